"""The simulator's extender calls agree with the extender's HTTP answers on the same cluster."""

from __future__ import annotations

import copy
from typing import Any

from migfit import decoding, profiles
from migfit.extender import server
from migfit.simulate import engine, spec, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")


def _nodes() -> list[spec.NodeSpec]:
    out = []
    for i, layout in enumerate(["all-balanced", "all-1g.10gb", "all-3g.40gb", "all-balanced"]):
        lay, config = spec.resolve_layout(A100, layout, where="test")
        out.append(spec.NodeSpec(name=f"n{i}", model=A100, gpu_layouts=(lay,) * 2,
                                 cpu_milli=64000, memory_mib=262144, config=config))
    return out


def _probe(obj: dict[str, Any], k: int) -> dict[str, Any]:
    """The same pod, not yet bound, as kube-scheduler sends it to the extender."""
    probe = copy.deepcopy(obj)
    probe["metadata"]["name"] = probe["metadata"]["uid"] = f"probe-{k}"
    probe["spec"].pop("nodeName", None)
    probe["status"] = {"phase": "Pending"}
    return probe


async def test_filter_and_scores_agree_with_http(aiohttp_client: Any) -> None:
    sim = engine.Simulation(_nodes(), policy=engine.Policy("migfit", True), seed=1,
                            options=engine.Options(mode="fill"), catalog=CATALOG)
    app = server.make_app(settings=server.ExtenderSettings(log_format="json"),
                          cluster=sim.cluster)
    client = await aiohttp_client(app)
    pods = workload.synthetic(40, model=A100, mapping="compute", seed=5)
    names = sim.cluster.node_names()
    compared = 0
    for k, s in enumerate(pods):
        sim.now = float(k)
        sim.arrive(s)
        pod = next(reversed(sim.pods.values()))
        if not pod.obj or not s.gpu:  # a cpu-only pod's object is bound at once
            continue
        probe = _probe(pod.obj, k)
        record = decoding.pod_from_api(probe)
        assert record is not None
        request = sim.extender.request(record)
        body = {"Pod": probe, "NodeNames": names}
        resp = await client.post("/filter", json=body)
        assert resp.status == 200
        http_passed = (await resp.json())["NodeNames"]
        assert sim.extender.filter(request, names) == http_passed
        resp = await client.post("/prioritize", json=body)
        assert resp.status == 200
        http_scores = {h["Host"]: h["Score"] for h in await resp.json()}
        assert sim.extender.score(request, names) == http_scores
        compared += 1
    assert compared >= 20
    assert sim.counters.gpu_placed > 0
