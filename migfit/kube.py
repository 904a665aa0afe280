"""The one home of migfit's Kubernetes API access: configuration, credentials, timeouts, errors.

Configuration is found the way kubectl finds it (:func:`discover`):

1. ``--kubeconfig PATH`` when given (a file that must exist);
2. else ``$KUBECONFIG``: a colon-separated list of files, merged as kubectl merges them
   (kubernetes-asyncio's ``KubeConfigMerger``: the first file that names a cluster, user or
   context wins; missing files are skipped; ``current-context`` of the last file that sets it);
3. else ``~/.kube/config`` when it exists;
4. else the pod's service account (in-cluster), when ``KUBERNETES_SERVICE_HOST`` is set.

``--context`` picks a kubeconfig context other than the current one; the context's
``namespace`` (in-cluster: the service account's namespace) is :attr:`KubeClient.namespace`,
the default namespace of commands such as ``migfit explain``.

Every client keeps its credentials fresh (exec plugins, OIDC and GCP tokens are re-run and a
kubeconfig ``tokenFile`` is re-read in a background task, and at once after a 401; an
in-cluster token file is re-read by the library), and every request has a
timeout (``--request-timeout``, kubectl's spelling: ``30s``, ``2m``, ``500ms``; ``0`` means
none).

Failing to connect is classified here too: what no retry can mend (a kubeconfig file missing
or unparsable; the context, its cluster or its user not in it; an exec credential plugin
malformed, not installed or not executable) is a ConfigError, raised before anything is
served (:func:`check`, which every command calls at start); credentials that cannot be had
*now* (the exec plugin ran and failed, the identity provider did not answer) are a
:class:`CredentialsError`, which servers retry with backoff (:func:`connect_retrying`) and
one-shot commands report at once.

Errors are classified once, here (:class:`ApiError`): 400, 401, 403, 404, 405 and 422 are
*final* (retrying cannot help; the message names the server and what to fix); no answer at
all (connection refused, DNS, TLS, timeout), 408, 429 and 5xx are *retryable* and are retried
``retries`` times with jittered exponential backoff (429's ``Retry-After`` honoured) before
they are raised. 409 Conflict and 410 Gone are neither: the caller re-reads (a precondition
failed) or re-lists (a watch expired); a paginated list whose continue token expired starts
again here (``LIST_RESTARTS`` times).

The calls migfit makes are the methods of :class:`KubeClient`; each builds its REST path in
one ``_request``/``open_get`` call so that ``tests/deploy/api_calls.py`` can read from the
source which RBAC verbs a server needs. Responses are plain JSON dicts (never the generated
model classes, which cost too much for 150,000 pods).

Stable API (other modules rely on it: add to it, do not rename): :func:`connect`,
:func:`connect_retrying`, :class:`CredentialsError`,
:class:`KubeClient` (``patch_node``, ``read_node``, ``read_pod``, ``list_nodes``,
``list_pods``, ``list_pod_disruption_budgets``, ``create_event``, ``read_config_map``,
``list_config_maps``, ``read_lease``, ``create_lease``, ``update_lease``, ``open_get``,
``close``), :func:`as_client`, :func:`read_json`,
:class:`ApiError`
(``.status``, ``.final``, ``.retryable``, ``.conflict``, ``.not_found``), :class:`Connection`,
:func:`discover`, :func:`parse_duration`, :func:`add_request_timeout_argument`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import pathlib
import random
import re
import shutil
import ssl
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Literal

import aiohttp
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.rest import ApiException

from migfit import errors, strictfiles

log = logging.getLogger(__name__)
# The client logs each failure to load credentials (ERROR "[Errno 2] No such file or
# directory", "exec: process returned 1") before it raises it; every one is raised to code
# here that says it again in one line naming the plugin and the fix, or logs it as a warning
# when it retries. Only that line is shown.
logging.getLogger("kubernetes_asyncio.config.kube_config").setLevel(logging.CRITICAL)

DEFAULT_REQUEST_TIMEOUT_S: Final = 30.0
"""A request's whole-answer limit when ``--request-timeout`` is not given (list pages and
single objects; a watch stream has its own read timeout)."""
DEFAULT_CONNECT_TIMEOUT_S: Final = 10.0
LIST_RESTARTS: Final = 3
"""How often a paginated list whose continue token expired (410) starts again before the 410
is raised."""
REFRESH_INTERVAL_S: Final = 60.0
"""How often exec plugins and OIDC/GCP tokens are checked (each re-runs only near expiry) and
a kubeconfig ``tokenFile`` is re-read."""

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC_PATCH: Final = "application/strategic-merge-patch+json"
PatchType = Literal["merge", "json", "strategic"]
_PATCH_TYPES: Final[Mapping[str, str]] = {
    "merge": MERGE_PATCH, "json": JSON_PATCH, "strategic": STRATEGIC_PATCH}

SERVICE_ACCOUNT_NAMESPACE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
FINAL_STATUSES: Final = frozenset({400, 401, 403, 404, 405, 406, 413, 415, 422})
RETRYABLE_STATUSES: Final = frozenset({408, 429})

# What an operator can do about each final answer.
_HINTS: Final[Mapping[int, str]] = {
    401: "the server refused the credentials: renew them (log in again, or check the "
         "kubeconfig user's token, certificate or exec plugin) or choose another --context",
    403: "the identity is not allowed to do this: grant it this verb on this resource with "
         "RBAC (the servers' grants are in deploy/; a person running the commands needs "
         "their own) or choose another --context",
    404: "no such object or API: check the name and namespace, and that --kubeconfig/"
         "--context point at the cluster you mean",
    422: "the server rejected the request as invalid (a migfit bug or an admission "
         "policy): report it with this message",
}


class CredentialsError(errors.MigfitError):
    """The kubeconfig user's credentials could not be had *now*: its exec plugin ran and
    failed (exited non-zero, printed no credential), or its identity provider did not answer
    (OIDC, GCP). Worth retrying with backoff (:func:`connect_retrying`); what no retry can
    mend (a missing file or entry, a plugin that is not installed) is a ConfigError."""

    status = 503


class NoKubeconfigError(errors.ConfigError):
    """No kubeconfig anywhere kubectl looks, and not in a pod. ``cluster_flag``: the command
    also reads a cluster file (``--cluster FILE``), the way to try it without a cluster."""

    def __init__(self, *, cluster_flag: bool = False) -> None:
        file = (", or --cluster FILE to read a cluster exported with `kubectl get nodes,pods "
                "-A -o yaml` (such as examples/cluster.yaml)," if cluster_flag else "")
        super().__init__(
            "cannot load in-cluster config (no service account mounted?) and found no "
            "kubeconfig ($KUBECONFIG unset, no ~/.kube/config): pass --kubeconfig PATH to a "
            f"readable kubeconfig{file} or run inside a pod with a service account")


class ApiError(ApiException):
    """A Kubernetes API call that failed, classified.

    ``status`` is the HTTP status, or 0 when no answer came (connection refused, DNS, TLS,
    timeout). ``final``: retrying cannot help (fix the configuration or RBAC); ``retryable``:
    worth retrying with backoff. ``str()`` is one line naming the server, the call and what to
    fix. It is an ``ApiException``, so code that catches the library's error still does.
    """

    def __init__(self, *, status: int, reason: str, server: str, action: str,
                 detail: str = "", hint: str = "", retry_after_s: float | None = None) -> None:
        super().__init__(status=status, reason=reason)
        self.status: int = status
        self.reason: str = reason
        self.server = server
        self.action = action
        self.detail = detail
        self.hint = hint or _HINTS.get(status, "")
        self.retry_after_s = retry_after_s

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def retryable(self) -> bool:
        return self.status == 0 or self.status in RETRYABLE_STATUSES or self.status >= 500

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def message(self) -> str:
        what = f"HTTP {self.status} {self.reason}".strip() if self.status else self.reason
        text = f"{self.server}: {self.action}: {what}"
        if self.detail and self.detail != self.reason:
            text += f": {self.detail}"
        if self.hint:
            text += f"; {self.hint}"
        return " ".join(text.split())  # one line, whatever the server sent

    def __str__(self) -> str:
        return self.message


def parse_duration(text: str, *, zero: str = "no limit") -> float:
    """kubectl's ``--request-timeout``: ``30s``, ``1m30s``, ``500ms``, ``2h`` or bare seconds.

    ``0`` means no timeout here (``zero``: what it means to the command whose flag this is,
    for the error). A negative or unreadable value is a UsageError.
    """
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise errors.UsageError(
                f"--request-timeout {text!r}: give a duration such as 30s, 1m or 500ms "
                f"(0: {zero})") from None
        seconds = sum(float(n) * units[u] for n, u in parts)
    if not (math.isfinite(seconds) and seconds >= 0):  # nan, inf and 1e999 are no duration
        raise errors.UsageError(f"--request-timeout {text!r}: use 0 or more (0: {zero})")
    return seconds


def add_request_timeout_argument(parser: argparse.ArgumentParser | Any) -> None:
    """``--request-timeout`` (kubectl's flag) on a parser or argument group."""
    parser.add_argument(
        "--request-timeout", metavar="DURATION", type=parse_duration, default=None,
        help="how long one try of a Kubernetes API request may take (one with no answer is "
             "tried three times in all): 30s, 1m, 500ms; 0: no limit "
             f"(default {DEFAULT_REQUEST_TIMEOUT_S:g}s)")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Connection:
    """How to reach the API server: the flags a command was given."""

    kubeconfig: str | os.PathLike[str] | None = None
    """None: discover ($KUBECONFIG, ~/.kube/config, in-cluster)."""
    context: str | None = None
    request_timeout_s: float | None = None
    """Whole-request limit; None: DEFAULT_REQUEST_TIMEOUT_S; 0: none."""
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    retries: int = 2
    """How often a retryable failure is retried inside one call before it is raised."""
    backoff_base_s: float = 0.2
    backoff_cap_s: float = 5.0
    refresh_interval_s: float = REFRESH_INTERVAL_S
    """How often the kubeconfig user's exec plugin / OIDC / GCP token is checked and its
    ``tokenFile`` re-read."""

    def backoff(self, attempt: int) -> float:
        """Jittered exponential delay before retry number ``attempt`` (0-based)."""
        ceiling = min(self.backoff_cap_s, self.backoff_base_s * (1 << min(attempt, 32)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    @property
    def timeout_s(self) -> float | None:
        """The whole-request limit in seconds, None for none."""
        if self.request_timeout_s is None:
            return DEFAULT_REQUEST_TIMEOUT_S
        return self.request_timeout_s or None


@dataclasses.dataclass(frozen=True, slots=True)
class Origin:
    """Where the configuration came from, for messages: ``kubeconfig`` None means in-cluster."""

    kubeconfig: str | None
    context: str | None

    def describe(self) -> str:
        if self.kubeconfig is None:
            return "the in-cluster service account"
        where = f"kubeconfig {self.kubeconfig}"
        return f"{where} (context {self.context})" if self.context else where


def discover(kubeconfig: str | os.PathLike[str] | None = None,
             context: str | None = None) -> Origin:
    """Which configuration kubectl would use (see the module docstring); ConfigError if none."""
    if kubeconfig is not None:
        path = os.path.expanduser(os.fspath(kubeconfig))
        if not os.path.isfile(path):
            what = "a directory, not a file" if os.path.isdir(path) else "no such file"
            raise errors.ConfigError(
                f"cannot load kubeconfig {os.fspath(kubeconfig)!r}: {what}; pass "
                "--kubeconfig PATH to a readable kubeconfig")
        return Origin(path, context)
    env = os.environ.get("KUBECONFIG", "")
    if env.strip(os.pathsep):
        paths = [os.path.expanduser(p) for p in env.split(os.pathsep) if p]
        if not any(os.path.isfile(p) for p in paths):
            raise errors.ConfigError(
                f"cannot load kubeconfig from $KUBECONFIG={env!r}: no such file; set it to a "
                "readable kubeconfig (or unset it to use ~/.kube/config)")
        return Origin(env, context)
    home = pathlib.Path.home() / ".kube" / "config"
    if home.is_file():
        return Origin(str(home), context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context is not None:
            raise errors.UsageError(f"--context {context}: no kubeconfig found to take it "
                                    "from (in-cluster config has no contexts)")
        return Origin(None, None)
    raise NoKubeconfigError()


_KUBECONFIG_FIX = "pass --kubeconfig PATH to a readable kubeconfig"


def check(origin: Origin) -> None:
    """ConfigError, in one line that says what to change, when the kubeconfig files of
    ``origin`` cannot be a kubeconfig: unreadable, not valid YAML, not a mapping, all of them
    empty or without clusters, contexts and users, without ``origin.context``, or when the
    context in use names a cluster or user it does not have or a user whose exec credential
    plugin is malformed, not installed or not executable (checked before the client reads
    them, whose own errors are tracebacks or Python messages; none of these mends itself). As
    kubectl merges a ``$KUBECONFIG`` list, files that do not exist, are empty or hold only
    preferences are skipped there."""
    if origin.kubeconfig is None:
        return
    from_env = origin.kubeconfig == os.environ.get("KUBECONFIG")
    fix = ("fix the file or take it out of $KUBECONFIG" if from_env else _KUBECONFIG_FIX)
    paths = [os.path.expanduser(p) for p in origin.kubeconfig.split(os.pathsep) if p]
    # The entries as the client merges them: the first file that names one wins;
    # current-context of the last file that sets it.
    entries: dict[str, dict[str, Any]] = {"clusters": {}, "contexts": {}, "users": {}}
    current: str | None = None
    useful = False
    for path in paths:
        if not os.path.isfile(path):
            continue  # $KUBECONFIG may list files that do not exist (kubectl skips them)
        where = f"cannot load kubeconfig {path!r}"
        try:
            with open(path, "rb") as f:
                doc = yaml.safe_load(f)
        except OSError as exc:
            raise errors.ConfigError(f"{where}: {exc.strerror or exc}; {fix}") from None
        except yaml.YAMLError as exc:
            raise errors.ConfigError(f"{where}: not valid YAML {strictfiles.yaml_problem(exc)}; "
                                     f"{fix}") from None
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise errors.ConfigError(f"{where}: not a kubeconfig (a YAML "
                                     f"{type(doc).__name__}, not a mapping); {fix}")
        useful = useful or any(doc.get(k) for k in ("clusters", "contexts", "users",
                                                    "current-context"))
        for kind, named in entries.items():
            listed = doc.get(kind) or ()
            for entry in listed if isinstance(listed, list) else ():
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    named.setdefault(entry["name"], entry)
        if isinstance(doc.get("current-context"), str):
            current = doc["current-context"]
    if not useful:
        which = (repr(paths[0]) if len(paths) == 1 else
                 f"from $KUBECONFIG={origin.kubeconfig!r}" if from_env else repr(origin.kubeconfig))
        raise errors.ConfigError(f"cannot load kubeconfig {which}: empty, or no clusters, "
                                 f"contexts or users; {fix}")
    contexts = entries["contexts"]
    if origin.context is not None and origin.context not in contexts:
        raise errors.ConfigError(
            f"--context {origin.context}: no such context in kubeconfig {origin.kubeconfig} "
            f"(it has: {_names(contexts)}); pass --context NAME of one of them")
    _check_entries(origin, entries, current)


def _names(named: Mapping[str, Any]) -> str:
    return ", ".join(sorted(named)[:10]) or "none"


def _check_entries(origin: Origin, entries: Mapping[str, Mapping[str, Any]],
                   current: str | None) -> None:
    """ConfigError when the context in use, its cluster or its user is not in the kubeconfig,
    or its user's exec credential plugin is malformed or cannot run: what kubectl refuses
    before any request, and what no retry can mend (the client's own message for the first
    was "Invalid kube-config file. Expected object with name nope in ...")."""
    where = f"cannot load kubeconfig {origin.kubeconfig!r}"
    name = origin.context or current
    if not name:
        raise errors.ConfigError(
            f"{where}: no current-context; pass --context NAME of one of its contexts "
            f"({_names(entries['contexts'])})")
    if name not in entries["contexts"]:
        raise errors.ConfigError(
            f"{where}: current-context {name} names no context in it (it has: "
            f"{_names(entries['contexts'])}); fix current-context or pass --context NAME")
    context = entries["contexts"][name].get("context")
    if not isinstance(context, dict):
        raise errors.ConfigError(f"{where}: context {name} has no context mapping (cluster, "
                                 "user); fix the file or pass another --context NAME")
    for kind, key in (("clusters", "cluster"), ("users", "user")):
        ref = context.get(key)
        if ref is None and key == "user":
            continue  # no user: anonymous requests, as kubectl makes them
        if not isinstance(ref, str) or ref not in entries[kind]:
            raise errors.ConfigError(
                f"{where}: context {name} names {key} {ref!r}, which it does not have (it "
                f"has: {_names(entries[kind])}); fix the context's {key} or pass another "
                "--context NAME")
    user_name = context.get("user")
    user = entries["users"][user_name].get("user") if user_name is not None else None
    if isinstance(user, dict) and "exec" in user:
        problem = _exec_config_problem(user["exec"])
        if problem is not None:
            raise errors.ConfigError(f"{where}: user {user_name}: {problem}")


def _exec_config_problem(spec: Any) -> str | None:
    """What is wrong with a kubeconfig user's ``exec`` section, in words (None: nothing):
    what the client would refuse, and a command that is not installed or cannot be run
    (looked up in the PATH the plugin is started with: the exec ``env`` over ours)."""
    if not isinstance(spec, dict):
        return "exec is not a mapping (command, apiVersion, args, env); fix the kubeconfig"
    command = spec.get("command")
    if not isinstance(command, str) or not command:
        return "exec has no command; fix the kubeconfig user's exec.command"
    if not isinstance(spec.get("apiVersion"), str):
        return (f"exec credential plugin {command}: no apiVersion (such as "
                "client.authentication.k8s.io/v1); fix the kubeconfig user's exec.apiVersion")
    args = spec.get("args")
    if args is not None and not (isinstance(args, list)
                                 and all(isinstance(a, str) for a in args)):
        return f"exec credential plugin {command}: args is not a list of strings"
    env = spec.get("env")
    if env is not None and not (isinstance(env, list) and all(
            isinstance(e, dict) and isinstance(e.get("name"), str) and "value" in e
            for e in env)):
        return f"exec credential plugin {command}: env is not a list of name/value pairs"
    search = os.environ.get("PATH", os.defpath)
    for entry in env or ():
        if entry["name"] == "PATH":
            search = str(entry["value"])
    missing = _not_runnable(command, search)
    return None if missing is None else _exec_wording(command, missing)


def _not_runnable(command: str, search: str) -> Literal["not found", "not executable"] | None:
    """Why ``command`` cannot be started, as the plugin is (a path with a slash as it is,
    relative to the working directory; a bare name looked up in ``search``); None: it can."""
    if shutil.which(command, path=search) is not None:
        return None
    if os.sep in command or (os.altsep and os.altsep in command):
        candidates = [command]
    else:
        candidates = [os.path.join(d or ".", command) for d in search.split(os.pathsep)]
    return "not executable" if any(os.path.exists(c) for c in candidates) else "not found"


def _exec_wording(command: str, why: str) -> str:
    """One exec credential plugin that cannot run, in words that name it and the fix."""
    if why == "not found":
        where = "" if os.sep in command else " in PATH"
        return (f"exec credential plugin {command}: not found{where}; install it or fix the "
                "kubeconfig user's exec.command")
    return (f"exec credential plugin {command}: {why}; make it runnable or fix the kubeconfig "
            "user's exec.command")


def _status_detail(body: bytes) -> tuple[str, str]:
    """(reason, message) of a Kubernetes Status body, or ("", the body's start)."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        return str(doc.get("reason") or ""), str(doc.get("message") or "")
    return "", body[:200].decode("utf-8", "replace")


def _no_answer(exc: BaseException, *, server: str, action: str,
               timeout_s: float | None) -> ApiError:
    """An ApiError (status 0) for a request that got no HTTP answer."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLError) or (
            isinstance(exc, aiohttp.ClientConnectorError)
            and isinstance(exc.os_error, ssl.SSLError)):
        return ApiError(status=0, reason="TLS verification failed", server=server,
                        action=action, detail=str(exc),
                        hint="check the kubeconfig cluster's certificate-authority(-data) "
                             "and server name")
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        limit = f" within {timeout_s:g}s" if timeout_s else ""
        return ApiError(status=0, reason=f"no answer{limit}", server=server, action=action,
                        hint="is the server reachable? raise --request-timeout if it is slow")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ApiError(status=0, reason="cannot connect", server=server, action=action,
                        detail=str(exc.os_error or exc),
                        hint="is the API server running, and is the kubeconfig's server "
                             "address (or --context) right?")
    return ApiError(status=0, reason=type(exc).__name__, server=server, action=action,
                    detail=str(exc), hint="the connection failed; retried with backoff")


TRANSPORT_ERRORS: Final[tuple[type[BaseException], ...]] = (
    aiohttp.ClientError, asyncio.TimeoutError, OSError)


class KubeClient:
    """One API server connection: a kubernetes-asyncio ApiClient with fresh credentials.

    Made by :func:`connect`; close it (or use ``async with``). Safe to share between tasks
    of one event loop.
    """

    def __init__(self, api: k8s.ApiClient, *, origin: Origin, server: str, namespace: str,
                 connection: Connection, refresher: asyncio.Task[None] | None,
                 credentials: _Credentials | None = None) -> None:
        self.api = api
        self.origin = origin
        self.server = server
        """The API server's URL, for messages."""
        self.namespace = namespace
        """The context's namespace (in-cluster: the service account's), else "default"."""
        self.connection = connection
        self._refresher = refresher
        self._credentials = credentials

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the credential refresh and close the HTTP session."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresher
            self._refresher = None
        await self.api.close()

    def _timeout(self, read_timeout_s: float | None = None) -> aiohttp.ClientTimeout:
        c = self.connection
        if read_timeout_s is not None:
            return aiohttp.ClientTimeout(total=None, sock_connect=c.connect_timeout_s,
                                         connect=c.connect_timeout_s,
                                         sock_read=read_timeout_s)
        total = c.timeout_s
        connect = min(c.connect_timeout_s, total) if total else c.connect_timeout_s
        return aiohttp.ClientTimeout(total=total, connect=connect, sock_connect=connect)

    async def open_get(self, path: str, query: Sequence[tuple[str, str]], *,
                       action: str, read_timeout_s: float | None = None) -> Any:
        """A raw GET (list page or watch stream): the aiohttp response, whatever its status.

        The caller reads and releases it. No answer at all is an ApiError (status 0), not
        retried here: list/watch loops have their own backoff. A 401 renews the credentials
        for the next request, as every call does.
        """
        sent = self._token()
        try:
            response = await self.api.call_api(
                path, "GET", query_params=list(query),
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=self._timeout(read_timeout_s))
        except TRANSPORT_ERRORS as exc:
            raise _no_answer(exc, server=self.server, action=action,
                             timeout_s=read_timeout_s or self.connection.timeout_s) from exc
        if response.status == 401:
            await self._refused(sent)
        return response

    def _token(self) -> str | None:
        """The Authorization value a request sends now."""
        token = self.api.configuration.api_key.get("BearerToken")
        return token if isinstance(token, str) else None

    async def _refused(self, sent: str | None) -> None:
        """The server answered 401 to a request that carried ``sent``: renew the credentials
        for the next request (this one fails)."""
        if self._credentials is not None:
            await self._credentials.refused(sent)

    def error(self, status: int, body: bytes, *, action: str,
              headers: Mapping[str, str] | None = None) -> ApiError:
        """The ApiError for an HTTP answer ``status`` with ``body``."""
        reason, detail = _status_detail(body)
        retry_after = None
        if headers is not None and status == 429:
            with contextlib.suppress(TypeError, ValueError):
                retry_after = float(headers.get("Retry-After", ""))
        return ApiError(status=status, reason=reason or _REASONS.get(status, ""),
                        server=self.server, action=action, detail=detail,
                        retry_after_s=retry_after)

    async def _once(self, method: str, path: str, *, action: str,
                    query: Sequence[tuple[str, str]] | None, body: Any,
                    content_type: str | None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        sent = self._token()
        try:
            response = await self.api.call_api(
                path, method, query_params=list(query or []), header_params=headers,
                body=body, auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=self._timeout())
            try:
                raw: bytes = await response.read()
            finally:
                response.release()
        except TRANSPORT_ERRORS as exc:
            raise _no_answer(exc, server=self.server, action=action,
                             timeout_s=self.connection.timeout_s) from exc
        if response.status == 401:
            await self._refused(sent)
        if response.status >= 400:
            raise self.error(response.status, raw, action=action, headers=response.headers)
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            raise ApiError(status=response.status, reason="not JSON", server=self.server,
                           action=action, detail=raw[:200].decode("utf-8", "replace"),
                           hint="is the kubeconfig's server a Kubernetes API server?"
                           ) from None
        if not isinstance(doc, dict):
            raise ApiError(status=response.status, reason="not a JSON object",
                           server=self.server, action=action)
        return doc

    async def _request(self, method: str, path: str, *, action: str,
                       query: Sequence[tuple[str, str]] | None = None, body: Any = None,
                       content_type: str | None = None) -> dict[str, Any]:
        """One call, retried while its failure is retryable (``Connection.retries`` times)."""
        attempt = 0
        while True:
            try:
                return await self._once(method, path, action=action, query=query, body=body,
                                        content_type=content_type)
            except ApiError as exc:
                if not exc.retryable or attempt >= self.connection.retries:
                    raise
                delay = self.connection.backoff(attempt)
                if exc.retry_after_s is not None:
                    delay = max(delay, min(exc.retry_after_s, self.connection.backoff_cap_s))
                log.debug("kube: %s; retrying in %.2fs", exc, delay)
                attempt += 1
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------ the calls migfit makes

    async def read_node(self, name: str) -> dict[str, Any]:
        return await self._request("GET", f"/api/v1/nodes/{name}", action=f"get node {name}")

    async def patch_node(self, name: str, body: Any,
                         patch_type: PatchType = "merge") -> dict[str, Any]:
        """PATCH a Node; ``patch_type`` "merge" (RFC 7386), "json" (RFC 6902) or "strategic".

        A merge patch carrying ``metadata.resourceVersion`` is a precondition: 409 when the
        node changed since.
        """
        return await self._request("PATCH", f"/api/v1/nodes/{name}", body=body,
                                   content_type=_PATCH_TYPES[patch_type],
                                   action=f"patch node {name}")

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return await self._request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}",
                                   action=f"get pod {namespace}/{name}")

    async def _list(self, path: str, what: str, query: list[tuple[str, str]],
                    page_size: int) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        resource_version = ""
        restarts = 0
        while True:
            page_query = [*query, ("limit", str(page_size))]
            if token:
                page_query.append(("continue", token))
            try:
                page = await self._request("GET", path, query=page_query,
                                           action=f"list {what}")
            except ApiError as exc:
                # A continue token names a snapshot that etcd compaction can remove before
                # the next page is asked for: 410 Gone. Only a new list can go on; client-go's
                # pager falls back to a full list then. Started again from its first page,
                # a few times at most (a cluster compacting that fast would not let it end).
                if not (exc.gone and token) or restarts >= LIST_RESTARTS:
                    raise
                restarts += 1
                log.info("kube: list %s: the continue token expired; listing again", what)
                items, token = [], None
                continue
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            metadata = page.get("metadata") or {}
            if token is None:
                resource_version = str(metadata.get("resourceVersion") or "")
            token = metadata.get("continue") or None
            if token is None:
                return items, resource_version

    async def list_nodes(self, *, label_selector: str | None = None,
                         field_selector: str | None = None,
                         page_size: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every Node (paginated): (objects, the list's resourceVersion)."""
        query = _selectors(label_selector, field_selector)
        return await self._list("/api/v1/nodes", "nodes", query, page_size)

    async def list_pods(self, *, namespace: str | None = None,
                        label_selector: str | None = None, field_selector: str | None = None,
                        page_size: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Pods of one namespace or (None) all (paginated): (objects, resourceVersion)."""
        query = _selectors(label_selector, field_selector)
        if namespace is None:
            return await self._list("/api/v1/pods", "pods", query, page_size)
        return await self._list(f"/api/v1/namespaces/{namespace}/pods",
                                f"pods in {namespace}", query, page_size)

    async def list_pod_disruption_budgets(self, *, page_size: int = 500
                                          ) -> tuple[list[dict[str, Any]], str]:
        """Every policy/v1 PodDisruptionBudget (paginated): (objects, resourceVersion)."""
        return await self._list("/apis/policy/v1/poddisruptionbudgets",
                                "PodDisruptionBudgets", [], page_size)

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a core/v1 Event into ``namespace``."""
        return await self._request("POST", f"/api/v1/namespaces/{namespace}/events",
                                   body=dict(body), action=f"create Event in {namespace}")

    async def read_config_map(self, namespace: str, name: str) -> dict[str, Any]:
        return await self._request(
            "GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}",
            action=f"get ConfigMap {namespace}/{name}")

    async def patch_config_map(self, namespace: str, name: str,
                               body: Any) -> dict[str, Any]:
        """Merge-patch (RFC 7386) a ConfigMap; ``metadata.resourceVersion`` in ``body`` is a
        precondition (409 when it changed since)."""
        return await self._request(
            "PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{name}", body=body,
            content_type=_PATCH_TYPES["merge"], action=f"patch ConfigMap {namespace}/{name}")

    async def list_cluster_policies(self, *, page_size: int = 50
                                    ) -> tuple[list[dict[str, Any]], str]:
        """The GPU Operator's ClusterPolicies (nvidia.com/v1, cluster-scoped; one in practice)."""
        return await self._list("/apis/nvidia.com/v1/clusterpolicies", "ClusterPolicies", [],
                                page_size)

    async def list_config_maps(self, namespace: str, *, label_selector: str | None = None,
                               page_size: int = 500) -> tuple[list[dict[str, Any]], str]:
        """ConfigMaps of ``namespace`` (paginated): (objects, the list's resourceVersion)."""
        return await self._list(f"/api/v1/namespaces/{namespace}/configmaps",
                                f"ConfigMaps in {namespace}",
                                _selectors(label_selector, None), page_size)

    async def read_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return await self._request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            action=f"get Lease {namespace}/{name}")

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._request(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            body=dict(body), action=f"create Lease in {namespace}")

    async def update_lease(self, namespace: str, name: str,
                           body: Mapping[str, Any]) -> dict[str, Any]:
        """Write a Lease as a merge patch; ``metadata.resourceVersion`` in ``body`` makes it
        conditional (409 Conflict when someone wrote in between)."""
        return await self._request(
            "PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            body=dict(body), content_type=MERGE_PATCH,
            action=f"update Lease {namespace}/{name}")


_REASONS: Final[Mapping[int, str]] = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 410: "Gone",
    422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


class _Credentials:
    """The kubeconfig user's token source, where it can change: an exec plugin, an OIDC or
    GCP auth-provider, or a ``tokenFile`` (a projected service-account token the kubelet
    rotates). Static tokens and certificates have none (``source`` None)."""

    def __init__(self, loader: Any, configuration: k8s.Configuration) -> None:
        self._loader = loader
        self._configuration = configuration
        self._lock = asyncio.Lock()  # one renewal at a time, whoever asks
        provider = getattr(loader, "provider", None)
        user = getattr(loader, "_user", None)
        self.source: Literal["gcp", "oidc", "exec", "tokenFile"] | None = None
        if provider in ("gcp", "oidc"):
            self.source = provider
        elif user is not None and "exec" in user:
            self.source = "exec"
        elif user is not None and "tokenFile" in user and not user.safe_get("token"):
            self.source = "tokenFile"  # a token given inline wins over the file, as there

    async def renew(self) -> None:
        """Re-run or re-read the token source: exec plugins re-run only when their credential
        nears expiry (or carries none), OIDC and GCP tokens when expired; a tokenFile is read
        again (client-go re-reads it every minute)."""
        async with self._lock:
            await self._renew()

    async def refused(self, sent: str | None) -> None:
        """The server answered 401 to a request that carried ``sent``: renew at once. An exec
        plugin's cached credential is dropped so that it runs again although it has not
        expired (client-go re-runs the plugin on a 401: the token may have been revoked)."""
        if self.source is None:
            return
        async with self._lock:
            if self._configuration.api_key.get("BearerToken") != sent:
                return  # renewed since that request left: the next one has the new token
            if self.source == "exec" and hasattr(self._loader, "exec_plugin_expiry"):
                del self._loader.exec_plugin_expiry
            try:
                await self._renew()
            except Exception as exc:  # keep the old token; the next 401 or round tries again
                log.warning("kube: renewing the credentials after a 401 failed: %s", exc)

    async def _renew(self) -> None:
        loader = self._loader
        if self.source == "gcp":
            await loader.load_gcp_token()
        elif self.source == "oidc":
            await loader._load_oid_token()
        elif self.source == "exec":
            await loader.load_from_exec_plugin()
        elif self.source == "tokenFile":
            loader._load_user_token()  # reads the file again, as the library read it first
        else:
            return
        if isinstance(getattr(loader, "token", None), str):
            self._configuration.api_key["BearerToken"] = loader.token


async def _refresh_credentials(credentials: _Credentials, interval_s: float) -> None:
    """Renew the kubeconfig user's credentials every ``interval_s``, until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await credentials.renew()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep the old token; the next round tries again
            log.warning("kube: refreshing the credentials failed: %s", exc)


def _in_cluster_namespace() -> str:
    try:
        return pathlib.Path(SERVICE_ACCOUNT_NAMESPACE).read_text(encoding="utf-8").strip() \
            or "default"
    except OSError:
        return "default"


async def read_json(raw: Any) -> dict[str, Any]:
    """The body of a kubernetes-asyncio ``_preload_content=False`` response (the generated
    API classes' raw answer); an ApiError for an error status (the library does not raise for
    those when it does not preload)."""
    status = int(getattr(raw, "status", 200))
    body: bytes = await raw.read()
    if status >= 400:
        reason, detail = _status_detail(body)
        url = getattr(raw, "url", None)
        server = f"{url.scheme}://{url.host}:{url.port}" if url is not None and url.host \
            else "the API server"
        raise ApiError(status=status, reason=reason or _REASONS.get(status, ""), server=server,
                       action=f"{getattr(raw, 'method', 'request')} {getattr(url, 'path', '')}"
                       .strip(), detail=detail)
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError("the API answered with something that is not an object")
    return doc


def as_client(api: KubeClient | k8s.ApiClient, *,
              connection: Connection | None = None) -> KubeClient:
    """``api`` itself when it is a KubeClient, else a KubeClient over an ApiClient configured
    elsewhere (a test's client of an emulator): no credential refresh of its own, and closing
    the KubeClient closes that ApiClient."""
    if isinstance(api, KubeClient):
        return api
    host = str(getattr(api.configuration, "host", "") or "the API server")
    return KubeClient(api, origin=Origin(None, None), server=host, namespace="default",
                      connection=connection or Connection(), refresher=None)


def _where(origin: Origin) -> str:
    return ("in-cluster config (no service account mounted?)" if origin.kubeconfig is None
            else f"kubeconfig {origin.kubeconfig!r}"
            + (f" context {origin.context!r}" if origin.context else ""))


def _config_error(origin: Origin, exc: BaseException) -> errors.ConfigError:
    return errors.ConfigError(
        f"cannot load {_where(origin)}: {exc or type(exc).__name__}; pass --kubeconfig PATH "
        "to a readable kubeconfig (and --context NAME to one of its contexts) or run inside a "
        "pod with a service account")


def _credentials_error(origin: Origin, loader: Any,
                       exc: BaseException) -> CredentialsError | errors.ConfigError:
    """A failure to get the kubeconfig user's credentials, classified: CredentialsError when
    a retry may get them (the plugin ran and failed; the identity provider did not answer),
    ConfigError when none can (the plugin cannot be started, the user entry is malformed).
    One line; never the credential itself (the client's messages carry none)."""
    user = getattr(loader, "_user", None)
    spec = user.safe_get("exec") if user is not None else None  # the plain mapping
    command = spec.get("command") if isinstance(spec, dict) else None
    plugin = f"exec credential plugin {command}" if command else "the credential provider"
    detail = " ".join(str(exc or type(exc).__name__).split())[:300]
    if isinstance(exc, aiohttp.ClientError | TimeoutError | ConnectionError):
        return CredentialsError(f"cannot get credentials for {_where(origin)}: {plugin}: "
                                f"no answer: {detail}")
    if command and isinstance(exc, OSError):
        # It could not be started: the command is not there, or not a program we may run.
        why = ("not found" if isinstance(exc, FileNotFoundError) else
               "not executable" if isinstance(exc, PermissionError) else
               f"cannot be run ({exc.strerror or exc})")
        return errors.ConfigError(f"cannot load {_where(origin)}: "
                                  f"{_exec_wording(str(command), why)}")
    if (command and isinstance(exc, k8s_config.ConfigException) and detail.startswith("exec:")
            and not detail.startswith("exec: malformed request")):
        # It ran and failed (exited non-zero, printed no credential): an identity provider
        # out of reach, a login that expired; client-go retries it on the next request.
        return CredentialsError(f"cannot get credentials for {_where(origin)}: {plugin}: "
                                f"{detail.removeprefix('exec: ')}")
    return _config_error(origin, exc)


async def connect_retrying(connection: Connection, *,
                           backoff: Callable[[int], float] | None = None,
                           failed: Callable[[CredentialsError, float], None] | None = None
                           ) -> KubeClient:
    """:func:`connect`, a CredentialsError (the credentials cannot be had now) retried for
    ever with ``backoff(attempt)`` (``connection.backoff`` by default), each failure reported
    to ``failed(error, delay)`` (by default logged as a warning). A ConfigError, which no retry
    can mend, is raised at once. What servers use at start-up; one-shot commands call
    :func:`connect` and fail at once."""
    delay_of = backoff or connection.backoff
    attempt = 0
    while True:
        try:
            return await connect(connection=connection)
        except CredentialsError as exc:
            delay = delay_of(attempt)
            if failed is not None:
                failed(exc, delay)
            else:
                log.warning("%s; retrying in %.1fs", exc, delay)
            await asyncio.sleep(delay)
            attempt += 1


async def connect(kubeconfig: str | os.PathLike[str] | None = None,
                  context: str | None = None,
                  request_timeout: float | None = None, *,
                  connection: Connection | None = None) -> KubeClient:
    """A KubeClient for the configuration kubectl would use.

    ConfigError when it cannot load, for good (the file, the context, its cluster or user,
    an exec plugin that is not installed); CredentialsError when the user's credentials
    cannot be had now (the exec plugin failed, the identity provider did not answer), which
    :func:`connect_retrying` retries. ``connection`` (all settings) wins over the three
    shorthand arguments.
    """
    if connection is None:
        connection = Connection(kubeconfig=kubeconfig, context=context,
                                request_timeout_s=request_timeout)
    origin = discover(connection.kubeconfig, connection.context)
    check(origin)
    configuration = k8s.Configuration()
    loader: Any = None
    namespace = "default"
    try:
        if origin.kubeconfig is None:
            in_cluster: Any = k8s_config.load_incluster_config  # untyped in the stubs
            in_cluster(client_configuration=configuration)
            namespace = _in_cluster_namespace()
        else:
            # load_kube_config's two steps, apart: reading the files and choosing the
            # context (what cannot change while the process runs), then getting the
            # credentials (an exec plugin or OIDC refresh runs: it may fail for a while).
            merged = k8s_config.kube_config.KubeConfigMerger(origin.kubeconfig).config
            loader = k8s_config.kube_config.KubeConfigLoader(
                config_dict=merged, active_context=origin.context, config_base_path=None)
            current = loader.current_context or {}
            namespace = str((current.get("context") or {}).get("namespace") or "default")
    except (k8s_config.ConfigException, OSError, ValueError, KeyError, TypeError,
            AttributeError, AssertionError, yaml.YAMLError) as exc:
        raise _config_error(origin, exc) from None
    if loader is not None:
        try:
            await loader.load_and_set(configuration)
        except (k8s_config.ConfigException, OSError, ValueError, KeyError, TypeError,
                AttributeError, AssertionError, yaml.YAMLError, aiohttp.ClientError) as exc:
            # (OSError covers timeouts too, and the network errors of an OIDC refresh.)
            raise _credentials_error(origin, loader, exc) from None
    refresher = None
    credentials = _Credentials(loader, configuration) if loader is not None else None
    if credentials is not None and credentials.source is not None:
        refresher = asyncio.get_running_loop().create_task(
            _refresh_credentials(credentials, connection.refresh_interval_s),
            name="kube credential refresh")
    api = k8s.ApiClient(configuration)
    return KubeClient(api, origin=origin, server=str(configuration.host), namespace=namespace,
                      connection=connection, refresher=refresher, credentials=credentials)


__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_S",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_PATCH",
    "TRANSPORT_ERRORS",
    "ApiError",
    "Connection",
    "CredentialsError",
    "KubeClient",
    "NoKubeconfigError",
    "Origin",
    "PatchType",
    "add_request_timeout_argument",
    "as_client",
    "connect",
    "connect_retrying",
    "discover",
    "parse_duration",
    "read_json",
]
