"""A GPU request no API server admits gets a 400 naming the container, the resource and what
to send, from both verbs (an outside check).

Before: ``"nvidia.com/mig-1g.10gb": "1e400"`` (and ``"abc"``, ``"-1"``, the JSON number
``1.5``, ``"containers": "x"``) read as no MIG request at all, so filter passed every node
with a 200 and prioritize scored them all 0.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from extender_builders import build, node

from migfit.extender import server

Client = TestClient[web.Request, web.Application]
LIMIT = '"nvidia.com/mig-1g.10gb"'


@pytest.fixture
async def client(aiohttp_client: Any) -> Client:
    model = build([node("a80-sxm", {"1g.10gb": 7})])
    app = server.make_app(settings=server.ExtenderSettings(log_format="json"), cluster=model)
    made: Client = await aiohttp_client(app)
    return made


def _body(spec_json: str) -> bytes:
    # Built as text: what kube-scheduler would forward, number forms included.
    return (('{"Pod":{"metadata":{"name":"p","namespace":"default"},"spec":' + spec_json
             + '},"NodeNames":["a80-sxm"]}').encode())


def _limits(value_json: str, resource: str = "nvidia.com/mig-1g.10gb") -> str:
    return ('{"containers":[{"name":"train","resources":{"limits":{"' + resource + '":'
            + value_json + "}}}]}")


BAD = [
    (_limits('"1e400"'), 'containers[0] ("train").resources.limits[' + LIMIT + '] is "1e400", '
     "not a Kubernetes quantity (the exponent is beyond ±100)"),
    (_limits('"abc"'), 'is "abc", not a Kubernetes quantity (it has no digits)'),
    (_limits('"-1"'), 'is "-1", a negative count'),
    (_limits("1.5"), "is 1.5, not a whole number"),
    (_limits('"500m"'), 'is "500m", not a whole number'),
    (_limits("1e400"), "the number 1e400 is beyond a 64-bit float"),  # already a 400
    (_limits("null"), "is null, not a quantity"),
    (_limits('"0.5"', "nvidia.com/gpu"), 'limits["nvidia.com/gpu"] is "0.5", not a whole'),
    ('{"containers":"x"}', "Pod.spec.containers is a string; send a list of containers"),
    ('{"containers":[1]}', "Pod.spec.containers[0] is a number; send a container object"),
    ('{"initContainers":[{"name":"i","resources":{"requests":{"nvidia.com/mig-1g.10gb":'
     '"two"}}}]}', 'Pod.spec.initContainers[0] ("i").resources.requests[' + LIMIT + "]"),
    ('{"containers":[{"resources":{"limits":["nvidia.com/mig-1g.10gb"]}}]}',
     "Pod.spec.containers[0].resources.limits is a list; send an object"),
]


@pytest.mark.parametrize(("spec", "said"), BAD, ids=[b[0][-40:] for b in BAD])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_a_malformed_gpu_request_is_a_400_saying_what_to_send(
        client: Client, verb: str, spec: str, said: str) -> None:
    resp = await client.post(f"/{verb}", data=_body(spec),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 400, await resp.text()
    assert resp.content_type == "application/json"
    error = (await resp.json())["Error"]
    assert said in error, error
    if "resources." in said and "is a" not in said:
        assert error.endswith('send a whole number of instances, e.g. "1"'), error
    if verb == "filter":  # still an ExtenderFilterResult: every node map empty
        answer = await resp.json()
        assert answer["NodeNames"] is None and answer["FailedNodes"] == {}


@pytest.mark.parametrize("value", ['"1"', "1", '"2k"', "2.0", '"0"'])
async def test_whole_number_quantities_are_read_as_before(client: Client, value: str) -> None:
    resp = await client.post("/filter", data=_body(_limits(value)),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200
    answer = json.loads(await resp.read())
    assert answer["Error"] == ""


@pytest.mark.parametrize("value", ['"lots"', '"1e400"', "[1]", '{"a":1}', "null"])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_a_malformed_cpu_or_memory_request_reads_as_none_as_before(
        client: Client, verb: str, value: str) -> None:
    spec = ('{"containers":[{"name":"c","resources":{"requests":{"cpu":' + value
            + ',"memory":' + value + ',"nvidia.com/mig-1g.10gb":"1"}}}]}')
    resp = await client.post(f"/{verb}", data=_body(spec),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    if verb == "filter":
        assert answer["NodeNames"] == ["a80-sxm"]
    else:
        assert answer[0]["Host"] == "a80-sxm"
