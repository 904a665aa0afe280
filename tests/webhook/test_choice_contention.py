"""The webhook's choice under contention (issue 15 item 5): ``--choice
smallest|free|ceiling|usable``, the reason recorded in ``migfit.io/decision``, the memos kept
correct, and the simulator's ``--webhook-choice`` reaching the decision it replays."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import webhook_scenery as s
from webhook_scenery import MakeClient

from migfit import builders, cluster, errors, keys, profiles, requests, sources
from migfit.commands import webhook as webhook_cli
from migfit.simulate import adapters, engine, spec
from migfit.webhook import decision, memo, server, view

ROOT = Path(__file__).resolve().parents[2]
A100 = (profiles.builtin().get("A100-80GB"),)
SMALLEST = decision.Policy(fallback_models=A100, contention="smallest")
FREE = decision.Policy(fallback_models=A100, contention="free")
CEILING = decision.Policy(fallback_models=A100, contention="ceiling")
ONE_G = profiles.ProfileName("1g.10gb")
BUSY_1G = "smallest with a free instance (1g.10gb: 0 free that no waiting pod asks for)"


def running(name: str, node: str, profile: str) -> dict[str, Any]:
    resource = profiles.resource_name(profile)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "limits": {resource: "1"}, "requests": {resource: "1"}}}]},
            "status": {"phase": "Running"}}


def record_of(patch: list[dict[str, Any]]) -> requests.DecisionRecord:
    path = "/metadata/annotations/" + decision.escape(requests.DECISION)
    (value,) = [op["value"] for op in patch if op["path"] == path]
    return requests.decode_decision(value)


def reason(verdict: decision.Verdict) -> str:
    assert verdict.record is not None
    return verdict.record["containers"][0].get("reason", "")


# ---------------------------------------------------------------- the example cluster, HTTPS


@pytest.mark.parametrize(("policy", "profile", "why"), [
    (SMALLEST, "1g.10gb", "smallest fitting"),
    (FREE, "1g.18gb", BUSY_1G),
    (CEILING, "1g.18gb", BUSY_1G),
])
async def test_the_example_8gi_pod_over_https(
        make_client: MakeClient, policy: decision.Policy, profile: str, why: str) -> None:
    # Every 1g.10gb of the example cluster is in use; five 1g.18gb (16Gi usable) are free.
    client = await make_client(sources.load_snapshot(ROOT / "examples" / "cluster.yaml"),
                               policy=policy)
    review = json.loads((ROOT / "examples/requests/create-8gi-in-use.json").read_text())
    body = await (await client.post("/mutate", json=review)).json()
    patch = s.patch_of(body)
    record = record_of(patch)
    assert [c["profile"] for c in record["containers"]] == [profile]
    assert record["containers"][0]["reason"] == why
    want = {profiles.resource_name(profile): "1"}
    assert patch[0]["value"] == {"limits": want, "requests": want}
    warnings = body["response"].get("warnings", [])
    assert any("every 1g.10gb instance is in use" in w for w in warnings) == (
        profile == "1g.10gb")


# ---------------------------------------------------------------- the rules


def contended() -> cluster.Cluster:
    """1g.10gb and 2g.20gb all in use; a 3g.40gb free."""
    return s.make_cluster(
        s.mig_node("gpu-a", allocatable={"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 1}),
        running("small", "gpu-a", "1g.10gb"), running("mid", "gpu-a", "2g.20gb"))


def test_free_takes_the_free_3g40gb_but_the_ceiling_refuses_its_waste() -> None:
    supply = s.supply_of(contended())
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    free = decision.decide_pod(pod, supply=supply, policy=FREE)
    assert free.profiles == ("3g.40gb",)
    assert reason(free) == ("smallest with a free instance (1g.10gb, 2g.20gb: 0 free that no "
                            "waiting pod asks for)")
    assert any("79% of its memory unused" in w for w in free.warnings)
    ceiling = decision.decide_pod(pod, supply=supply, policy=CEILING)
    assert ceiling.profiles == ("1g.10gb",)
    assert reason(ceiling) == ("smallest fitting: none free within the waste ceiling "
                               "(3g.40gb would leave 79% unused, more than 50%)")
    # 16Gi: 2g.20gb is busy, the free 3g.40gb would leave 59% unused: refused under a 0.5
    # ceiling, taken under 0.6.
    wide = decision.Policy(fallback_models=A100, contention="ceiling", waste_ceiling=0.6)
    sixteen = s.pod({requests.GPU_MEMORY: "16Gi"})
    assert decision.decide_pod(sixteen, supply=supply, policy=CEILING).profiles == ("2g.20gb",)
    assert decision.decide_pod(sixteen, supply=supply, policy=wide).profiles == ("3g.40gb",)


def test_the_smallest_with_a_free_instance_is_the_smallest_when_it_has_one() -> None:
    supply = s.supply_of(s.make_cluster())
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    for policy in (FREE, CEILING):
        verdict = decision.decide_pod(pod, supply=supply, policy=policy)
        assert verdict.profiles == ("1g.10gb",)
        assert reason(verdict) == "smallest fitting, with a free instance"


def test_with_nothing_free_every_choice_is_the_smallest() -> None:
    c = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 1, "2g.20gb": 1}),
                       running("small", "gpu-a", "1g.10gb"), running("mid", "gpu-a", "2g.20gb"))
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    for policy in (FREE, CEILING):
        verdict = decision.decide_pod(pod, supply=s.supply_of(c), policy=policy)
        assert verdict.profiles == ("1g.10gb",)
        assert reason(verdict) == "smallest fitting: no fitting profile has a free instance"


def test_the_choice_is_deterministic() -> None:
    c = contended()
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    answers = {json.dumps(decision.decide_pod(pod, supply=s.supply_of(c), policy=FREE).patch)
               for _ in range(5)}
    assert len(answers) == 1


# ---------------------------------------------------------------- the record


def test_older_records_without_a_reason_still_decode_and_are_kept_on_reinvocation() -> None:
    old = {"v": 1, "strategy": "mixed", "containers": [{
        "container": "main", "request_mib": 8192, "profile": "1g.10gb",
        "resource": "nvidia.com/mig-1g.10gb", "models": []}]}
    record = requests.decode_decision(json.dumps(old))
    assert "reason" not in record["containers"][0]
    pod = s.pod({requests.GPU_MEMORY: "8Gi", requests.DECISION: json.dumps(old)})
    verdict = decision.decide_pod(pod, supply=s.supply_of(contended()), policy=FREE)
    assert verdict.profiles == ("1g.10gb",)  # reinvoked: what the first call decided stays
    assert verdict.record is not None and "reason" not in verdict.record["containers"][0]
    newer = dict(old, containers=[dict(old["containers"][0], reason="smallest fitting")])
    assert requests.decode_decision(json.dumps(newer))["containers"][0]["reason"] == (
        "smallest fitting")
    bad = dict(old, containers=[dict(old["containers"][0], reason=3)])
    with pytest.raises(requests.RequestError, match="reason is not a str"):
        requests.decode_decision(json.dumps(bad))
    extra = dict(old, containers=[dict(old["containers"][0], other="x")])
    with pytest.raises(requests.RequestError, match="may have reason"):
        requests.decode_decision(json.dumps(extra))
    assert keys.decision_of({requests.DECISION: json.dumps(bad)}) is None


# ---------------------------------------------------------------- the memos


def ask(st: server.State, pod: dict[str, Any]) -> tuple[str, ...]:
    status, body = server.answer_bytes(json.dumps(s.review(pod)).encode(), state=st)
    assert status == 200
    return tuple(c["profile"] for c in record_of(s.patch_of(json.loads(body)))["containers"])


def test_the_webhook_memo_sees_an_offer_flip_from_0_to_1_free() -> None:
    c = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 1, "2g.20gb": 1}),
                       running("small", "gpu-a", "1g.10gb"))
    app = server.make_app(server.Settings(policy=FREE), c, tracker=view.SupplyTracker(c),
                          decisions=memo.DecisionMemo())
    st = app[server.STATE]
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    assert ask(st, pod) == ("2g.20gb",)
    assert ask(st, pod) == ("2g.20gb",) and st.exact.stats.hits == 1
    c.apply("Pod", "DELETED", running("small", "gpu-a", "1g.10gb"))  # 1g.10gb: 0 -> 1 free
    assert ask(st, pod) == ("1g.10gb",)


def test_the_simulators_cache_keys_on_a_free_bit_per_offer() -> None:
    c = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 2, "2g.20gb": 1}),
                       running("one", "gpu-a", "1g.10gb"), running("two", "gpu-a", "1g.10gb"))
    free = adapters.Decider(c, contention="free")
    smallest = adapters.Decider(c, contention="smallest")
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    assert free.decide(pod)[0] == ("2g.20gb",) and smallest.decide(pod)[0] == ("1g.10gb",)
    c.apply("Pod", "DELETED", running("one", "gpu-a", "1g.10gb"))  # 0 -> 1 free
    assert free.decide(pod)[0] == ("1g.10gb",)
    misses = free.misses
    c.apply("Pod", "DELETED", running("two", "gpu-a", "1g.10gb"))  # 1 -> 2 free: same bits
    assert free.decide(pod)[0] == ("1g.10gb",) and free.misses == misses
    assert smallest.decide(pod)[0] == ("1g.10gb",) and smallest.misses == 1


# ---------------------------------------------------------------- the flags


def policy_of(*argv: str) -> decision.Policy:
    parser = argparse.ArgumentParser()
    webhook_cli.add_policy_arguments(parser)
    return webhook_cli.policy_from(parser.parse_args(list(argv)))[1]


def test_choice_and_waste_ceiling_flags() -> None:
    assert policy_of().contention == decision.Policy().contention
    chosen = policy_of("--choice", "ceiling", "--waste-ceiling", "0.3")
    assert (chosen.contention, chosen.waste_ceiling) == ("ceiling", 0.3)
    assert policy_of("--choice", "smallest").contention == "smallest"
    with pytest.raises(errors.UsageError, match=r"--waste-ceiling 2: use a fraction 0\.\.1"):
        policy_of("--waste-ceiling", "2")
    with pytest.raises(SystemExit):
        policy_of("--choice", "largest")


def test_the_simulators_option_reaches_the_decider() -> None:
    nodes = [spec.NodeSpec(name="n", model=A100[0], gpu_layouts=((ONE_G,) * 7,),
                           cpu_milli=32000, memory_mib=262144, config="all-1g.10gb")]
    for choice in ("smallest", "free", "ceiling"):
        sim = engine.Simulation(nodes, policy=engine.Policy("default"), seed=0,
                                options=engine.Options(webhook_choice=choice),
                                catalog=profiles.builtin())
        assert sim.decider.policy.contention == choice
    unset = engine.Simulation(nodes, policy=engine.Policy("default"), seed=0,
                              options=engine.Options(), catalog=profiles.builtin())
    assert unset.decider.policy == decision.Policy()


def test_the_default_is_free_by_measurement() -> None:
    # docs/simulation.md, "The webhook's choice under contention".
    assert decision.Policy().contention == "free"
    c = sources.load_snapshot(ROOT / "examples" / "cluster.yaml")
    review = json.loads((ROOT / "examples/requests/create-8gi-in-use.json").read_text())
    verdict = decision.decide_pod(review["request"]["object"], supply=s.supply_of(c),
                                  policy=decision.Policy())
    assert verdict.profiles == ("1g.18gb",)


# ---------------------------------------------------------------- usable: where the pod fits

USABLE = decision.Policy(fallback_models=A100, contention="usable")


def _gpu_node(name: str, alloc: dict[str, int], cpu: str) -> dict[str, Any]:
    labels = builders.mig_labels(product=s.A100_PRODUCT, instances=alloc, gpus=1, config=None,
                                 config_state="success", count_labels=False)
    return builders.node(name, labels=labels,
                         resources=builders.mig_resources(alloc, whole_gpus=None),
                         cpu=cpu, memory="512Gi")


def _asking(cpu: str) -> dict[str, Any]:
    """A pod asking for 8Gi (1g.10gb fits) and ``cpu`` cores."""
    return s.pod({requests.GPU_MEMORY: "8Gi"}, containers=[
        {"name": "main", "image": "registry.example/train:1",
         "resources": {"requests": {"cpu": cpu, "memory": "16Gi"}}}])


def test_usable_counts_only_free_instances_where_the_pods_cpu_and_memory_fit() -> None:
    # The only free 1g.10gb is on a node with 4 cores; a free 2g.20gb on one with 64.
    view_ = s.make_cluster(_gpu_node("cramped", {"1g.10gb": 1}, "4"),
                           _gpu_node("roomy", {"2g.20gb": 1}, "64"))
    supply = s.supply_of(view_)
    hungry = _asking("8")
    assert decision.decide_pod(hungry, supply=supply, policy=FREE).profiles == ("1g.10gb",)
    got = decision.decide_pod(hungry, supply=supply, policy=USABLE)
    assert got.profiles == ("2g.20gb",)
    assert reason(got) == ("smallest with a free instance where the pod's cpu and memory fit "
                           "(1g.10gb: none)")
    light = decision.decide_pod(_asking("2"), supply=supply, policy=USABLE)
    assert light.profiles == ("1g.10gb",)
    assert reason(light) == ("smallest fitting, with a free instance where the pod's cpu and "
                             "memory fit")
    # Nowhere: the smallest, as `free` does when nothing is free.
    huge = decision.decide_pod(_asking("100"), supply=supply, policy=USABLE)
    assert huge.profiles == ("1g.10gb",)
    assert reason(huge).startswith("smallest fitting: no fitting profile has a free instance")
    # A pod bound on the roomy node takes its cpu: the 2g.20gb there no longer serves.
    taker = running("taker", "roomy", "2g.20gb")
    taker["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "60"
    more = s.make_cluster(_gpu_node("cramped", {"1g.10gb": 1}, "4"),
                          _gpu_node("roomy", {"2g.20gb": 2}, "64"), taker)
    assert decision.decide_pod(hungry, supply=s.supply_of(more),
                               policy=USABLE).profiles == ("1g.10gb",)


def test_the_simulators_decider_keys_usable_on_the_pods_own_requests() -> None:
    view_ = s.make_cluster(_gpu_node("cramped", {"1g.10gb": 1}, "4"),
                           _gpu_node("roomy", {"2g.20gb": 1}, "64"))
    decider = adapters.Decider(view_, contention="usable")
    assert decider.decide(_asking("8"))[0] == ("2g.20gb",)
    assert decider.decide(_asking("2"))[0] == ("1g.10gb",)  # not the first answer, cached
    assert decider.decide(_asking("8"))[0] == ("2g.20gb",)
    assert decider.misses == 2


def test_the_webhook_decides_usable_afresh_when_only_cpu_moved() -> None:
    c = s.make_cluster(_gpu_node("cramped", {"1g.10gb": 1}, "4"),
                       _gpu_node("roomy", {"2g.20gb": 1}, "64"))
    app = server.make_app(server.Settings(policy=USABLE), c, tracker=view.SupplyTracker(c),
                          decisions=memo.DecisionMemo())
    st = app[server.STATE]
    assert ask(st, _asking("8")) == ("2g.20gb",)
    # A pod without GPU requests takes 60 of roomy's cores: no offer changes, so the supply's
    # content is the same, but the 2g.20gb there no longer has the pod's 8 cores beside it.
    cpu_only = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "batch", "namespace": "ml", "uid": "uid-batch"},
                "spec": {"nodeName": "roomy", "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "60"}}}]},
                "status": {"phase": "Running"}}
    c.apply("Pod", "ADDED", cpu_only)
    assert ask(st, _asking("8")) == ("1g.10gb",)
    assert st.exact.stats.hits == 0 and st.memo.stats.hits == 0


def test_one_trackers_rooms_follow_pods_and_nodes_as_they_change() -> None:
    # The tracker keeps each node's cpu and memory left and recomputes a node's only when
    # the cluster reports it changed: one tracker, asked between changes.
    roomy = _gpu_node("roomy", {"2g.20gb": 2}, "64")
    c = s.make_cluster(roomy)
    t = view.SupplyTracker(c)
    state = c.node("roomy")
    assert state is not None and state.node.model is not None
    key = (state.node.model, profiles.ProfileName("2g.20gb"))
    gib = 1 << 30
    assert t.fits(key, 8000, 16 * gib)
    assert not t.fits(key, 65000, 0) and not t.fits(key, 0, 513 * gib)
    taker = running("taker", "roomy", "2g.20gb")
    taker["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "60"
    c.apply("Pod", "ADDED", taker)
    assert not t.fits(key, 8000, 16 * gib)  # one 2g.20gb still free, 4 cores beside it
    assert t.fits(key, 4000, 16 * gib)
    c.apply("Pod", "DELETED", taker)
    assert t.fits(key, 8000, 16 * gib)
    c.apply("Node", "DELETED", roomy)
    assert not t.fits(key, 0, 0)


def test_a_tracker_not_asked_for_rooms_collects_no_node_names() -> None:
    # Under --choice free nothing asks for rooms: nodes that come and go (an autoscaler's)
    # leave nothing behind in the tracker.
    c = s.make_cluster(_gpu_node("roomy", {"2g.20gb": 2}, "64"))
    t = view.SupplyTracker(c)
    for i in range(50):
        node = _gpu_node(f"scaled-{i}", {"1g.10gb": 1}, "8")
        c.apply("Node", "ADDED", node)
        c.apply("Node", "DELETED", node)
        t.supply()
    assert t.rooms_kept() == 0
    key = (profiles.ModelId(c.node("roomy").node.model or ""), profiles.ProfileName("2g.20gb"))
    assert t.fits(key, 8000, 0)
    assert t.rooms_kept() == 1  # the nodes there are now, not the 50 that went


# ---------------------------------------------------------------- instances waiting pods ask for


def waiting(name: str, profile: str, count: int = 1) -> dict[str, Any]:
    """A pod admitted earlier that kube-scheduler has not bound yet."""
    resource = profiles.resource_name(profile)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c", "resources": {
                "limits": {resource: str(count)}, "requests": {resource: str(count)}}}]},
            "status": {"phase": "Pending"}}


def burst() -> cluster.Cluster:
    """Two 1g.10gb and a 2g.20gb free; two pods admitted before wait for a 1g.10gb each."""
    return s.make_cluster(
        s.mig_node("gpu-a", allocatable={"1g.10gb": 2, "2g.20gb": 1}),
        waiting("first", "1g.10gb"), waiting("second", "1g.10gb"))


async def test_a_burst_over_https_does_not_all_get_the_last_free_profile(
        make_client: MakeClient) -> None:
    # The two free 1g.10gb are the waiting pods'; the next 8Gi pod gets the free 2g.20gb
    # instead of a third 1g.10gb that would leave it waiting beside it.
    client = await make_client(burst(), policy=FREE)
    body = await (await client.post("/mutate", json=s.review(
        s.pod({requests.GPU_MEMORY: "8Gi"})))).json()
    record = record_of(s.patch_of(body))
    assert [c["profile"] for c in record["containers"]] == ["2g.20gb"]
    assert record["containers"][0]["reason"] == BUSY_1G


def test_claims_follow_the_waiting_pods() -> None:
    view_ = burst()
    tracker = view.SupplyTracker(view_)
    key = (profiles.ModelId("A100-80GB"), ONE_G)
    offer = tracker.supply().offers[key]
    assert (offer.free, offer.claimed) == (0, 2)
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    assert decision.decide_pod(pod, supply=tracker.supply(), policy=FREE).profiles == (
        "2g.20gb",)
    assert decision.decide_pod(pod, supply=tracker.supply(), policy=SMALLEST).profiles == (
        "1g.10gb",)
    # The first waiting pod is bound: it holds one instance, its claim is gone; the other
    # still claims the last free one.
    bound = waiting("first", "1g.10gb")
    bound["spec"]["nodeName"] = "gpu-a"
    bound["status"]["phase"] = "Running"
    view_.apply("Pod", "MODIFIED", bound)
    assert view_.pending_claims() == {ONE_G: 1}
    offer = tracker.supply().offers[key]
    assert (offer.free, offer.claimed) == (0, 1)
    # The second is deleted before it runs: the free instance is free again.
    view_.apply("Pod", "DELETED", waiting("second", "1g.10gb"))
    assert view_.pending_claims() == {}
    offer = tracker.supply().offers[key]
    assert (offer.free, offer.claimed) == (1, 0)
    assert decision.decide_pod(pod, supply=tracker.supply(), policy=FREE).profiles == (
        "1g.10gb",)


def test_more_claims_than_free_instances_leave_none_and_never_below_zero() -> None:
    view_ = s.make_cluster(
        s.mig_node("gpu-a", allocatable={"1g.10gb": 1, "3g.40gb": 2}),
        *(waiting(f"w{i}", "1g.10gb") for i in range(3)), waiting("big", "3g.40gb", 2),
        waiting("bigger", "3g.40gb", 2))
    offers = s.supply_of(view_).offers
    a100 = profiles.ModelId("A100-80GB")
    assert (offers[(a100, ONE_G)].free, offers[(a100, ONE_G)].claimed) == (0, 1)
    three = profiles.ProfileName("3g.40gb")
    assert (offers[(a100, three)].free, offers[(a100, three)].claimed) == (0, 2)
    assert view_.pending_claims() == {ONE_G: 3, three: 4}


SEVEN = profiles.ProfileName("7g.80gb")


def test_a_pod_asking_for_several_instances_claims_them_only_where_one_node_has_them(
) -> None:
    # Two nodes with one free 7g.80gb each; a pod waits for two on one node. It cannot take
    # the scattered ones, so they stay free for the next pod that can use one now.
    view_ = s.make_cluster(
        s.mig_node("gpu-a", allocatable={"7g.80gb": 1}),
        s.mig_node("gpu-b", allocatable={"7g.80gb": 1}),
        waiting("pair", "7g.80gb", 2), waiting("one", "7g.80gb"))
    tracker = view.SupplyTracker(view_)
    key = (profiles.ModelId("A100-80GB"), SEVEN)
    assert view_.pending_claims() == {SEVEN: 1}
    assert (tracker.supply().offers[key].free, tracker.supply().offers[key].claimed) == (1, 1)
    pod = s.pod({requests.GPU_MEMORY: "60Gi"})
    verdict = decision.decide_pod(pod, supply=tracker.supply(), policy=FREE)
    assert verdict.profiles == ("7g.80gb",)
    assert "0 free" not in reason(verdict)
    # A node with two free appears: the pair's claim counts again (it will land there).
    view_.apply("Node", "ADDED", s.mig_node("gpu-c", allocatable={"7g.80gb": 2}))
    assert view_.pending_claims() == {SEVEN: 3}
    assert (tracker.supply().offers[key].free, tracker.supply().offers[key].claimed) == (1, 3)
    # The pair is bound there: its claim is gone with it, and the node has none left.
    bound = waiting("pair", "7g.80gb", 2)
    bound["spec"]["nodeName"] = "gpu-c"
    bound["status"]["phase"] = "Running"
    view_.apply("Pod", "MODIFIED", bound)
    assert view_.pending_claims() == {SEVEN: 1}
    assert (tracker.supply().offers[key].free, tracker.supply().offers[key].claimed) == (1, 1)
    # A second pair waits; the only node left with two 7g.80gb is cordoned: no claim.
    view_.apply("Pod", "ADDED", waiting("pair2", "7g.80gb", 2))
    assert view_.pending_claims() == {SEVEN: 1}
    view_.apply("Node", "ADDED", s.mig_node("gpu-d", allocatable={"7g.80gb": 2},
                                            unschedulable=True))
    assert view_.pending_claims() == {SEVEN: 1}
    view_.apply("Pod", "DELETED", waiting("pair2", "7g.80gb", 2))
    view_.apply("Pod", "DELETED", waiting("one", "7g.80gb"))
    assert view_.pending_claims() == {}


def test_a_single_strategy_pod_claims_the_profile_its_decision_names() -> None:
    record: requests.DecisionRecord = {
        "v": keys.DECISION_VERSION, "strategy": "single", "containers": [{
            "container": "c", "request_mib": 8192, "profile": "1g.10gb",
            "resource": profiles.GPU_RESOURCE, "models": ["A100-80GB"]}]}
    pod = waiting("single", "1g.10gb")
    pod["metadata"]["annotations"] = {keys.DECISION: keys.encode_decision(record)}
    limits = {profiles.GPU_RESOURCE: "2"}
    pod["spec"]["containers"][0]["resources"] = {"limits": limits, "requests": limits}
    whole = waiting("whole", "1g.10gb")  # nvidia.com/gpu without a record: no MIG claim
    whole["spec"]["containers"][0]["resources"] = {"limits": limits, "requests": limits}
    view_ = s.make_cluster(s.mig_node("gpu-a"), pod, whole)
    assert view_.pending_claims() == {ONE_G: 2}


def test_claims_go_to_the_model_with_the_most_free_first() -> None:
    a100, h100 = profiles.ModelId("A100-80GB"), profiles.ModelId("H100-80GB")
    free = {(a100, ONE_G): 2, (h100, ONE_G): 5, (a100, profiles.ProfileName("7g.80gb")): 1}
    assert view.set_aside(free, {ONE_G: 6}) == {(h100, ONE_G): 5, (a100, ONE_G): 1}
    assert view.set_aside(free, {ONE_G: 9}) == {(h100, ONE_G): 5, (a100, ONE_G): 2}
    assert view.set_aside(free, {}) == {}
