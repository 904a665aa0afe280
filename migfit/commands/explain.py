"""``migfit explain [NAMESPACE/]POD``: why one pod is pending, in plain words, with the fix.

Against an API server it reads only what the answer needs: the pod; then, only when it is a
pending MIG pod, the Nodes, the pods bound to the GPU nodes it could use (one field-selected
list per node) and the other pending pods (they compete for the same re-layouts). Never a
whole-cluster list and watch. ``-n/--namespace`` defaults to the kubeconfig context's
namespace (as kubectl's); ``-o json|yaml`` prints ``{"pod", "pending", "explanation",
"recommendation"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from migfit import advisor, cluster, errors, profiles
from migfit.commands import advise as advice_cli
from migfit.commands import workstation

PARALLEL_NODE_LISTS = 8
"""Field-selected pod lists in flight at once (one per candidate node)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pod", metavar="[NAMESPACE/]POD",
                        help="the pending pod; a bare name is looked up in -n NAMESPACE")
    parser.add_argument("-n", "--namespace", metavar="NAMESPACE",
                        help="the pod's namespace (default: the kubeconfig context's, as "
                             "kubectl; with --cluster: default)")
    advice_cli.add_common_arguments(parser)
    workstation.add_output_argument(parser)


def _target(args: argparse.Namespace) -> tuple[str | None, str]:
    ns, sep, name = str(args.pod).partition("/")
    if not sep:
        ns, name = "", ns
    if (sep and not ns) or not name or "/" in name:
        raise errors.UsageError(f"{args.pod!r} is not [NAMESPACE/]POD")
    if ns and args.namespace and ns != args.namespace:
        raise errors.UsageError(f"{args.pod!r} and -n {args.namespace} name two namespaces")
    return (ns or args.namespace or None), name


async def read_for_pod(client: Any, namespace: str, name: str,
                       catalog: profiles.Catalog | None = None) -> cluster.Cluster:
    """The part of the cluster an explanation of ``namespace/name`` needs (see the module)."""
    from migfit import kube

    model = cluster.Cluster(catalog)
    try:
        pod = await client.read_pod(namespace, name)
    except kube.ApiError as exc:
        if not exc.not_found:
            raise
        model.replace("Node", [])
        model.replace("Pod", [])
        model.mark_synced()
        return model
    model.replace("Pod", [pod])
    record = model.find_pod(namespace, name)
    nodes: list[dict[str, Any]] = []
    pods: dict[str, dict[str, Any]] = {}
    if record is not None and record.node is None and record.phase == "Pending" \
            and not record.deleting and record.mig_requests:
        nodes, _ = await client.list_nodes()
        model.replace("Node", nodes)
        pending, _ = await client.list_pods(field_selector="spec.nodeName=,status.phase=Pending")
        limit = asyncio.Semaphore(PARALLEL_NODE_LISTS)

        async def on_node(node: str) -> list[dict[str, Any]]:
            async with limit:
                found, _ = await client.list_pods(field_selector=f"spec.nodeName={node}")
                return list(found)

        # The nodes it could use: those that advertise MIG instances or have a known GPU.
        bound = await asyncio.gather(*(on_node(s.name) for s in model.nodes()
                                       if s.node.allocatable or s.node.model is not None))
        for obj in [*pending, *(p for group in bound for p in group)]:
            meta = obj.get("metadata") or {}
            pods[str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")] = obj
    meta = pod.get("metadata") or {}
    pods[str(meta.get("uid") or f"{namespace}/{name}")] = pod
    model.replace("Node", nodes)
    model.replace("Pod", list(pods.values()))
    model.mark_synced()
    return model


def run(args: argparse.Namespace) -> int:
    given, name = _target(args)
    settings = advice_cli.settings_from_args(args)
    where = {"namespace": given or "default"}  # with --cluster a bare name means "default"

    async def reader(client: Any, catalog: profiles.Catalog) -> cluster.Cluster:
        if given is None:
            where["namespace"] = str(client.namespace)  # the kubeconfig context's
        return await read_for_pod(client, where["namespace"], name, catalog)

    state, config = advice_cli.load(args, reader=reader)
    ns = where["namespace"]
    now = time.time() if args.now is None else args.now
    machine = args.output in ("json", "yaml")
    advice = advisor.advise(state, now=now, settings=settings, config=config) if machine \
        else None
    text = advisor.explain(state, ns, name, now=now, settings=settings, config=config,
                           advice=advice, source=args.cluster_file)
    found = state.find_pod(ns, name)
    if advice is not None:
        rec = advice.for_pod(f"{ns}/{name}")
        workstation.print_data({
            "pod": f"{ns}/{name}",
            "found": found is not None,
            "pending": found is not None and found.node is None and found.phase == "Pending",
            "explanation": text,
            "recommendation": rec.to_json() if rec is not None else None,
            # the node being re-laid out whose target layout will serve it, or None
            "awaiting": advice.awaiting.get(f"{ns}/{name}"),
        }, args.output)
    else:
        print(text)
    return 0 if found is not None else 1
