"""Filter verdicts: outcomes and reasons as data, messages only at the edge."""

from __future__ import annotations

from typing import Any

from extender_builders import build, decision, node, pod

from migfit import builders, cluster
from migfit.commands import status
from migfit.extender import figures, filtering
from migfit.extender.filtering import Code, Outcome, Relayout


def _verdicts(model: cluster.Cluster, pod_obj: dict[str, Any], names: list[str]
              ) -> filtering.FilterResult:
    return filtering.filter_nodes(figures.Index(model), filtering.decode_pod(pod_obj), names)


def _seed_cluster() -> cluster.Cluster:
    return build([
        node("idle-3g", {"3g.40gb": 2}),
        node("full-1g", {"1g.10gb": 7}),
        *[pod(f"busy-{i}", node_name="full-1g") for i in range(7)],
        node("free-1g", {"1g.10gb": 7}),
        pod("one", node_name="free-1g"),
        node("relayout", {"1g.10gb": 7}, state="pending"),
        node("tainted", {"1g.10gb": 7},
             taints=[{"key": "migfit.io/relayout", "value": "pending", "effect": "NoSchedule"}]),
    ])


def test_seed_case_idle_3g_node_is_unresolvable_and_says_a_relayout_could_serve() -> None:
    model = _seed_cluster()
    result = _verdicts(model, pod("want"), ["idle-3g"])
    assert result.outcome("idle-3g") is Outcome.UNRESOLVABLE
    (reason,) = result.unresolvable["idle-3g"]
    assert reason.code is Code.NOT_ADVERTISED
    assert reason.relayout is Relayout.IDLE
    assert reason.advertised == (("3g.40gb", 2, 2),)
    assert filtering.message(reason) == (
        "node advertises 3g.40gb×2 but no 1g.10gb; a re-layout of its idle GPU "
        "could provide it (see migfit advise)")


def test_advertised_but_all_in_use_is_failed_not_unresolvable() -> None:
    result = _verdicts(_seed_cluster(), pod("want"), ["full-1g"])
    assert result.outcome("full-1g") is Outcome.FAILED
    (reason,) = result.failed["full-1g"]
    assert (reason.code, reason.free, reason.allocatable) == (Code.INSUFFICIENT_FREE, 0, 7)
    assert filtering.message(reason) == "every 1g.10gb instance is in use"


def test_free_instance_passes() -> None:
    result = _verdicts(_seed_cluster(), pod("want"), ["free-1g"])
    assert result.passed == ["free-1g"]


def test_node_under_relayout_is_unresolvable() -> None:
    result = _verdicts(_seed_cluster(), pod("want"), ["relayout", "tainted"])
    for name in ("relayout", "tainted"):
        (reason,) = result.unresolvable[name]
        assert reason.code is Code.REPARTITIONING
    assert "mig.config.state=pending" in filtering.message(result.unresolvable["relayout"][0])
    assert "migfit.io/relayout" in filtering.message(result.unresolvable["tainted"][0])


def test_relayout_annotation_in_progress_is_unresolvable() -> None:
    model = build([node("n", {"1g.10gb": 7},
                        annotations={"migfit.io/relayout": '{"state": "applying"}'})])
    result = _verdicts(model, pod("want"), ["n"])
    assert result.unresolvable["n"][0].code is Code.REPARTITIONING


def test_unknown_node_is_unresolvable() -> None:
    result = _verdicts(_seed_cluster(), pod("want"), ["ghost"])
    assert result.unresolvable["ghost"][0].code is Code.UNKNOWN_NODE


def test_every_input_node_gets_exactly_one_outcome() -> None:
    model = _seed_cluster()
    names = ["idle-3g", "full-1g", "free-1g", "relayout", "tainted", "ghost", "free-1g"]
    result = _verdicts(model, pod("want"), names)
    groups = [set(result.passed), set(result.failed), set(result.unresolvable)]
    assert set.union(*groups) == set(names)
    assert sum(len(g) for g in groups) == len(set(names))


def test_multi_container_pod_needs_all_profiles_on_one_node() -> None:
    model = build([
        node("both", {"1g.10gb": 3, "3g.40gb": 1}),
        node("only-1g", {"1g.10gb": 7}),
        node("both-but-3g-used", {"1g.10gb": 3, "3g.40gb": 1}),
        pod("big", [{"3g.40gb": 1}], node_name="both-but-3g-used"),
    ])
    want = pod("multi", [{"1g.10gb": 1}, {"3g.40gb": 1}, {"1g.10gb": 1}])
    request = filtering.decode_pod(want)
    assert {(w.profile, w.count) for w in request.wants} == {("1g.10gb", 2), ("3g.40gb", 1)}
    result = filtering.filter_nodes(figures.Index(model), request,
                                    ["both", "only-1g", "both-but-3g-used"])
    assert result.passed == ["both"]
    assert result.unresolvable["only-1g"][0].code is Code.NOT_ADVERTISED
    assert result.failed["both-but-3g-used"][0].profile == "3g.40gb"


def test_more_than_advertised_is_unresolvable() -> None:
    model = build([node("n", {"1g.10gb": 2})])
    result = _verdicts(model, pod("three", [{"1g.10gb": 3}]), ["n"])
    assert result.unresolvable["n"][0].code is Code.TOO_FEW_ADVERTISED


def test_pod_without_mig_request_passes_every_node() -> None:
    model = _seed_cluster()
    plain = pod("cpu-only", [{}])
    request = filtering.decode_pod(plain)
    assert not request.mig
    names = ["idle-3g", "full-1g", "relayout", "ghost"]
    assert filtering.filter_nodes(figures.Index(model), request, names).passed == names


def test_recorded_request_above_usable_memory_is_unresolvable() -> None:
    model = build([node("a100", {"1g.10gb": 7}, memory={"1g.10gb": 9728}),
                   node("h100", {"1g.10gb": 7}, model="H100-80GB", memory={"1g.10gb": 9984})])
    annotated = pod("p", annotations={
        "migfit.io/decision": decision([("c0", "1g.10gb", 9800, [])])})
    result = _verdicts(model, annotated, ["a100", "h100"])
    assert result.passed == ["h100"]
    (reason,) = result.unresolvable["a100"]
    assert (reason.code, reason.memory_mib, reason.request_mib) == (
        Code.MEMORY_TOO_SMALL, 9728, 9800)


def test_model_outside_the_decision_is_unresolvable() -> None:
    model = build([node("a100", {"1g.10gb": 7}),
                   node("h100", {"1g.10gb": 7}, model="H100-80GB")])
    annotated = pod("p", annotations={
        "migfit.io/decision": decision([("c0", "1g.10gb", 9800, ["H100-80GB"])])})
    result = _verdicts(model, annotated, ["a100", "h100"])
    assert result.passed == ["h100"]
    assert result.unresolvable["a100"][0].code is Code.MODEL_NOT_ALLOWED


def test_model_refusal_names_the_models_as_the_webhook_spelt_them() -> None:
    # Matching is case-insensitive, but the message an operator reads (kubectl describe
    # pod) spells the models as everywhere else: an outside check saw "a100-40gb, h100-80gb".
    model = build([node("a100", {"1g.10gb": 7}),
                   node("h100", {"1g.10gb": 7}, model="H100-80GB")])
    annotated = pod("p", annotations={"migfit.io/decision": decision(
        [("c0", "1g.10gb", 9800, ["H100-80GB", "A100-40GB"])])})
    result = _verdicts(model, annotated, ["a100", "h100"])
    text = filtering.message(result.unresolvable["a100"][0])
    assert text.endswith("fits 1g.10gb only on A100-40GB, H100-80GB"), text


def test_single_strategy_uses_the_decision_profile() -> None:
    model = build([
        node("single-1g", {"1g.5gb": 7}, model="A100-40GB", strategy="single"),
        node("single-3g", {"3g.20gb": 2}, model="A100-40GB", strategy="single"),
        node("mixed", {"1g.5gb": 7}, model="A100-40GB"),
    ])
    annotated = pod("p", [{}], gpu=1, annotations={
        "migfit.io/decision": decision([("c0", "1g.5gb", 4000, [])], strategy="single")})
    result = _verdicts(model, annotated, ["single-1g", "single-3g", "mixed"])
    assert result.passed == ["single-1g"]
    assert result.unresolvable["single-3g"][0].code is Code.NOT_ADVERTISED
    assert result.unresolvable["mixed"][0].code is Code.STRATEGY_MISMATCH


def test_busy_node_without_the_profile_needs_a_disruptive_relayout() -> None:
    model = build([node("busy", {"3g.40gb": 2}), pod("big", [{"3g.40gb": 1}], node_name="busy")])
    (reason,) = _verdicts(model, pod("want"), ["busy"]).unresolvable["busy"]
    assert reason.relayout is Relayout.DISRUPTIVE
    assert "only after the pods on its GPUs stop" in filtering.message(reason)


def test_model_without_the_profile_says_no_relayout_can_help() -> None:
    model = build([node("a30", {"1g.6gb": 4}, model="A30-24GB")])
    (reason,) = _verdicts(model, pod("want"), ["a30"]).unresolvable["a30"]
    assert reason.relayout is Relayout.IMPOSSIBLE
    assert "A30-24GB has no 1g.10gb" in filtering.message(reason)


def test_verdicts_follow_cache_changes() -> None:
    model = build([node("n", {"1g.10gb": 1})])
    request = filtering.decode_pod(pod("want"))
    index = figures.Index(model)  # one index, following the changes
    assert filtering.filter_nodes(index, request, ["n"]).passed == ["n"]
    model.apply("Pod", "ADDED", pod("taker", node_name="n"))
    assert filtering.filter_nodes(index, request, ["n"]).outcome("n") is Outcome.FAILED
    model.apply("Pod", "DELETED", pod("taker", node_name="n"))
    assert filtering.filter_nodes(index, request, ["n"]).passed == ["n"]


def test_nodes_in_the_same_situation_get_the_same_message() -> None:
    """kube-scheduler groups identical reasons in the pod's event ("2 node(s) ..."): messages
    carry the layout, not the free counts of the moment."""
    model = build([
        node("a", {"3g.40gb": 2}), node("b", {"3g.40gb": 2}),
        pod("on-b", ({"3g.40gb": 1},), node_name="b"),
        node("c", {"1g.10gb": 7}), node("d", {"1g.10gb": 7}),
        *[pod(f"c-{i}", node_name="c") for i in range(7)],
        *[pod(f"d-{i}", node_name="d") for i in range(7)],
    ])
    result = filtering.filter_nodes(figures.Index(model), filtering.decode_pod(pod("new")),
                                    list("abcd"))
    messages = {n: filtering.node_message(r)
                for n, r in {**result.failed, **result.unresolvable}.items()}
    assert messages["a"] != "" and messages["c"] == messages["d"]
    # a and b differ only in what is free right now (b is busy: a re-layout would disrupt it)
    assert messages["a"].split(";")[0] == messages["b"].split(";")[0]


# ------------------------------------------------ an outside check: failed re-layouts, counts


_RELAYOUT_TAINT = {"key": "migfit.io/relayout", "value": "pending", "effect": "NoSchedule"}


def test_failed_relayout_says_it_failed_and_what_to_remove_not_to_wait() -> None:
    # It said "node's MIG layout is being changed (taint migfit.io/relayout ...); wait for it
    # to finish": a failed node keeps its taint until an operator clears it, waiting never does.
    record = ('{"v": 1, "state": "failed", "target": "all-1g.10gb", "result": "timeout", '
              '"reason": "nvidia.com/mig.config.state stayed pending for 1200 s"}')
    model = build([
        node("failed", {"3g.40gb": 2}, taints=[_RELAYOUT_TAINT], annotations={
            "migfit.io/relayout": record, "migfit.io/relayout-failed": "timeout"}),
        # only the failure annotation (the record unreadable): still failed, result from it
        node("marked", {"3g.40gb": 2}, taints=[_RELAYOUT_TAINT], annotations={
            "migfit.io/relayout-failed": '{"reason": "x", "result": "wedged"}'}),
        # cleared taint: the node is back in service (the record alone blocks nothing)
        node("cleared", {"1g.10gb": 7}, annotations={"migfit.io/relayout": record}),
        node("in-flight", {"1g.10gb": 7}, taints=[_RELAYOUT_TAINT], annotations={
            "migfit.io/relayout": '{"v": 1, "state": "applying"}'}),
    ])
    result = _verdicts(model, pod("want"), ["failed", "marked", "cleared", "in-flight"])
    assert result.passed == ["cleared"]
    (reason,) = result.unresolvable["failed"]
    assert (reason.code, reason.detail) == (Code.RELAYOUT_FAILED, "timeout")
    text = filtering.message(reason)
    assert "wait" not in text and "being changed" not in text
    assert text.startswith("migfit's re-layout of this node failed (result: timeout;")
    assert text.endswith("kubectl taint node NODE migfit.io/relayout- && kubectl annotate "
                         "node NODE migfit.io/relayout- migfit.io/relayout-failed-)")
    assert result.unresolvable["marked"][0].detail == "wedged"
    assert result.unresolvable["in-flight"][0].code is Code.REPARTITIONING
    # `migfit status` said "migfit re-layout in progress" for the failed ones too.
    notes = {line.split()[0]: line for line in status.render_table(model).splitlines()
             if line.strip()}
    assert ("migfit re-layout failed (timeout): fix the node, then remove the taint "
            "migfit.io/relayout and the annotations") in notes["failed"]
    assert "migfit re-layout failed (wedged)" in notes["marked"]
    assert "in progress" not in notes["failed"] + notes["marked"]
    assert "migfit re-layout in progress" in notes["in-flight"]


def _one(model: cluster.Cluster, pod_obj: dict[str, Any], name: str) -> filtering.Reason:
    (reason,) = _verdicts(model, pod_obj, [name]).unresolvable[name]
    return reason


def test_relayout_chance_counts_the_instances_and_the_gpus() -> None:
    # It said "a re-layout of its idle GPU could provide it" for 8 × 1g.10gb on one A100-80GB
    # (7 at most), 3 × 7g.80gb on 2 GPUs, 3 × 2g.12gb on one A30 (2 at most).
    model = build([
        node("a100", {"3g.40gb": 2}),
        node("a100x2", {"3g.40gb": 4}, gpus=2),
        node("a30", {"1g.6gb": 4}, model="A30-24GB"),
    ])
    eight = pod("eight", [{"1g.10gb": 8}])
    reason = _one(model, eight, "a100")
    assert (reason.relayout, reason.per_gpu) == (Relayout.TOO_MANY, 7)
    assert filtering.message(reason) == (
        "node advertises 3g.40gb×2 but no 1g.10gb; no re-layout of this node can give "
        "8 1g.10gb: the most is 7 (1 GPU × 7 1g.10gb per A100-80GB); the pod needs a node "
        "with 2 or more GPUs, or fewer 1g.10gb per pod")
    three_7g = _one(model, pod("big", [{"7g.80gb": 3}]), "a100x2")
    assert three_7g.relayout is Relayout.TOO_MANY
    assert "the most is 2 (2 GPUs × 1 7g.80gb per A100-80GB)" in filtering.message(three_7g)
    assert _one(model, pod("two", [{"7g.80gb": 2}]), "a100").relayout is Relayout.TOO_MANY
    a30 = _one(model, pod("a30", [{"2g.12gb": 3}]), "a30")
    assert "no re-layout of this node can give 3 2g.12gb: the most is 2" in (
        filtering.message(a30))
    # what fits the node's GPUs is still a re-layout away: both idle GPUs, or one of them
    both = _one(model, eight, "a100x2")
    assert both.relayout is Relayout.IDLE
    assert filtering.message(both).endswith(
        "a re-layout of its idle GPUs could provide 8 1g.10gb (see migfit advise)")
    seven = _one(model, pod("seven", [{"1g.10gb": 7}]), "a100x2")
    assert filtering.message(seven).endswith(
        "a re-layout of its idle GPUs could provide 7 1g.10gb (see migfit advise)")
    three = build([node("a100x3", {"3g.40gb": 6}, gpus=3)])
    assert filtering.message(_one(three, pod("nine", [{"1g.10gb": 9}]), "a100x3")).endswith(
        "a re-layout of 2 of its idle GPUs could provide 9 1g.10gb (see migfit advise)")


def test_busy_node_relayout_counts_its_idle_gpus() -> None:
    model = build([node("busy2", {"3g.40gb": 4}, gpus=2),
                   pod("big", [{"3g.40gb": 1}], node_name="busy2")])
    # one GPU is idle: 7 fit there; 8 need both, and one holds a pod
    assert _one(model, pod("seven", [{"1g.10gb": 7}]), "busy2").relayout is Relayout.IDLE
    reason = _one(model, pod("eight", [{"1g.10gb": 8}]), "busy2")
    assert reason.relayout is Relayout.DISRUPTIVE
    assert filtering.message(reason).endswith(
        "a re-layout could provide 8 1g.10gb, but only after the pods on its GPUs stop "
        "(see migfit advise)")
    # more than both GPUs hold: no stopping of pods helps
    assert _one(model, pod("15", [{"1g.10gb": 15}]), "busy2").relayout is Relayout.TOO_MANY


def test_relayout_with_an_unknown_gpu_count_says_what_it_needs() -> None:
    unknown = node("nocount", {"3g.40gb": 2})
    del unknown["metadata"]["labels"]["nvidia.com/gpu.count"]
    model = build([unknown])
    assert model.node("nocount") is not None
    assert model.node("nocount").node.gpu_count == 0  # type: ignore[union-attr]
    reason = _one(model, pod("eight", [{"1g.10gb": 8}]), "nocount")
    assert reason.relayout is Relayout.GPUS_UNKNOWN
    assert filtering.message(reason).endswith(
        "a re-layout could provide 8 1g.10gb only on 2 or more GPUs (7 1g.10gb per "
        "A100-80GB), and the node's GPU count is unknown (no nvidia.com/gpu.count label)")
    # one GPU's worth: as before
    assert _one(model, pod("one"), "nocount").relayout is Relayout.IDLE


def test_cpu_node_with_a_decision_record_says_it_has_no_mig_gpu() -> None:
    # It said "node has an unknown GPU model; the request (9800 MiB) fits 1g.10gb only on
    # H100-80GB": the decision's models were checked before the node's lack of any GPU.
    cpu_node = builders.node("cpu-0", labels={}, resources={})
    model = build([cpu_node, node("h100", {"1g.10gb": 7}, model="H100-80GB")])
    annotated = pod("p", annotations={
        "migfit.io/decision": decision([("c0", "1g.10gb", 9800, ["H100-80GB"])])})
    result = _verdicts(model, annotated, ["cpu-0", "h100"])
    assert result.passed == ["h100"]
    (reason,) = result.unresolvable["cpu-0"]
    assert reason.code is Code.NOT_ADVERTISED
    assert filtering.message(reason) == (
        "node has no MIG GPU (no nvidia.com/gpu.product label)")
