"""Property tests: any body and any annotation values get a well-formed AdmissionReview or a 4xx."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
import webhook_scenery as s
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_scenery import MakeClient

from migfit import requests
from migfit.webhook import server

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)
_names = st.sampled_from(["main", "side", "eval", "", "x/y", "~"])
_values = st.one_of(
    st.sampled_from(["8Gi", "10Gi", "12Gi", "30Gi", "100Gi", "0", "-1", "1e3", "1.5Ti", "Gi",
                     "12GB", "1e1000", " 1", "true", "2", "9999999Ei", ""]),
    st.text(max_size=12),
)
_keys = st.one_of(
    st.sampled_from([requests.GPU_MEMORY, requests.GPU_COMPUTE, requests.GPU_MEDIA,
                     requests.DEFAULT_CONTAINER, requests.DECISION, requests.PROFILE]),
    _names.map(lambda n: requests.GPU_MEMORY_PREFIX + n),
    st.text(max_size=10),
)
_containers = st.lists(
    st.fixed_dictionaries({"name": _names}, optional={
        "resources": st.one_of(_json, st.fixed_dictionaries({}, optional={
            "limits": st.dictionaries(st.sampled_from(
                ["cpu", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]),
                st.sampled_from(["1", "2", "0", "x"]) | _json, max_size=3),
            "requests": _json})),
    }),
    max_size=3,
)


@st.composite
def reviews(draw: st.DrawFn) -> Any:
    pod = s.pod(draw(st.dictionaries(_keys, _values, max_size=5)),
                containers=draw(_containers))
    if draw(st.booleans()):
        pod["spec"]["affinity"] = draw(_json)
    review: Any = s.review(pod, operation=draw(st.sampled_from(["CREATE", "CREATE", "UPDATE"])))
    # Corrupt some part of the review now and then.
    where = draw(st.sampled_from(["none", "none", "request", "object", "metadata", "spec",
                                  "uid", "top"]))
    junk = draw(_json)
    if where == "request":
        review["request"][draw(st.sampled_from(["operation", "kind", "dryRun"]))] = junk
    elif where == "object":
        review["request"]["object"] = junk
    elif where == "metadata":
        review["request"]["object"]["metadata"] = junk
    elif where == "spec":
        review["request"]["object"]["spec"] = junk
    elif where == "uid":
        review["request"]["uid"] = junk
    elif where == "top":
        review = junk
    return review


def check(status: int, body: dict[str, Any], sent: Any) -> None:
    assert status == 200 or 400 <= status < 500, status
    if status != 200:
        assert isinstance(body["error"], str) and "Traceback" not in body["error"]
        return
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert 400 <= response["status"]["code"] < 500
        assert response["status"]["message"]
        assert "patch" not in response
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"]))
        # The patch applies to the object it was computed for.
        jsonpatch.apply_patch(sent["request"]["object"], ops)
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and len(warning.encode()) <= 256  # bytes, as Go


STATE = server.make_app(server.Settings(policy=s.POLICY), s.make_cluster())[server.STATE]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reviews())
def test_answer_is_always_a_review_or_a_4xx(review: Any) -> None:
    status, body = server.answer(json.dumps(review).encode(), state=STATE)
    check(status, body, review)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200) | _json.map(lambda j: json.dumps(j).encode()))
def test_arbitrary_bytes_get_a_4xx(body: bytes) -> None:
    status, out = server.answer(body, state=STATE)
    assert 400 <= status < 500 and "error" in out


async def test_over_tls_the_server_agrees(make_client: MakeClient) -> None:
    """The same generated reviews through the real server: only 200 or 4xx come back."""
    samples: list[Any] = []

    @settings(max_examples=60, deadline=None, database=None)
    @given(reviews())
    def collect(review: Any) -> None:
        samples.append(review)

    collect()
    client = await make_client()
    for review in samples:
        resp = await client.post("/mutate", data=json.dumps(review),
                                 headers={"Content-Type": "application/json"})
        check(resp.status, await resp.json(), review)
