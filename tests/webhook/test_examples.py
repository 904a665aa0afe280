"""The sample AdmissionReviews of the README walk-through, against examples/cluster.yaml."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import webhook_scenery as s
from webhook_scenery import MakeClient

from migfit import sources

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = ROOT / "examples" / "requests"

# file -> (allowed, profiles recorded or None, a warning or message fragment or None)
EXPECTED: dict[str, tuple[bool, str | None, str | None]] = {
    "create-12gi.json": (True, "1g.18gb", None),
    "create-30gi.json": (True, "3g.40gb", None),
    "create-8gi-in-use.json": (True, "1g.10gb", "every 1g.10gb instance is in use"),
    # ... and not "use a whole GPU": none of this cluster holds 200Gi either
    "create-200gi-denied.json": (False, None, "7g.141gb on H200-141GB (143099Mi usable); ask "
                                 "for at most 143099Mi, or split the work over several GPUs"),
    "create-bad-quantity.json": (False, None, 'did you mean "G"'),
    "create-per-container.json": (True, "3g.40gb,3g.40gb", None),
    "create-4gi-single.json": (True, "1g.5gb", None),
    "create-unannotated.json": (True, None, None),
    "update-ignored.json": (True, None, None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_example_request(make_client: MakeClient, name: str) -> None:
    allowed, profile, text = EXPECTED[name]
    client = await make_client(sources.load_snapshot(ROOT / "examples" / "cluster.yaml"))
    review: dict[str, Any] = json.loads((REQUESTS / name).read_text())
    resp = await client.post("/mutate?timeout=10s", json=review)
    assert resp.status == 200
    body = await resp.json()
    response = body["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is allowed
    if text is not None:
        shown = response["status"]["message"] if not allowed else " ".join(response["warnings"])
        assert text in shown
    elif allowed:
        assert "warnings" not in response, response["warnings"]  # none expected
    pod = jsonpatch.apply_patch(review["request"]["object"], s.patch_of(body))
    annotations = pod["metadata"].get("annotations", {})
    assert annotations.get("migfit.io/profile") == profile
