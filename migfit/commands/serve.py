"""``migfit serve``: the webhook, the extender and the advisor in one process on localhost, to try.

With no cluster given it reads the bundled example cluster and makes a throwaway self-signed
certificate, then prints copy-paste ``curl`` commands against examples/requests/. This is the
composition root of the two servers (the extender process already hosts the advisor), and it
lives in the commands layer, the only layer allowed to compose the extender with the webhook.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from aiohttp import web

from migfit import advisor, cluster, errors, logs, serving, snapshots, sources
from migfit import metrics as common_metrics
from migfit.certs import certificates, reloading, store
from migfit.commands import options
from migfit.commands import webhook as webhook_cli
from migfit.extender import advice, figures, usage
from migfit.extender import server as extender_server
from migfit.webhook import decision, memo, view
from migfit.webhook import server as webhook_server

log = logging.getLogger("migfit.serve")
_REQUESTS = Path("examples/requests")
# The checkout's, when migfit runs from one (an editable install) and is started elsewhere.
_CHECKOUT_REQUESTS = Path(__file__).resolve().parents[2] / _REQUESTS
_WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: %(default)s)")
    parser.add_argument("--webhook-port", type=options.port, default=8443,
                        help="HTTPS port of the webhook (default: %(default)s)")
    parser.add_argument("--extender-port", type=options.port, default=8444,
                        help="HTTPS port of the extender and /advice (default: %(default)s)")
    parser.add_argument("--cert-dir", type=_cert_dir, metavar="DIR",
                        help="keep the throwaway certificate, its key and its CA (ca.crt, "
                             "which curl is to trust) in DIR after the server stops: a new or "
                             "empty folder, or one an earlier migfit serve wrote; each start "
                             "writes a new CA there (default: a temporary folder, removed "
                             "when the server stops)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"],
                        help="debug also logs every filter verdict with its reasons "
                             "(default: %(default)s)")
    parser.add_argument("--log-format", choices=["json", "text", "both"], default="text",
                        help="json: every log line one JSON object (the scoring log's too); "
                             "text: human lines; both: human lines plus the scoring log's "
                             "JSON line per prioritize call (default: %(default)s)")
    sources.add_source_arguments(parser, neither="the bundled example cluster")
    webhook_cli.add_policy_arguments(parser)
    serving.add_limit_arguments(
        parser.add_argument_group("connections",
                                  "bounds on what clients may hold, for both servers"),
        body_budget_default=(
            f"{serving.BUDGET_BODIES} times the extender's largest body, "
            f"{_mib(serving.BUDGET_BODIES * extender_server.DEFAULT_MAX_BODY)}, and "
            f"{serving.WEBHOOK_BUDGET_BODIES} times the webhook's, "
            f"{_mib(serving.WEBHOOK_BUDGET_BODIES * webhook_server.DEFAULT_MAX_BODY)}; a "
            f"value given applies to both and must be at least the "
            f"extender's largest body, {_mib(extender_server.DEFAULT_MAX_BODY)}"))
    usage.add_arguments(parser)


def _cert_dir(text: str) -> Path:
    """``--cert-dir``'s value; an empty one (which ``Path`` reads as the current folder) is
    refused."""
    if not text:
        raise argparse.ArgumentTypeError(
            "empty: pass a folder, such as --cert-dir ./migfit-serve-certs")
    return Path(text)


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB"


# The files ``certificate_files`` writes.
_CERT_FILES = ("tls.crt", "tls.key", "ca.crt")


def check_cert_dir(cert_dir: Path) -> None:
    """UsageError unless ``cert_dir`` can take the throwaway files: a folder that does not
    exist yet, an empty one, or one an earlier ``migfit serve`` wrote (its three files,
    signed by a throwaway CA). Anything else, such as the folder of ``migfit certs init``,
    is refused rather than overwritten: its ca.key would no longer belong to its ca.crt."""
    where = f"--cert-dir {cert_dir}"
    try:
        info = cert_dir.stat()
    except FileNotFoundError:
        return  # made when the certificate is written
    except OSError as exc:  # a parent without search permission, a name too long, ...
        raise errors.UsageError(f"cannot use {where} ({exc.strerror or exc}): pass a new or "
                                f"empty folder you can write") from None
    if not stat.S_ISDIR(info.st_mode):
        raise errors.UsageError(f"{where} is a file, not a folder: pass a new or empty folder")
    try:
        present = sorted(entry.name for entry in cert_dir.iterdir())
    except OSError as exc:
        raise errors.UsageError(f"{where} cannot be read ({exc.strerror}): pass a new or "
                                f"empty folder you can write") from None
    if not present or (sorted(_CERT_FILES) == present
                       and store.is_throwaway_ca(cert_dir / "ca.crt")):
        return
    overwritten = [name for name in present if name in _CERT_FILES]
    others = [name for name in present if name not in _CERT_FILES]
    if not overwritten:
        raise errors.UsageError(
            f"{where} is not empty (it holds {_some(others)}) and is not a folder an earlier "
            f"migfit serve wrote: pass a new or empty folder")
    besides = f", and {_some(others)}" if others else ""
    raise errors.UsageError(
        f"{where} already holds {', '.join(overwritten)}, which migfit serve would overwrite "
        f"with a throwaway localhost certificate{besides}; it is not a folder an earlier "
        f"migfit serve wrote: pass a new or empty folder")


def _some(names: list[str]) -> str:
    """The first few of ``names``, and how many more."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


@contextlib.contextmanager
def certificate_files(cert_dir: Path | None, *, host: str = "127.0.0.1"
                      ) -> Iterator[tuple[Path, Path, Path]]:
    """A throwaway localhost certificate, key and CA as files: (tls.crt, tls.key, ca.crt);
    the certificate is for ``host`` too (``reachable``), so that curl can verify it there.

    In ``cert_dir`` when given (kept afterwards, for curl; refused unless ``check_cert_dir``
    accepts it); otherwise in a new temporary folder removed on exit, so that the private
    key does not outlive the server.
    """
    if cert_dir is not None:
        check_cert_dir(cert_dir)
    with contextlib.ExitStack() as stack:
        directory = cert_dir or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="migfit-serve-")))
        cert_pem, key_pem, ca_pem = certificates.self_signed_for_localhost(
            also=[reachable(host)])
        paths = (directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for path, data, mode in zip(paths, (cert_pem, key_pem, ca_pem),
                                        (0o644, 0o600, 0o644), strict=True):
                path.write_bytes(data)
                path.chmod(mode)
        except OSError as exc:
            raise errors.UsageError(
                f"cannot write the certificate to --cert-dir {directory} ({exc.strerror}): "
                f"pass a new or empty folder in a place you can write") from None
        yield paths


# How the walkthrough's commands print JSON: indented as the README shows it, "×" as itself.
PRETTY = "python3 -m json.tool --indent 2 --no-ensure-ascii"


def reachable(host: str) -> str:
    """The address that reaches a server listening on ``--host``: a wildcard address as the
    loopback one of its family."""
    return _WILDCARDS.get(host, host)


def url_host(host: str) -> str:
    """``reachable(host)`` as the host of a URL: an IPv6 address in brackets."""
    address = reachable(host)
    return f"[{address}]" if ":" in address else address


def _walkthrough(*, host: str, webhook_port: int, extender_port: int, ca: Path,
                 cluster_file: str | None) -> str:
    requests = (_REQUESTS if _REQUESTS.is_dir() else _CHECKOUT_REQUESTS
                if _CHECKOUT_REQUESTS.is_dir() else Path("<migfit checkout>") / _REQUESTS)
    hook = f"https://{url_host(host)}:{webhook_port}"
    ext = f"https://{url_host(host)}:{extender_port}"
    curl = f"curl -s --cacert {ca} -H 'Content-Type: application/json'"
    return "\n".join([
        "",
        "migfit is serving" + (f" the cluster in {cluster_file}" if cluster_file else ""),
        f"  webhook   {hook}/mutate   (AdmissionReview v1)",
        f"  extender  {ext}/filter  {ext}/prioritize   (kube-scheduler extender v1)",
        f"  advice    {ext}/advice     metrics: {hook}/metrics {ext}/metrics",
        "",
        "Try it" + (" (from the migfit checkout):" if not requests.is_absolute() else ":"),
        "  # a pod asking for 12Gi of GPU memory: patched to the smallest MIG profile that fits",
        f"  {curl} --data @{requests}/create-12gi.json {hook}/mutate | {PRETTY}",
        "  # too much memory: denied, with the largest profile named",
        f"  {curl} --data @{requests}/create-200gi-denied.json {hook}/mutate",
        "  # which nodes can take a 1g.10gb pod, and why the others cannot",
        f"  {curl} --data @{requests}/filter-1g10gb.json {ext}/filter | {PRETTY}",
        "  # a 3g.40gb pod: two nodes can take it; the extender scores them (see the log)",
        f"  {curl} --data @{requests}/filter-3g40gb.json {ext}/filter | {PRETTY}",
        f"  {curl} --data @{requests}/prioritize-3g40gb.json {ext}/prioritize",
        "  # which idle GPUs to re-partition so that pending pods can run",
        f"  curl -s --cacert {ca} {ext}/advice | {PRETTY}",
        "",
        "Stop with Ctrl-C.",
        "",
    ])


async def _serve(args: argparse.Namespace) -> None:
    if args.webhook_port == args.extender_port:
        raise errors.UsageError(
            f"--webhook-port and --extender-port are both {args.webhook_port}: the two servers "
            f"need different ports")
    catalog, policy = webhook_cli.policy_from(args)
    cluster_file = args.cluster_file
    if (usage.settings_from(args) is not None and args.dcgm_exporter_url is None
            and args.kubeconfig is None):
        raise errors.UsageError("--gpu-usage-from dcgm finds the exporters through the API: "
                                "give --kubeconfig, or --dcgm-exporter-url")
    # --context and --request-timeout mean nothing with a file, the bundled one included.
    sources.check_source_args(args)
    if cluster_file is None and args.kubeconfig is None:
        for flag, value in (("--context", args.context),
                            ("--request-timeout", args.request_timeout)):
            if value is not None:
                raise errors.UsageError(
                    f"{flag} applies to a Kubernetes API, and migfit serve is serving the "
                    f"bundled example cluster: add --kubeconfig PATH to serve a live cluster, "
                    f"or drop {flag}")
        cluster_file = str(snapshots.EXAMPLE_CLUSTER)
    model = cluster.Cluster(catalog)
    source = sources.open_source(model, cluster_file=cluster_file, kubeconfig=args.kubeconfig,
                                 in_cluster=False, context=args.context,
                                 request_timeout_s=args.request_timeout)
    try:
        limits = serving.limits_from(args)
        # One budget for both servers: it must hold the larger of their largest bodies (the
        # extender's), and a refusal names that one, as --help does.
        limits.body_budget(max(webhook_server.DEFAULT_MAX_BODY, extender_server.DEFAULT_MAX_BODY))
    except ValueError as exc:
        raise errors.UsageError(str(exc)) from None
    # The ports next: nothing is written to --cert-dir for a server that cannot start (one
    # on the ports of a running `migfit serve` rewrote that one's certificate files).
    for port, flag in ((args.webhook_port, "--webhook-port"),
                       (args.extender_port, "--extender-port")):
        serving.check_free(serving.Listen(
            host=args.host, port=port, port_flag=flag,
            limits=serving.Limits(reuse_port=bool(getattr(args, "reuse_port", False)))))
    with certificate_files(args.cert_dir, host=args.host) as (cert, key, ca):
        await _serve_with(args, model=model, source=source, policy=policy, limits=limits,
                          cluster_file=cluster_file, cert=cert, key=key, ca=ca)


async def _serve_with(
    args: argparse.Namespace,
    *,
    model: cluster.Cluster,
    source: sources.Source,
    policy: decision.Policy,
    limits: serving.Limits,
    cluster_file: str | None,
    cert: Path,
    key: Path,
    ca: Path,
) -> None:
    """Both servers over ``model`` with the given certificate files, until a signal (a
    second one during the shutdown cuts it short: ``serving.Interrupted``, exit status 130).

    The composition root of both: the cluster (``model``), the extender's figures index and
    advice cache are built here and handed in; each server listens through
    ``migfit.serving`` (the connection bounds of the flags) and stops through its drain.
    """
    reloader = reloading.CertificateReloader(cert_file=cert, key_file=key)

    hook_settings = webhook_server.Settings(policy=policy, host=args.host,
                                            port=args.webhook_port, tls_cert=cert, tls_key=key,
                                            limits=limits)
    # One registry per server: each /metrics shows its own server (and migfit_build_info).
    hook_app = webhook_server.make_app(hook_settings, model, certificate=reloader,
                                       registry=common_metrics.registry(),
                                       tracker=view.SupplyTracker(model),
                                       decisions=memo.DecisionMemo())
    ext_registry = common_metrics.registry()
    index = figures.Index(model)
    scraper = usage.from_args(args, model, registry=ext_registry)  # --gpu-usage-from dcgm
    # As `migfit extender`: advice may propose re-laying out the idle GPUs of busy nodes
    # (applying them needs --apply-busy-nodes there).
    cache = advice.AdviceCache(settings=advisor.Settings(busy_nodes=True), usage=scraper)
    advice.Metrics(ext_registry, state=model, cache=cache)  # the gauges /advice agrees with
    ext_settings = extender_server.ExtenderSettings(log_format=args.log_format, limits=limits)
    ext_app = extender_server.make_app(
        settings=ext_settings, cluster=model, index=index, advice_cache=cache, source=source,
        registry=ext_registry, certificate=reloader)

    listens = [serving.Listen(host=args.host, port=port, ssl_context=reloader.context,
                              limits=limits, port_flag=flag)
               for port, flag in ((args.webhook_port, "--webhook-port"),
                                  (args.extender_port, "--extender-port"))]
    runners: list[tuple[web.AppRunner, serving.Listen]] = []
    stop, hurry = asyncio.Event(), asyncio.Event()
    reload_task = asyncio.create_task(reloader.run(reloading.DEFAULT_INTERVAL))
    usage_task = asyncio.create_task(scraper.run()) if scraper is not None else None
    try:
        for app, listen in zip((hook_app, ext_app), listens, strict=True):
            runner, _ = await serving.start(app, listen)  # a port in use: UsageError
            runners.append((runner, listen))
        try:
            # Not asyncio.wait_for: on Python 3.11 it returns the result, and swallows the
            # cancellation, when the awaited future is done by the time a cancellation
            # reaches it (CPython gh-86296, fixed in 3.12), and asyncio.Runner answers a
            # Ctrl-C before the servers' signal handlers are in by cancelling this task: a
            # Ctrl-C as the cluster view synced was lost, and serve went on serving.
            async with asyncio.timeout(60):
                await source.synced.wait()
        except TimeoutError:
            raise errors.ConfigError(
                "the cluster view did not sync within 60s"
                + (f": {source.last_error}" if source.last_error else "")) from None
        # The whole shutdown runs under the handlers: a second Ctrl-C hurries it, a third
        # exits at once, removing the throwaway key's temporary folder (certificate_files)
        # first, since nothing else runs on that way out.
        forget = None if args.cert_dir is not None else functools.partial(
            shutil.rmtree, cert.parent, ignore_errors=True)
        with serving.on_signals(stop, hurry, before_exit=forget):
            # "Stop with Ctrl-C" only once the handlers are in: a Ctrl-C right after it used
            # to find Python's default one (exit 130, no shutdown line) on a busy machine.
            print(_walkthrough(host=args.host, webhook_port=args.webhook_port,
                               extender_port=args.extender_port, ca=ca,
                               cluster_file=cluster_file), flush=True)
            await stop.wait()
            log.info("shutting down: the listeners close; requests in flight get %ss",
                     f"{listens[0].shutdown_timeout:g}")
            await _stop(runners, hurry)
    finally:
        reload_task.cancel()
        if usage_task is not None:
            usage_task.cancel()
        await _stop(runners, hurry)  # the ones started before a failure, if any
        with contextlib.suppress(asyncio.CancelledError):
            await reload_task
        if usage_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await usage_task
    if hurry.is_set():
        raise serving.Interrupted


async def _stop(runners: list[tuple[web.AppRunner, serving.Listen]],
                hurry: asyncio.Event) -> None:
    """Drain and stop each started server, the last started first (each taken off the list)."""
    while runners:
        runner, listen = runners.pop()
        await serving.drain_and_stop(runner, listen, hurry=hurry)


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> NoReturn:
    logs.configure(level=args.log_level, style=logs.style_of(args.log_format))
    # Until the servers take SIGTERM over (once serving), it unwinds like Ctrl-C rather than
    # killing the process outright: the throwaway certificate folder, which holds a CA key,
    # is removed on the way out.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        serving.run_until_signal(_serve(args))
    finally:
        # Unless a signal stopped the servers: then the handler on_signals left answers the
        # next one until the process has ended (it had been replaced, and a SIGTERM then
        # ended the process with no line).
        if signal.getsignal(signal.SIGTERM) is _terminated:
            signal.signal(signal.SIGTERM, previous)
