"""``bound`` and ``bound-static``: no policy beats them, on several traces, seeds and modes."""

from __future__ import annotations

import math

import pytest

from migfit import profiles
from migfit.simulate import bound, engine, policies, spec, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")
EPS = 1e-9


def nodes(layouts: list[str], gpus: int = 4, cpu: int = 48000) -> list[spec.NodeSpec]:
    out = []
    for i, layout in enumerate(layouts):
        lay, config = spec.resolve_layout(A100, layout, where="test")
        out.append(spec.NodeSpec(name=f"n{i:02d}", model=A100, gpu_layouts=(lay,) * gpus,
                                 cpu_milli=cpu, memory_mib=196608, config=config,
                                 trace_model="A100-80GB"))
    return out


MIXED = nodes(["all-balanced", "all-1g.10gb", "all-7g.80gb", "all-3g.40gb"] * 3)
SKEWED = nodes(["all-1g.10gb"] * 6 + ["all-7g.80gb"] * 2, cpu=32000)
POLICIES = [p for p in policies.ALL_POLICIES if not p.is_bound]


def run(cluster: list[spec.NodeSpec], pods: list[workload.PodSpec], policy: policies.Policy,
        seed: int, mode: policies.Mode) -> dict[str, float]:
    # The bound gives each pod its smallest fitting profile; a larger free one taken under
    # contention (--webhook-choice free) allocates slices beyond the request.
    options = policies.Options(mode=mode, advisor_grace=0.0, advisor_free_grace=60.0,
                               webhook_choice="smallest")
    return engine.run(cluster, pods, policy=policy, seed=seed, options=options,
                      catalog=CATALOG, keep_snapshot=False).figures


@pytest.mark.parametrize("mode", ["fill", "events"])
@pytest.mark.parametrize(("cluster", "seed"), [(MIXED, 0), (MIXED, 1), (SKEWED, 2)])
def test_no_policy_beats_the_bound(cluster: list[spec.NodeSpec], seed: int,
                                   mode: policies.Mode) -> None:
    pods = workload.synthetic(160, model=A100, mapping="compute", seed=seed,
                              mean_interval=30.0, mean_duration=3 * 3600.0)
    full = run(cluster, pods, policies.Policy("bound"), seed, mode)
    static = run(cluster, pods, policies.Policy("bound-static"), seed, mode)
    assert full["unallocated_share"] <= static["unallocated_share"] + EPS
    assert full["unallocated_share_time_avg"] <= static["unallocated_share_time_avg"] + EPS
    for policy in POLICIES:
        f = run(cluster, pods, policy, seed, mode)
        for figure in ("unallocated_share", "unallocated_share_time_avg",
                       "unallocated_share_at_last_arrival"):
            assert full[figure] <= f[figure] + EPS, (policy.name, figure)
            if not policy.advisor and policy.scorer != "upper-bound":
                assert static[figure] <= f[figure] + EPS, (policy.name, figure)


def test_bound_is_exact_where_it_must_be() -> None:
    """One node, one 3g.40gb pair; pods of 1g.10gb: static allows none, any re-layout 7."""
    cluster = nodes(["all-3g.40gb"], gpus=1)
    pods = [workload.explicit_pod(A100, name=f"p{i}", profile="1g.10gb") for i in range(9)]
    options = policies.Options(mode="fill", target=10.0)
    static = bound.figures(cluster, pods, options=options, catalog=CATALOG, static=True)
    full = bound.figures(cluster, pods, options=options, catalog=CATALOG, static=False)
    assert static["unallocated_share"] == pytest.approx(1.0)
    assert full["unallocated_share"] == pytest.approx(0.0)  # 7 × 1g.10gb fill the GPU
    assert full["gpu_pods_placed"] == pytest.approx(7.0)


def test_bound_counts_cpu_and_memory() -> None:
    """Four whole-GPU pods of 30 cores on one 4-GPU node of 48 cores: one fits (cpu)."""
    cluster = nodes(["all-7g.80gb"], gpus=4, cpu=48000)
    pods = [workload.explicit_pod(A100, name=f"p{i}", profile="7g.80gb", cpu_milli=30000)
            for i in range(4)]
    f = bound.figures(cluster, pods, options=policies.Options(target=10.0), catalog=CATALOG,
                      static=False)
    assert f["allocated_slices"] == pytest.approx(48000 / 30000 * 7)
    assert f["unallocated_share"] == pytest.approx(1 - 48 / 30 * 7 / 28)


def test_bound_honours_gpu_spec() -> None:
    """Pods that may only use trace model T4 get nothing on a cluster of A100 nodes."""
    cluster = nodes(["all-7g.80gb"], gpus=2)
    pods = [workload.PodSpec(name=f"p{i}", cpu_milli=1000, memory_mib=1024, num_gpu=1,
                             gpu_milli=1000, arrival=float(i), duration=math.inf,
                             annotations={}, containers=1, expected=None, gpu_memory_mib=1,
                             explicit=("7g.80gb",), gpu_spec=frozenset({"T4"}))
            for i in range(2)]
    f = bound.figures(cluster, pods, options=policies.Options(target=10.0), catalog=CATALOG,
                      static=False)
    assert f["allocated_slices"] == pytest.approx(0.0)


def test_bound_policies_parse_and_take_no_advisor() -> None:
    assert policies.Policy.parse("bound").is_bound
    assert policies.Policy.parse("bound-static").is_bound
    with pytest.raises(ValueError, match="bound"):
        policies.Policy.parse("bound+advisor")


def test_bound_reports_every_figure_a_policy_reports() -> None:
    """The JSON contract: summary[policy][figure] exists for the bounds too."""
    pods = workload.synthetic(40, model=A100, mapping="compute", seed=3)
    for mode in ("fill", "events"):
        policy = run(MIXED, pods, policies.Policy("migfit", True), 3, mode)
        for name in ("bound", "bound-static"):
            assert set(run(MIXED, pods, policies.Policy.parse(name), 3, mode)) == set(policy)


def test_bound_rows_show_only_their_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    """The text and markdown tables printed a bound's LP pod count (fewer than any policy's)
    and its trivial zeros as if replayed; they show "(LP)" and "-" there, and say why."""
    from migfit import cli
    from migfit.simulate import report

    assert cli.main(["simulate", "--example", "--policies", "migfit,bound", "--markdown"]) == 0
    out = capsys.readouterr().out
    text_row = next(line for line in out.splitlines() if line.startswith("bound "))
    cells = text_row.split()
    assert cells[1] == "(LP)" and cells[2].endswith("%") and cells[3] == "-", text_row
    assert cells[-1].replace(".", "").isdigit()  # wall s, a real figure
    md_row = next(line for line in out.splitlines() if line.startswith("| bound |"))
    assert "| (LP) |" in md_row and "| - |" in md_row, md_row
    assert out.count(report.BOUND_NOTE) == 2
    mine = next(line for line in out.splitlines() if line.startswith("migfit "))
    assert "(LP)" not in mine and " - " not in mine
