"""What the workstation commands (``status``, ``advise``, ``explain``) share: the cluster flags,
``-o/--output``, and reading the cluster once, the way kubectl does.

Against an API server a command connects with migfit.kube (``--kubeconfig``, else
``$KUBECONFIG``, else ``~/.kube/config``, else in-cluster; ``--context``;
``--request-timeout``), lists what it needs once (no watch) and fails at once, in one line
naming the server and what to fix, on an error that will not go away (a refused connection
after the client's short retries, 401, 403, 404).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import yaml

from migfit import cluster, errors, profiles, sources

T = TypeVar("T")

OUTPUTS = ("text", "wide", "json", "yaml")


def add_output_argument(parser: argparse.ArgumentParser, *, wide: str | None = None) -> None:
    """``-o/--output text|json|yaml`` (and ``wide`` when the command has details to add)."""
    choices = [o for o in OUTPUTS if o != "wide" or wide]
    parser.add_argument(
        # No default: ``output_of`` tells an -o given from one left out.
        "-o", "--output", choices=choices,
        help="text (default)" + (f", wide ({wide})" if wide else "")
             + ", or the data as json or yaml")


def output_of(args: argparse.Namespace, *, switches: Mapping[str, str]) -> str:
    """The output chosen by ``-o`` and the switches that stand for one (``--json`` for
    json, ``--details`` for wide: ``switches`` maps the flag to its value); ``text`` when
    none is given. UsageError when two of them disagree."""
    given = [(flag, output) for flag, output in switches.items()
             if getattr(args, flag.removeprefix("--").replace("-", "_"))]
    if args.output is not None:
        given.append((f"-o {args.output}", args.output))
    for flag, output in given[1:]:
        if output != given[0][1]:
            raise errors.UsageError(f"{given[0][0]} and {flag} disagree: pass one")
    return given[0][1] if given else "text"


class _ReadableDumper(yaml.SafeDumper):
    """YAML for people: text with line breaks as a block (``|``), "×" as itself. PyYAML
    otherwise writes such text as one double-quoted scalar continued with backslashes."""


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data,
                                   style="|" if "\n" in data else None)


_ReadableDumper.add_representer(str, _text)


def print_data(doc: Any, output: str) -> None:
    """``doc`` as one JSON document or YAML."""
    if output == "yaml":
        sys.stdout.write(yaml.dump(doc, Dumper=_ReadableDumper, sort_keys=False,
                                   allow_unicode=True))
    else:
        print(json.dumps(doc))


def add_catalog_argument(parser: argparse.ArgumentParser) -> None:
    """``--catalog FILE``, as the servers take it: a node of a model only that file knows is
    then read as the extender reads it (without it, as an unknown GPU)."""
    parser.add_argument("--catalog", metavar="FILE",
                        help="MIG catalog file adding or overriding GPU models (as given to "
                             "the webhook and the extender)")


def catalog_of(args: argparse.Namespace) -> profiles.Catalog:
    """The built-in catalog with ``--catalog``'s models; ConfigError for a bad file."""
    return profiles.load(getattr(args, "catalog", None))


def connection_args(args: argparse.Namespace) -> dict[str, Any]:
    """kube.connect's keyword arguments from the cluster flags."""
    return {"kubeconfig": getattr(args, "kubeconfig", None),
            "context": getattr(args, "context", None),
            "request_timeout": getattr(args, "request_timeout", None)}


def run_api(work: Callable[[Any], Awaitable[T]], args: argparse.Namespace) -> T:
    """Connect as the flags say, run ``work(client)``, close; API errors become one line."""
    from migfit import kube  # the Kubernetes client loads only for the API

    async def main() -> T:
        client = await kube.connect(**connection_args(args))
        async with client:
            return await work(client)

    try:
        return asyncio.run(main())
    except kube.NoKubeconfigError:
        raise kube.NoKubeconfigError(cluster_flag=True) from None  # this command reads files
    except kube.ApiError as exc:
        raise errors.MigfitError(str(exc)) from None


def load_cluster(args: argparse.Namespace) -> cluster.Cluster:
    """The whole cluster once: a snapshot file, or one list of Nodes and Pods (no watch)."""
    sources.check_source_args(args)
    catalog = catalog_of(args)
    cluster_file = getattr(args, "cluster_file", None)
    if cluster_file is not None:
        return sources.load_snapshot(cluster_file, catalog=catalog)

    async def work(client: Any) -> cluster.Cluster:
        from migfit import watching

        model = cluster.Cluster(catalog)
        await watching.list_once(model, client)
        return model

    return run_api(work, args)
