"""`migfit extender --kubeconfig` as a real process against kmock: it lists and watches, serves
the advice, and, holding the leader Lease, publishes it on the node (annotation and label) and
as Events; of two replicas only one publishes; it listens (alive, not Ready) while the
credentials of its writes cannot be had yet."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import socket
import sys
import time
from typing import Any

import aiohttp
import kmock
import pytest
from advisor_scene import node, pod
from migmanager_sim import CONFIGMAPS, MigManager, api_for, events, read_node, store

from tests.watching.scenery import write_kubeconfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/events", "v1/configmaps",
                "coordination.k8s.io/v1/leases"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    return kmock


def _kubeconfig(server: kmock.KubernetesEmulator, path: pathlib.Path) -> pathlib.Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": str(server.url).rstrip("/")}}],
        "users": [{"name": "tester", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "tester"}}],
        "current-context": "kmock",
    }))
    return path


async def _until(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError("timed out")


async def _marked(api: Any, name: str) -> Any:
    """Node ``name`` once the advice publisher has marked it (its relayout annotation)."""
    obj = await read_node(api, name)
    return obj if "migfit.io/relayout" in obj["metadata"].get("annotations", {}) else None


@pytest.mark.parametrize("how", ["flag", "env"])
async def test_extender_process_serves_and_publishes_advice(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path, how: str) -> None:
    """``how``: --kubeconfig, or $KUBECONFIG found as kubectl finds it (the watch and the
    write client both)."""
    store(server, node("idle", alloc={"3g.40gb": 2}))
    store(server, node("busy", alloc={"1g.10gb": 7}))
    for i in range(7):
        store(server, pod(f"run-{i}", "1g.10gb", namespace="ml", node="busy"))
    store(server, pod("small", "1g.10gb", namespace="ml"))
    port = _free_port()
    kc = str(_kubeconfig(server, tmp_path / "kc"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    if how == "env":
        env["KUBECONFIG"] = kc
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "migfit.cli", "extender", "--host", "127.0.0.1",
        "--port", str(port), *(["--kubeconfig", kc] if how == "flag" else []),
        "--grace", "0", "--log-level", "warning", "--lease-namespace", "default", cwd=ROOT,
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    api = api_for(server)
    try:
        async with aiohttp.ClientSession() as http:
            async def advice() -> Any:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/advice") as resp:
                        body = await resp.json()
                        return body if body.get("recommendations") else None
                except aiohttp.ClientError:
                    return None

            body = await _until(advice)
        assert [r["node"] for r in body["recommendations"]] == ["idle"]
        assert body["recommendations"][0]["unblocks"] == ["ml/small"]

        obj = await _until(lambda: _marked(api, "idle"))
        assert obj["metadata"]["labels"]["migfit.io/relayout-recommended"] == "true"
        note = json.loads(obj["metadata"]["annotations"]["migfit.io/relayout"])
        assert "1g.10gb" in note["gpus"][0]["after"]
        busy = await read_node(api, "busy")
        assert "migfit.io/relayout" not in busy["metadata"].get("annotations", {})
        wanted = {"MigRelayoutRecommended", "WaitingForMigProfile"}

        async def both_reasons() -> Any:
            # The node Event and the pod Events are separate writes: wait for what is asserted.
            found = {e.get("reason") for e in await events(api)}
            return found if wanted <= found else None

        reasons = await _until(both_reasons)
        assert {"MigRelayoutRecommended", "WaitingForMigProfile"} <= reasons
    finally:
        await api.close()
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    assert b"Traceback" not in err, err.decode()


async def test_two_replicas_publish_each_event_once(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    """The base Deployment runs two replicas: both serve the advice, only the Lease's holder
    writes it. Before, both published, and every Event was written twice."""
    store(server, node("idle", alloc={"3g.40gb": 2}))
    store(server, pod("small", "1g.10gb", namespace="ml"))
    store(server, pod("other", "1g.10gb", namespace="ml"))
    kc = str(_kubeconfig(server, tmp_path / "kc"))
    ports = {"extender-a": _free_port(), "extender-b": _free_port()}
    procs = []
    for identity, port in ports.items():
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        env.update(HOME=str(tmp_path), POD_NAME=identity)
        procs.append(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "migfit.cli", "extender", "--host", "127.0.0.1",
            "--port", str(port), "--kubeconfig", kc, "--grace", "0", "--log-level", "warning",
            "--lease-namespace", "default", cwd=ROOT, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE))
    api = api_for(server)
    try:
        async with aiohttp.ClientSession() as http:
            for port in ports.values():  # both synced and serving the advice
                async def advised(port: int = port) -> Any:
                    try:
                        async with http.get(f"http://127.0.0.1:{port}/advice") as resp:
                            return (await resp.json()).get("recommendations")
                    except aiohttp.ClientError:
                        return None

                await _until(advised)
        wanted = [("Node", "idle", "MigRelayoutRecommended"),
                  ("Pod", "other", "WaitingForMigProfile"),
                  ("Pod", "small", "WaitingForMigProfile")]

        async def written() -> list[tuple[str, str, str]]:
            return sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"],
                           e["reason"]) for e in await events(api))

        await _until(lambda: _at_least(written, len(wanted)))
        # Both replicas have synced: a second publisher would have written by now (its first
        # pass follows the sync within a fraction of a second; its next is 30 s later).
        await asyncio.sleep(3.0)
        assert await written() == wanted
        lease = server.objects[kmock.resource("coordination.k8s.io", "v1", "leases"),
                               "default", "migfit-relayout"]
        assert lease["spec"]["holderIdentity"] in ports
    finally:
        await api.close()
        for proc in procs:
            proc.terminate()
        errs = [(await asyncio.wait_for(p.communicate(), timeout=20))[1] for p in procs]
    for err in errs:
        assert b"Traceback" not in err, err.decode()


async def _at_least(read: Any, n: int) -> bool:
    return len(await read()) >= n


async def test_extender_process_writes_a_custom_config_and_applies_it(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    """--apply-relayout --apply-custom-configs end to end: the custom config the advice
    renders for GPU 0 lands in the ConfigMap, the label follows once the (simulated) MIG
    Manager's volume has it, and GPU 1 keeps its instance."""
    server.resources["coordination.k8s.io/v1/leases"] = {}  # type: ignore[assignment]
    text = ("version: v1\nmig-configs:\n  all-3g.40gb:\n    - devices: all\n"
            "      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 1}\n")
    server.objects[CONFIGMAPS, "gpu-operator", "migfit-mig-parted-config"] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "migfit-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": text}}
    store(server, node("idle", gpus=2, alloc={"3g.40gb": 2}, config="all-3g.40gb"))
    store(server, pod("small", "1g.10gb", namespace="ml"))
    kc = str(_kubeconfig(server, tmp_path / "kc"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    api = api_for(server)
    mm = MigManager(api, "idle", configmap=("gpu-operator", "migfit-mig-parted-config"),
                    mount_lag_s=0.5, gpus=2)
    mm.start()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "migfit.cli", "extender", "--host", "127.0.0.1",
        "--port", str(_free_port()), "--kubeconfig", kc, "--grace", "0",
        "--log-level", "warning", "--lease-namespace", "default", "--apply-relayout",
        "--apply-custom-configs", "--configmap", "gpu-operator/migfit-mig-parted-config",
        "--config-sync", "2", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        async def settled() -> Any:
            obj = await read_node(api, "idle")
            labels = obj["metadata"].get("labels", {})
            done = (labels.get("nvidia.com/mig.config", "").startswith("migfit-")
                    and labels.get("nvidia.com/mig.config.state") in ("success", "failed")
                    and not obj.get("spec", {}).get("taints")
                    # released: the taint goes at success, the record once the pods are checked
                    and "migfit.io/relayout" not in obj["metadata"].get("annotations", {}))
            return obj if done or labels.get("nvidia.com/mig.config.state") == "failed" \
                else None

        obj = await _until(settled, timeout=120.0)
        labels = obj["metadata"]["labels"]
        assert labels["nvidia.com/mig.config.state"] == "success", mm.failures
        assert mm.applied == [labels["nvidia.com/mig.config"]] and not mm.failures
        alloc = obj["status"]["allocatable"]
        assert alloc["nvidia.com/mig-1g.10gb"] == "2" and alloc["nvidia.com/mig-3g.40gb"] == "2"
        cm = server.objects[CONFIGMAPS, "gpu-operator", "migfit-mig-parted-config"]
        assert labels["nvidia.com/mig.config"] in cm["data"]["config.yaml"]
    finally:
        await mm.stop()
        await api.close()
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    assert b"Traceback" not in err, err.decode()


async def test_extender_survives_an_exec_plugin_failing_at_start(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    """With publishing on, the extender's own client retries credentials that cannot be had
    yet (the exec plugin's identity provider out of reach), as its cluster source does, and
    then publishes. Before, it exited 2 at once ("cannot load kubeconfig ...")."""
    store(server, node("idle", alloc={"3g.40gb": 2}))
    store(server, node("busy", alloc={"1g.10gb": 7}))
    for i in range(7):
        store(server, pod(f"run-{i}", "1g.10gb", namespace="ml", node="busy"))
    store(server, pod("small", "1g.10gb", namespace="ml"))
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib, sys\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "n = len(runs.read_text()) if runs.exists() else 0\n"
        "runs.write_text('x' * (n + 1))\n"
        "if n < 2:\n"
        "    sys.exit('dial tcp: i/o timeout')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',\n"
        "  'kind': 'ExecCredential', 'status': {'token': 'from-exec'}}))\n")
    kc = tmp_path / "kc"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": str(server.url).rstrip("/")}}],
        "users": [{"name": "tester", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
            "args": [str(plugin)], "interactiveMode": "Never"}}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "tester"}}],
        "current-context": "kmock",
    }))
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "migfit.cli", "extender", "--host", "127.0.0.1",
        "--port", str(port), "--kubeconfig", str(kc), "--grace", "0", "--log-level",
        "warning", "--lease-namespace", "default", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    api = api_for(server)
    try:
        async def marked() -> Any:
            if proc.returncode is not None:
                raise AssertionError(f"the extender exited {proc.returncode}")
            return await _marked(api, "idle")

        await _until(marked)
    finally:
        await api.close()
        if proc.returncode is None:
            proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    text = err.decode()
    assert "Traceback" not in text, text
    assert "process returned 1. dial tcp: i/o timeout" in text, text
    assert "kubernetes_asyncio" not in text, text


async def test_extender_listens_while_its_credentials_are_retried(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    """With publishing on, credentials that cannot be had yet (the exec plugin fails while its
    identity provider is out of reach) are retried while the extender serves: /healthz 200,
    /readyz 503 saying why; once the plugin works, /readyz 200 and the advice is published.
    Before, the publisher's client retried them before the extender listened: nothing
    answered /healthz meanwhile, so the kubelet's liveness probe killed the pod."""
    store(server, node("idle", alloc={"3g.40gb": 2}))
    store(server, pod("small", "1g.10gb", namespace="ml"))
    back = tmp_path / "identity-provider-back"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib, sys\n"
        f"if not pathlib.Path({str(back)!r}).exists():\n"
        "    sys.exit('dial tcp: i/o timeout')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',\n"
        "  'kind': 'ExecCredential', 'status': {'token': 'from-exec'}}))\n")
    kc = write_kubeconfig(server, tmp_path / "kc", user=(
        "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
        f'command: "{sys.executable}", args: ["{plugin}"], interactiveMode: Never}}}}'))
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "migfit.cli", "extender", "--host", "127.0.0.1",
        "--port", str(port), "--kubeconfig", str(kc), "--grace", "0", "--log-level",
        "warning", "--lease-namespace", "default", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    api = api_for(server)
    try:
        async with aiohttp.ClientSession() as http:
            async def probe(path: str) -> tuple[int, Any] | None:
                if proc.returncode is not None:
                    raise AssertionError(f"the extender exited {proc.returncode}")
                try:
                    async with http.get(f"http://127.0.0.1:{port}{path}") as resp:
                        return resp.status, await resp.json()
                except aiohttp.ClientError:
                    return None

            alive = await _until(lambda: probe("/healthz"), timeout=20.0)
            assert alive[0] == 200

            async def said_why() -> Any:
                answer = await probe("/readyz")
                return answer if answer and "credentials" in answer[1].get("reason", "") \
                    else None

            status, body = await _until(said_why, timeout=20.0)
            assert status == 503 and body["ready"] is False, body
            assert ("the advice publisher has no Kubernetes credentials yet: cannot get "
                    "credentials for kubeconfig") in body["reason"], body
            assert "dial tcp: i/o timeout" in body["reason"], body
            assert (await probe("/healthz")) == (200, {"ok": True})  # still alive
            assert not list(server[kmock.action.LIST])  # nothing read without them

            back.touch()  # the identity provider answers again

            async def ready() -> Any:
                answer = await probe("/readyz")
                return answer if answer and answer[0] == 200 else None

            assert (await _until(ready, timeout=60.0))[1]["ready"] is True

        await _until(lambda: _marked(api, "idle"))
    finally:
        await api.close()
        if proc.returncode is None:
            proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    text = err.decode()
    assert "Traceback" not in text, text
    assert "process returned 1. dial tcp: i/o timeout" in text, text


async def test_a_kubeconfig_only_connecting_refuses_still_exits_2(
        tmp_path: pathlib.Path) -> None:
    """A kubeconfig that passes the checks at start but that no retry can mend once the client
    loads it (its HTTPS cluster's CA file is missing) still ends the extender with exit status
    2 and a ``migfit: error:`` line, now that the publisher connects while the extender
    serves."""
    kc = tmp_path / "kc"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {
            "server": "https://127.0.0.1:1", "certificate-authority": str(tmp_path / "no-ca")}}],
        "users": [{"name": "u", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }))
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "migfit.cli", "extender", "--host", "127.0.0.1",
        "--port", str(_free_port()), "--kubeconfig", str(kc), "--log-level", "warning",
        "--drain-delay", "0", "--lease-namespace", "default", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = err.decode()
    assert proc.returncode == 2, text
    assert text.strip().splitlines()[-1].startswith(
        f"migfit: error: cannot load kubeconfig {str(kc)!r}: File does not exist"), text
    assert "Traceback" not in text, text
