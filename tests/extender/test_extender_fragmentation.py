"""The score's fragmentation term (FGD's expected fragment, for fixed MIG instances) and the
opt-in score of pods without MIG requests (``--score-all-pods``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from extender_builders import mig_pod
from extender_builders import node as gpu_node

from migfit import builders, cluster
from migfit.extender import figures, filtering, scoring, server


def cpu_pod(name: str, *, cpu: str = "4", node_name: str | None = None) -> dict[str, Any]:
    return builders.pod(name, node_name=node_name, requests=[{"cpu": cpu}])


def scene(extra: Sequence[dict[str, Any]] = ()) -> cluster.Cluster:
    """``tight`` has 4 cores left next to six free 1g.10gb; ``roomy`` 60; ``full`` none free."""
    model = cluster.Cluster()
    cluster.load_objects(model, [
        gpu_node("tight", {"1g.10gb": 7}, cpu="8"), mig_pod("t0", node_name="tight"),
        gpu_node("roomy", {"1g.10gb": 7}, cpu="64"), mig_pod("r0", node_name="roomy"),
        gpu_node("full", {"1g.10gb": 1}, cpu="64"), mig_pod("f0", node_name="full"),
        *extra])
    return model


def by_node(scores: Sequence[scoring.NodeScore]) -> dict[str, scoring.NodeScore]:
    return {s.node: s for s in scores}


def test_a_placement_that_leaves_no_cpu_for_the_mix_counts_the_free_instances_as_fragment(
        ) -> None:
    model = scene([mig_pod("want")])
    index = figures.Index(model)
    # The mix: every pod is a 1g.10gb with 4 cores.
    assert [(c.cpu_milli, c.share) for c in index.mix()] == [(4000, 1.0)]
    got = by_node(scoring.score_nodes(index, filtering.decode_pod(mig_pod("want")),
                                      ["tight", "roomy", "full"]))
    # On tight the pod's 4 cores leave 0: its five other free 1g.10gb serve no pod of the mix.
    assert got["tight"].frag == pytest.approx(5 / 8)
    assert got["roomy"].frag == pytest.approx(0.0)
    assert not got["full"].fits
    assert got["roomy"].score > got["tight"].score
    assert scoring.terms(got["tight"])["no_frag"] == pytest.approx(0.5 - 5 / 16)


def test_cpu_taken_by_pods_without_gpu_requests_is_what_the_fragment_sees() -> None:
    # 4 more cores of a cpu-only pod on roomy's twin: its host room is now tight's.
    model = scene([gpu_node("twin", {"1g.10gb": 7}, cpu="12"), mig_pod("w0", node_name="twin"),
                   mig_pod("want")])
    index = figures.Index(model)
    request = filtering.decode_pod(mig_pod("want"))
    assert by_node(scoring.score_nodes(index, request, ["twin"]))["twin"].frag == 0.0
    model.apply("Pod", "ADDED", cpu_pod("batch", node_name="twin"))
    assert by_node(scoring.score_nodes(index, request, ["twin"]))["twin"].frag == \
        pytest.approx(5 / 8)


def test_a_node_with_no_mig_pod_is_the_reserve_and_breaking_it_costs_its_mismatch() -> None:
    model = scene([gpu_node("idle", {"3g.40gb": 2}, cpu="64"), mig_pod("want")])
    index = figures.Index(model)
    fig = index.figures
    index.refresh()
    idle = fig["idle"]
    # Idle: some layout of its GPU serves the mix's 1g.10gb pods, so nothing is a fragment.
    assert scoring.fragmentation(idle, index.mix(), idle.state.free, idle.free_slices, True,
                                 60_000, 2**40) == 0.0
    # Busy with the same layout, its two 3g.40gb serve nobody in the mix: all fragment.
    assert scoring.fragmentation(idle, index.mix(), idle.state.free, idle.free_slices, False,
                                 60_000, 2**40) == idle.free_slices


def test_pods_without_mig_requests_score_only_when_asked_and_go_where_they_strand_nothing(
        ) -> None:
    model = scene()
    index = figures.Index(model)
    request = filtering.decode_pod(cpu_pod("batch"))
    assert (request.mig, request.cpu_milli) == (False, 4000)
    names = ["tight", "roomy", "full"]
    assert {s.score for s in scoring.score_nodes(index, request, names)} == {scoring.MIN_SCORE}
    got = by_node(scoring.score_nodes(index, request, names, all_pods=True))
    assert got["tight"].frag == pytest.approx(6 / 8)  # it would strand six free 1g.10gb
    assert got["roomy"].frag == 0.0
    assert got["full"].score > got["roomy"].score > got["tight"].score
    for s in got.values():  # raw is the weighted sum of the host-only terms
        values = scoring.terms(s)
        assert s.raw == pytest.approx(
            sum(w * values[t] for t, w in scoring.HOST_ONLY_WEIGHTS.items()))
    # score_node (one node, fresh) says the same.
    for name in names:
        assert scoring.score_node(index, request, name, all_pods=True) == got[name]


def test_the_mix_is_the_common_classes_rounded_and_does_not_depend_on_order() -> None:
    one = ((("nvidia.com/mig-1g.10gb", 1),), None, 4000, 0)
    three = ((("nvidia.com/mig-3g.40gb", 1),), None, 8000, 0)
    rare = ((("nvidia.com/mig-7g.80gb", 1),), None, 16000, 0)
    a = figures.mix_of({one: 600, three: 300, rare: 1})
    b = figures.mix_of({rare: 1, three: 300, one: 600})
    assert a == b
    assert [(c.wants[0].profile, round(c.share, 3)) for c in a] == [
        ("1g.10gb", round(11 / 16, 3)), ("3g.40gb", round(5 / 16, 3))]  # rare: < 1/32
    assert not figures.mix_of({})


async def test_a_cpu_only_prioritize_call_over_the_wire_with_score_all_pods(
        aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    app = server.make_app(settings=server.ExtenderSettings(log_format="json", log_nodes=0,
                                                           score_all_pods=True),
                          cluster=scene())
    client = await aiohttp_client(app)
    args = {"Pod": cpu_pod("batch"), "NodeNames": ["tight", "roomy", "full"], "Nodes": None}
    with caplog.at_level(logging.INFO, logger="migfit.scoring"):
        resp = await client.post("/prioritize", data=json.dumps(args))
        assert resp.status == 200
        answered = {h["Host"]: h["Score"] for h in await resp.json()}
    assert answered["full"] > answered["roomy"] > answered["tight"]
    record = json.loads(caplog.records[-1].getMessage())
    assert record["weights"] == scoring.HOST_ONLY_WEIGHTS
    for s in record["scores"]:
        assert sum(w * s["terms"][t] for t, w in record["weights"].items()) == \
            pytest.approx(s["raw"], abs=1e-3)
        assert s["score"] == answered[s["node"]]
    # Without the flag the same call gets no opinion.
    plain = server.make_app(settings=server.ExtenderSettings(log_format="json"),
                            cluster=scene())
    other = await aiohttp_client(plain)
    resp = await other.post("/prioritize", data=json.dumps(args))
    assert {h["Score"] for h in await resp.json()} == {0}


def whole_gpus_scene(*, big: bool) -> tuple[figures.Index, filtering.PodRequest]:
    """Two 8-GPU nodes with every GPU a 7g.80gb: ``whole`` holds no pod, ``started`` one;
    pending: a one-GPU pod (the one scored) and, with ``big``, an 8-GPU pod."""
    def seven(name: str, count: int = 1, node_name: str | None = None) -> dict[str, Any]:
        return mig_pod(name, "7g.80gb", cpu="8", count=count, node_name=node_name)
    objects = [gpu_node("whole", {"7g.80gb": 8}, gpus=8, cpu="96"),
               gpu_node("started", {"7g.80gb": 8}, gpus=8, cpu="96"),
               seven("held", node_name="started"), seven("want")]
    if big:
        objects.append(seven("big", 8))
    model = cluster.Cluster()
    cluster.load_objects(model, objects)
    return figures.Index(model), filtering.decode_pod(seven("want"))


def test_breaking_the_last_whole_node_costs_more_than_a_gpu_when_pods_need_a_node_whole(
        ) -> None:
    index, request = whole_gpus_scene(big=True)
    mix = index.mix()
    assert 0 < mix.multi < 1  # the 8-GPU pod's class
    got = by_node(scoring.score_nodes(index, request, ["whole", "started"]))
    whole, started = got["whole"], got["started"]
    assert whole.floor == pytest.approx(-scoring.FRAG_FLOOR * mix.multi) == started.floor
    # On whole, the seven 7g.80gb left serve no 8-GPU pod: more than a GPU's worth of growth,
    # and the term goes below 0 (down to the floor), where it used to stop at 0.
    assert whole.frag > 1
    assert scoring.terms(whole)["no_frag"] == pytest.approx(max(whole.floor, 0.5 - whole.frag / 2))
    assert scoring.terms(whole)["no_frag"] < 0
    assert started.frag <= 0  # started was no use to the 8-GPU pod already
    assert started.score > whole.score
    for s in got.values():  # raw is still the weighted sum of the logged terms
        values = scoring.terms(s)
        assert s.raw == pytest.approx(sum(w * values[t] for t, w in scoring.WEIGHTS.items()))
        assert scoring.score_node(index, request, s.node) == s


def test_without_pods_that_need_several_instances_the_term_stops_at_zero() -> None:
    index, request = whole_gpus_scene(big=False)
    assert index.mix().multi == 0
    got = by_node(scoring.score_nodes(index, request, ["whole", "started"]))
    assert {s.floor for s in got.values()} == {0.0}
    assert all(scoring.terms(s)["no_frag"] >= 0 for s in got.values())


def test_with_the_room_the_mix_reads_the_fragment_is_the_one_for_unknown_room() -> None:
    """``_finish`` skips the host-limited fragment when the node keeps at least the cpu and
    memory that ``_room_read`` says the fragment compares against: exactly (bit for bit) the
    fragment computed for unknown room; with less, the fragment can only grow."""
    layout = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    objs: list[dict[str, Any]] = [gpu_node(f"n{i}", layout, cpu="96") for i in range(3)]
    for i, (profile, cpu) in enumerate([("1g.10gb", "2"), ("1g.10gb", "30"), ("2g.20gb", "8"),
                                        ("3g.40gb", "60"), ("4g.40gb", "16"),
                                        ("1g.10gb", "12")]):
        objs.append(mig_pod(f"want{i}", profile, cpu=cpu))
    objs.append(mig_pod("busy", "2g.20gb", cpu="4", node_name="n1"))
    model = cluster.Cluster()
    cluster.load_objects(model, objs)
    index = figures.Index(model)
    mix = index.mix()
    assert len({c.cpu_milli for c in mix}) >= 4
    index.refresh()
    tighter = 0
    for name in ("n0", "n1", "n2"):
        fig = index.figures[name]
        base = dict(fig.state.free)
        for taken in [{}, {"1g.10gb": 1}, {"3g.40gb": 1}, {"1g.10gb": 2, "2g.20gb": 1}]:
            free = {q: base.get(q, 0) - taken.get(q, 0) for q in base}
            slices = fig.free_slices - sum(
                k * fig.slices.get(q, 1) for q, k in taken.items())
            cpu, mem = scoring._room_read(fig, mix, free)
            unknown = scoring.fragmentation(fig, mix, free, slices, False, None, None)
            for more_cpu, more_mem in [(0, 0), (1, 0), (0, 1), (10**6, 2**40)]:
                assert scoring.fragmentation(fig, mix, free, slices, False, cpu + more_cpu,
                                             mem + more_mem) == unknown
            less = scoring.fragmentation(fig, mix, free, slices, False, cpu - 1, mem)
            assert less >= unknown
            tighter += less > unknown
    assert tighter  # the bound is tight: one milli-cpu less changes some fragment
