"""Re-layouts ahead of demand: idle nodes re-laid out toward what the demand mix will lack."""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import prometheus_client
from advisor_scene import T0, build, node, pod

from migfit import advisor, cli, decoding, keys, planner, profiles
from migfit.commands import extender as extender_cli
from migfit.extender import advice
from migfit.simulate import engine, objects, policies

A100 = profiles.builtin().get("A100-80GB")
SETTINGS = advisor.Settings()


def _scene(*, bound: int = 60, idle: int = 4, idle_alloc: dict[str, int] | None = None,
           idle_cpu: str = "64", pod_cpu: str = "8") -> list[dict[str, Any]]:
    """``bound`` one-GPU nodes each running one 7g.80gb pod (the mix: whole GPUs only) and
    ``idle`` one-GPU nodes laid out as ``idle_alloc`` (default seven 1g.10gb) with no pod."""
    objs: list[dict[str, Any]] = []
    for i in range(bound):
        objs.append(node(f"busy-{i:03d}", alloc={"7g.80gb": 1}))
        objs.append(pod(f"train-{i:03d}", "7g.80gb", node=f"busy-{i:03d}", phase="Running",
                        cpu=pod_cpu))
    for i in range(idle):
        objs.append(node(f"idle-{i}", alloc=idle_alloc or {"1g.10gb": 7}, cpu=idle_cpu))
    return objs


def test_shortfall_projects_the_mix_over_the_free_slices() -> None:
    c = build(*_scene())
    fall = advisor.shortfall(c, SETTINGS)
    model, whole = A100.id, profiles.ProfileName("7g.80gb")
    # 4 idle GPUs × 7 free 1g.10gb = 28 free memory slices; the mix is all 7g.80gb (8 memory
    # slices): it needs 3.5 of them and has none free. Nobody asks for 1g.10gb: surplus.
    assert set(fall) == {model}
    assert dict(fall[model].short) == {whole: 3}
    assert "1g.10gb" in fall[model].surplus
    assert fall[model].needs[whole] == (8000, 0)


def test_idle_nodes_are_relaid_out_for_the_shortfall() -> None:
    c = build(*_scene())
    adv = advisor.advise(c, now=T0 + 600, settings=SETTINGS)
    ahead = [r for r in adv.recommendations if r.ahead]
    assert len(ahead) == 3  # the shortfall: three 7g.80gb
    for r in ahead:
        assert r.node.startswith("idle-")
        assert [(g.before, g.after) for g in r.gpus] == [(("1g.10gb",) * 7, ("7g.80gb",))]
        assert r.unblocks == () and r.disrupts == () and r.running == ()
        assert r.to_json()["ahead"] is True
    assert adv.waiting == ()  # no pod waits: the advice is ahead of demand


def test_ahead_adds_at_most_what_the_mix_has_shown() -> None:
    # 50 whole-GPU pods (the smallest sample) and 200 idle GPUs: the projection over the
    # 1,400 free memory slices wants 175 7g.80gb, but a round re-lays out only as many as
    # the mix holds (a small early sample would otherwise re-lay out most of an empty
    # cluster, then the next sample the other way).
    bound = SETTINGS.ahead_min_pods
    c = build(*_scene(bound=bound, idle=200))
    fall = advisor.shortfall(c, SETTINGS)
    assert dict(fall[A100.id].short) == {profiles.ProfileName("7g.80gb"): bound}
    adv = advisor.advise(c, now=T0 + 600, settings=SETTINGS)
    assert len([r for r in adv.recommendations if r.ahead]) == bound
    # Once those hold pods, the next round may add as many again.
    objs = _scene(bound=2 * bound, idle=150)
    assert dict(advisor.shortfall(build(*objs), SETTINGS)[A100.id].short) == {
        profiles.ProfileName("7g.80gb"): 2 * bound}


def test_off_below_the_sample_size_and_when_disabled() -> None:
    few = build(*_scene(bound=SETTINGS.ahead_min_pods - 1))
    assert advisor.shortfall(few, SETTINGS) == {}
    assert advisor.advise(few, now=T0 + 600, settings=SETTINGS).recommendations == ()
    off = advisor.Settings(ahead_from=None)
    c = build(*_scene())
    assert advisor.shortfall(c, off) == {}
    assert advisor.advise(c, now=T0 + 600, settings=off).recommendations == ()


def test_not_before_the_allocated_share() -> None:
    c = build(*_scene(bound=60, idle=60))  # half of the memory slices in use (60 of 120 GPUs)
    assert advisor.shortfall(c, advisor.Settings(ahead_from=0.6)) == {}
    assert advisor.shortfall(c, advisor.Settings(ahead_from=0.4)) != {}


def test_a_layout_that_matches_the_mix_stays() -> None:
    c = build(*_scene(idle_alloc={"7g.80gb": 1}))
    assert advisor.shortfall(c, SETTINGS) == {}
    assert advisor.advise(c, now=T0 + 600, settings=SETTINGS).recommendations == ()


def test_a_node_without_the_cpu_for_the_new_instances_stays() -> None:
    # each 7g.80gb pod of the mix asks for 8 cores; the idle nodes have 4
    c = build(*_scene(idle_cpu="4"))
    assert advisor.shortfall(c, SETTINGS)  # the gap is there ...
    assert advisor.advise(c, now=T0 + 600, settings=SETTINGS).recommendations == ()  # ... no room


def test_free_instances_behind_exhausted_cpu_are_no_supply() -> None:
    # Eight nodes with a free 7g.80gb but 4 cores (the mix's 7g pod asks for 8) and two idle
    # nodes of 1g.10gb. Counting those 7g as free, the projection over 78 free memory slices
    # wants 9.75 and has 8: no shift. None of them can take a pod: the usable supply is the
    # 14 slices of the idle nodes, which want 1.75 7g.80gb, and none is usable.
    whole = profiles.ProfileName("7g.80gb")

    def scene(cpu: str) -> list[dict[str, Any]]:
        objs = _scene(idle=2)
        objs.extend(node(f"starved-{i}", alloc={"7g.80gb": 1}, cpu=cpu) for i in range(8))
        return objs

    fall = advisor.shortfall(build(*scene("4")), SETTINGS)
    assert dict(fall[A100.id].short) == {whole: 1}
    # The mix counts 60 pods: trades allowed from 50 here (their own gate is tested below).
    early = dataclasses.replace(SETTINGS, balance_min_pods=50)
    adv = advisor.advise(build(*scene("4")), now=T0 + 600, settings=early)
    recs = [(r.node, [g.after for g in r.gpus]) for r in adv.recommendations]
    assert recs[0] == ("idle-0", [(whole,)])  # ahead of demand: the usable 7g.80gb it lacks
    # ... and a starved node trades its 7g.80gb for the other idle node's 1g.10gb layout
    # (nobody asks for 1g.10gb: those want no cpu)
    assert len(recs) == 3 and recs[1][1] == [("1g.10gb",) * 7] and recs[2] == (
        "idle-1", [(whole,)])
    assert all(r.balance for r in adv.recommendations[1:])
    # The same nodes with the cores for it: eight usable 7g.80gb, nothing short.
    assert advisor.shortfall(build(*scene("64")), SETTINGS) == {}


def test_busy_gpus_and_needed_instances_are_kept() -> None:
    # An idle node whose GPU holds 4g.40gb + 3g.40gb: the mix asks for neither, both are
    # surplus, so the GPU becomes a 7g.80gb. A node with one 1g.10gb pod is not idle: kept.
    objs = _scene(idle=0)
    objs.append(node("idle-mixed", alloc={"4g.40gb": 1, "3g.40gb": 1}))
    objs.append(node("half", alloc={"1g.10gb": 7}))
    objs.append(pod("small", "1g.10gb", node="half", phase="Running"))
    objs.append(node("idle-small", alloc={"1g.10gb": 7}))
    c = build(*objs)
    adv = advisor.advise(c, now=T0 + 600, settings=SETTINGS)
    changed = {r.node: [g.after for g in r.gpus if g.changed] for r in adv.recommendations}
    assert "half" not in changed
    assert changed.get("idle-mixed") == [("7g.80gb",)]


def test_an_instance_the_mix_needs_is_worth_keeping() -> None:
    # The mix: 7g.80gb and 4g.40gb pods alike (the 4g.40gb ones on busy 4g.40gb + 3g.40gb
    # GPUs). An idle GPU of 4g.40gb + 2g.20gb + 1g.10gb (2g and 1g: nobody asks) becomes a
    # 7g.80gb only if that is worth a slice more than keeping its needed 4g.40gb: 8 memory
    # slices against 4, so it changes; an idle 7g.80gb GPU (nothing in surplus) is never
    # touched.
    objs: list[dict[str, Any]] = []
    for i in range(40):
        objs.append(node(f"big-{i:02d}", alloc={"7g.80gb": 1}))
        objs.append(pod(f"big-{i:02d}", "7g.80gb", node=f"big-{i:02d}", phase="Running"))
        objs.append(node(f"mid-{i:02d}", alloc={"4g.40gb": 1, "3g.40gb": 1}))
        objs.append(pod(f"mid-{i:02d}", "4g.40gb", node=f"mid-{i:02d}", phase="Running"))
    objs.append(node("idle-a", alloc={"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}))
    objs.append(node("idle-whole", alloc={"7g.80gb": 1}))
    c = build(*objs)
    adv = advisor.advise(c, now=T0 + 600, settings=SETTINGS)
    changed = {r.node: [(g.before, g.after) for g in r.gpus if g.changed]
               for r in adv.recommendations if r.ahead}
    assert "idle-whole" not in changed
    assert changed.get("idle-a") == [(("1g.10gb", "2g.20gb", "4g.40gb"), ("7g.80gb",))]


def _advise_cli(tmp_path: pathlib.Path, items: list[dict[str, Any]]
                ) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``migfit advise --cluster FILE`` on ``items``, with the extra arguments given."""
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    root = pathlib.Path(__file__).resolve().parents[2]

    def advise(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "migfit.cli", "advise", "--cluster",
                               str(path), "--now", str(T0 + 600), *extra], cwd=root,
                              capture_output=True, text=True, timeout=120, check=False)

    return advise


def test_advise_command_shows_and_disables_it(tmp_path: pathlib.Path) -> None:
    advise = _advise_cli(tmp_path, _scene())
    doc = json.loads(advise("--json").stdout)
    assert [r["ahead"] for r in doc["recommendations"]] == [True] * 3
    text = advise("--details")
    assert text.returncode == 0, text.stderr
    assert "ahead of demand: the demand mix will lack 1 × 7g.80gb" in text.stdout
    summary = advise().stdout
    assert "3 idle node(s) re-laid out ahead of demand" in summary and " ahead " in summary
    off = advise("--no-ahead")
    assert off.returncode == 0 and "nothing to re-lay out" in off.stdout


def test_a_pod_with_two_profiles_counts_once_toward_the_sample() -> None:
    # 49 pods, each with a 7g.80gb container and a 1g.10gb one: 98 instances, 49 pods
    objs: list[dict[str, Any]] = []
    for i in range(49):
        objs.append(node(f"busy-{i:02d}", gpus=2, alloc={"7g.80gb": 1, "1g.10gb": 7}))
        p = pod(f"two-{i:02d}", "7g.80gb", node=f"busy-{i:02d}", phase="Running")
        p["spec"]["containers"].append({"name": "side", "image": "x", "resources": {
            "limits": {profiles.resource_name("1g.10gb"): "1"},
            "requests": {profiles.resource_name("1g.10gb"): "1"}}})
        objs.append(p)
    objs.append(node("idle", alloc={"1g.10gb": 7}))
    assert advisor.shortfall(build(*objs), SETTINGS) == {}
    assert advisor.shortfall(build(*objs), advisor.Settings(ahead_min_pods=49)) != {}


# ---------------------------------------------------------------- idle nodes trade layouts


def _host_scene(*, idle_cpu: str = "32", full: int = 30) -> list[dict[str, Any]]:
    """The mix: 210 pods on 1g.10gb and 30 on 7g.80gb, 4 cores each, on full nodes (as many
    memory slices of each, in proportion, as the idle nodes have free: no profile in surplus;
    240 pods: enough for trades, ``balance_min_pods``; ``full`` nodes of each); two idle 2-GPU
    nodes: ``small`` of 1g.10gb only (14 × 4 cores wanted of ``idle_cpu``) and ``whole`` of
    7g.80gb only (2 × 4)."""
    objs: list[dict[str, Any]] = []
    for i in range(full):
        objs.append(node(f"ones-{i}", alloc={"1g.10gb": 7}))
        objs.extend(pod(f"small-{i}-{k}", "1g.10gb", node=f"ones-{i}", phase="Running",
                        cpu="4") for k in range(7))
    for i in range(full):
        objs.append(node(f"big-{i:02d}", alloc={"7g.80gb": 1}))
        objs.append(pod(f"big-{i:02d}", "7g.80gb", node=f"big-{i:02d}", phase="Running",
                        cpu="4"))
    objs.append(node("small", gpus=2, alloc={"1g.10gb": 14}, cpu=idle_cpu))
    objs.append(node("whole", gpus=2, alloc={"7g.80gb": 2}, cpu=idle_cpu))
    return objs


def test_idle_nodes_trade_layouts_so_their_cpu_feeds_their_instances() -> None:
    c = build(*_host_scene())
    # small's cpu feeds 8 of its 14 1g.10gb: the other 6 are no supply, so the projection
    # finds 1g.10gb short; no idle GPU holds a profile in surplus, so no change is ahead of
    # demand: the trade is what feeds them.
    assert dict(advisor.shortfall(c, SETTINGS)[A100.id].short) == {
        profiles.ProfileName("1g.10gb"): 3}
    adv = advisor.advise(c, now=T0 + 600, settings=SETTINGS)
    recs = {r.node: r for r in adv.recommendations}
    assert set(recs) == {"small", "whole"}
    # 14 × 1g.10gb want 56 of small's 32 cores; after one GPU each way both want 32.
    small, whole = recs["small"], recs["whole"]
    assert [g.after for g in small.gpus if g.changed] == [("7g.80gb",)]
    assert [g.after for g in whole.gpus if g.changed] == [("1g.10gb",) * 7]
    assert sum(g.changed for g in small.gpus) == 1 and sum(g.changed for g in whole.gpus) == 1
    for r in (small, whole):
        assert r.ahead and r.served == {} and r.disrupts == () and r.running == ()
        assert "after trading GPU layouts" in r.balance
        assert r.to_json()["balance"] == r.balance
    assert "175%" in small.balance and "100%" in small.balance


def test_trades_wait_for_a_mix_of_100_pods() -> None:
    # The same scene with a third of the mix gone (80 pods): the means per profile are the
    # same, but a sample that small does not move layouts; the shortfall still counts.
    small = build(*_host_scene(full=10))
    assert advisor.demand_mix(small).pods == 80
    assert not any(r.balance for r in advisor.advise(small, now=T0 + 600).recommendations)
    assert advisor.Settings().balance_min_pods == 100
    trading = advisor.advise(small, now=T0 + 600,
                             settings=advisor.Settings(balance_min_pods=80)).recommendations
    assert sorted(r.node for r in trading if r.balance) == ["small", "whole"]


def test_no_trade_when_the_cpu_suffices_or_when_off() -> None:
    roomy = build(*_host_scene(idle_cpu="64"))
    assert advisor.advise(roomy, now=T0 + 600, settings=SETTINGS).recommendations == ()
    c = build(*_host_scene())
    off = advisor.Settings(balance_gain=None)
    assert advisor.advise(c, now=T0 + 600, settings=off).recommendations == ()
    assert advisor.advise(c, now=T0 + 600,
                          settings=advisor.Settings(ahead_from=None)).recommendations == ()


def test_advise_command_shows_trades_and_disables_them(tmp_path: pathlib.Path) -> None:
    advise = _advise_cli(tmp_path, _host_scene())
    doc = json.loads(advise("--json").stdout)
    assert sorted(r["node"] for r in doc["recommendations"] if r["balance"]) == [
        "small", "whole"]
    text = advise("--details")
    assert text.returncode == 0, text.stderr
    assert "node small (A100-80GB, balance)" in text.stdout
    assert "ahead of demand: its instances would ask for 175% of its free cpu" in text.stdout
    summary = advise().stdout
    assert "2 idle node(s) trade GPU layouts" in summary and "re-laid out ahead" not in summary
    off = advise("--no-balance")
    assert off.returncode == 0 and "nothing to re-lay out" in off.stdout


def test_no_trade_while_a_node_of_the_model_is_re_partitioned() -> None:
    # The trading scene plus a node of the same model whose MIG Manager is at work: the
    # trade waits for it; a node of another model being re-partitioned does not hold it up.
    moving = node("moving", gpus=1, alloc={"3g.40gb": 2}, state="pending")
    c = build(*_host_scene(), moving)
    state = c.node("moving")
    assert state is not None and state.repartitioning
    assert not any(r.balance for r in advisor.advise(c, now=T0 + 600).recommendations)
    other = node("other", product="NVIDIA-H100-80GB-HBM3", gpus=1, alloc={"3g.40gb": 2},
                 state="pending")
    c = build(*_host_scene(), other)
    state = c.node("other")
    assert state is not None and state.repartitioning
    assert state.node.model == "H100-80GB"
    assert sorted(r.node for r in advisor.advise(c, now=T0 + 600).recommendations
                  if r.balance) == ["small", "whole"]


def _small_pod(name: str, profile: str, compute: int, *, node: str) -> dict[str, Any]:
    """A bound pod the webhook gave ``profile`` for 1Mi and ``compute`` compute slices."""
    obj = pod(name, profile, node=node, phase="Running", cpu="8")
    obj["metadata"].setdefault("annotations", {}).update({
        keys.GPU_MEMORY: "1Mi", keys.GPU_COMPUTE: str(compute),
        keys.DECISION: keys.encode_decision({"v": 1, "strategy": "mixed", "containers": [
            {"container": "main", "request_mib": 1, "profile": profile,
             "resource": profiles.resource_name(profile), "models": []}]})})
    return obj


def test_a_mixed_cluster_counts_small_pods_toward_the_larger_model_too() -> None:
    # 60 A100 GPUs running 7g.80gb pods, 30 A30 GPUs running pods of 3 compute slices that
    # the webhook gave the A30's 4g.24gb, and idle A100 GPUs of whole 7g.80gb: the A100's
    # mix counts those pods as its smallest profile that holds them (3g.40gb), so a share
    # of its idle slices is laid out for them; the A30's mix is its own profiles' pods.
    objs = _scene(bound=60, idle=8, idle_alloc={"7g.80gb": 1})
    for i in range(30):
        objs.append(node(f"a30-{i:02d}", product="NVIDIA-A30", alloc={"4g.24gb": 1}))
        objs.append(_small_pod(f"small-{i:02d}", "4g.24gb", 3, node=f"a30-{i:02d}"))
    c = build(*objs)
    mix = advisor.demand_mix(c)
    a30 = profiles.builtin().get("A30-24GB").id
    assert mix.pods == 90
    assert dict(mix.on(A100.id).instances) == {"7g.80gb": 60, "3g.40gb": 30}
    assert mix.on(A100.id).needs[profiles.ProfileName("3g.40gb")] == (8000, 0)
    assert dict(mix.on(a30).instances) == {"4g.24gb": 30}  # no A30 profile holds a 7g.80gb
    fall = advisor.shortfall(c, SETTINGS, mix)
    assert set(fall[A100.id].short) == {"3g.40gb"}


# ---------------------------------------------------------------- the burst reserve


def _created(obj: dict[str, Any], at: float) -> dict[str, Any]:
    obj["metadata"]["creationTimestamp"] = datetime.datetime.fromtimestamp(
        at, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return obj


def _burst_scene(spacing_s: float) -> list[dict[str, Any]]:
    """60 nodes of seven 1g.10gb held by 60 pods of 7 × 1g.10gb (the mix: mostly small), ten
    one-GPU 7g.80gb pods created ``spacing_s`` apart, and twelve idle 7g.80gb GPUs."""
    objs: list[dict[str, Any]] = []
    for i in range(60):
        objs.append(node(f"small-{i:02d}", alloc={"1g.10gb": 7}))
        objs.append(_created(pod(f"infer-{i:02d}", "1g.10gb", count=7, node=f"small-{i:02d}",
                                 phase="Running"), T0 - 7200 + 60 * i))
    for i in range(10):
        objs.append(node(f"big-{i:02d}", alloc={"7g.80gb": 1}))
        objs.append(_created(pod(f"train-{i:02d}", "7g.80gb", node=f"big-{i:02d}",
                                 phase="Running"), T0 - 3600 + spacing_s * i))
    objs.extend(node(f"idle-{i:02d}", alloc={"7g.80gb": 1}) for i in range(12))
    return objs


def test_burst_reserve_is_the_largest_burst_of_the_pods_present() -> None:
    objs = [_created(pod("a", "7g.80gb", node="n", phase="Running"), T0),
            _created(pod("b", "7g.80gb", count=2, node="n", phase="Running"), T0 + 100),
            _created(pod("c", "7g.80gb", node="n", phase="Running"), T0 + 181),  # a: out
            _created(pod("d", "7g.80gb"), T0 + 200),  # waiting: counts
            _created(pod("gone", "7g.80gb", node="n", phase="Succeeded"), T0 + 150),
            pod("undated", "7g.80gb", node="n", phase="Running"),  # no creation time
            _created(pod("e", "3g.40gb", node="n", phase="Running"), T0 + 5000),
            node("n", alloc={"7g.80gb": 8, "3g.40gb": 1})]
    # windows of 180 s: b, c and d (2 + 1 + 1) within 100..281; a and b within 0..180: 3
    assert advisor.burst_reserve(build(*objs), 180.0) == {"7g.80gb": 4, "3g.40gb": 1}
    assert advisor.burst_reserve(build(*objs), 10_000.0) == {"7g.80gb": 5, "3g.40gb": 1}
    assert advisor.burst_reserve(build(*objs), 50.0) == {"7g.80gb": 2, "3g.40gb": 1}


def test_ahead_of_demand_leaves_the_largest_burst_free() -> None:
    """The twelve idle 7g.80gb are surplus for a mix of small pods (gpushare100 in events
    ×200: re-layouts ahead of demand took them, then a burst of whole-GPU pods waited). Ten
    7g.80gb pods created at once: a re-layout (180 s) could not serve such a burst in time,
    so ten stay free beyond the two the mix needs and none is re-laid out; created ten
    minutes apart, the burst is one and nine are; without the reserve all twelve."""
    whole = profiles.ProfileName("7g.80gb")
    at_once = build(*_burst_scene(0.0))
    (fall,) = advisor.shortfall(at_once, SETTINGS).values()
    assert dict(fall.short) == {"1g.10gb": 80} and whole in fall.surplus
    assert fall.spare == {whole: 0}

    def ahead(c: Any, settings: advisor.Settings) -> int:
        adv = advisor.advise(c, now=T0 + 600, settings=settings)
        return sum(g.changed for r in adv.recommendations if r.ahead for g in r.gpus)

    assert ahead(at_once, SETTINGS) == 0
    assert ahead(build(*_burst_scene(600.0)), SETTINGS) == 9
    assert ahead(at_once, dataclasses.replace(SETTINGS, ahead_reserve_s=None)) == 12


def test_the_window_is_the_time_a_relayout_takes_to_serve() -> None:
    """The extender's window: 180 s, plus --config-sync when the apply mode writes custom
    configs (their re-layouts start that much later); the simulator's: its re-layout time
    plus its config sync. Its pods carry their creation time, as the API's do."""
    parser = cli.build_parser("extender")
    plain = extender_cli.advice_settings(parser.parse_args(["extender"]))
    assert plain.ahead_reserve_s == advisor.AHEAD_RESERVE_S == 180.0
    custom = extender_cli.advice_settings(parser.parse_args(
        ["extender", "--apply-relayout", "--apply-custom-configs", "--config-sync", "90"]))
    assert custom.ahead_reserve_s == 270.0
    assert extender_cli.advice_settings(parser.parse_args(
        ["extender", "--no-ahead"])).ahead_from is None
    options = policies.Options(relayout_seconds=200.0, config_sync_seconds=100.0)
    sim = engine.Simulation([], policy=policies.Policy("migfit", True), seed=0,
                            options=options, catalog=profiles.builtin())
    assert sim.settings.ahead_reserve_s == 300.0
    obj = objects.pod_object(name="p", cpu_milli=1000, memory_mib=1024, annotations={},
                             containers=1, profile_per_container=["1g.10gb"],
                             created=T0 + 12.0)
    record = decoding.pod_from_api(obj)
    assert record is not None and record.created == T0 + 12.0


def _changes(pool: list[planner.NodeSupply], fall: advisor.Shortfall
             ) -> list[planner.NodeChange]:
    return advisor._ahead_changes(pool, {A100.id: fall}, {}, None)


G1, G2, G3, G7 = (profiles.ProfileName(p) for p in ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"))


def test_every_change_ahead_serves_the_shortfall() -> None:
    """A change that removes an instance the mix needs opens a gap that a later GPU may
    close by adding it back; closing it must count, or every later idle GPU was re-laid out
    to rebuild it, serving nothing (the simulator skipped such advice; the apply mode
    would have carried it out)."""
    def node(name: str, *layouts: tuple[profiles.ProfileName, ...]) -> planner.NodeSupply:
        return planner.NodeSupply(name=name, model=A100, gpus=tuple(
            planner.GpuState(i, layout) for i, layout in enumerate(layouts)))

    # 1g.10gb neither short nor surplus (needed where it is), no reserve: node a gives its
    # two up for the 3g.40gb, one GPU re-creates them, and nothing more changes
    pool = [node("a", (G2, G2, G2, G1), (G2, G2, G2, G1)),
            *(node(f"big{i}", (G7,)) for i in range(3))]
    fall = advisor.Shortfall(short={G3: 4}, surplus=frozenset({G2, G7}), needs={G3: (0, 0)})
    changes = _changes(pool, fall)
    assert [c.name for c in changes] == ["a", "big0"]
    assert changes[0].plan.served == {G3: 4}
    assert Counter(changes[1].plan.gpus[0].after_names)[G1] >= 2
    # 1g.10gb surplus with one to spare: a GPU that would take seven stays
    pool = [node("a", (G1,) * 7, (G1,) * 7), *(node(f"big{i}", (G7,)) for i in range(6))]
    fall = advisor.Shortfall(short={G3: 2}, surplus=frozenset({G1, G7}), needs={G3: (0, 0)},
                             spare={G1: 1, G7: 10})
    changes = _changes(pool, fall)
    assert all(c.plan.served for c in changes)
    assert sum(c.plan.served.get(G3, 0) for c in changes) == 2
    assert [c.name for c in changes] == ["big0"]


def test_the_reserve_bounds_what_a_round_takes() -> None:
    """However the planner trades, a round takes no more surplus instances than ``spare``."""
    gpus = [planner.GpuState(i, (G1,) * 7) for i in range(3)]
    size = {p.name: p.memory_slices for p in A100.profiles}
    for allowed in (0, 1, 2, 3, 5, 7, 14):
        fall = advisor.Shortfall(short={G3: 10}, surplus=frozenset({G1}), needs={G3: (0, 0)},
                                 spare={G1: allowed})
        left: Counter[profiles.ProfileName] = Counter(fall.short)
        spare: Counter[profiles.ProfileName] = Counter(fall.spare)
        memo: advisor._AheadMemo = {}
        taken = added = 0
        for gpu in gpus:
            plan = advisor._ahead_gpu(A100, gpu, fall, left, size, [], memo, spare)
            if plan is not None:
                taken += 7 - Counter(plan.after_names)[G1]
                added += Counter(plan.after_names)[G3]
        assert taken <= allowed and spare[G1] == allowed - taken, allowed
        assert left[G3] == 10 - added
    assert taken >= 7  # with two GPUs' worth to spare, whole GPUs change


def test_advise_says_what_the_reserve_keeps_free(tmp_path: pathlib.Path) -> None:
    """`migfit advise` says why twelve idle 7g.80gb GPUs, surplus to a mix of small pods,
    are not re-laid out: ten are kept for a burst as large as the one seen."""
    advise = _advise_cli(tmp_path, _burst_scene(0.0))
    out = advise()
    assert out.returncode == 0, out.stderr
    assert ("Kept free for bursts of pods as large as the largest seen (re-layouts ahead of "
            "demand leave them): A100-80GB: 10 × 7g.80gb.") in out.stdout
    assert "A100-80GB: 10 × 7g.80gb." in advise("--details").stdout
    spread = _advise_cli(tmp_path, _burst_scene(600.0))()
    assert "A100-80GB: 1 × 7g.80gb." in spread.stdout
    (fall,) = advisor.shortfall(build(*_burst_scene(0.0)), SETTINGS).values()
    assert fall.held == {G7: 10}


def test_the_reserve_is_a_gauge() -> None:
    """The extender's /metrics shows what the reserve keeps, per model and profile, from the
    advice /advice serves; nothing once the burst's pods are gone."""
    registry = prometheus_client.CollectorRegistry()
    state = build(*_burst_scene(0.0))
    advice.Metrics(registry, state=state, cache=advice.AdviceCache(clock=lambda: T0 + 600))
    name = "migfit_relayout_burst_reserve_instances"
    labels = {"model": "A100-80GB", "profile": "7g.80gb"}
    assert registry.get_sample_value(name, labels) == 10.0
    spread = prometheus_client.CollectorRegistry()
    advice.Metrics(spread, state=build(*_burst_scene(600.0)),
                   cache=advice.AdviceCache(clock=lambda: T0 + 600))
    assert spread.get_sample_value(name, labels) == 1.0
    empty = prometheus_client.CollectorRegistry()
    advice.Metrics(empty, state=build(*_scene()), cache=advice.AdviceCache(clock=lambda: T0))
    assert empty.get_sample_value(name, labels) is None
    assert f"# TYPE {name} gauge" in prometheus_client.generate_latest(empty).decode()
