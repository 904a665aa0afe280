"""migfit.kube against kmock: kubectl's configuration discovery, credentials refreshed for
every client (an exec plugin's token is renewed, a tokenFile re-read; both at once after a
401), request timeouts, and errors classified once (final 401/403/404/422 at once; 429/5xx
retried with backoff)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import time
from typing import Any

import kmock
import pytest

from migfit import errors, kube

NODES = kmock.resource("v1", "nodes")


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources["v1/nodes"] = {}  # type: ignore[assignment]
    kmock.objects[NODES, None, "n1"] = {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    return kmock


def _config(path: pathlib.Path, url: str, *, user: dict[str, Any] | None = None,
            namespace: str | None = None, name: str = "c") -> pathlib.Path:
    ctx: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        ctx["namespace"] = namespace
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": user or {"token": f"token-{name}"}}],
        "contexts": [{"name": name, "context": ctx}], "current-context": name}))
    return path


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_discovery_order(clean_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = clean_env
    with pytest.raises(errors.ConfigError, match=r"in-cluster.*--kubeconfig"):
        kube.discover()
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert kube.discover().kubeconfig is None  # in-cluster
    (home / ".kube").mkdir()
    default = _config(home / ".kube" / "config", "http://127.0.0.1:1")
    assert kube.discover().kubeconfig == str(default)
    listed = f"{home / 'missing'}{os.pathsep}{default}"
    monkeypatch.setenv("KUBECONFIG", listed)
    assert kube.discover().kubeconfig == listed
    monkeypatch.setenv("KUBECONFIG", str(home / "missing"))
    with pytest.raises(errors.ConfigError, match=r"\$KUBECONFIG"):
        kube.discover()
    explicit = _config(home / "explicit", "http://127.0.0.1:1")
    assert kube.discover(explicit, "c").kubeconfig == str(explicit)
    with pytest.raises(errors.ConfigError, match="no such file"):
        kube.discover(home / "nope")


async def test_kubeconfig_list_merges_and_context_namespace(
        server: kmock.KubernetesEmulator, clean_env: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = str(server.url).rstrip("/")
    first = _config(clean_env / "a", url, name="a", namespace="team-a")
    second = _config(clean_env / "b", url, name="b")
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    async with await kube.connect(context="a") as client:
        assert client.namespace == "team-a"
        await client.read_node("n1")
    async with await kube.connect(context="b") as client:
        assert client.namespace == "default"
        await client.read_node("n1")
    tokens = [r.headers["Authorization"] for r in server[kmock.method.GET]]
    assert tokens == ["Bearer token-a", "Bearer token-b"]


def _counting_plugin(server: kmock.KubernetesEmulator, tmp_path: pathlib.Path, *,
                     valid_s: int) -> tuple[pathlib.Path, pathlib.Path]:
    """A kubeconfig whose exec plugin hands out exec-1, exec-2, ... (each valid ``valid_s``),
    and the file that counts its runs."""
    counter = tmp_path / "count"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib, datetime\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "until = datetime.datetime.now(datetime.timezone.utc)"
        f" + datetime.timedelta(seconds={valid_s})\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',\n"
        "  'kind': 'ExecCredential', 'status': {'token': f'exec-{n}',\n"
        "  'expirationTimestamp': until.strftime('%Y-%m-%dT%H:%M:%SZ')}}))\n")
    kc = _config(tmp_path / "kc", str(server.url).rstrip("/"), user={"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": [str(plugin)], "interactiveMode": "Never"}})
    return kc, counter


async def test_exec_credentials_are_refreshed(server: kmock.KubernetesEmulator,
                                              tmp_path: pathlib.Path) -> None:
    kc, counter = _counting_plugin(server, tmp_path, valid_s=30)
    client = await kube.connect(connection=kube.Connection(kubeconfig=kc,
                                                           refresh_interval_s=0.2))
    async with client:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            await client.read_node("n1")
            tokens = [r.headers["Authorization"] for r in server[kmock.method.GET]]
            if tokens[-1] != tokens[0]:
                break
            await asyncio.sleep(0.1)
    assert tokens[0] == "Bearer exec-1"
    assert tokens[-1] != tokens[0], tokens  # the plugin ran again, its new token is used
    assert int(counter.read_text()) >= 2


async def test_token_file_is_read_again(server: kmock.KubernetesEmulator,
                                        tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    kc = _config(tmp_path / "kc", str(server.url).rstrip("/"), user={"tokenFile": str(token)})
    client = await kube.connect(connection=kube.Connection(kubeconfig=kc,
                                                           refresh_interval_s=0.05))
    async with client:
        await client.read_node("n1")
        token.write_text("rotated")  # as the kubelet rotates a projected token
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            await client.read_node("n1")
            tokens = [r.headers["Authorization"] for r in server[kmock.method.GET]]
            if tokens[-1] != tokens[0]:
                break
            await asyncio.sleep(0.05)
    assert tokens[0] == "Bearer old" and tokens[-1] == "Bearer rotated"


async def test_exec_plugin_runs_again_after_a_401(server: kmock.KubernetesEmulator,
                                                  tmp_path: pathlib.Path) -> None:
    kc, _ = _counting_plugin(server, tmp_path, valid_s=3600)
    # Revoked long before the expiry its plugin gave it.
    server[kmock.headers({"Authorization": "Bearer exec-1"})] << 401 << {
        "kind": "Status", "code": 401, "message": "revoked"}
    async with await kube.connect(kc) as client:
        with pytest.raises(kube.ApiError) as caught:
            await client.read_node("n1")  # a 401 is final: this call fails...
        node = await client.read_node("n1")  # ...and the next one has a new token
    assert caught.value.status == 401
    assert node["metadata"]["name"] == "n1"
    tokens = [r.headers["Authorization"] for r in server[kmock.method.GET]]
    assert tokens == ["Bearer exec-1", "Bearer exec-2"]


@pytest.mark.parametrize("code", [401, 403, 404, 422])
async def test_final_errors_are_raised_at_once(server: kmock.KubernetesEmulator,
                                               tmp_path: pathlib.Path, code: int) -> None:
    server[kmock.method.PATCH] << code << {"kind": "Status", "code": code, "message": "no"}
    kc = _config(tmp_path / "kc", str(server.url).rstrip("/"))
    async with await kube.connect(kc) as client:
        with pytest.raises(kube.ApiError) as caught:
            await client.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert caught.value.status == code and caught.value.final
    assert not caught.value.retryable
    assert len(list(server[kmock.method.PATCH])) == 1  # not retried
    text = str(caught.value)
    assert "\n" not in text and str(server.url).rstrip("/") in text and "patch node n1" in text


@pytest.mark.parametrize("code", [429, 503])
async def test_throttling_and_server_errors_are_retried(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path, code: int) -> None:
    server[kmock.method.GET][:2] << code << {"kind": "Status", "code": code}
    kc = _config(tmp_path / "kc", str(server.url).rstrip("/"))
    connection = kube.Connection(kubeconfig=kc, retries=3, backoff_base_s=0.01)
    async with await kube.connect(connection=connection) as client:
        node = await client.read_node("n1")
    assert node["metadata"]["name"] == "n1"
    assert len(list(server[kmock.method.GET])) == 3


async def test_a_refused_connection_is_retryable_and_names_the_server(
        tmp_path: pathlib.Path) -> None:
    kc = _config(tmp_path / "kc", "http://127.0.0.1:9")
    connection = kube.Connection(kubeconfig=kc, retries=1, backoff_base_s=0.01)
    async with await kube.connect(connection=connection) as client:
        with pytest.raises(kube.ApiError) as caught:
            await client.read_config_map("gpu-operator", "cfg")
    assert caught.value.status == 0 and caught.value.retryable and not caught.value.final
    assert "http://127.0.0.1:9" in str(caught.value) and "cannot connect" in str(caught.value)


async def test_request_timeout(server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    server[kmock.method.GET] << (lambda: asyncio.sleep(5)) << {"kind": "Node"}
    kc = _config(tmp_path / "kc", str(server.url).rstrip("/"))
    connection = kube.Connection(kubeconfig=kc, request_timeout_s=0.3, retries=0)
    began = time.monotonic()
    async with await kube.connect(connection=connection) as client:
        with pytest.raises(kube.ApiError, match=r"no answer within 0\.3s"):
            await client.read_node("n1")
    assert time.monotonic() - began < 3


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30.0), ("1m30s", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("12", 12.0), ("0", 0.0)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert kube.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["-1", "soon", "1x", "s"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(errors.UsageError, match="--request-timeout"):
        kube.parse_duration(text)
