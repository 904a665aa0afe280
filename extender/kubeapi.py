"""One way to get a kubernetes-asyncio client for the extender's writes (advice, apply mode),
and to read the raw responses it returns."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException

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


async def read_json(raw: Any) -> dict[str, Any]:
    """The body of a ``_preload_content=False`` response; an ApiException for an error status
    (the client does not raise for those when it does not preload)."""
    status = int(getattr(raw, "status", 200))
    body = await raw.read()
    if status >= 400:
        raise ApiException(status=status, reason=str(getattr(raw, "reason", "")))
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError("the API answered with something that is not an object")
    return doc
