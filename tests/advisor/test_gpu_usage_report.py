"""The advisor with a per-GPU report of instances in use (``advise(usage=...)``): a GPU is busy
only when the report puts an instance there, and a report that disagrees with the node's
bound pods is ignored (the counts' conservative rule applies)."""

from __future__ import annotations

from advisor_scene import T0, build, node, pod

from migfit import advisor, migparted
from migfit.profiles import ProfileName

NOW = T0 + 600
BUSY = advisor.Settings(busy_nodes=True, allow_disruptive=False)
UNIFORM = migparted.parse("""
version: v1
mig-configs:
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
""")
ONE = ProfileName("1g.10gb")


def _scene(running: int = 1):
    """Two A100s of seven 1g.10gb each; ``running`` 1g pods bound; a 7g.80gb pod waits."""
    runners = [pod(f"r{i}", "1g.10gb", namespace="t", node="n", phase="Running")
               for i in range(running)]
    return build(node("n", gpus=2, alloc={"1g.10gb": 14}, config="all-1g"),
                 *runners, pod("big", "7g.80gb", namespace="ml"))


def test_counts_alone_leave_a_uniform_busy_node_alone() -> None:
    # One 1g.10gb in use: either GPU may hold it, so both are busy.
    advice = advisor.advise(_scene(), now=NOW, settings=BUSY, config=UNIFORM)
    assert advice.recommendations == ()


def test_a_report_frees_the_gpu_that_holds_nothing() -> None:
    usage = {"n": [{ONE: 1}, {}]}
    advice = advisor.advise(_scene(), now=NOW, settings=BUSY, config=UNIFORM, usage=usage)
    (rec,) = advice.recommendations
    assert rec.unblocks == ("ml/big",) and rec.busy_node and not rec.disruptive
    g0, g1 = rec.gpus
    assert not g0.changed and g0.after == (ONE,) * 7  # the GPU the pod is on, kept exactly
    assert g1.changed and g1.after == ("7g.80gb",)
    # The report says GPU 0: the other GPU changes.
    usage = {"n": [{}, {ONE: 1}]}
    (rec,) = advisor.advise(_scene(), now=NOW, settings=BUSY, config=UNIFORM,
                            usage=usage).recommendations
    assert rec.gpus[0].changed and not rec.gpus[1].changed


def test_a_report_that_disagrees_with_the_bound_pods_is_ignored() -> None:
    for stale in ([{}, {}],  # a pod bound after the report
                  [{ONE: 2}, {}],  # a pod gone since
                  [{ONE: 1}],  # not one entry per GPU
                  [{ProfileName("3g.40gb"): 1}, {}]):  # a profile the GPU does not have
        advice = advisor.advise(_scene(), now=NOW, settings=BUSY, config=UNIFORM,
                                usage={"n": stale})
        assert advice.recommendations == (), stale


def test_usage_holds() -> None:
    gpus = [(ONE,) * 7, (ONE,) * 7]
    assert advisor.usage_holds([{ONE: 1}, {}], gpus, {ONE: 1})
    assert not advisor.usage_holds([{ONE: 8}, {}], gpus, {ONE: 8})
    assert not advisor.usage_holds([{ONE: -1}, {ONE: 2}], gpus, {ONE: 1})
