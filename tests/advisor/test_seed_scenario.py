"""The seed's scenario: idle 3g.40gb next to a pod waiting for 1g.10gb; busy nodes are not safe."""

from __future__ import annotations

import pathlib
from collections import Counter
from collections.abc import Mapping
from typing import Any

import yaml
from advisor_scene import T0, build, node, pod

from migfit import advisor, cluster, layouts, migparted, profiles
from migfit.profiles import ProfileName

NOW = T0 + 600
A100 = profiles.builtin().get("A100-80GB")
EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


def _valid(rec: advisor.Recommendation) -> None:
    model = profiles.builtin().get(rec.model)
    for g in rec.gpus:
        assert not g.after or layouts.check(model, g.after).valid, g


def test_idle_node_is_flagged_with_a_layout_providing_the_profile() -> None:
    c = build(node("a", alloc={"3g.40gb": 2}, config="all-3g.40gb"),
              pod("wants-small", "1g.10gb", namespace="ml"))
    advice = advisor.advise(c, now=NOW)
    (rec,) = advice.recommendations
    assert rec.node == "a" and not rec.disruptive and rec.disrupts == ()
    assert rec.unblocks == ("ml/wants-small",)
    assert any("1g.10gb" in g.after for g in rec.gpus)
    assert rec.gpus[0].before == ("3g.40gb", "3g.40gb")
    assert rec.before_source == "inferred" and rec.before_config == "all-3g.40gb"
    _valid(rec)
    # No ConfigMap: a custom config in mig-parted format that parses strictly and matches.
    assert rec.config is None and rec.mig_parted is not None
    cfg = migparted.parse_data(rec.mig_parted)
    back = migparted.resolve(cfg, rec.target, model=A100, gpu_count=1)
    assert back.gpus[0] == rec.gpus[0].after
    assert rec.command.endswith(
        f"kubectl label node a nvidia.com/mig.config={rec.target} --overwrite")
    # It says where to find the config, in words an operator reads (not a field name alone).
    assert rec.command.startswith(f"add config {rec.target} (printed by migfit advise "
                                  "--details; mig_parted in GET /advice) to the ConfigMap"), \
        rec.command
    js = advice.to_json()["recommendations"][0]
    assert set(js) >= {"node", "config", "mig_parted", "gpus", "unblocks", "disrupts"}


def test_busy_node_is_never_safe_and_lists_exactly_its_pods() -> None:
    c = build(node("busy", alloc={"3g.40gb": 2}),
              pod("runner", "3g.40gb", namespace="t", node="busy"),
              pod("done", "3g.40gb", namespace="t", node="busy", phase="Succeeded"),
              pod("wants-small", "1g.10gb"))
    (rec,) = advisor.advise(c, now=NOW).recommendations
    assert rec.disruptive and rec.disrupts == ("t/runner",)
    # The instance in use stays in the proposed layout.
    assert Counter(rec.gpus[0].after)["3g.40gb"] >= 1
    _valid(rec)
    none = advisor.advise(c, now=NOW, settings=advisor.Settings(allow_disruptive=False))
    assert none.recommendations == () and none.unserved == ("default/wants-small",)


def test_safe_node_preferred_over_busy_one() -> None:
    c = build(node("busy", alloc={"3g.40gb": 2}),
              node("idle", alloc={"3g.40gb": 2}),
              pod("runner", "3g.40gb", node="busy"),
              pod("wants-small", "1g.10gb"))
    (rec,) = advisor.advise(c, now=NOW).recommendations
    assert rec.node == "idle" and not rec.disruptive


def test_no_advice_when_servable_within_grace_or_not_yet_unschedulable() -> None:
    free = build(node("a", alloc={"3g.40gb": 2}), node("b", alloc={"1g.10gb": 7}),
                 pod("p", "1g.10gb"))
    assert advisor.advise(free, now=NOW).recommendations == ()
    # Still Unschedulable long after the scheduler's retries although 1g.10gb is free on b:
    # those instances are of no use to it, so a re-layout of a is recommended after all.
    late = advisor.advise(free, now=T0 + advisor.Settings().free_grace_s + 1)
    assert [r.node for r in late.recommendations] == ["a"]
    young = build(node("a", alloc={"3g.40gb": 2}), pod("p", "1g.10gb"))
    assert advisor.advise(young, now=T0 + 5).recommendations == ()
    untried = build(node("a", alloc={"3g.40gb": 2}), pod("p", "1g.10gb", since=None))
    assert advisor.advise(untried, now=NOW).recommendations == ()


def test_nodes_under_relayout_or_failed_are_left_alone() -> None:
    c = build(node("moving", alloc={"3g.40gb": 2}, state="pending"),
              node("tainted", alloc={"3g.40gb": 2},
                   taints=[{"key": "migfit.io/relayout", "value": "pending",
                            "effect": "NoSchedule"}]),
              node("failed", alloc={"3g.40gb": 2}, state="failed"),
              node("operator-must-clear", alloc={"3g.40gb": 2},
                   annotations={advisor.ANNOTATION_RELAYOUT_FAILED: "{}"}),
              node("cordoned", alloc={"3g.40gb": 2}, unschedulable=True),
              pod("p", "1g.10gb"))
    assert advisor.advise(c, now=NOW).recommendations == ()


def test_named_config_preferred_when_it_serves_the_demand() -> None:
    cfg = migparted.parse("""
version: v1
mig-configs:
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
""")
    c = build(node("a", alloc={"3g.40gb": 4}, gpus=2, config="all-3g.40gb"),
              pod("p1", "1g.10gb"), pod("p2", "1g.10gb"))
    (rec,) = advisor.advise(c, now=NOW, config=cfg).recommendations
    assert rec.config == "all-balanced" and rec.mig_parted is None
    assert rec.before_source == "config"
    assert rec.unblocks == ("default/p1", "default/p2")
    assert rec.command == "kubectl label node a nvidia.com/mig.config=all-balanced --overwrite"
    _valid(rec)


def test_many_pods_spread_over_few_nodes() -> None:
    nodes = [node(f"n{i}", alloc={"7g.80gb": 8}, gpus=8) for i in range(5)]
    pods = [pod(f"p{i}", "1g.10gb") for i in range(20)]
    advice = advisor.advise(build(*nodes, *pods), now=NOW)
    (rec,) = advice.recommendations  # one node's GPUs hold 20 × 1g.10gb
    assert len(rec.unblocks) == 20 and advice.unserved == ()
    assert sum(g.changed for g in rec.gpus) == 3
    _valid(rec)


def test_example_cluster() -> None:
    c = cluster.Cluster()
    raw = yaml.safe_load(EXAMPLE.read_text())
    cluster.load_objects(c, raw["items"] if isinstance(raw, dict) else raw)
    advice = advisor.advise(c, now=2_000_000_000.0)
    flagged = {r.node: r for r in advice.recommendations}
    assert flagged, "the seed node must be flagged"
    for rec in advice.recommendations:
        _valid(rec)
        state = c.node(rec.node)
        assert state is not None
        # Nothing in use is touched: every instance in use still exists after the change.
        after = Counter(p for g in rec.gpus for p in g.after)
        for p, n in state.used.items():
            assert after[p] >= n
        assert any("1g.10gb" in g.after for g in rec.gpus) or rec.unblocks
        if state.used_total:
            assert rec.disruptive


def test_explain_says_why_and_how_to_fix() -> None:
    c = build(node("a", alloc={"3g.40gb": 2}), pod("p", "1g.10gb", namespace="ml"),
              pod("r", "3g.40gb", namespace="ml", node="a", phase="Running"))
    text = advisor.explain(c, "ml", "p", now=NOW)
    assert "no node advertises it" in text and "kubectl label node a" in text
    assert "ml/r" in text  # the change disrupts the running pod
    assert "bound to node a" in advisor.explain(c, "ml", "r", now=NOW)
    assert "not in migfit's view" in advisor.explain(c, "ml", "nope", now=NOW)
    assert "grace period" in advisor.explain(c, "ml", "p", now=T0 + 1)


def test_advice_json_and_gauges() -> None:
    import prometheus_client

    from migfit.extender import advice

    c = build(node("a", alloc={"3g.40gb": 2}), pod("p", "1g.10gb"))
    doc = advice.advice_json(c, now=NOW)
    assert [r["node"] for r in doc["recommendations"]] == ["a"]
    cache = advice.AdviceCache(clock=lambda: NOW)
    assert cache.get(c) is cache.get(c)  # cached on the generation
    registry = prometheus_client.CollectorRegistry()
    metrics = advice.Metrics(registry)
    metrics.observe(cache.get(c))
    text = prometheus_client.generate_latest(registry).decode()
    assert 'migfit_relayout_recommendations{disruptive="false"} 1.0' in text


def test_a_node_whose_allocatable_needs_more_gpus_than_it_reports_is_not_planned() -> None:
    # Two 7g.80gb cannot sit on the one GPU the node reports: the inferred layout has a
    # second GPU the MIG Manager could never re-partition, so no recommendation uses it.
    c = build(node("stale", alloc={"7g.80gb": 2}, gpus=1), pod("wants-small", "1g.10gb"))
    assert advisor.advise(c, now=NOW).recommendations == ()
    ok = build(node("two", alloc={"7g.80gb": 2}, gpus=2), pod("wants-small", "1g.10gb"))
    (rec,) = advisor.advise(ok, now=NOW).recommendations
    assert len(rec.gpus) == 2


# ---------------------------------------------------------------- the seed scenario, per GPU

SEED_CONFIG = migparted.parse("""
version: v1
mig-configs:
  seed-layout:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
""")
BUSY = advisor.Settings(busy_nodes=True, allow_disruptive=False)


def _seed() -> cluster.Cluster:
    """Two idle 3g.40gb on GPU 0; GPU 1's seven 1g.10gb all in use; a 1g.10gb pod waits."""
    runners = [pod(f"r{i}", "1g.10gb", namespace="t", node="seed", phase="Running")
               for i in range(7)]
    return build(node("seed", gpus=2, alloc={"3g.40gb": 2, "1g.10gb": 7},
                      config="seed-layout"),
                 *runners, pod("wants-small", "1g.10gb", namespace="ml"))


def _mig_manager(before: tuple[tuple[str, ...], ...], doc: Mapping[str, Any], name: str,
                 busy: tuple[bool, ...]) -> tuple[tuple[tuple[str, ...], ...], list[int]]:
    """What mig-parted does with config ``name`` of ``doc``: per GPU, a GPU whose instance
    counts already match is skipped; any other is cleared and re-created, which must never
    happen to a GPU holding an instance in use. The new layouts and the GPUs it touched."""
    wanted = migparted.resolve(migparted.parse_data(doc), name, model=A100,
                               gpu_count=len(before))
    touched = []
    for i, (now_, want) in enumerate(zip(before, wanted.gpus, strict=True)):
        if Counter(now_) != Counter(want):
            assert not busy[i], f"GPU {i} holds instances in use and would be re-created"
            touched.append(i)
    return wanted.gpus, touched


def test_seed_scenario_end_to_end_relays_out_gpu0_only_and_the_pod_runs() -> None:
    from migfit.extender import figures, filtering

    c = _seed()
    advice = advisor.advise(c, now=NOW, settings=BUSY, config=SEED_CONFIG)
    (rec,) = advice.recommendations
    assert rec.node == "seed" and rec.unblocks == ("ml/wants-small",)
    # A busy-node re-layout: it disrupts nobody and says who keeps running.
    assert not rec.disruptive and rec.busy_node
    assert rec.running == tuple(f"t/r{i}" for i in range(7))
    g0, g1 = rec.gpus
    assert g0.changed and "1g.10gb" in g0.after
    assert not g1.changed and g1.after == ("1g.10gb",) * 7  # the busy GPU, exactly as it was
    _valid(rec)
    js = advice.to_json()["recommendations"][0]
    assert js["busy_node"] is True and js["running"] == list(rec.running)
    assert js["disruptive"] is False

    # The custom config has one entry per GPU layout (devices: [0] and [1]); migfit's own
    # mig-parted parser reads it back to exactly the proposed layouts.
    assert rec.config is None and rec.mig_parted is not None
    (entries,) = rec.mig_parted["mig-configs"].values()
    assert sorted(e["devices"] for e in entries) == [[0], [1]]
    state = c.node("seed")
    assert state is not None
    before = ((ProfileName("3g.40gb"),) * 2, (ProfileName("1g.10gb"),) * 7)
    layout, touched = _mig_manager(before, rec.mig_parted, rec.target, busy=(False, True))
    assert touched == [0] and layout[1] == before[1]
    assert [tuple(g) for g in layout] == [g0.after, g1.after]

    # The MIG Manager reports success: the node advertises the new instances under the new
    # config (now in the ConfigMap), and the pod passes the extender's filter and is bound.
    new_alloc = Counter(p for g in layout for p in g)
    cfg = migparted.Config({**SEED_CONFIG.configs,
                            **migparted.parse_data(rec.mig_parted).configs})
    runners = [pod(f"r{i}", "1g.10gb", namespace="t", node="seed", phase="Running")
               for i in range(7)]
    after = build(node("seed", gpus=2, alloc=dict(new_alloc), config=rec.target), *runners,
                  pod("wants-small", "1g.10gb", namespace="ml"))
    waiting = after.find_pod("ml", "wants-small")
    assert waiting is not None
    verdict = filtering.filter_nodes(figures.Index(after), filtering.request_of(waiting),
                                     ["seed"])
    assert verdict.passed == ["seed"]
    bound = build(node("seed", gpus=2, alloc=dict(new_alloc), config=rec.target), *runners,
                  pod("wants-small", "1g.10gb", namespace="ml", node="seed", phase="Running"))
    again = advisor.advise(bound, now=NOW + 60, settings=BUSY, config=cfg)
    assert again.recommendations == () and again.waiting == ()
    # Its layout now resolves from the config, GPU 1 still the seven 1g.10gb in use.
    seed = bound.node("seed")
    assert seed is not None
    view = advisor.view(bound, seed, cfg)
    assert view is not None and view.layout.source == "config"
    assert view.layout.gpus[1] == before[1] and view.busy == (True, True)


def test_seed_scenario_is_not_touched_when_which_gpu_is_busy_is_not_known() -> None:
    # Without the ConfigMap the layout is inferred, and {3g.40gb: 2, 1g.10gb: 7} over two GPUs
    # could be either way round: the advisor cannot tell GPU 0 from GPU 1, so it proposes no
    # busy-node re-layout (and, without allow_disruptive, nothing).
    c = _seed()
    assert advisor.advise(c, now=NOW, settings=BUSY).recommendations == ()
    seed = c.node("seed")
    assert seed is not None
    view = advisor.view(c, seed, None)
    assert view is not None and view.unknown is not None and "inferred" in view.unknown
    # Off by default: the library's Settings() propose the old, disruptive change only.
    (rec,) = advisor.advise(c, now=NOW, config=SEED_CONFIG).recommendations
    assert rec.disruptive and rec.running == ()


def test_a_gpu_is_busy_when_any_of_its_profiles_is_in_use() -> None:
    # One 3g.40gb of four in use over two identical GPUs: either GPU may hold it, so both
    # are busy and nothing can change without disrupting it.
    c = build(node("n", gpus=2, alloc={"3g.40gb": 4}),
              pod("r", "3g.40gb", node="n", phase="Running"), pod("p", "1g.10gb"))
    assert advisor.advise(c, now=NOW, settings=BUSY).recommendations == ()
    assert advisor.busy_gpus([("3g.40gb", "3g.40gb"), ("1g.10gb",) * 7],
                             {ProfileName("1g.10gb"): 1}) == (False, True)
    assert advisor.busy_gpus([("3g.40gb", "3g.40gb")] * 2, {}) == (False, False)


def test_uniform_unique_inferred_layout_counts_as_known() -> None:
    # 7g.80gb on each of two GPUs, one in use: only one arrangement exists, so the idle GPU
    # is re-laid out without a ConfigMap, and the busy one is kept.
    c = build(node("n", gpus=2, alloc={"7g.80gb": 2}),
              pod("big", "7g.80gb", node="n", phase="Running"), pod("p", "1g.10gb"))
    # Both GPUs hold 7g.80gb, one in use: either may be it, so both are busy.
    assert advisor.advise(c, now=NOW, settings=BUSY).recommendations == ()
    c2 = build(node("n", gpus=2, alloc={"1g.10gb": 14}),
               *[pod(f"r{i}", "1g.10gb", node="n", phase="Running") for i in range(14)],
               pod("p", "3g.40gb"))
    n2 = c2.node("n")
    assert n2 is not None
    v2 = advisor.view(c2, n2, None)
    assert v2 is not None and v2.unknown is None  # 7 + 7 is the only arrangement
    balanced = build(node("n", gpus=2, alloc={"3g.40gb": 2, "2g.20gb": 2, "1g.10gb": 4}),
                     pod("r", "2g.20gb", node="n", phase="Running"))
    nb = balanced.node("n")
    assert nb is not None
    vb = advisor.view(balanced, nb, None)
    assert vb is not None and vb.unknown is not None  # 3g+3g | 2g+2g+2g+1g... also fits


def test_whole_gpus_on_a_busy_node_forbid_a_per_gpu_relayout() -> None:
    objs = node("n", gpus=2, alloc={"1g.10gb": 7}, config="seed-layout")
    for key in ("capacity", "allocatable"):
        objs["status"][key]["nvidia.com/gpu"] = "1"
    c = build(objs, *[pod(f"r{i}", "1g.10gb", node="n", phase="Running") for i in range(7)],
              pod("p", "1g.10gb"))
    n = c.node("n")
    assert n is not None
    v = advisor.view(c, n, None)
    assert v is None or (v.unknown is not None and "MIG disabled" in v.unknown)
    assert all(r.running == () for r in
               advisor.advise(c, now=NOW, settings=BUSY).recommendations)


def test_explain_says_a_busy_node_keeps_its_pods_running() -> None:
    c = _seed()
    text = advisor.explain(c, "ml", "wants-small", now=NOW, settings=BUSY, config=SEED_CONFIG)
    assert "re-partition node seed (GPU 0: 3g.40gb 3g.40gb ->" in text
    assert "GPU 1" not in text and "keep running" in text and "t/r0" in text


def test_advise_text_marks_busy_node_relayouts() -> None:
    from migfit.commands import advise as advise_cli

    advice = advisor.advise(_seed(), now=NOW, settings=BUSY, config=SEED_CONFIG)
    full = advise_cli.render_text(advice)
    assert "node seed (A100-80GB, busy node)" in full
    assert "GPU 1: " + " ".join(["1g.10gb"] * 7) + " -> " in full and "(unchanged)" in full
    assert "keeps running" in full and "t/r6" in full
    summary = advise_cli.render_text(advice, details=False)
    assert "(0 safe, 1 of busy nodes' idle GPUs, 0 disruptive)" in summary


def test_a_busy_node_with_an_empty_gpu_is_not_relaid_out_per_gpu() -> None:
    cfg = migparted.parse("""
version: v1
mig-configs:
  half:
    - devices: [0]
      mig-enabled: false
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
""")
    c = build(node("n", gpus=2, alloc={"1g.10gb": 7}, config="half"),
              *[pod(f"r{i}", "1g.10gb", node="n", phase="Running") for i in range(7)],
              pod("p", "1g.10gb"))
    n = c.node("n")
    assert n is not None
    v = advisor.view(c, n, cfg)
    assert v is not None and v.layout.source == "config"
    assert v.unknown is not None and "GPU 0 has no instances" in v.unknown
    assert advisor.advise(c, now=NOW, settings=BUSY, config=cfg).recommendations == ()
