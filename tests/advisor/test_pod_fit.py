"""A waiting pod counts toward a node only when the node can take it: selectors, node
affinity (the webhook's model affinity), taints, cpu and memory; and the cool-down."""

from __future__ import annotations

from typing import Any

from advisor_scene import T0, build, node, pod
from migmanager_sim import CONFIG

from migfit import advisor, builders, decoding, keys, profiles, records
from migfit.commands import advise as advise_cmd
from migfit.commands import status

NOW = T0 + 600
H100 = "NVIDIA-H100-80GB-HBM3"


def _nodes_for(c: Any, **kw: Any) -> list[str]:
    return [r.node for r in advisor.advise(c, now=NOW, **kw).recommendations]


def _affinity(key: str, op: str, values: list[str]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": key, "operator": op, "values": values}]}]}}}}


def test_node_selector_picks_the_node_the_pod_can_go_to() -> None:
    a = node("a", alloc={"3g.40gb": 2}, labels={"pool": "x"})
    b = node("b", alloc={"3g.40gb": 2}, labels={"pool": "y"})
    assert _nodes_for(build(a, b, pod("p", "1g.10gb"))) == ["a"]
    picky = pod("p", "1g.10gb", spec={"nodeSelector": {"pool": "y"}})
    assert _nodes_for(build(a, b, picky)) == ["b"]
    nowhere = pod("p", "1g.10gb", spec={"nodeSelector": {"pool": "z"}})
    advice = advisor.advise(build(a, b, nowhere), now=NOW)
    assert advice.recommendations == () and advice.unserved == ("default/p",)


def test_the_webhooks_model_affinity_is_honoured() -> None:
    a100 = node("a100", alloc={"3g.40gb": 2})
    h100 = node("h100", alloc={"3g.40gb": 2}, product=H100)
    pinned = pod("p", "1g.10gb", spec=_affinity(keys.LABEL_PRODUCT, "In", [H100]))
    assert _nodes_for(build(a100, h100, pinned)) == ["h100"]
    away = pod("p", "1g.10gb", spec=_affinity(keys.LABEL_PRODUCT, "NotIn", [H100]))
    assert _nodes_for(build(a100, h100, away)) == ["a100"]


def test_taints_need_tolerations() -> None:
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    a = node("a", alloc={"3g.40gb": 2}, taints=[taint])
    b = node("b", alloc={"3g.40gb": 2})
    assert _nodes_for(build(a, b, pod("p", "1g.10gb"))) == ["b"]
    tol = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml",
                            "effect": "NoSchedule"}]}
    assert _nodes_for(build(a, pod("p", "1g.10gb", spec=tol))) == ["a"]
    assert _nodes_for(build(a, pod("p", "1g.10gb"))) == []
    soft = node("a", alloc={"3g.40gb": 2},
                taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}])
    assert _nodes_for(build(soft, pod("p", "1g.10gb"))) == ["a"]


def test_cpu_and_memory_room_after_the_planned_change() -> None:
    small = node("a", alloc={"3g.40gb": 2}, cpu="6")
    big = node("b", alloc={"3g.40gb": 2}, cpu="64")
    # Each pod needs 4 cpus: a (6 cpus) takes one of them, b the other.
    pods = [pod(f"p{i}", "1g.10gb", cpu="4") for i in range(2)]
    recs = advisor.advise(build(small, big, *pods), now=NOW).recommendations
    assert {r.node: len(r.unblocks) for r in recs} == {"a": 1, "b": 1}
    # A pod needing more cpu than a node has is not counted there at all.
    huge = pod("p", "1g.10gb", cpu="32")
    assert _nodes_for(build(small, huge)) == []
    assert _nodes_for(build(small, big, huge)) == ["b"]
    # Bound pods' requests come off the room (here a cpu-hungry 3g.40gb pod on a 2-GPU node).
    two = node("two", gpus=2, alloc={"3g.40gb": 4}, cpu="8", config=None)
    runner = pod("r", "3g.40gb", node="two", phase="Running", cpu="6")
    c = build(two, runner, pod("p", "1g.10gb", cpu="4"))
    assert advisor.host_room(c, c.node("two").node) == (2000, 512 * 1024 ** 3)  # type: ignore[union-attr]
    assert _nodes_for(c) == []


def test_room_taken_by_pods_without_gpu_requests_counts_too() -> None:
    # b has room for the pod's 4 cpus until a cpu-only pod takes 62 of its 64.
    big = node("b", alloc={"3g.40gb": 2}, cpu="64")
    c = build(big, pod("p", "1g.10gb", cpu="4"))
    assert _nodes_for(c) == ["b"]
    c.apply("Pod", "ADDED", builders.pod("batch", node_name="b", requests=[{"cpu": "62"}]))
    assert advisor.host_room(c, c.node("b").node) == (2000, 512 * 1024 ** 3)  # type: ignore[union-attr]
    assert _nodes_for(c) == []


def test_excludes_reads_kubernetes_operators() -> None:
    rec = decoding.node_from_api(
        node("n1", alloc={"3g.40gb": 2}, labels={"zone": "z1", "rank": "5"}),
        profiles.builtin())

    def cons(spec: dict[str, Any]) -> records.PodConstraints:
        return decoding.pod_constraints(spec)

    assert advisor.excludes(rec, cons(_affinity("zone", "In", ["z1", "z2"]))) is None
    assert advisor.excludes(rec, cons(_affinity("zone", "NotIn", ["z1"]))) is not None
    assert advisor.excludes(rec, cons(_affinity("zone", "Exists", []))) is None
    assert advisor.excludes(rec, cons(_affinity("nope", "DoesNotExist", []))) is None
    assert advisor.excludes(rec, cons(_affinity("rank", "Gt", ["4"]))) is None
    assert advisor.excludes(rec, cons(_affinity("rank", "Lt", ["4"]))) is not None
    # Gt and Lt read numbers as kube-scheduler does (Go's strconv.ParseInt, base 10, int64):
    # a label or bound it cannot read matches no node.
    for label, bound, holds in (("5", "-3", True), ("+5", "4", True), ("5_0", "10", False),
                                (" 5", "4", False), ("99999999999999999999", "10", False),
                                ("9223372036854775807", "10", True), ("5", "4.0", False),
                                ("-9223372036854775808", "-9223372036854775809", False)):
        ranked = decoding.node_from_api(
            node("n1", alloc={"3g.40gb": 2}, labels={"rank": label}), profiles.builtin())
        assert (advisor.excludes(ranked, cons(_affinity("rank", "Gt", [bound]))) is None
                ) is holds, (label, bound)
    by_name = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                "values": ["n2"]}]},
                              {"matchFields": [{"key": "metadata.name", "operator": "In",
                                                "values": ["n1"]}]}]}}}}
    assert advisor.excludes(rec, cons(by_name)) is None  # terms are ORed
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}
    empty: dict[str, Any] = {"affinity": {"nodeAffinity": required}}
    assert advisor.excludes(rec, cons(empty)) is not None  # an empty term matches nothing
    tainted = decoding.node_from_api(
        node("t", alloc={"3g.40gb": 2},
             taints=[{"key": "a", "value": "1", "effect": "NoExecute"}]),
        profiles.builtin())
    everything = {"tolerations": [{"operator": "Exists"}]}
    assert advisor.excludes(tainted, cons(everything)) is None
    other_effect = {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]}
    assert advisor.excludes(tainted, cons(other_effect)) == "taint a=1:NoExecute"


def test_bound_pods_keep_no_constraints() -> None:
    spec = {"nodeSelector": {"pool": "x"}}
    bound = decoding.pod_from_api(pod("b", "1g.10gb", node="n", phase="Running", spec=spec))
    waiting = decoding.pod_from_api(pod("w", "1g.10gb", spec=spec))
    assert bound is not None and bound.constraints is records.NO_CONSTRAINTS
    assert waiting is not None and waiting.constraints.node_selector == (("pool", "x"),)
    shared = decoding.RequestMaps()
    one = decoding.pod_from_api(pod("w1", "1g.10gb", spec=spec), shared)
    two = decoding.pod_from_api(pod("w2", "1g.10gb", spec=spec), shared)
    assert one is not None and two is not None and one.constraints is two.constraints


# ---------------------------------------------------------------- hysteresis

LATER = "2023-11-14T22:20:00Z"  # T0 + 400 s


def test_a_node_just_relaid_out_is_not_relaid_out_for_the_same_demand() -> None:
    a = node("a", alloc={"3g.40gb": 2})
    old = [pod(f"old{i}", "1g.10gb") for i in range(3)]  # unschedulable since T0
    recent = {"a": T0 + 300}
    assert _nodes_for(build(a, *old), recent=recent) == []
    # Another idle node takes the demand meanwhile.
    b = node("b", alloc={"3g.40gb": 2})
    assert _nodes_for(build(a, b, *old), recent=recent) == ["b"]
    # After the cool-down it counts again.
    assert _nodes_for(build(a, *old), recent={"a": NOW - advisor.Settings().cooldown_s - 1}) \
        == ["a"]


def test_clearly_new_demand_lifts_the_cool_down() -> None:
    a = node("a", alloc={"3g.40gb": 2})
    recent = {"a": T0 + 300}
    one = [pod("new0", "1g.10gb", since=LATER)]
    assert _nodes_for(build(a, *one), recent=recent) == []  # one instance: not clear enough
    two = [pod(f"new{i}", "1g.10gb", since=LATER) for i in range(2)]
    (rec,) = advisor.advise(build(a, *two), now=NOW, recent=recent).recommendations
    assert rec.node == "a" and rec.unblocks == ("default/new0", "default/new1")


def test_a_pod_of_several_instances_counts_only_toward_a_node_that_holds_them_all() -> None:
    # A pod runs on one node: four 7g.80gb never count toward 2-GPU nodes, however many.
    twos = [node(f"two{i}", gpus=2, alloc={"3g.40gb": 2, "4g.40gb": 2}) for i in range(3)]
    big = pod("big", "7g.80gb", count=4)
    advice = advisor.advise(build(*twos, big), now=NOW)
    assert advice.recommendations == () and advice.unserved == ("default/big",)
    # A 4-GPU node takes it whole, and no 2-GPU node is re-laid out beside it.
    four = node("four", gpus=4, alloc={"3g.40gb": 4, "4g.40gb": 4})
    recs = advisor.advise(build(*twos, four, big), now=NOW).recommendations
    assert [(r.node, r.unblocks) for r in recs] == [("four", ("default/big",))]
    assert recs[0].served == {"7g.80gb": 4}


def test_free_instances_the_pod_cannot_use_do_not_hide_it() -> None:
    # Within the free grace (600 s < 900 s) a pod whose profile has free instances counts
    # only when no node holding them could take it: here "full" has seven free 1g.10gb but
    # not the pod's cpu, is tainted, or holds fewer than the pod asks for.
    idle = node("idle", alloc={"3g.40gb": 2})
    hungry = pod("p", "1g.10gb", cpu="4")
    assert advisor.Settings().free_grace_s > NOW - T0
    short = node("full", alloc={"1g.10gb": 7}, cpu="2")
    assert _nodes_for(build(short, idle, hungry)) == ["idle"]
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    tainted = node("full", alloc={"1g.10gb": 7}, taints=[taint])
    assert _nodes_for(build(tainted, idle, hungry)) == ["idle"]
    one_free = node("full", alloc={"1g.10gb": 7})
    taken = [pod(f"r{i}", "1g.10gb", node="full", phase="Running") for i in range(6)]
    pair = pod("p", "1g.10gb", count=2)
    assert _nodes_for(build(one_free, idle, *taken, pair)) == ["idle"]
    # Where a node could take it, the pod is the scheduler's to place: no advice yet.
    roomy = node("full", alloc={"1g.10gb": 7}, cpu="64")
    assert _nodes_for(build(roomy, idle, hungry)) == []
    assert _nodes_for(build(one_free, idle, *taken, pod("p", "1g.10gb"))) == []
    assert _nodes_for(build(tainted, idle, pod("p", "1g.10gb", spec={"tolerations": [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}))) == []


def test_explain_fixes_the_obstacle_it_names() -> None:
    """Free instances behind a taint, behind exhausted cpu, or only on a cordoned node, and
    no idle GPU to re-lay out: the fix names what to change there (it had said "free
    instances on such a node", and a cordoned node's were "advertised by no node")."""
    taint = {"key": "team", "value": "x", "effect": "NoSchedule"}
    cases = (
        (node("a", alloc={"1g.10gb": 7}, taints=[taint]), {},
         "Give the pod a toleration for the taint, or take the taint off such a node; add "
         "capacity; or ask for another profile."),
        (node("a", alloc={"1g.10gb": 7}, cpu="2"), {"cpu": "8"},
         "Free cpu or memory on such a node, or lower the pod's cpu or memory request; add "
         "capacity; or ask for another profile."),
        (node("a", alloc={"1g.10gb": 7}, unschedulable=True), {},
         "Uncordon a once it may take pods again (kubectl uncordon a); add capacity; or ask "
         "for another profile."),
    )
    for blocked, kw, fix in cases:
        text = advisor.explain(build(blocked, pod("p", "1g.10gb", **kw)), "default", "p",
                               now=NOW)
        assert text.endswith(fix), text
    cordoned = advisor.explain(build(cases[2][0], pod("p", "1g.10gb")), "default", "p",
                               now=NOW)
    assert "- 1g.10gb: advertised only by cordoned node(s) (a), which the scheduler passes " \
        "over." in cordoned
    # Beside a node being re-partitioned to a layout without the profile: both are named
    # (it had said only "it can run once they finish").
    moving = node("m", alloc={"3g.40gb": 2}, config="all-1g.10gb", state="pending")
    text = advisor.explain(build(moving, node("c", alloc={"3g.40gb": 2}, unschedulable=True),
                                 pod("p", "3g.40gb")), "default", "p", now=NOW, config=CONFIG)
    assert ("- 3g.40gb: advertised only by node(s) being re-partitioned to a layout without "
            "it (m); and by cordoned node(s) (c), which the scheduler passes over.") in text
    assert "kubectl uncordon c" in text
    # An idle node a re-layout could use, behind a taint, while the instances are in use.
    full = node("full", alloc={"1g.10gb": 1})
    taken = pod("r", "1g.10gb", node="full", phase="Running")
    idle = node("idle", alloc={"3g.40gb": 2}, taints=[taint])
    text = advisor.explain(build(full, taken, idle, pod("p", "1g.10gb")), "default", "p",
                           now=NOW)
    assert "- Idle node(s) a re-layout could give it from cannot take it (idle: taint " \
        "team=x:NoSchedule)." in text
    assert "This disrupts running pods: default/r." in text  # the fix it has, named
    # No node to re-lay out at all: the fix is the taint's (or the freed instance).
    text = advisor.explain(build(full, taken, idle, pod("p", "1g.10gb")), "default", "p",
                           now=NOW, settings=advisor.Settings(allow_disruptive=False))
    assert text.endswith("Give the pod a toleration for the taint, or take the taint off such "
                         "a node; wait for an instance to be freed (it runs then); add "
                         "capacity; or ask for another profile."), text


def test_explain_names_an_idle_node_whose_layout_migfit_cannot_read() -> None:
    """An idle node laid out in compute instances (1c.3g.40gb) cannot be planned: explain
    names it and the fix, not "widen the pod's nodeSelector" nor no node at all."""
    full = node("full", alloc={"1g.10gb": 1})
    taken = pod("r", "1g.10gb", node="full", phase="Running")
    split = node("split", alloc={"1c.3g.40gb": 6})
    text = advisor.explain(build(full, taken, split, pod("p", "1g.10gb")), "default", "p",
                           now=NOW, settings=advisor.Settings(allow_disruptive=False))
    assert ("- Idle node(s) a re-layout could give it from cannot take it (split: its layout "
            "is unknown to migfit (1c.3g.40gb: compute instances share their GPU instance's "
            "memory") in text, text
    assert text.endswith("Lay out such a node with GPU instance profiles of its model's "
                         "catalog, on GPUs of that one model (migfit status names what it "
                         "advertises); wait for an "
                         "instance to be freed (it runs then); add capacity; or ask for "
                         "another profile."), text


def test_explain_names_an_idle_node_with_gpus_of_two_models() -> None:
    """A node whose GPUs are of two models (GFD labels one, the first GPU's) advertises
    another model's profile: explain says so and that migfit plans no re-layout there."""
    full = node("full", alloc={"1g.10gb": 1})
    taken = pod("r", "1g.10gb", node="full", phase="Running")
    two = node("two", alloc={"3g.40gb": 2, "1g.5gb": 7})
    text = advisor.explain(build(full, taken, two, pod("p", "1g.10gb")), "default", "p",
                           now=NOW, settings=advisor.Settings(allow_disruptive=False))
    assert ("- Idle node(s) a re-layout could give it from cannot take it (two: its layout "
            "is unknown to migfit (GPUs of more than one model: 1g.5gb (A100-40GB) besides "
            "A100-80GB") in text, text
    assert "migfit plans no re-layout here: keep one GPU model per node" in text


def test_explain_names_why_each_free_instance_cannot_take_the_pod() -> None:
    short = node("full", alloc={"1g.10gb": 7}, cpu="2")
    c = build(short, node("idle", alloc={"3g.40gb": 2}), pod("p", "1g.10gb", cpu="4"))
    text = advisor.explain(c, "default", "p", now=NOW)
    assert ("1 schedulable node(s) have a free instance, but none can take it "
            "(full: cpu: 2000m free, it asks for 4000m)") in text
    assert "Fix: re-partition node idle" in text
    # The fix is a sentence: a custom config's step starts with a capital (a command line,
    # for a named config, is left as it is).
    fix = text[text.index("Fix: "):]
    assert "). Add config migfit-" in fix, fix
    roomy = build(node("full", alloc={"1g.10gb": 7}), pod("p", "1g.10gb", cpu="4"))
    text = advisor.explain(roomy, "default", "p", now=NOW)
    assert "have a free instance and room for it (full)" in text and "Fix" not in text


def test_a_pod_counts_unless_one_node_has_both_its_cpu_and_its_memory() -> None:
    # Two nodes with free 1g.10gb: one rich in cpu, one in memory. A pod needing much of both
    # fits neither and counts at once; one needing much of either is the scheduler's.
    cpu_rich = node("cpu-rich", alloc={"1g.10gb": 7}, cpu="64", memory="8Gi")
    mem_rich = node("mem-rich", alloc={"1g.10gb": 7}, cpu="4", memory="512Gi")
    idle = node("idle", alloc={"3g.40gb": 2})

    def asking(cpu: str, memory: str) -> dict[str, Any]:
        p = pod("p", "1g.10gb", cpu=cpu)
        p["spec"]["containers"][0]["resources"]["requests"]["memory"] = memory
        return p

    assert _nodes_for(build(cpu_rich, mem_rich, idle, asking("32", "64Gi"))) == ["idle"]
    assert _nodes_for(build(cpu_rich, mem_rich, idle, asking("32", "4Gi"))) == []
    assert _nodes_for(build(cpu_rich, mem_rich, idle, asking("2", "64Gi"))) == []
    text = advisor.explain(build(cpu_rich, mem_rich, idle, asking("32", "64Gi")), "default", "p",
                           now=NOW)
    assert "cpu-rich: memory: 8Gi free, it asks for 64Gi" in text
    assert "mem-rich: cpu: 4000m free, it asks for 32000m" in text


def _decided(p: dict[str, Any], profile: str, mib: int, reason: str) -> dict[str, Any]:
    """``p`` with the webhook's decision record: ``mib`` asked for, ``profile`` chosen."""
    record: keys.DecisionRecord = {"v": keys.DECISION_VERSION, "strategy": "mixed",
                                   "containers": [{
                                       "container": "main", "request_mib": mib,
                                       "profile": profile,
                                       "resource": profiles.resource_name(profile),
                                       "models": [], "reason": reason}]}
    p["metadata"].setdefault("annotations", {})[keys.DECISION] = keys.encode_decision(record)
    return p


def test_explain_names_a_larger_free_profile_beside_room() -> None:
    # The only free 4g.40gb is on a node without the pod's cpu; an idle 7g.80gb GPU has room,
    # and a free 3g.40gb (too few slices) and a free 1g.10gb (too little memory) do not count.
    short = node("short", alloc={"4g.40gb": 1, "3g.40gb": 1}, cpu="2")
    whole = node("whole", alloc={"7g.80gb": 1})
    small = node("small", alloc={"1g.10gb": 7})
    waiting = _decided(pod("p", "4g.40gb", cpu="4"), "4g.40gb", 30 * 1024,
                       "smallest fitting, with a free instance")
    text = advisor.explain(build(short, whole, small, waiting), "default", "p", now=NOW)
    assert ("- 7g.80gb: holds the 30Gi it asked for and has a free instance on a node with "
            "room for it (whole). The pod keeps its 4g.40gb: the webhook's --choice free "
            "counted the free 4g.40gb wherever they were") in text
    assert "under --choice usable it gives such a pod the larger free instance" in text
    # Decided under --choice usable: the 4g.40gb with room has been taken since.
    usable = _decided(pod("p", "4g.40gb", cpu="4"), "4g.40gb", 30 * 1024,
                      "smallest fitting, with a free instance where the pod's cpu and memory "
                      "fit")
    text = advisor.explain(build(short, whole, usable), "default", "p", now=NOW)
    assert "has been taken since; delete and recreate it to be decided again." in text
    # No line without a record, when the larger instance has no room either, or when the
    # request needs more memory than any free instance has.
    bare = advisor.explain(build(short, whole, pod("p", "4g.40gb", cpu="4")), "default", "p",
                           now=NOW)
    assert "holds the" not in bare and "none can take it (short: cpu" in bare
    cramped = node("whole", alloc={"7g.80gb": 1}, cpu="2")
    assert "holds the" not in advisor.explain(build(short, cramped, waiting), "default", "p",
                                              now=NOW)
    big = _decided(pod("p", "4g.40gb", cpu="4"), "4g.40gb", 90 * 1024, "smallest fitting")
    assert "holds the" not in advisor.explain(build(short, whole, big), "default", "p",
                                              now=NOW)


def test_status_counts_the_pods_waiting_beside_free_instances() -> None:
    short = node("short", alloc={"4g.40gb": 1, "3g.40gb": 1}, cpu="2")
    whole = node("whole", alloc={"7g.80gb": 1})
    c = build(short, whole, pod("p", "4g.40gb", cpu="4"), pod("q", "4g.40gb", cpu="1"),
              pod("r", "2g.20gb", cpu="1"))
    # p: the only free 4g.40gb has 2 cores, it asks for 4; q fits there; no 2g.20gb is free.
    assert advisor.stranded(c) == ["default/p"]
    table = status.render_table(c)
    assert table.splitlines()[-1] == (
        "1 of them wait beside free instances of their profiles that no node they can go to "
        "has (cpu, memory, selectors, taints, or not as many free on one node as they ask "
        "for): default/p; migfit explain POD says why, and names a larger free profile with "
        "room where there is one")
    # A pod of two 3g.40gb where no node has two free is among them: the note names the
    # count as a cause, and says the larger profile is named only where there is one (an
    # outside check read "(cpu, memory, selectors, taints)" for it).
    two = build(node("a", alloc={"3g.40gb": 2}), pod("held", "3g.40gb", node="a"),
                node("b", alloc={"3g.40gb": 2}), pod("held2", "3g.40gb", node="b"),
                pod("w", "3g.40gb", count=2))
    assert advisor.stranded(two) == ["default/w"]
    assert "wait beside" not in status.render_table(build(short, whole, pod("q", "4g.40gb")))


def _eight(name: str, **kw: Any) -> dict[str, Any]:
    return node(name, gpus=8, alloc={"7g.80gb": 8}, **kw)


def test_explain_names_the_nearest_node_for_a_pod_of_many_instances() -> None:
    # An operator asks why an 8-GPU pod waits: the nodes that could ever hold it, the one
    # nearest to eight free, and who holds the rest there (a tainted node it may not use, and
    # a 2-GPU node, however free, do not count).
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    held_a = [pod(f"a{i}", "7g.80gb", node="a") for i in range(5)]
    held_b = [pod(f"b{i}", "7g.80gb", node="b") for i in range(6)]
    scene = [_eight("a"), _eight("b"), _eight("tainted", taints=[taint]),
             node("small", gpus=2, alloc={"7g.80gb": 2}), *held_a, *held_b,
             pod("w", "7g.80gb", count=8)]
    text = advisor.explain(build(*scene), "default", "w", now=NOW)
    assert "needs 8 × 7g.80gb" in text
    assert ("  2 node(s) it may use advertise 8 or more; the nearest, a, has 3 of its 8 free; "
            "the rest are held by default/a0, default/a1, default/a2, default/a3, "
            "default/a4. It runs once one node has 8 free at once") in text
    # Nothing free anywhere: the line follows "every instance is in use".
    full = [_eight("a"), *[pod(f"a{i}", "7g.80gb", node="a") for i in range(8)],
            pod("w", "7g.80gb", count=8)]
    text = advisor.explain(build(*full), "default", "w", now=NOW)
    assert "every instance is in use on the node(s) that advertise it and that it may use " \
           "(a); it runs when enough are." in text
    assert "the nearest, a, has 0 of its 8 free; the rest are held by default/a0" in text
    # No node it may use could ever hold eight: say so, and what to change.
    small = [node("small", gpus=2, alloc={"7g.80gb": 2}), _eight("tainted", taints=[taint]),
             pod("w", "7g.80gb", count=8)]
    text = advisor.explain(build(*small), "default", "w", now=NOW)
    # A taint can be lifted: the tainted 8-GPU node could still hold it.
    assert "can never be scheduled" not in text
    assert ("No node it may use advertises 8 × 7g.80gb (the most is 2, on small), and a "
            "pod's instances must all be on one node") in text
    # Selectors and affinity are the pod's own: an 8-GPU node it does not select cannot.
    small = [node("small", gpus=2, alloc={"7g.80gb": 2}, labels={"pool": "mine"}),
             _eight("elsewhere", labels={"pool": "other"}),
             pod("w", "7g.80gb", count=8, spec={"nodeSelector": {"pool": "mine"}})]
    text = advisor.explain(build(*small), "default", "w", now=NOW)
    assert text.splitlines()[1:] == [
        "- 7g.80gb: no node it may use can ever hold 8 of it, whatever its layout: the most "
        "is 2, on small (2 GPU(s) × 1 per GPU), and a pod's instances must all be on one "
        "node. Waiting or re-partitioning cannot help.",
        "Fix: it can never be scheduled as it is: split the work into pods that ask for at "
        "most 2 × 7g.80gb each, or add a node with more GPUs of a model that has 7g.80gb."]
    # Before, an idle 1-GPU node being re-partitioned was named as one to wait for (an
    # outside check): neither for a pod no node can hold, nor for one a busy node could.
    moving = node("moving", gpus=1, alloc={"3g.40gb": 2},
                  labels={"nvidia.com/mig.config.state": "pending"})
    text = advisor.explain(build(*small, moving), "default", "w", now=NOW)
    assert "moving" not in text and "can never be scheduled" in text
    big = [_eight("a"), *[pod(f"a{i}", "7g.80gb", node="a") for i in range(8)], moving,
           pod("w", "7g.80gb", count=2)]
    text = advisor.explain(build(*big), "default", "w", now=NOW)
    assert "moving" not in text and "Wait for such a node" not in text, text
    assert "can never be scheduled" not in text
    # Eight free but too little cpu: the refusal above says why, no "nearest" is named.
    cramped = [_eight("a", cpu="2"), pod("w", "7g.80gb", count=8, cpu="4")]
    text = advisor.explain(build(*cramped), "default", "w", now=NOW)
    assert "a: cpu: 2000m free, it asks for 4000m" in text
    assert ("Every node it may use that advertises 8 has them free; what keeps it off them "
            "is said above.") in text and "nearest" not in text
    # One instance: no such line.
    one = advisor.explain(build(*scene[:-1], pod("w", "7g.80gb", count=1)), "default", "w",
                          now=NOW)
    assert "room for it (a, b, small)" in one and "nearest" not in one


def test_the_webhooks_recorded_request_is_honoured() -> None:
    # 9900Mi fits the H100's 1g.10gb (9984 MiB), not the A100's (9728): the webhook records it
    # with `models: []` when only H100s were there. The extender's filter refuses an A100
    # node for it after any re-layout, so the advisor must not re-lay one out for it.
    a100 = node("a100", alloc={"3g.40gb": 2})
    h100 = node("h100", alloc={"3g.40gb": 2}, product=H100)
    waiting = _decided(pod("p", "1g.10gb"), "1g.10gb", 9900, "smallest fitting")
    advice = advisor.advise(build(a100, waiting), now=NOW)
    assert advice.recommendations == () and advice.unserved == ("default/p",)
    assert _nodes_for(build(a100, h100, waiting)) == ["h100"]
    text = advisor.explain(build(a100, waiting), "default", "p", now=NOW)
    assert ("a100: its request does not fit: 1g.10gb on A100-80GB has 9728 MiB, below the "
            "9900 MiB requested") in text
    assert "Recreate the pod with a migfit.io/gpu-memory such a node's instances hold" in text
    # A record naming the models the request fits: no other model's node is re-laid out.
    only = _decided(pod("q", "1g.10gb"), "1g.10gb", 8000, "smallest fitting")
    record = keys.decode_decision(only["metadata"]["annotations"][keys.DECISION])
    record["containers"][0]["models"] = ["H100-80GB"]
    only["metadata"]["annotations"][keys.DECISION] = keys.encode_decision(record)
    assert _nodes_for(build(a100, only)) == []
    assert _nodes_for(build(a100, h100, only)) == ["h100"]
    # Without a record (a pod that asked for the resource itself) any model serves.
    assert _nodes_for(build(a100, pod("r", "1g.10gb"))) == ["a100"]


def test_explain_does_not_say_wait_for_an_instance_the_pod_cannot_use() -> None:
    # The only node advertising 1g.10gb has it in use, and the pod's selector excludes that
    # node: a freed instance would not serve it either, so "it runs when one is freed" (and
    # the fix "wait") was wrong.
    busy = node("busy", alloc={"1g.10gb": 1}, labels={"pool": "x"})
    holder = pod("h", "1g.10gb", node="busy", phase="Running")
    picky = pod("p", "1g.10gb", spec={"nodeSelector": {"pool": "y"}})
    text = advisor.explain(build(busy, holder, picky), "default", "p", now=NOW)
    assert "- 1g.10gb: advertised only by node(s) it cannot use (busy: nodeSelector pool=y)." \
        in text
    assert "runs when one is freed" not in text and "Wait for an instance" not in text
    assert "Widen the pod's nodeSelector or required node affinity" in text
    # A pod that may go there still waits for the instance.
    text = advisor.explain(build(busy, holder, pod("q", "1g.10gb")), "default", "q", now=NOW)
    assert ("every instance is in use on the node(s) that advertise it and that it may use "
            "(busy); it runs when one is freed") in text


def _annotated(memory: str) -> dict[str, Any]:
    """A pending pod carrying ``migfit.io/gpu-memory`` that the webhook never patched."""
    p = builders.pod("p", [{"cpu": "1"}], unschedulable_since=None, image="x",
                     container_names=["main"])
    p["metadata"].setdefault("annotations", {})[keys.GPU_MEMORY] = memory
    return p


def test_explain_says_an_annotated_pod_was_not_patched_and_why() -> None:
    a = node("a", alloc={"3g.40gb": 2})
    text = advisor.explain(build(a, _annotated("8Gi")), "default", "p", now=NOW)
    assert text.startswith("default/p is annotated migfit.io/gpu-memory='8Gi' but asks for "
                           "no GPU resource: the webhook did not patch it when it was created.")
    assert "reaches namespace default" in text and "nothing to say" not in text
    text = advisor.explain(build(a, _annotated("12GB")), "default", "p", now=NOW)
    assert "the webhook did not patch it, and would refuse it: " in text
    assert 'did you mean "G" (10^9) or "Gi" (2^30)?' in text


def test_explain_names_idle_nodes_no_re_layout_may_start_on() -> None:
    # The only idle node is cordoned: explain said only "add capacity", with no reason.
    cordoned = node("c", alloc={"3g.40gb": 2}, unschedulable=True)
    text = advisor.explain(build(cordoned, pod("p", "1g.10gb")), "default", "p", now=NOW)
    assert "(c: no re-layout can start there now: cordoned)" in text
    assert "Wait for such a node to finish its change or be Ready, or uncordon it" in text


def test_an_idle_node_kept_for_a_pod_its_instances_fit_is_named() -> None:
    # The outside check's case: an idle node's two free 3g.40gb fit a pod that has waited past
    # the free-instance grace (so something migfit does not model keeps it off them), and the
    # advisor does not take them from it for a 1g.10gb pod. `explain` said "no idle GPU can
    # be re-laid out" beside that idle node, and `advise` counted the first pod among those
    # "no node can give" an instance.
    later = NOW + 1000  # both past the grace; `two` past the free-instance grace too
    scene = build(node("idle", alloc={"3g.40gb": 2}), node("full", alloc={"1g.10gb": 7}),
                  *[pod(f"f{i}", "1g.10gb", node="full") for i in range(7)],
                  pod("two", "3g.40gb", count=2), pod("small", "1g.10gb"))
    advice = advisor.advise(scene, now=later)
    assert advice.recommendations == ()
    assert {w.key: w.fits_free for w in advice.waiting} == {"default/two": True,
                                                            "default/small": False}
    text = advisor.explain(scene, "default", "small", now=later)
    assert ("- Idle node(s) a re-layout could give it from keep their layout: their free "
            "instances fit other waiting pods, which the advisor does not take them from "
            "(idle: default/two).") in text, text
    assert "without taking free instances that other waiting pods fit" in text
    lines = advise_cmd.render_text(advice, details=False).splitlines()
    assert lines[0].startswith("1 pod(s) wait for a MIG instance no node can give them")
    assert lines[1].startswith("1 waiting pod(s) fit free instances on a node they may use, "
                               "yet kube-scheduler has not placed them")
    assert lines[1].endswith(": default/two")
    assert lines[2] == "1 waiting pod(s) no re-layout can serve now: default/small"


def test_never_rests_on_what_lasts_and_kept_nodes_can_hold_the_pod() -> None:
    # A review: migfit's own re-layout taint (gone when the change is done) made `explain` say
    # a 2 × 7g.80gb pod "can never be scheduled" beside a 2-GPU node; and a 1-GPU node was
    # named as kept for another pod, "re-laid out once they run or go", for that same pod.
    relayout = {"key": keys.TAINT_RELAYOUT, "value": "pending", "effect": "NoSchedule"}
    scene = build(node("big", gpus=2, alloc={"3g.40gb": 4}, taints=[relayout]),
                  node("small", alloc={"7g.80gb": 1}),
                  pod("held", "7g.80gb", node="small"), pod("w", "7g.80gb", count=2))
    assert "can never be scheduled" not in advisor.explain(scene, "default", "w", now=NOW)
    later = NOW + 1000
    scene = build(node("big", gpus=2, alloc={"7g.80gb": 2}),
                  *[pod(f"b{i}", "7g.80gb", node="big") for i in range(2)],
                  node("one-gpu", alloc={"1g.10gb": 7}), pod("o", "1g.10gb"),
                  pod("w", "7g.80gb", count=2))
    text = advisor.explain(scene, "default", "w", now=later)
    assert "one-gpu" not in text and "keep their layout" not in text, text


def test_explain_says_a_failed_relayout_failed_not_that_it_is_under_way() -> None:
    # An outside check: a node whose migfit re-layout failed keeps its taint, which read as
    # "being re-partitioned" (wait), while status and the filter say it failed.
    relayout = {"key": keys.TAINT_RELAYOUT, "value": "pending", "effect": "NoSchedule"}
    failed = node("a", alloc={"3g.40gb": 2}, taints=[relayout],
                  annotations={keys.ANNOTATION_RELAYOUT_FAILED: "timeout"})
    text = advisor.explain(build(failed, pod("p", "1g.10gb")), "default", "p", now=NOW)
    assert ("(a: no re-layout can start there now: a migfit re-layout failed here; an "
            "operator must clear it)") in text, text
    assert "being re-partitioned" not in text


def test_a_pod_no_busy_node_could_hold_is_not_told_to_wait_for_freed_ones() -> None:
    # An outside check: 8 × 1g.10gb where the only node advertises 7, all in use, was told
    # "it runs when enough are" and "wait for an instance to be freed".
    scene = build(node("a", gpus=2, alloc={"1g.10gb": 7, "7g.80gb": 1}),
                  *[pod(f"h{i}", "1g.10gb", node="a") for i in range(7)],
                  pod("big", "7g.80gb", node="a"), pod("w", "1g.10gb", count=8))
    text = advisor.explain(scene, "default", "w", now=NOW)
    assert ("- 1g.10gb: every instance is in use on the node(s) that advertise it and that it "
            "may use (a), and none of them advertises 8.") in text, text
    assert "runs when" not in text and "wait for an instance to be freed" not in text.lower()
    assert "Split the pod into pods that ask for fewer instances" in text
