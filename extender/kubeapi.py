"""One way to get a kubernetes-asyncio client for the extender's writes (advice, apply mode)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client, config

from migfit import errors


async def api_client(*, kubeconfig: str | None, context: str | None = None) -> Any:
    """An ApiClient from ``kubeconfig`` (its ``context``), else the pod's service account.

    The caller closes it. A configuration that cannot be loaded is a ConfigError that says
    which one was tried.
    """
    cfg = client.Configuration()
    try:
        if kubeconfig:
            await config.load_kube_config(config_file=kubeconfig, context=context,
                                          client_configuration=cfg)
        else:
            in_cluster: Any = config.load_incluster_config  # untyped in the stubs
            in_cluster(client_configuration=cfg)
    except Exception as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account"
        raise errors.ConfigError(f"cannot configure the Kubernetes client from {where}: "
                                 f"{exc}") from None
    return client.ApiClient(cfg)
