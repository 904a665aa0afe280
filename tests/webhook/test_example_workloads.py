"""The workloads under examples/workloads are valid objects, and what each file's header says
the webhook gives its containers on the example cluster is what the webhook gives them: each
pod (or the pod its controller's template makes) goes through /mutate over TLS with the
defaults `migfit serve` uses, and the patched pod is still a valid Pod."""

from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import webhook_scenery as s
import yaml
from webhook_scenery import MakeClient

from migfit import sources
from migfit.commands import webhook as webhook_cli
from migfit.webhook import decision

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = sorted((ROOT / "examples" / "workloads").glob("*.yaml"))
EXPECT = re.compile(r"^# expect on examples/cluster\.yaml: (.+)$", re.MULTILINE)


def _serve_policy() -> decision.Policy:
    """The decision policy of `migfit serve` with no flags, read from its own parser."""
    parser = argparse.ArgumentParser()
    webhook_cli.add_policy_arguments(parser)
    return webhook_cli.policy_from(parser.parse_args([]))[1]


SERVE_POLICY = _serve_policy()


def test_there_are_workloads() -> None:
    assert len(WORKLOADS) >= 4, WORKLOADS


def pod_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The Pod the API server admits: the object itself, or its controller's template."""
    if obj["kind"] == "Pod":
        return copy.deepcopy(obj)
    template = copy.deepcopy(obj["spec"]["template"])
    meta = template.get("metadata", {})
    meta.update(generateName=f"{obj['metadata']['name']}-",
                namespace=obj["metadata"].get("namespace", "default"))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.name)
async def test_the_webhook_gives_each_workload_what_its_header_says(
        path: Path, make_client: MakeClient) -> None:
    text = path.read_text(encoding="utf-8")
    (obj,) = list(yaml.safe_load_all(text))
    kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    (expect_line,) = EXPECT.findall(text)
    expected = dict(pair.split("=", 1) for pair in expect_line.split())

    client = await make_client(sources.load_snapshot(ROOT / "examples" / "cluster.yaml"),
                               policy=SERVE_POLICY)
    pod = pod_of(obj)
    body = await (await client.post("/mutate", json=s.review(pod))).json()
    assert body["response"]["allowed"], body["response"].get("status")
    mutated = jsonpatch.apply_patch(pod, s.patch_of(body))
    kubernetes_validate.validate(mutated, kubernetes_validate.latest_version(), strict=True)

    got = {}
    for container in mutated["spec"]["containers"]:
        limits = container.get("resources", {}).get("limits", {})
        mig = [r for r in limits if r.startswith("nvidia.com/")]
        if mig:
            (resource,) = mig
            assert limits[resource] == container["resources"]["requests"][resource] == "1"
            got[container["name"]] = resource
    assert got == expected, f"{path.name}: the header says {expected}, the webhook gave {got}"


def test_the_readme_shows_the_smoke_pod_as_the_file_has_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```yaml\n# examples/workloads/smoke\.yaml\n(.*?)```", readme, re.S)
    assert yaml.safe_load(block) == yaml.safe_load(
        (ROOT / "examples" / "workloads" / "smoke.yaml").read_text(encoding="utf-8"))
