"""The idle-while-pending figure (``metrics.idle_for_pending``) keeps what it reads of each
node's GPUs between samples (``World.idle_summaries``, per node version): at every step of an
events run with re-layouts and departures, the kept answer equals one computed afresh."""

from __future__ import annotations

from migfit import profiles
from migfit.simulate import cli, engine, metrics, spec, workload

CATALOG = profiles.builtin()


def test_the_kept_summaries_answer_as_a_fresh_count() -> None:
    nodes = spec.load_spec(cli.EXAMPLE_CLUSTER, CATALOG)
    ref = CATALOG.get("A100-80GB")
    pods = workload.synthetic(400, model=ref, mapping="memory", seed=7, mean_interval=5.0,
                              mean_duration=4 * 3600.0)
    options = engine.Options(mode="events")
    sim = engine.Simulation(nodes, policy=engine.Policy.parse("migfit+advisor"), seed=7,
                            options=options, catalog=CATALOG, workload_pods=pods)
    for s in pods:
        sim._push(s.arrival, "arrive", s)
    end = max(s.arrival for s in pods) + 4 * 3600.0
    steps = nonzero = 0
    t = 0.0
    while t < end:
        t += 60.0
        sim._run_until(t)
        kept = metrics.idle_for_pending(sim, sim.pending)
        saved, sim.idle_summaries = sim.idle_summaries, {}
        fresh = metrics.idle_for_pending(sim, sim.pending)
        sim.idle_summaries = saved
        assert kept == fresh, (t, kept, fresh)
        steps += 1
        nonzero += kept > 0
    assert sim.counters.relayouts > 0 and sim.counters.gpu_placed > 100
    assert nonzero > 10, (steps, nonzero, sim.counters)  # the figure was exercised, not always 0
