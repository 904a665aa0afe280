"""A node that migfit's advice re-lays out is held for the pods the change is for: another pod
scores it lower (``spoils_plan``), so the scheduler does not break the GPUs the change needs."""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from extender_builders import build, mig_pod, node

from migfit import advisor, cluster, keys, snapshots
from migfit.extender import advice, figures, filtering, scoring, server

EXAMPLES = Path(__file__).parents[2] / "examples"


def _example_nodes() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load((EXAMPLES / "cluster.yaml").read_text())
    return {o["metadata"]["name"]: o for o in doc["items"] if o["kind"] == "Node"}


def _advised(model: cluster.Cluster, name: str) -> dict[str, Any]:
    """The node object of ``name`` with the record the advice publisher writes for it."""
    got = advisor.advise(model, now=time.time())
    rec = next(r for r in got.recommendations if r.node == name)
    obj = copy.deepcopy(_example_nodes()[name])
    obj["metadata"].setdefault("annotations", {})[keys.ANNOTATION_RELAYOUT] = \
        advice.annotation_value(rec)
    return obj


async def _prioritize(client: Any, body: bytes) -> dict[str, int]:
    resp = await client.post("/prioritize", data=body)
    assert resp.status == 200
    return {h["Host"]: h["Score"] for h in await resp.json()}


async def test_a_pod_the_advice_is_not_for_no_longer_prefers_the_advised_idle_node(
        aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    # The outside check's case on the example cluster: GET /advice re-lays out the idle
    # gpu-a100-0 (2 x 3g.40gb) for the waiting ml-research/finetune-small-0, yet a 3g.40gb pod
    # ranked that very node first (raw 0.641 against gpu-h100-0's 0.560) and would have
    # broken the change.
    model = snapshots.load(snapshots.EXAMPLE_CLUSTER)
    app = server.make_app(settings=server.ExtenderSettings(log_format="both", log_nodes=0),
                          cluster=model)
    client = await aiohttp_client(app)
    body = (EXAMPLES / "requests" / "prioritize-3g40gb.json").read_bytes()
    before = await _prioritize(client, body)
    assert before["gpu-a100-0"] >= before["gpu-h100-0"]

    model.apply("Node", "MODIFIED", _advised(model, "gpu-a100-0"))  # the publisher's write
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="migfit.scoring"):
        after = await _prioritize(client, body)
    assert after["gpu-a100-0"] < after["gpu-h100-0"]
    assert after["gpu-h100-0"] == before["gpu-h100-0"]  # a node without a plan: unchanged
    assert after["gpu-a100-0"] == before["gpu-a100-0"] - 3  # W_PLAN: both its 3g.40gb go
    text_line, json_line = (r.getMessage() for r in caplog.records)
    assert "− 0.30×spoils_plan 1.00" in text_line
    record = json.loads(json_line)
    for s in record["scores"]:
        assert sum(w * s["terms"][t] for t, w in record["weights"].items()) == \
            pytest.approx(s["raw"], abs=1e-3)
    entry = {s["node"]: s for s in record["scores"]}
    assert entry["gpu-a100-0"]["terms"]["spoils_plan"] == 1.0
    assert entry["gpu-h100-0"]["terms"]["spoils_plan"] == 0.0

    # The change done (or the advice withdrawn: the publisher removes the record), the node
    # scores as before: the answer tables forget the node on the cache event.
    model.apply("Node", "MODIFIED", _example_nodes()["gpu-a100-0"])
    assert await _prioritize(client, body) == before


def _record(gpus: list[tuple[list[str], list[str]]], *, unblocks: tuple[str, ...] = (),
            state: keys.RelayoutState = keys.RelayoutState.RECOMMENDED) -> dict[str, str]:
    rec = keys.RelayoutRecord(
        state=state, target="custom", unblocks=unblocks,
        gpus=tuple(keys.GpuChange(index=i, before=tuple(b), after=tuple(a))
                   for i, (b, a) in enumerate(gpus)))
    return {keys.ANNOTATION_RELAYOUT: keys.encode_relayout(rec)}


def _score(objects: list[dict[str, Any]], pod_obj: dict[str, Any]) -> scoring.NodeScore:
    model = build(objects)
    request = filtering.decode_pod(pod_obj)
    index = figures.Index(model)
    got = scoring.score_nodes(index, request, ["n"])[0]
    assert got == scoring.score_node(index, request, "n")  # the memo-free formula agrees
    return got


THREE_G = ["3g.40gb", "3g.40gb"]
ONE_G = ["1g.10gb"] * 7


def test_the_spoil_is_the_share_of_free_instances_on_gpus_the_change_re_lays_out() -> None:
    want = mig_pod("want", "3g.40gb")
    plain = _score([node("n", {"3g.40gb": 4}, gpus=2)], want)
    # GPU 0 changes, GPU 1 keeps its layout: half the free 3g.40gb may be taken harmlessly
    half = _score([node("n", {"3g.40gb": 4}, gpus=2, annotations=_record(
        [(THREE_G, ONE_G), (THREE_G, THREE_G)], unblocks=("default/small",)))], want)
    both = _score([node("n", {"3g.40gb": 4}, gpus=2, annotations=_record(
        [(THREE_G, ONE_G), (THREE_G, ONE_G)], unblocks=("default/small",)))], want)
    assert (plain.spoil, half.spoil, both.spoil) == (0.0, 0.5, 1.0)
    assert half.raw == pytest.approx(plain.raw - 0.5 * scoring.W_PLAN)
    assert both.raw == pytest.approx(plain.raw - scoring.W_PLAN)
    assert both.fits  # held, not refused: the filter still passes it


def test_time_sliced_instances_count_as_their_replicas() -> None:
    # GFD's replicas=4: the one GPU's seven 1g.10gb are advertised 28 times, all free, all on
    # the GPU the change re-lays out. Counting the record's 7 instances against 28 free
    # replicas gave a quarter of the hold.
    shared = node("n", {"1g.10gb": 28}, annotations=_record(
        [(ONE_G, THREE_G)], unblocks=("default/small",)))
    shared["metadata"]["labels"]["nvidia.com/mig-1g.10gb.replicas"] = "4"
    shared["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"] = "7"
    assert _score([shared], mig_pod("other", "1g.10gb")).spoil == 1.0


def test_a_disruptive_change_holds_nothing() -> None:
    # Its changed GPU holds instances in use that the record does not tell apart from free
    # ones (the share came out 7/11 for 4 of 11 free), and the apply mode never starts it.
    rec = keys.RelayoutRecord(target="custom", unblocks=("default/small",), disruptive=True,
                              disrupts=("default/run0",),
                              gpus=(keys.GpuChange(index=0, before=tuple(ONE_G),
                                                   after=tuple(THREE_G)),
                                    keys.GpuChange(index=1, before=tuple(ONE_G),
                                                   after=tuple(ONE_G))))
    busy = node("n", {"1g.10gb": 14}, gpus=2,
                annotations={keys.ANNOTATION_RELAYOUT: keys.encode_relayout(rec)})
    running = [mig_pod(f"run{i}", "1g.10gb", node_name="n") for i in range(3)]
    assert _score([busy, *running], mig_pod("other", "1g.10gb")).spoil == 0.0


def test_the_pods_the_change_is_for_and_other_profiles_spoil_nothing() -> None:
    objects = [node("n", {"3g.40gb": 2, "1g.10gb": 1}, gpus=2, annotations=_record(
        [(THREE_G, ONE_G), (["1g.10gb"], ["1g.10gb"])], unblocks=("default/small",)))]
    assert _score(objects, mig_pod("small", "3g.40gb")).spoil == 0.0  # the change is for it
    assert _score(objects, mig_pod("other", "3g.40gb")).spoil == 1.0
    assert _score(objects, mig_pod("other", "1g.10gb")).spoil == 0.0  # on the kept GPU


@pytest.mark.parametrize("notes", [
    {keys.ANNOTATION_RELAYOUT: "{not json"},  # not a record: ignored, as everywhere
    _record([(THREE_G, THREE_G)], unblocks=("default/small",)),  # nothing changes
    _record([(THREE_G, ONE_G)]),  # ahead of demand: for no waiting pod
])
def test_no_plan_no_spoil(notes: dict[str, str]) -> None:
    got = _score([node("n", {"3g.40gb": 2}, annotations=notes)], mig_pod("want", "3g.40gb"))
    assert got.fits and got.spoil == 0.0


def test_a_change_under_way_refuses_the_node_instead() -> None:
    # tainted/applying: the node takes no new MIG pod at all (the filter), so no spoil term
    got = _score([node("n", {"3g.40gb": 2}, annotations=_record(
        [(THREE_G, ONE_G)], unblocks=("default/small",), state=keys.RelayoutState.APPLYING))],
        mig_pod("want", "3g.40gb"))
    assert not got.fits


def test_the_index_follows_which_pods_each_plan_is_for() -> None:
    model = build([node("a", {"3g.40gb": 2}, annotations=_record(
        [(THREE_G, ONE_G)], unblocks=("default/small",))), node("b", {"3g.40gb": 2})])
    index = figures.Index(model)
    index.refresh()
    assert index.planned_for("default/small") == {"a"}
    assert index.planned_for("default/other") == frozenset()
    model.apply("Node", "MODIFIED", node("a", {"3g.40gb": 2}))  # the record removed
    index.refresh()
    assert index.planned_for("default/small") == frozenset()
    model.apply("Node", "DELETED", node("b", {"3g.40gb": 2}))
    index.refresh()
    assert index.planned_for("default/small") == frozenset()
