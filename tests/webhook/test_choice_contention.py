"""The webhook's choice under contention (issue 15 item 5): ``--choice smallest|free|ceiling``,
the reason recorded in ``migfit.io/decision``, the memos kept correct, and the simulator's
``--webhook-choice`` reaching the decision it replays."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import webhook_scenery as s
from webhook_scenery import MakeClient

from migfit import cluster, errors, keys, profiles, requests, sources
from migfit.commands import webhook as webhook_cli
from migfit.simulate import adapters, engine, spec
from migfit.webhook import decision, memo, server, view

ROOT = Path(__file__).resolve().parents[2]
A100 = (profiles.builtin().get("A100-80GB"),)
SMALLEST = decision.Policy(fallback_models=A100, contention="smallest")
FREE = decision.Policy(fallback_models=A100, contention="free")
CEILING = decision.Policy(fallback_models=A100, contention="ceiling")
ONE_G = profiles.ProfileName("1g.10gb")


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
    (FREE, "1g.18gb", "smallest with a free instance (1g.10gb: 0 free)"),
    (CEILING, "1g.18gb", "smallest with a free instance (1g.10gb: 0 free)"),
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
    assert reason(free) == "smallest with a free instance (1g.10gb, 2g.20gb: 0 free)"
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
    with pytest.raises(errors.UsageError, match=r"--waste-ceiling 2\.0"):
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
