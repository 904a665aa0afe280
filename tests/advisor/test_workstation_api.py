"""`migfit status|advise|explain` against an API server, as a person runs them: configuration
found as kubectl finds it ($KUBECONFIG), fast one-line failures, machine output, and a
one-pod `explain` that reads only what it needs (issue 16 items 3 and 8)."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess

import kmock
import pytest
import yaml
from advisor_scene import node, pod
from migmanager_sim import store

from tests.workstation import kubeconfig as _kubeconfig
from tests.workstation import migfit as _migfit
from tests.workstation import one_line_error as _one_line_error

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMANDS = [("status",), ("advise",), ("explain", "ml/small")]


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/configmaps"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    return kmock


def _scene(server: kmock.KubernetesEmulator) -> None:
    store(server, node("idle", alloc={"3g.40gb": 2}))
    store(server, node("busy", alloc={"1g.10gb": 7}))
    for i in range(7):
        store(server, pod(f"run-{i}", "1g.10gb", namespace="ml", node="busy"))
    store(server, pod("small", "1g.10gb", namespace="ml"))


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens there


def _one_line_failure(done: subprocess.CompletedProcess[str], took: float, *must: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for text in must:
        assert text in lines[0], lines[0]
    assert took < 5.0, f"took {took:.1f}s"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
async def test_a_refused_port_fails_fast_in_one_line(command: tuple[str, ...],
                                               tmp_path: pathlib.Path) -> None:
    port = _refused_port()
    kc = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    done, took = await _migfit(*command, kubeconfig=kc, home=tmp_path)
    _one_line_failure(done, took, f"127.0.0.1:{port}", "cannot connect")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
async def test_a_403_fails_fast_in_one_line_with_the_fix(
        command: tuple[str, ...], server: kmock.KubernetesEmulator,
        tmp_path: pathlib.Path) -> None:
    _scene(server)
    server[kmock.method.GET] << 403 << {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
        "code": 403, "message": 'pods is forbidden: User "dev" cannot list resource "pods"'}
    kc = _kubeconfig(tmp_path / "kc", str(server.url).rstrip("/"))
    done, took = await _migfit(*command, kubeconfig=kc, home=tmp_path)
    _one_line_failure(done, took, str(server.url).rstrip("/"), "403", "RBAC")


async def test_kubeconfig_env_is_used_and_yaml_output(server: kmock.KubernetesEmulator,
                                                tmp_path: pathlib.Path) -> None:
    _scene(server)
    # $KUBECONFIG is a list: a missing file first, then the real one (kubectl merges them).
    kc = _kubeconfig(tmp_path / "kc", str(server.url).rstrip("/"))
    env_list = pathlib.Path(f"{tmp_path / 'missing'}{os.pathsep}{kc}")
    done, _ = await _migfit("status", "-o", "yaml", kubeconfig=env_list, home=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(done.stdout)
    assert sorted(n["name"] for n in doc["nodes"]) == ["busy", "idle"]
    assert server[kmock.action.LIST][0].headers["Authorization"] == "Bearer t0k3n"
    assert not list(server[kmock.action.WATCH]), "a one-shot command does not watch"


async def test_advise_prints_a_summary_and_details_on_request(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    _scene(server)
    kc = _kubeconfig(tmp_path / "kc", str(server.url).rstrip("/"))
    summary, _ = await _migfit("advise", "--grace", "0", kubeconfig=kc, home=tmp_path)
    assert summary.returncode == 0, summary.stderr
    assert "kubectl label node idle" in summary.stdout
    assert "GPU 0:" not in summary.stdout and "--details" in summary.stdout
    for flags in (("--details",), ("-o", "wide")):
        full, _ = await _migfit("advise", "--grace", "0", *flags, kubeconfig=kc, home=tmp_path)
        assert full.returncode == 0, full.stderr
        assert "GPU 0:" in full.stdout and "unblocks: ml/small" in full.stdout
    data, _ = await _migfit("advise", "--grace", "0", "-o", "json", kubeconfig=kc, home=tmp_path)
    assert [r["node"] for r in json.loads(data.stdout)["recommendations"]] == ["idle"]


async def test_explain_reads_only_the_pod_and_the_nodes_it_could_use(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    _scene(server)
    cpu_only = node("cpu-only", alloc={})
    cpu_only["metadata"]["labels"] = {}  # no GPU: not a node the pod could use
    store(server, cpu_only)
    for i in range(5):
        store(server, pod(f"elsewhere-{i}", "1g.10gb", namespace="other", node="cpu-only"))
    # The context's namespace is "ml": a bare pod name is looked up there, as kubectl does.
    kc = _kubeconfig(tmp_path / "kc", str(server.url).rstrip("/"), namespace="ml")
    done, _ = await _migfit("explain", "small", "--grace", "0", "-o", "json",
                      kubeconfig=kc, home=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["pod"] == "ml/small" and doc["pending"] is True
    assert doc["recommendation"]["node"] == "idle"
    assert doc["awaiting"] is None  # no node being re-laid out serves it
    assert "Fix: re-partition node idle" in doc["explanation"]
    assert not list(server[kmock.action.WATCH])
    gets = [str(r.url) for r in server[kmock.method.GET]]
    assert any(u.endswith("/api/v1/namespaces/ml/pods/small") for u in gets), gets
    pod_lists = [u for u in gets if "/pods?" in u or u.endswith("/pods")]
    assert pod_lists and all("fieldSelector" in u for u in pod_lists), pod_lists
    assert not any("spec.nodeName%3Dcpu-only" in u for u in pod_lists), pod_lists


async def test_context_with_cluster_is_an_error(tmp_path: pathlib.Path) -> None:
    example = ROOT / "examples" / "cluster.yaml"
    for command in COMMANDS:
        done, _ = await _migfit(*command, "--cluster", str(example), "--context", "prod",
                          kubeconfig=None, home=tmp_path)
        assert done.returncode == 2 and "--context" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


async def test_status_notes_a_mig_strategy_label_gfd_never_writes(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    """A cluster file with it is refused; a live node's is shown, and nothing fails."""
    store(server, node("odd", alloc={"3g.40gb": 2}, labels={"nvidia.com/mig.strategy": "mixd"}))
    kc = _kubeconfig(tmp_path / "kc", str(server.url).rstrip("/"))
    done, _ = await _migfit("status", "-o", "json", kubeconfig=kc, home=tmp_path)
    assert done.returncode == 0, done.stderr
    [odd] = json.loads(done.stdout)["nodes"]
    assert odd["notes"] == ["unknown nvidia.com/mig.strategy 'mixd' (valid: none | single | "
                            "mixed)"]
    table, _ = await _migfit("status", kubeconfig=kc, home=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "unknown nvidia.com/mig.strategy 'mixd'" in table.stdout


@pytest.mark.parametrize("command", [*COMMANDS, ("extender",)], ids=lambda c: c[0])
async def test_no_kubeconfig_anywhere_names_the_cluster_file_too(
        command: tuple[str, ...], tmp_path: pathlib.Path) -> None:
    """A first try with no cluster at hand: the message named only --kubeconfig and a
    service account, not the file that every one of these commands reads."""
    done, _ = await _migfit(*command, kubeconfig=None, home=tmp_path)
    assert _one_line_error(done) == (
        "cannot load in-cluster config (no service account mounted?) and found no kubeconfig "
        "($KUBECONFIG unset, no ~/.kube/config): pass --kubeconfig PATH to a readable "
        "kubeconfig, or --cluster FILE to read a cluster exported with `kubectl get "
        "nodes,pods -A -o yaml` (such as examples/cluster.yaml), or run inside a pod with a "
        "service account")
