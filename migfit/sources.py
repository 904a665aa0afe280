"""Where a server or command gets its cluster view: a snapshot file or the Kubernetes API.

Every server and CLI command opens its source here, so ``--cluster FILE`` and
``--kubeconfig PATH`` mean the same everywhere and both sources look alike to the caller
(``run()``, ``synced``, ``last_error``). The Kubernetes client is imported only when a
watch source is opened, so file-based commands start fast.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import TYPE_CHECKING, Protocol

from migfit import cluster, errors, profiles, snapshots

if TYPE_CHECKING:
    from migfit import watching


class Source(Protocol):
    """A source keeping a Cluster current: the file source and the watch source."""

    @property
    def synced(self) -> asyncio.Event:
        """Set after the first complete load (both Nodes and Pods)."""

    @property
    def last_error(self) -> str | None:
        """The latest problem, for /readyz and logs; None when the last attempt worked."""

    async def run(self) -> None:
        """Keep the cluster current until cancelled."""


class WatchSource:
    """The Kubernetes list/watch source (migfit.watching) with the Source shape."""

    def __init__(self, inner: watching.KubernetesSource) -> None:
        self.inner = inner

    @property
    def synced(self) -> asyncio.Event:
        return self.inner.synced

    @property
    def last_error(self) -> str | None:
        status = self.inner.status()
        # Once the watches work again the old error is history, not the state.
        return status.last_error if status.consecutive_failures or not status.synced else None

    async def run(self) -> None:
        await self.inner.run()


def open_source(
    model: cluster.Cluster,
    *,
    cluster_file: str | os.PathLike[str] | None,
    kubeconfig: str | os.PathLike[str] | None,
    in_cluster: bool,
    context: str | None = None,
    poll_interval_s: float = snapshots.DEFAULT_POLL_INTERVAL_S,
    request_timeout_s: float | None = None,
) -> Source:
    """The source for one of: a snapshot file, a kubeconfig, or the pod's service account."""
    if cluster_file is not None and kubeconfig is not None:
        raise errors.UsageError("give either --cluster FILE or --kubeconfig PATH, not both")
    if cluster_file is not None:
        # A file missing (a typo), a directory or a file that is no cluster is an error at
        # start-up, said as status and advise say it, rather than a cluster view that never
        # syncs; a file that later goes missing or breaks keeps the last good state (the
        # file source's behaviour).
        source = snapshots.FileSource(model, cluster_file, poll_interval_s=poll_interval_s,
                                      catalog=model.catalog)
        source.check_first()
        return source
    if kubeconfig is None and not in_cluster:
        raise errors.UsageError(
            "no cluster given: pass --cluster FILE (a `kubectl get nodes,pods -A -o yaml` "
            "export) or --kubeconfig PATH, or run inside a pod to use its service account")
    from migfit import kube, watching  # the Kubernetes client loads only when it is needed

    # A kubeconfig that is missing or cannot be one is an error now, not a source that
    # retries for ever in the background while the server never becomes ready (``serve``
    # waited on it, the webhook served without it); an API that does not answer is retried.
    try:
        kube.check(kube.discover(kubeconfig, context))
    except kube.NoKubeconfigError:
        raise kube.NoKubeconfigError(cluster_flag=True) from None  # every server reads files
    settings = (watching.WatchSettings(read_timeout_s=request_timeout_s)
                if request_timeout_s else None)  # --request-timeout: a list page's limit
    return WatchSource(watching.KubernetesSource(model, kubeconfig=kubeconfig, context=context,
                                                 settings=settings))


AS_KUBECTL = "as kubectl, $KUBECONFIG, else ~/.kube/config, else the in-cluster service account"


def add_source_arguments(parser: argparse.ArgumentParser, *, neither: str = AS_KUBECTL,
                         once: bool = False) -> None:
    """The standard ``--cluster FILE`` / ``--kubeconfig PATH`` flags; ``neither``: what the
    command reads without either; ``once``: a command that reads the cluster once (no
    watch, no file re-read)."""
    group = parser.add_argument_group(
        "cluster", f"where the cluster view comes from (neither flag: {neither})")
    exclusive = group.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--cluster", metavar="FILE", dest="cluster_file",
        help="a snapshot file: `kubectl get nodes,pods -A -o yaml` (or JSON, or multi-document "
             "YAML)" + ("" if once else "; re-read when it changes"))
    exclusive.add_argument(
        "--kubeconfig", metavar="PATH",
        help=("list" if once else "list and watch")
        + " the cluster of this kubeconfig (its current context)")
    group.add_argument("--context", metavar="NAME",
                       help="kubeconfig context to use instead of the current one")
    group.add_argument("--request-timeout", metavar="DURATION",
                       type=_duration if once else _page_duration,
                       help=("how long one Kubernetes API request may take: 30s, 1m, 500ms; "
                             "0: no limit (default 30s)") if once else
                            ("how long a page of the initial list may stay silent: 30s, 1m, "
                             "500ms (default and with 0: 60s; a watch has its own limit)"))


def _duration(text: str) -> float:
    from migfit import kube  # the Kubernetes client loads only when it is needed

    return kube.parse_duration(text)


def _page_duration(text: str) -> float:
    """A watching command's ``--request-timeout``: 0 leaves the list page's default
    (``open_source``), as its help says."""
    from migfit import kube, watching  # the Kubernetes client loads only when it is needed

    default = watching.WatchSettings().read_timeout_s
    return kube.parse_duration(text, zero=f"{default:g}s, the default")


def source_from_args(model: cluster.Cluster, args: argparse.Namespace) -> Source:
    """``open_source`` for a namespace parsed with ``add_source_arguments``."""
    cluster_file = getattr(args, "cluster_file", None)
    kubeconfig = getattr(args, "kubeconfig", None)
    check_source_args(args)
    return open_source(model, cluster_file=cluster_file, kubeconfig=kubeconfig,
                       in_cluster=cluster_file is None and kubeconfig is None,
                       context=getattr(args, "context", None),
                       request_timeout_s=getattr(args, "request_timeout", None))


def check_source_args(args: argparse.Namespace) -> None:
    """Flags that would be ignored are an error: ``--context`` or ``--request-timeout`` with
    ``--cluster`` (a snapshot file has no contexts and makes no requests)."""
    if getattr(args, "cluster_file", None) is None:
        return
    for flag, value in (("--context", getattr(args, "context", None)),
                        ("--request-timeout", getattr(args, "request_timeout", None))):
        if value is not None:
            raise errors.UsageError(f"{flag} applies to a Kubernetes API; it means nothing with "
                                    "--cluster FILE: drop one of them")


def load_snapshot(path: str | os.PathLike[str], *,
                  catalog: profiles.Catalog | None = None) -> cluster.Cluster:
    """A synced Cluster loaded once from a snapshot file (for status, advise, explain)."""
    return snapshots.load(path, catalog=catalog)


async def list_once(model: cluster.Cluster, source: Source, *,
                    timeout_s: float = 60.0) -> None:
    """Run ``source`` until it has synced, then stop it: one consistent list of the cluster.

    Raises ConfigError with the source's last error when it cannot sync within ``timeout_s``.
    """
    task = asyncio.create_task(source.run())
    waiter = asyncio.create_task(source.synced.wait())
    try:
        done, _ = await asyncio.wait({task, waiter}, timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiter in done:
            return
        if task in done:
            task.result()  # raises the source's own error (a bad kubeconfig, ...)
        raise errors.ConfigError(
            f"the cluster did not answer a full list within {timeout_s:g}s"
            + (f": {source.last_error}" if source.last_error else ""))
    finally:
        for t in (task, waiter):
            t.cancel()
        await asyncio.gather(task, waiter, return_exceptions=True)


def load_from_args(args: argparse.Namespace, *, timeout_s: float = 60.0) -> cluster.Cluster:
    """A synced Cluster for a one-shot command: the file read once, or the API listed once."""
    check_source_args(args)
    cluster_file = getattr(args, "cluster_file", None)
    if cluster_file is not None:
        return load_snapshot(cluster_file)
    model = cluster.Cluster()
    source = source_from_args(model, args)
    asyncio.run(list_once(model, source, timeout_s=timeout_s))
    return model
