"""The score's shape-matching term: a pod's cpu per MIG slice against the node's free cpu per
free slice, so that pods light on cpu leave the cpu-rich nodes to the heavy ones."""

from __future__ import annotations

import math
from typing import Any

import pytest
from extender_builders import mig_pod
from extender_builders import node as gpu_node

from migfit import builders, cluster, profiles
from migfit.extender import figures, filtering, scoring


def scores(pod_obj: dict[str, Any]) -> dict[str, scoring.NodeScore]:
    # Two idle nodes alike but for their cpu: 2 and 48 cores per free 1g.10gb slice.
    model = cluster.Cluster()
    cluster.load_objects(model, [gpu_node("lean", {"1g.10gb": 7}, cpu="14"),
                                 gpu_node("rich", {"1g.10gb": 7}, cpu="336")])
    request = filtering.decode_pod(pod_obj)
    return {s.node: s for s in scoring.score_nodes(figures.Index(model), request,
                                                   ["lean", "rich"])}


def test_a_pod_light_on_cpu_matches_the_lean_node_and_a_heavy_one_the_rich_node() -> None:
    light, heavy = scores(mig_pod("light", cpu="2")), scores(mig_pod("heavy", cpu="40"))
    assert light["lean"].mismatch == pytest.approx(0.0, abs=1e-9)  # 2 cores a slice, both
    assert light["rich"].mismatch == 1.0  # 24 times off: beyond the span, clamped
    # 40 cores for one slice: 20 times the lean node's ratio, 1.2 times below the rich one's
    assert heavy["rich"].mismatch == pytest.approx(math.log(48 / 40) / math.log(16))
    assert heavy["rich"].mismatch < heavy["lean"].mismatch
    terms_light = {n: scoring.terms(s)["aligned"] for n, s in light.items()}
    assert terms_light["lean"] > terms_light["rich"]


def test_the_term_enters_raw_with_its_weight() -> None:
    got = scores(mig_pod("light", cpu="2"))
    for s in got.values():
        values = scoring.terms(s)
        assert s.raw == pytest.approx(sum(w * values[t] for t, w in scoring.WEIGHTS.items()))
    assert scoring.WEIGHTS["aligned"] == scoring.W_ALIGN > 0


def test_mismatch_is_symmetric_in_the_ratio_and_bounded() -> None:
    # a pod with 4 cores a slice on nodes with 1 and 16 cores a free slice: equally far off
    assert scoring.mismatch(4000, 1, 1000, 1) == pytest.approx(scoring.mismatch(4000, 1,
                                                                                16000, 1))
    assert scoring.mismatch(4000, 1, 4000, 1) == 0.0
    assert scoring.mismatch(1000, 1, 1000 * 1000, 1) == 1.0  # clamped
    assert scoring.mismatch(1000, 1, 0, 1) == 1.0  # no cpu left


def test_a_pod_without_cpu_requests_has_no_opinion() -> None:
    res = {profiles.resource_name("1g.10gb"): "1"}
    got = scores(builders.pod("bare", [res]))
    assert {s.mismatch for s in got.values()} == {0.0}


@pytest.mark.parametrize("cpu", ["1", "2", "7", "40", "400"])
def test_the_score_takes_mismatch_as_the_function_computes_it(cpu: str) -> None:
    """The score computes the term inline on its hot path: the same value, bit for bit, as
    ``mismatch`` on the node's free cpu and slices (one slice taken here)."""
    got = scores(mig_pod("p", cpu=cpu))
    pod_cpu = int(float(cpu) * 1000)
    assert got["lean"].mismatch == scoring.mismatch(pod_cpu, 1, 14000, 7)
    assert got["rich"].mismatch == scoring.mismatch(pod_cpu, 1, 336000, 7)
