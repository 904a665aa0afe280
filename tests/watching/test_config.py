"""Kubeconfig (with a context) or in-cluster config; a bad one is a ConfigError, not a retry."""

from __future__ import annotations

import pathlib

import kmock
import pytest

from migfit import errors, watching

from .scenery import RecordingSink, Start, assert_matches_fresh_lists, node, store


async def test_missing_kubeconfig_is_a_config_error(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope.yaml"
    source = watching.KubernetesSource(RecordingSink(), kubeconfig=missing)

    with pytest.raises(errors.ConfigError, match=r"nope\.yaml"):
        await source.run()


async def test_no_service_account_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # The environment of a process outside any pod.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    source = watching.KubernetesSource(RecordingSink())

    with pytest.raises(errors.ConfigError, match="in-cluster"):
        await source.run()


@pytest.fixture()
def kubeconfig(server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> pathlib.Path:
    """Its current context points nowhere; only the context named "emulator" works."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"""
apiVersion: v1
kind: Config
clusters:
- {{name: nowhere, cluster: {{server: "http://127.0.0.1:9"}}}}
- {{name: kmock, cluster: {{server: "{str(server.url).rstrip('/')}"}}}}
users:
- {{name: tester, user: {{token: other-token}}}}
contexts:
- {{name: broken, context: {{cluster: nowhere, user: tester}}}}
- {{name: emulator, context: {{cluster: kmock, user: tester}}}}
current-context: broken
"""
    )
    return path


@pytest.mark.parametrize("context", ["emulator"])
async def test_the_named_context_is_used(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, node("n1", "3"))

    start()
    await source.synced.wait()

    assert server[kmock.action.LIST][0].headers["Authorization"] == "Bearer other-token"
    await assert_matches_fresh_lists(server, sink)
