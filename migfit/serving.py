"""Serving one aiohttp application: bounded connections, timeouts, graceful drain, one line per
client mistake. The webhook and the extender both serve through ``serve``.

Its own layer, between the two servers and ``migfit.certs`` (the core imports no HTTP server):
both servers import it, it imports neither.

What it bounds, so that idle or hostile clients cannot take the memory every pod needs
(``Limits``; the flags of ``add_limit_arguments``):

- **Connections.** At most ``max_connections`` open at once, TLS handshakes in progress
  included; a connection beyond it is closed as soon as it is accepted (the client reconnects
  later or elsewhere), so memory stays bounded whatever the number of clients. At most
  ``max_per_client`` of them from one address: one client (a slow-header or stalled-handshake
  flood from a pod, say) cannot take every slot from kube-apiserver and kube-scheduler.
- **Idle and slow-header connections.** aiohttp's keep-alive timer runs from the connection's
  start and after every response; when it fires while the connection waits for a complete
  request head it is closed. ``keepalive_timeout`` thus bounds both idleness and how long a
  request's headers may take to arrive.
- **Slow bodies.** ``read_body`` reads a request's body within ``body_timeout`` (408 after,
  then the connection closes within ``LINGER_S``).
- **Bodies in flight.** ``read_body`` also holds the bodies an application reads at once, all
  connections together, to its ``BodyBudget`` (``max_body_in_flight``; by default
  ``BUDGET_BODIES`` of its largest): one body may be large, but 25 slow clients each sending
  30 MiB to the extender made it hold more than 1 GiB. A request whose body would go beyond
  is answered 503 with ``Retry-After`` before a byte of its body is read. One client address
  may hold all of it but one largest body (``Limits.client_share``), so that four slow
  bodies from one client cannot refuse everyone else's.
- **What a body makes the parser build.** A body may hold at most one JSON array or object
  per ``BYTES_PER_CONTAINER`` bytes of the largest body (``JSON_CONTAINERS``), counted before
  it is parsed; more is a 413 (``TooManyContainers``).
- **Answers nobody reads.** A connection whose transport is paused for writing (the
  socket's buffers are full) and whose client takes nothing of what is left to send for
  ``write_timeout`` is closed (``_WriteStall``): it held the connection, and the answer, for
  ever. A client that reads, however slowly, is not cut.
- **Request heads**: at most ``MAX_HEADERS`` lines of ``MAX_FIELD_SIZE`` bytes (and a
  request line of ``MAX_LINE_SIZE``); more is a 431 (``malformed``).
- **TLS handshakes** must finish within ``handshake_timeout``.
- **Per-connection memory.** asyncio's TLS layer allocates a 256 KiB receive buffer per
  connection (``asyncio.sslproto.SSLProtocol.max_size``); ``SmallBufferTLS`` uses 16 KiB
  (about one TLS record; OpenSSL reassembles records across reads, so any size is correct,
  a smaller one only reads in more steps). 295 KiB per idle TLS connection became 73 KiB
  (``bench/bench_connections.py``). uvloop's TLS (in C) mallocs its 256 KiB buffer, whose
  pages are touched only as far as records fill them.

The event loop (``run``): uvloop where it is installed (a dependency on Linux and macOS),
because its TLS layer is compiled: the webhook's server CPU per admission over TLS fell from
96 to about 77 µs (``bench/bench_webhook.py``). ``MIGFIT_EVENT_LOOP=asyncio`` selects the
standard library's loop. Under uvloop a TLS listener is ``_Acceptor``: ``create_server(ssl=)``
would run the protocol factory, where the gate admits or refuses, only after the handshake,
so refused connections would still cost a handshake each.

Client misbehaviour (malformed HTTP, a client gone mid-body, a failed handshake) is logged as
one line at warning (malformed) or debug (disconnects, and traffic that is not HTTP at all),
never an ERROR with a traceback. What aiohttp's parser rejects before any handler runs (a bad
request line, header or chunked body, a request head over its bounds) is answered by
``JsonErrors`` in the application's own JSON error shape (``ERROR_ANSWER``): 400, 431 for a
head over its bounds, or 415 for a Content-Encoding aiohttp cannot decode, with a fixed
message saying what to change, ``Connection: close``, and none of the client's bytes
(aiohttp's own answer was text that quoted them back).

Stopping (``serve``, ``on_signals``): the first SIGTERM or SIGINT begins a graceful shutdown
(drain, then requests in flight get ``shutdown_timeout``); a second one during it cuts it
short (the connections still open are closed at once) and ``run`` ends in KeyboardInterrupt:
the command exits 130, with one log line and no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import contextlib
import dataclasses
import errno
import logging
import os
import signal
import socket
import ssl
import struct
import sys
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from typing import Any, Final, NoReturn, TypeVar

from aiohttp import http_exceptions, web

from migfit import errors, flagtypes, jsonwire

log = logging.getLogger("migfit.http")

DEFAULT_KEEPALIVE_S = 60.0
DEFAULT_BODY_TIMEOUT_S = 10.0
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
# kube-apiserver and kube-scheduler read an answer as soon as it comes; a connection whose
# answer has not moved for this long belongs to a client that does not read.
DEFAULT_WRITE_TIMEOUT_S = 10.0
# Bodies of the largest size an application reads at once by default (its body budget, when
# --max-body-in-flight is not given): kube-scheduler sends one call at a time per scheduling
# cycle (filter, then prioritize), and a few API servers' admissions are a few KB each.
BUDGET_BODIES = 4
# The webhook's: kube-apiserver sends every admission from one address, hundreds at once, and
# with 4 (12 MiB) a burst of 200 connections with 1 MiB pods among 4-20 KB ones got 503s from
# the share one client may hold (``Limits.client_share``) that it did not get before the
# share. A webhook holds little else, so 8 of its 3 MiB bodies cost it 12 MiB more at most.
WEBHOOK_BUDGET_BODIES = 8
# A body may hold one JSON array or object ('[' or '{') per this many bytes of the largest
# body accepted: parsed, each costs 56 to 64 bytes or more, and a 30 MiB /filter body of empty
# arrays ("[],", 3 bytes each) took the extender from 295 MB to 1.17 GB and the event loop for
# 1.1 s. Kubernetes objects hold far fewer: about one per 75 bytes in a Node's images, one
# per 10 to 20 in the densest part of any (metadata.managedFields); Nodes as kubectl writes
# them hold one per 55 to 84 bytes (an outside probe), so a body of real objects stays well
# within (the extender's 32 MiB allow 2,097,152: 15,000 Nodes of 140 each; the webhook's
# 3 MiB, a pod and its old object of 1.5 MiB each).
BYTES_PER_CONTAINER = 16
# What a request refused for want of body budget is told: try again in a second. kube-apiserver
# calls webhooks through client-go's REST client, which retries an answer of 429 or 5xx that
# carries Retry-After (rest/request.go, checkWait) while the webhook's timeout allows; a 413
# it would not retry, so the pod's creation would fail (failurePolicy: Fail). kube-scheduler's
# extender client takes any answer but 200 as that scheduling cycle's error, whatever the
# status; 503 says what is true (busy, try again), 413 would blame a request that fits.
RETRY_AFTER_S = 1
DEFAULT_MAX_CONNECTIONS = 1000
# A quarter of the slots per client address: the API servers (the webhook's clients) and
# kube-scheduler (the extender's) keep a few keep-alive connections each and open more only
# under bursts, so three API servers at this bound still leave room for every other client.
# One API server calls the webhook for at most --max-mutating-requests-inflight pod creations
# at once (200 by default), one connection each over HTTP/1.1: within this bound.
DEFAULT_MAX_PER_CLIENT = 250
TLS_BUFFER_BYTES = 16 * 1024
# After an answer sent before the body was read in full (408, 413), the rest of the body is
# read and dropped this long so that the client can read the answer (aiohttp's default: 10 s).
LINGER_S = 1.0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Bounds on what clients may hold of a server (see the module's docstring)."""

    keepalive_timeout: float = DEFAULT_KEEPALIVE_S
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_per_client: int = DEFAULT_MAX_PER_CLIENT  # open connections from one address
    write_timeout: float = DEFAULT_WRITE_TIMEOUT_S  # seconds a connection's writes may stall
    # Bytes of request bodies an application reads at once, all connections together; None:
    # BUDGET_BODIES times the largest body it accepts (``body_budget``).
    max_body_in_flight: int | None = None
    # SO_REUSEPORT: several processes listen on one port and the kernel spreads new
    # connections over them (more than one core per pod; each process holds its own cache).
    reuse_port: bool = False

    def check(self) -> None:
        """ValueError naming the flag when a bound cannot work."""
        for flag, value in (("--keepalive-timeout", self.keepalive_timeout),
                            ("--body-timeout", self.body_timeout),
                            ("--handshake-timeout", self.handshake_timeout),
                            ("--write-timeout", self.write_timeout)):
            if not value > 0:
                raise ValueError(f"{flag} {flagtypes.shown(value)}: use a positive number "
                                 "of seconds")
        if self.max_connections < 1:
            raise ValueError(f"--max-connections {self.max_connections}: use 1 or more")
        if self.max_per_client < 1:
            raise ValueError(f"--max-connections-per-client {self.max_per_client}: use 1 "
                             "or more")
        if self.max_body_in_flight is not None and self.max_body_in_flight < 1:
            raise ValueError(f"--max-body-in-flight {self.max_body_in_flight}: use a positive "
                             "number of bytes")

    def body_budget(self, max_body: int, bodies: int = BUDGET_BODIES) -> int:
        """The bytes of bodies in flight of an application whose largest body is ``max_body``:
        ``max_body_in_flight``, or ``bodies`` (the application's default count) times
        ``max_body``. ValueError (naming the flag) when the budget could not hold one body of
        the largest size."""
        if self.max_body_in_flight is None:
            return bodies * max_body
        if self.max_body_in_flight < max_body:
            raise ValueError(f"--max-body-in-flight {self.max_body_in_flight}: use at least "
                             f"the largest body accepted ({max_body:,} bytes), or a request "
                             "of that size could never be read")
        return self.max_body_in_flight

    def client_share(self, max_body: int, bodies: int = BUDGET_BODIES) -> int:
        """The bytes of bodies in flight one client address may hold: the budget
        (``body_budget``) but one body of ``max_body``, so that another client's largest
        request still fits; never less than ``max_body``, so that its own does.

        Four slow bodies from one client (a pod, a misbehaving API server) took the whole
        default budget, and every other admission got 503 for the body timeout. Not a
        smaller share: kube-apiserver sends every admission from one address, hundreds at
        once, and with a quarter of the webhook's budget (one 3 MiB body) 200 connections
        sending admissions of 4 KB to 1 MiB got 177 answers of 503 among 444, where the whole
        budget answered all 1,000 (an outside probe)."""
        budget = self.body_budget(max_body, bodies)
        return max(budget - max_body, max_body)


# What ``--max-body-in-flight`` defaults to, in the words of ``migfit webhook`` and
# ``migfit extender``, which take ``--max-body``.
BODY_BUDGET_DEFAULT = (f"{BUDGET_BODIES} times the largest body accepted for the extender "
                       f"(128 MiB), {WEBHOOK_BUDGET_BODIES} for the webhook (24 MiB), with "
                       "their default --max-body")


def add_limit_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *,
                        body_budget_default: str = BODY_BUDGET_DEFAULT) -> None:
    """The flags of ``Limits``, with the defaults a production cluster needs;
    ``body_budget_default``: what ``--max-body-in-flight`` defaults to, in words."""
    parser.add_argument(
        "--keepalive-timeout", type=flagtypes.number, default=DEFAULT_KEEPALIVE_S,
        metavar="SECONDS",
        help="close a connection idle this long, or whose request headers have not all "
             "arrived by then (kube-apiserver and kube-scheduler reconnect cheaply; "
             "default %(default)s)")
    parser.add_argument(
        "--body-timeout", type=flagtypes.number, default=DEFAULT_BODY_TIMEOUT_S, metavar="SECONDS",
        help="answer 408 and close when a request body takes longer to arrive "
             "(default %(default)s)")
    parser.add_argument(
        "--handshake-timeout", type=flagtypes.number, default=DEFAULT_HANDSHAKE_TIMEOUT_S,
        metavar="SECONDS", help="close a connection whose TLS handshake takes longer "
                                "(default %(default)s)")
    parser.add_argument(
        "--write-timeout", type=flagtypes.number, default=DEFAULT_WRITE_TIMEOUT_S,
        metavar="SECONDS",
        help="close a connection whose client, its socket's buffers full, has read nothing "
             "of its answer for this long (default %(default)s)")
    parser.add_argument(
        "--max-body-in-flight", type=int, default=None, metavar="BYTES",
        help="bytes of request bodies being received at once, all connections together; a "
             "request whose body would go beyond is answered 503 with Retry-After: "
             f"{RETRY_AFTER_S} before its body is read; one client address may hold all "
             f"of it but one largest body (default: {body_budget_default})")
    parser.add_argument(
        "--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
        help="connections open at once; more are closed when accepted (default %(default)s)")
    parser.add_argument(
        "--max-connections-per-client", type=int, default=DEFAULT_MAX_PER_CLIENT, metavar="N",
        dest="max_per_client",
        help="connections open at once from one client address; more are closed when "
             "accepted, so that one client cannot take every slot (default %(default)s)")
    parser.add_argument(
        "--reuse-port", action="store_true",
        help="listen with SO_REUSEPORT, so that several migfit processes (one per core) can "
             "serve one port; the kernel spreads new connections over them")


def limits_from(args: argparse.Namespace) -> Limits:
    """The ``Limits`` of parsed ``add_limit_arguments`` flags; ValueError for bad values."""
    limits = Limits(keepalive_timeout=args.keepalive_timeout, body_timeout=args.body_timeout,
                    handshake_timeout=args.handshake_timeout,
                    max_connections=args.max_connections,
                    max_per_client=args.max_per_client,
                    write_timeout=args.write_timeout,
                    max_body_in_flight=args.max_body_in_flight,
                    reuse_port=bool(getattr(args, "reuse_port", False)))
    limits.check()
    return limits


# ---------------------------------------------------------------- request bodies


class BodyBudget:
    """The bytes of request bodies one application holds at once, all connections together
    (``read_body`` takes from it before reading, and gives back when the body is handed over
    or given up). Beyond ``limit`` a request is refused (503) before its body is read, and so
    is one whose client (its address, as the connection gate counts clients) would hold more
    than ``share`` of it: four slow bodies from one client held the whole default budget, and
    every other admission got 503 until they timed out.

    Refusals are logged at most once per ``LINE_S`` (the first, then the first after a
    quieter ``LINE_S``), and every ``REFUSALS_PER_LINE``-th: only the first of a process was
    logged, so a later burst of 503s said nothing."""

    LINE_S = 10.0
    REFUSALS_PER_LINE = 1000

    def __init__(self, limit: int, share: int | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.share = limit if share is None else min(share, limit)
        self.held = 0
        self.refused = 0
        self.clients: dict[str, int] = {}  # bytes held per client address (those holding any)
        self._clock = clock
        self._logged: float | None = None  # when the last refusal line was written

    def refusal(self, size: int, client: str = "") -> str | None:
        """Why ``size`` bytes more for ``client`` would not fit (the 503's text), or None."""
        if self.held + size > self.limit:
            return (f"the server is receiving {self.held:,} bytes of request bodies already, "
                    f"{self.limit:,} at most (--max-body-in-flight); retry")
        held = self.clients.get(client, 0)
        if held + size > self.share:
            return (f"this client is sending {held:,} bytes of request bodies already, "
                    f"{self.share:,} at most from one client (a share of "
                    f"--max-body-in-flight, {self.limit:,}); retry once its other requests "
                    "are answered")
        return None

    def has_room(self, size: int, client: str = "") -> bool:
        """Whether ``size`` bytes more for ``client`` stay within ``limit`` and its share."""
        return self.refusal(size, client) is None

    def take(self, size: int, client: str = "") -> str | None:
        """Hold ``size`` bytes more for ``client`` (None), or count a refusal and say why."""
        why = self.refusal(size, client)
        if why is not None:
            self.refused += 1
            now = self._clock()
            if (self._logged is None or now - self._logged >= self.LINE_S
                    or self.refused % self.REFUSALS_PER_LINE == 0):
                self._logged = now
                log.warning("%s: request body refused, answering 503 (%d refused so far): %s",
                            client or "a client", self.refused, why)
            return why
        self.held += size
        self.clients[client] = self.clients.get(client, 0) + size
        return None

    def give(self, size: int, client: str = "") -> None:
        """Give back ``size`` bytes taken before for ``client``."""
        self.held -= size
        left = self.clients.get(client, 0) - size
        if left > 0:
            self.clients[client] = left
        else:
            self.clients.pop(client, None)


BODY_BUDGET: Final = web.AppKey("migfit_body_budget", BodyBudget)
JSON_CONTAINERS: Final = web.AppKey("migfit_json_containers", int)
"""The most JSON arrays and objects ``read_body`` lets a body hold (``limit_bodies``)."""


class TooManyContainers(web.HTTPRequestEntityTooLarge):
    """413: a body holds more JSON arrays and objects than ``JSON_CONTAINERS``."""

    def __init__(self, held: int, limit: int) -> None:
        super().__init__(
            max_size=limit, actual_size=held,
            text=f"the request body holds {held:,} JSON arrays and objects, more than "
                 f"{limit:,} (one per {BYTES_PER_CONTAINER} bytes of --max-body); send fewer")


def limit_bodies(app: web.Application, limits: Limits, max_body: int, *,
                 bodies: int = BUDGET_BODIES) -> BodyBudget:
    """Give ``app`` (whose largest body is ``max_body``; ``bodies``: its default budget in
    such bodies) its ``BodyBudget`` of ``limits``, which ``read_body`` reads through;
    ValueError as ``Limits.body_budget`` raises it."""
    app[BODY_BUDGET] = budget = BodyBudget(limits.body_budget(max_body, bodies),
                                           limits.client_share(max_body, bodies))
    app[JSON_CONTAINERS] = max(max_body // BYTES_PER_CONTAINER, 1)
    return budget


def _busy(why: str) -> web.HTTPServiceUnavailable:
    # Connection: close, since the body is left unread (aiohttp reads and drops it for
    # LINGER_S at most, then closes).
    return web.HTTPServiceUnavailable(
        text=why, headers={"Retry-After": str(RETRY_AFTER_S), "Connection": "close"})


async def read_body(request: web.Request, timeout_s: float) -> bytes:
    """The request's body, read within ``timeout_s``, at most the app's ``client_max_size``
    (413 beyond), and within the app's ``BodyBudget`` when it has one (``limit_bodies``).

    The budget is taken before a byte is read: the declared ``Content-Length`` whole, or a
    body of no declared length (chunked) as it arrives, counted for the connection's client
    address too; a request it cannot hold, or whose client would pass its share of it
    (``BodyBudget.share``), gets 503 with ``Retry-After``. It is given back on every way
    out: the body handed over, 408 when the body takes longer than ``timeout_s``, a client
    gone mid-body (logged at debug; a 400 it will never read), 413. A body of more JSON
    arrays and objects than the app's ``JSON_CONTAINERS`` is a 413 (``TooManyContainers``).

    The body is not kept on the request (``request.read()`` would keep it there, and aiohttp
    keeps the last request of a keep-alive connection until the next one: 30 MiB per idle
    connection): the handler's copy is the only one, gone once its answer is made. Both
    servers' handlers make their answer without waiting on anything after this returns, so
    the budget holds every body being received or handled.
    """
    budget = request.app.get(BODY_BUDGET)
    limit = request.client_max_size
    declared = request.content_length or 0
    if limit and declared > limit:
        raise too_large(limit, declared)
    taken = 0
    client = _request_client(request)
    if budget is not None and declared:
        why = budget.take(declared, client)
        if why is not None:
            raise _busy(why)
        taken = declared
    content = request.content
    try:
        if content.is_eof():  # all of it has arrived (the usual case): no timer, one piece
            body = content.read_nowait()
            if len(body) > taken:  # no declared length
                taken = _account(budget, client, limit, len(body), taken)
            return _shaped(request, body)
        if declared:
            # Held to its declared length (and budgeted): let aiohttp buffer that much
            # before it pauses reading, as its own ``read`` does (aiohttp 3.13 and later),
            # rather than pause and resume every 128 KiB of a body of megabytes.
            grow = getattr(content, "set_read_chunk_size", None)
            if callable(grow):
                grow(declared)
        chunks: list[bytes] = []
        size = 0
        async with asyncio.timeout(timeout_s):
            while chunk := await content.readany():
                size += len(chunk)
                if size > taken:  # no declared length: counted as it comes
                    taken = _account(budget, client, limit, size, taken)
                chunks.append(chunk)
        return _shaped(request, b"".join(chunks))
    except TimeoutError:
        log.warning("%s %s from %s: body not received within %ss; closing", request.method,
                    request.path, request.remote, timeout_s)
        raise web.HTTPRequestTimeout(text="request body too slow",
                                     headers={"Connection": "close"}) from None
    except web.RequestPayloadError as exc:
        if not _undecodable(exc):
            log.debug("%s %s from %s: client gone mid-body (%s)", request.method,
                      request.path, request.remote, exc or type(exc).__name__)
            raise web.HTTPBadRequest(text="incomplete request body") from None
        # The parser stopped at the bytes that do not decode: the body ends here for
        # aiohttp too (else its lingering read after the answer meets the same error and
        # logs it as an unhandled exception), and the connection closes.
        content.feed_eof()
        said = request.headers.get("Content-Encoding", "").strip().lower()
        name = said if said in ("gzip", "x-gzip", "deflate") else "its Content-Encoding"
        log.info("%s %s from %s: body does not decode as %s: answering 400", request.method,
                 request.path, request.remote, name)
        raise web.HTTPBadRequest(
            text=f"the request body does not decode as {name} (Content-Encoding: {name}); "
                 f"send it so compressed, or uncompressed without Content-Encoding",
            headers={"Connection": "close"}) from None
    except ConnectionError as exc:
        log.debug("%s %s from %s: client gone mid-body (%s)", request.method, request.path,
                  request.remote, exc or type(exc).__name__)
        raise web.HTTPBadRequest(text="incomplete request body") from None
    finally:
        if taken and budget is not None:
            budget.give(taken, client)


def too_large(limit: int, size: int) -> web.HTTPRequestEntityTooLarge:
    """413 for a body of ``size`` bytes (declared, or received so far) over ``limit``, in
    words: aiohttp's own text is "Maximum request body size 33554432 exceeded, actual body
    size 50000000"."""
    return web.HTTPRequestEntityTooLarge(
        max_size=limit, actual_size=size,
        text=f"the request body of {size:,} bytes is larger than {limit:,}")


def _undecodable(exc: web.RequestPayloadError) -> bool:
    """Whether ``exc`` says the body does not decode as its Content-Encoding says (aiohttp's
    parser wraps its ContentEncodingError's words, not the error itself)."""
    cause = exc.__cause__ or exc.__context__
    return (isinstance(cause, http_exceptions.ContentEncodingError)
            or "content-encoding" in str(exc).lower())


def error_text(exc: web.HTTPException) -> str:
    """What an error answer built from ``exc`` says: its text (the reason ``read_body`` and
    the handlers give, "request body too slow"), or its reason phrase where the text is
    aiohttp's default ("404: Not Found")."""
    text = exc.text or ""
    return exc.reason if not text or text == f"{exc.status}: {exc.reason}" else text


def _shaped(request: web.Request, body: bytes) -> bytes:
    """``body``, unless it holds more JSON arrays and objects than the app's
    ``JSON_CONTAINERS`` (413, ``TooManyContainers``): counted, not parsed, and only where
    the body is long enough to hold that many (two bytes each at least)."""
    most = request.app.get(JSON_CONTAINERS)
    if most is not None and len(body) > 2 * most:
        held = jsonwire.containers(body)
        if held > most:
            log.warning("%s %s from %s: body of %d JSON arrays and objects, more than %d: "
                        "answering 413", request.method, request.path, request.remote, held,
                        most)
            raise TooManyContainers(held, most)
    return body


def _account(budget: BodyBudget | None, client: str, limit: int, size: int, taken: int) -> int:
    """What a body of no declared length has taken of ``budget`` once ``size`` bytes of it
    have arrived (``taken`` before), for ``client``: 413 past ``limit``, 503 past the budget
    or the client's share of it."""
    if limit and size > limit:
        raise too_large(limit, size)
    if budget is None:
        return 0
    why = budget.take(size - taken, client)
    if why is not None:
        raise _busy(why)
    return size


_BODILESS = frozenset({"GET", "HEAD"})


@web.middleware
async def bodiless(request: web.Request,
                   handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                   ) -> web.StreamResponse:
    """GET and HEAD take no body: one declared beyond the app's ``client_max_size`` is a 413
    in the app's ``ERROR_ANSWER``, and any other is left unread; either way the connection
    closes once answered, the body never read. aiohttp read and dropped what was left of
    an unread body after the answer: ``GET /healthz`` with ``Content-Length: 99999999999``
    was answered 200, then the server took in gigabytes, past --max-body and
    --body-timeout. The outermost of an app's middlewares."""
    if request.method not in _BODILESS or not request.body_exists:
        return await handler(request)
    limit = request.client_max_size
    declared = request.content_length
    if limit and declared is not None and declared > limit:
        answer = request.app.get(ERROR_ANSWER, default_error_answer)
        response = answer(413, f"a {request.method} request takes no body, and this one "
                               f"declares {declared:,} bytes, more than {limit:,} "
                               "(--max-body): send none")
    else:
        response = await handler(request)
    if not request.content.is_eof():
        # Closed once answered: the parser takes no more of the connection's bytes (the
        # handler's ``close``), and the body counts as ended, so that aiohttp does not read
        # it on for LINGER_S.
        response.force_close()
        request.protocol.close()
        request.content.feed_eof()
    return response


def keep_headers(exc: web.HTTPException, response: web.StreamResponse) -> None:
    """Give ``response``, an error answer rebuilt from ``exc``, the headers it must keep
    (``kept_headers``), and close its connection once it is sent where ``exc`` says
    ``Connection: close``: the header alone does not make aiohttp close it, so a client
    told so waited on an open connection until the keep-alive timeout."""
    response.headers.update(kept_headers(exc))
    if response.headers.get("Connection", "").lower() == "close":
        response.force_close()


def kept_headers(exc: web.HTTPException) -> dict[str, str]:
    """The headers of ``exc`` that an error answer rebuilt from it (a JSON body) must keep:
    ``Retry-After`` (the body budget's 503) and ``Connection`` (close: a body left unread)."""
    return {name: exc.headers[name] for name in ("Retry-After", "Connection")
            if name in exc.headers}


ExpectHandler = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def expect_within(limit: int, refuse: Callable[[int], web.StreamResponse]) -> ExpectHandler:
    """A route's ``Expect: 100-continue`` handler that answers a declared body over ``limit``
    bytes with ``refuse(length)`` (the server's own 413, connection closed) instead of
    inviting the client to send it, and does not invite a body the app's ``BodyBudget`` has
    no room for (the handler answers 503); else ``100 Continue``, as aiohttp's own handler
    does."""

    async def handle(request: web.Request) -> web.StreamResponse | None:
        expect = request.headers.get("Expect", "")
        if request.version != (1, 1):
            return None
        if expect.lower() != "100-continue":
            # Answered here, in the app's own shape: the expect handler runs outside its
            # middlewares, and none of the client's bytes are echoed.
            refused = request.app.get(ERROR_ANSWER, default_error_answer)(
                417, "unsupported Expect header: send Expect: 100-continue, or none")
            refused.headers["Connection"] = "close"
            refused.force_close()
            return refused
        length = request.content_length
        if length is not None and length > limit:
            answer = refuse(length)
            answer.headers["Connection"] = "close"  # the body was never sent: nothing to read
            answer.force_close()
            return answer
        budget = request.app.get(BODY_BUDGET)
        client = _request_client(request)
        if length and budget is not None and not budget.has_room(length, client):
            # No invitation: the handler's ``read_body`` answers 503 (Retry-After) before
            # the body is sent, in the route's own error shape; should room free up first,
            # it reads the body the client sends once its wait for 100 Continue is over.
            return None
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the interim answer is not the response's size
        return None

    return handle


# ---------------------------------------------------------------- connections


class _Gate:
    """Counts open connections, in all and per client address, and refuses those beyond
    the limits. The per-address counts hold only addresses with a connection open.

    Refusals are logged per kind (``--max-connections``, ``--max-connections-per-client``)
    and per episode: the first of an episode, then every ``REFUSALS_PER_LINE``-th. An
    episode ends once the count it hit drops below its limit, or after ``QUIET_S`` without a
    refusal of its kind; the next refusal begins a new one, logged if the last line of its
    kind is ``EPISODE_LINE_S`` old (a count that swings about its limit logs no more). One
    counter for both logged the first refusal only: after a per-client refusal, filling
    --max-connections logged nothing."""

    REFUSALS_PER_LINE = 1000
    QUIET_S = 60.0
    EPISODE_LINE_S = 10.0

    def __init__(self, limit: int, per_client: int = DEFAULT_MAX_PER_CLIENT, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.per_client = per_client
        self.open = 0
        self.refused = 0
        self.clients: dict[str, int] = {}
        self._clock = clock
        self._episodes: dict[str, _Episode] = {}

    def admit(self) -> bool:
        if self.open >= self.limit:
            self._refuse("all", f"connection limit ({self.limit}) reached "
                                "(--max-connections)")
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1
        if self.open < self.limit:
            self._end("all")

    def claim(self, client: str) -> bool:
        """Count one more connection of ``client`` (an admitted one), or refuse it."""
        held = self.clients.get(client, 0)
        if held >= self.per_client:
            self._refuse("client", f"{client} holds {held} connections, the most one client "
                                   "may (--max-connections-per-client)", client)
            return False
        self.clients[client] = held + 1
        return True

    def unclaim(self, client: str) -> None:
        held = self.clients.get(client, 0) - 1
        if held > 0:
            self.clients[client] = held
        else:
            self.clients.pop(client, None)
        episode = self._episodes.get("client")
        if episode is not None and episode.client == client and held < self.per_client:
            self._end("client")

    def _end(self, kind: str) -> None:
        episode = self._episodes.get(kind)
        if episode is not None:
            episode.ended = True

    def _refuse(self, kind: str, why: str, client: str = "") -> None:
        self.refused += 1
        now = self._clock()
        episode = self._episodes.get(kind)
        if episode is None:
            episode = self._episodes[kind] = _Episode(client=client, last=now)
            episode.refused = 1
            self._line(episode, why, now)
            return
        if episode.ended or now - episode.last >= self.QUIET_S:
            episode.ended = False
            episode.client = client
            episode.refused = 0
        episode.refused += 1
        episode.last = now
        if ((episode.refused == 1 and now - episode.logged >= self.EPISODE_LINE_S)
                or episode.refused % self.REFUSALS_PER_LINE == 0):
            self._line(episode, why, now)

    def _line(self, episode: _Episode, why: str, now: float) -> None:
        episode.logged = now
        log.warning("%s: refusing new connections (%d refused in this episode, %d in all)",
                    why, episode.refused, self.refused)


@dataclasses.dataclass(slots=True)
class _Episode:
    """Refusals of one kind in a row (``_Gate._refuse``)."""

    client: str
    last: float  # when the last refusal came
    refused: int = 0
    logged: float = 0.0  # when the last line was written
    ended: bool = False  # the count dropped below its limit since


def _request_client(request: web.Request) -> str:
    """The client address of ``request``'s connection, as the gate counts clients ("" when
    the transport is gone)."""
    return _client(request.transport) if request.transport is not None else ""


def _host(peer: object) -> str:
    """The host part of a socket's peer address, or "" when it has none (a Unix socket)."""
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _client(transport: asyncio.BaseTransport) -> str:
    """The address a connection comes from (its host part), or "" when it has none."""
    return _host(transport.get_extra_info("peername"))


def _abort(transport: asyncio.BaseTransport) -> None:
    """Close ``transport`` at once, unsent data dropped. uvloop's transports have ``abort``
    but are no ``asyncio.Transport``: an ``isinstance`` test closed them gracefully instead,
    which a TLS transport does only once the client has read what is left to send."""
    abort = getattr(transport, "abort", None)
    if callable(abort):
        abort()
    else:
        transport.close()


class _Refused(asyncio.Protocol):
    """What a connection beyond the limit gets: closed at once, nothing read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _abort(transport)


class _WriteStall:
    """Aborts a connection whose writes stall: its transport paused for writing
    (``pause_writing``: the socket's buffers are full) and none of what it holds taken by the
    client for ``limit`` seconds. A client that reads, however slowly, keeps it open: each
    ``limit`` the answer's bytes still buffered are compared with the last count.
    So a client that stops reading is cut between ``limit`` and twice that after it stopped."""

    __slots__ = ("_left", "_limit", "_timer")

    def __init__(self, limit: float) -> None:
        self._limit = limit
        self._timer: asyncio.TimerHandle | None = None
        self._left = 0

    def paused(self, transport: asyncio.BaseTransport | None) -> None:
        """The transport paused for writing: watch it (once)."""
        if self._timer is None and transport is not None:
            self._arm(transport)

    def resumed(self) -> None:
        """The transport resumed writing, or the connection is gone: stop watching."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, transport: asyncio.BaseTransport) -> None:
        self._left = _buffered(transport)
        self._timer = asyncio.get_running_loop().call_later(self._limit, self._check, transport)

    def _check(self, transport: asyncio.BaseTransport) -> None:
        # A transport being closed is watched too: it closes only once its buffer is sent.
        self._timer = None
        left = _buffered(transport)
        if not left:  # nothing waits at this layer any more
            return
        if left < self._left:  # the client took some: it reads, slowly
            self._arm(transport)
            return
        log.warning("%s has read nothing of its answer for %ss; closing the connection",
                    _client(transport) or "a client", self._limit)
        _abort(transport)


def _buffered(transport: asyncio.BaseTransport) -> int:
    """Bytes ``transport`` holds, not yet taken by the socket (0 where it does not say)."""
    size = getattr(transport, "get_write_buffer_size", None)
    return int(size()) if callable(size) else 0


class _Counted(asyncio.Protocol):
    """A connection's protocol (plain TCP, or the application's under uvloop's TLS), releasing
    its slot in the gate once, when it closes or when its handshake fails, and closing it
    when its writes stall for ``write_timeout`` (``_WriteStall``).

    ``client``: the address already claimed in the gate (uvloop's acceptor knows it when it
    accepts); None: claimed here when the connection is made, and refused (reset, nothing
    read) when that client holds its share already."""

    def __init__(self, inner: asyncio.Protocol, gate: _Gate, client: str | None = None, *,
                 write_timeout: float = DEFAULT_WRITE_TIMEOUT_S) -> None:
        self._inner = inner
        self._gate = gate
        self._held = True
        self._client = client
        self._started = False
        self._transport: asyncio.BaseTransport | None = None
        self._stall = _WriteStall(write_timeout)

    def release(self) -> None:
        if self._held:
            self._held = False
            self._gate.release()
            if self._client is not None:
                self._gate.unclaim(self._client)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._client is None:
            client = _client(transport)
            if not self._gate.claim(client):
                _abort(transport)
                return
            self._client = client
        self._started = True
        self._transport = transport
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._stall.paused(self._transport)
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._stall.resumed()
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stall.resumed()
        self._transport = None
        self.release()
        if self._started:
            self._inner.connection_lost(exc)


class SmallBufferTLS(asyncio.sslproto.SSLProtocol):
    """asyncio's server-side TLS protocol with a 16 KiB receive buffer instead of 256 KiB.

    It is the raw socket's protocol, so it sees every connection close (a failed handshake
    too) and frees the connection's slot in the gate, and sees the socket's writes pause and
    resume (``_WriteStall``).
    """

    max_size = TLS_BUFFER_BYTES

    def __init__(self, loop: asyncio.AbstractEventLoop, app_protocol: asyncio.BaseProtocol,
                 context: ssl.SSLContext, gate: _Gate, handshake_timeout: float, *,
                 write_timeout: float = DEFAULT_WRITE_TIMEOUT_S) -> None:
        # No waiter (None, as asyncio's own servers may pass): nobody awaits the handshake,
        # and a waiter's unread failure would be logged when collected.
        super().__init__(loop, app_protocol, context, None,  # type: ignore[arg-type]
                         server_side=True,
                         ssl_handshake_timeout=handshake_timeout)  # type: ignore[arg-type]
        self._gate = gate
        self._client: str | None = None
        self._raw: asyncio.BaseTransport | None = None
        self._stall = _WriteStall(write_timeout)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        client = _client(transport)
        if not self._gate.claim(client):  # that client holds its share: reset, unread
            _abort(transport)
            return
        self._client = client
        self._raw = transport
        super().connection_made(transport)

    def pause_writing(self) -> None:
        self._stall.paused(self._raw)
        super().pause_writing()

    def resume_writing(self) -> None:
        self._stall.resumed()
        super().resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stall.resumed()
        self._raw = None
        self._gate.release()
        if self._client is None:
            return  # refused in connection_made: the TLS layer never started
        self._gate.unclaim(self._client)
        super().connection_lost(exc)


# Connections accepted per readable event, so that a flood cannot starve the loop.
ACCEPT_BATCH = 64
# After the process ran out of file descriptors (or memory) for a connection, accepting
# resumes this much later (the pending connections wait in the listen backlog meanwhile).
ACCEPT_RETRY_S = 1.0
# struct linger {on, 0 s}: close() sends a reset instead of a FIN
_RESET = struct.pack("ii", 1, 0)
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _native_tls(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` brings its own TLS layer (uvloop's), which ``SmallBufferTLS`` cannot
    stand in for."""
    return type(loop).__module__.startswith("uvloop")


def _listen_sockets(host: str, port: int, *, reuse_port: bool,
                    backlog: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for ``host`` (every address it resolves to; all
    interfaces for an empty host), as ``loop.create_server`` binds them."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:
                if host:
                    raise
                continue  # a family this kernel lacks (IPv6 disabled): as asyncio, skipped
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                # as asyncio: one socket per family, not a dual-stack one
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)  # an OSError becomes one line in ``start``
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


class _Acceptor:
    """A TLS listener for a loop with its own TLS layer (uvloop): each connection passes the
    gate when accepted, before its handshake, and the refused ones are reset unread.

    It stands where aiohttp keeps a site's ``asyncio.Server`` (``sockets``, ``close``).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, socks: list[socket.socket],
                 protocol: Callable[[], asyncio.Protocol], tls: ssl.SSLContext, gate: _Gate,
                 handshake_timeout: float, write_timeout: float = DEFAULT_WRITE_TIMEOUT_S
                 ) -> None:
        self._loop = loop
        self._write_timeout = write_timeout
        self._socks = socks
        self._protocol = protocol
        self._tls = tls
        self._gate = gate
        self._handshake_timeout = handshake_timeout
        self._handshakes: set[asyncio.Task[None]] = set()
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False
        for sock in socks:
            loop.add_reader(sock, self._accept, sock)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._socks)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    log.warning("accepting a connection failed: %s", exc)
                    return
                log.warning("accepting a connection failed: %s; retrying in %ss",
                            exc, ACCEPT_RETRY_S)
                self._loop.remove_reader(sock)
                self._retry = self._loop.call_later(ACCEPT_RETRY_S, self._resume, sock)
                return
            client = _host(address)
            admitted = self._gate.admit()
            if admitted and not self._gate.claim(client):
                self._gate.release()
                admitted = False
            if not admitted:
                # reset, nothing read (as ``_Refused`` does under asyncio's TLS)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                conn.close()
                continue
            conn.setblocking(False)
            task = self._loop.create_task(self._handshake(conn, client))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def _resume(self, sock: socket.socket) -> None:
        self._retry = None
        if not self._closed:
            self._loop.add_reader(sock, self._accept, sock)

    async def _handshake(self, conn: socket.socket, client: str) -> None:
        counted = _Counted(self._protocol(), self._gate, client,
                           write_timeout=self._write_timeout)
        try:
            peer = conn.getpeername()
        except OSError:
            peer = None
        try:
            # the loop owns the socket from here: it closes it when the handshake fails
            await self._loop.connect_accepted_socket(
                lambda: counted, conn, ssl=self._tls,
                ssl_handshake_timeout=self._handshake_timeout)
        except asyncio.CancelledError:
            counted.release()
            raise
        except Exception as exc:
            counted.release()
            log.debug("TLS handshake with %s failed: %s", peer, exc or type(exc).__name__)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        for sock in self._socks:
            self._loop.remove_reader(sock)
            sock.close()
        for task in list(self._handshakes):
            task.cancel()


class BoundedSite(web.BaseSite):
    """A TCP site whose connections pass through a ``_Gate`` (and ``SmallBufferTLS``), each
    handled by a ``JsonErrors`` of the runner's server made with ``handler_args`` (the
    runner's own, as ``start`` passes them to both), answering malformed requests in the
    runner's application's ``ERROR_ANSWER``."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *,
                 ssl_context: ssl.SSLContext | None, limits: Limits,
                 handler_args: Mapping[str, Any] | None = None) -> None:
        super().__init__(runner)
        self._host, self._port = host, port
        self._tls = ssl_context
        self._limits = limits
        self._handler_args = dict(handler_args or {})
        self.gate = _Gate(limits.max_connections, limits.max_per_client)

    def _handler(self) -> web.RequestHandler:
        """A new connection's aiohttp handler."""
        server = self._runner.server
        assert server is not None
        app = self._runner.app if isinstance(self._runner, web.AppRunner) else None
        answer = default_error_answer if app is None else app.get(ERROR_ANSWER,
                                                                  default_error_answer)
        return JsonErrors(server, loop=asyncio.get_running_loop(), answer=answer,
                          **self._handler_args)

    @property
    def name(self) -> str:
        host = self._host or "*"  # every address of every family
        return f"{'https' if self._tls else 'http'}://{host}:{self._port}"

    def _protocol(self) -> asyncio.BaseProtocol:
        if not self.gate.admit():
            return _Refused()
        write_timeout = self._limits.write_timeout
        if self._tls is None:
            return _Counted(self._handler(), self.gate, write_timeout=write_timeout)
        return SmallBufferTLS(asyncio.get_running_loop(), self._handler(), self._tls,
                              self.gate, self._limits.handshake_timeout,
                              write_timeout=write_timeout)

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        backlog = min(socket.SOMAXCONN, 1024)
        if self._tls is not None and _native_tls(loop):
            socks = _listen_sockets(self._host, self._port,
                                    reuse_port=self._limits.reuse_port, backlog=backlog)
            self._server = _Acceptor(  # type: ignore[assignment]
                loop, socks, self._handler, self._tls, self.gate,
                self._limits.handshake_timeout, self._limits.write_timeout)
            return
        # No ``ssl=`` here: TLS is the protocol's own layer (``SmallBufferTLS``).
        self._server = await loop.create_server(
            self._protocol, self._host, self._port, reuse_address=True,
            reuse_port=self._limits.reuse_port or None, backlog=backlog)


# ---------------------------------------------------------------- request heads


# A request head a client may hold unfinished until the keep-alive timeout. aiohttp's defaults
# (128 lines of 8 KiB) let each connection hold about 2.5 MiB of parsed headers (measured by
# an outside probe: 400 TLS connections with 985 KiB of headers each took 0.8–1.0 GiB).
# kube-apiserver's AdmissionReview POSTs and kube-scheduler's extender calls send a handful
# of headers, so the number of lines is cut to 32; a line keeps aiohttp's 8 KiB, so that a
# long bearer token (webhook authentication, where configured) still fits. A head is then
# at most 256 KiB of raw bytes.
MAX_HEADERS = 32
MAX_FIELD_SIZE = 8190
MAX_LINE_SIZE = 8190


ErrorAnswer = Callable[[int, str], web.StreamResponse]
"""An application's error answer: its JSON error body of a status and a message."""
ERROR_ANSWER: Final = web.AppKey[ErrorAnswer]("migfit_error_answer")
"""Where an application keeps its ``ErrorAnswer`` for ``JsonErrors``; without one,
``default_error_answer``."""


def default_error_answer(status: int, message: str) -> web.StreamResponse:
    """``{"error": message, "status": status}``: the webhook's shape."""
    return web.json_response({"error": message, "status": status}, status=status)


_HEAD_TOO_LARGE = 431  # Request Header Fields Too Large (RFC 6585 §5)
_UNSUPPORTED_MEDIA = 415  # what RFC 9110 §15.5.16 answers a Content-Encoding not supported
# What a request body may be encoded as (Content-Encoding), in words.
ACCEPTED_ENCODINGS = "gzip, deflate or identity (uncompressed)"


def malformed(exc: http_exceptions.HttpProcessingError, *, max_line_size: int = MAX_LINE_SIZE,
              max_field_size: int = MAX_FIELD_SIZE, max_headers: int = MAX_HEADERS
              ) -> tuple[int, str]:
    """The status and the message that answer a request aiohttp's parser rejected with
    ``exc``: what was wrong and what to send instead, in fixed words.

    None of ``exc``'s text is returned: aiohttp's messages quote the client's bytes. The
    kind is read from the exception's class, or, for the parser's catch-all
    ``BadHttpMessage``, from the words before its first colon (llhttp's reason, or aiohttp's
    own sentence), which name the part at fault; anything else is a plain malformed request.
    A line over its bound is 431, as Go's net/http (kube-apiserver's and kube-scheduler's
    HTTP stack) answers a request head over its bound, the request line included.
    """
    if isinstance(exc, http_exceptions.LineTooLong):
        longest = max(max_line_size, max_field_size)
        return _HEAD_TOO_LARGE, (f"the request line or a header line is longer than "
                                 f"{longest:,} bytes; send a shorter path or header")
    if isinstance(exc, http_exceptions.BadHttpMethod):
        if exc.message.startswith("Received HTTPS traffic"):
            return 400, "TLS was sent to a plain-HTTP port; connect with http://"
        return 400, ("not an HTTP request: the request line must be METHOD PATH HTTP/1.1, "
                     "with a method such as GET or POST")
    if isinstance(exc, http_exceptions.BadStatusLine):
        return 400, "malformed request line: send METHOD PATH HTTP/1.1"
    if isinstance(exc, http_exceptions.InvalidURLError):
        return 400, "malformed request target: send a path such as /healthz"
    if isinstance(exc, http_exceptions.TransferEncodingError):
        return 400, ("malformed chunked body: each chunk is its size in hexadecimal, CRLF, "
                     "the data, CRLF, and a chunk of size 0 ends the body")
    if isinstance(exc, http_exceptions.InvalidHeader):
        return 400, _BAD_HEADER
    if isinstance(exc, http_exceptions.ContentEncodingError):
        # aiohttp decodes gzip and deflate; br and zstd only with optional packages
        return _UNSUPPORTED_MEDIA, (f"unsupported Content-Encoding: send the body as "
                                    f"{ACCEPTED_ENCODINGS}")
    reason = exc.message.split(":", 1)[0].split("\n", 1)[0].lower()
    if "missing" in reason and "host" in reason:
        return 400, ("the Host header is missing: an HTTP/1.1 request must send one "
                     "(Host: the server's name)")
    if "too many headers" in reason:
        return _HEAD_TOO_LARGE, (f"more than {max_headers} header lines; send at most "
                                 f"{max_headers}")
    if "transfer-encoding" in reason:
        return 400, ("invalid Transfer-Encoding: send chunked (last, once), without "
                     "Content-Length, or a Content-Length instead")
    if "content-length" in reason:
        return 400, ("invalid Content-Length: send one, a decimal number of bytes, and no "
                     "Transfer-Encoding with it")
    if "chunk" in reason:
        return 400, ("malformed chunked body: each chunk is its size in hexadecimal, CRLF, "
                     "the data, CRLF, and a chunk of size 0 ends the body")
    if "header" in reason:
        return 400, _BAD_HEADER
    return 400, "malformed HTTP request: send an HTTP/1.1 request"


_BAD_HEADER = ("malformed header line: send NAME: VALUE, the name a token (letters, digits, "
               "-, no spaces) and the value without control characters")


class JsonErrors(web.RequestHandler):
    """aiohttp's connection handler, whose answer to what its parser rejects before any
    handler runs is the application's ``ErrorAnswer`` (``malformed``: 400 or 431, a fixed
    message), with ``Connection: close``, logged as one line: at debug for traffic that is not
    HTTP at all (scanners' noise, as aiohttp logs it), else a warning. aiohttp's own answer
    was ``text/plain`` quoting the client's bytes back.

    aiohttp answers a parse error (and a handler's unexpected error, 500, or timeout, 504)
    through ``handle_error``, a public method of its ``RequestHandler``;
    tests/serving/test_malformed_requests.py fails should it stop doing so. An error past the
    parser (500, 504: the apps' middlewares answer theirs first) is aiohttp's own, its body
    replaced by the application's JSON, its message fixed."""

    __slots__ = ("_answer",)

    def __init__(self, manager: web.Server, *, answer: ErrorAnswer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._answer = answer

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None
                     ) -> web.StreamResponse:
        if isinstance(exc, http_exceptions.HttpProcessingError):
            status, text = malformed(exc, max_line_size=self.max_line_size,
                                     max_field_size=self.max_field_size,
                                     max_headers=self.max_headers)
            level = (logging.DEBUG if isinstance(exc, http_exceptions.BadHttpMethod)
                     else logging.WARNING)
            log.log(level, "malformed request from %s (%s): answered %d, %s",
                    _client(self.transport) if self.transport is not None else "a client",
                    type(exc).__name__, status, text)
        else:  # logged, and refused once an answer has begun, by aiohttp
            super().handle_error(request, status, exc, message)
            text = ("the request took too long" if status == 504 else
                    "internal error; see the server's log")
        response = self._answer(status, text)
        response.headers["Connection"] = "close"
        response.force_close()
        return response


# ---------------------------------------------------------------- logging client mistakes


class ClientErrorLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's connection logger: what it would log as an ERROR with a traceback is one
    warning line, what it logs at debug one debug line.

    A request aiohttp cannot parse ``JsonErrors`` logs itself (one line, none of the client's
    bytes); aiohttp logged it as an ERROR with a traceback ("Error handling request"), the
    client's mistake, not the server's. What is left here is aiohttp's own (a handler's
    unexpected error or timeout, a client gone before its answer).
    """

    def __init__(self) -> None:
        super().__init__(logging.getLogger("migfit.http"), {})

    def exception(self, msg: object, *args: object, exc_info: Any = True,
                  **kwargs: Any) -> None:
        self._one_line(logging.WARNING, msg, args, exc_info)

    def error(self, msg: object, *args: object, exc_info: Any = None, **kwargs: Any) -> None:
        self._one_line(logging.WARNING, msg, args, exc_info)

    def debug(self, msg: object, *args: object, exc_info: Any = None, **kwargs: Any) -> None:
        self._one_line(logging.DEBUG, msg, args, exc_info)

    def _one_line(self, level: int, msg: object, args: tuple[object, ...],
                  exc_info: Any) -> None:
        if not self.logger.isEnabledFor(level):
            return
        text = str(msg) % args if args else str(msg)
        if isinstance(exc_info, BaseException):
            detail = str(exc_info).replace("\n", " ").replace("\r", " ")[:200]
            text = f"{text}: {type(exc_info).__name__}: {detail}"
        self.logger.log(level, "%s", text)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]
                ) -> tuple[Any, MutableMapping[str, Any]]:
        return msg, kwargs


# ---------------------------------------------------------------- background tasks


async def logged(name: str, run: Callable[[], Awaitable[None]]) -> None:
    """``run()``, a failure logged as one line (``NAME stopped: ...``) instead of raised, so
    that what runs beside it (the server, other tasks) goes on."""
    try:
        await run()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.error("%s stopped: %s", name, exc)


async def together(runs: Sequence[tuple[str, Callable[[], Awaitable[None]]]]) -> None:
    """Each ``(name, run)`` as a task (``logged``: one failing stops only itself) until
    cancelled; then they are cancelled last first, each one waited for before the one before
    it is cancelled, as ``cleanup_ctx`` entries are cleaned up (the extender's leader
    election, started before the writers, releases its Lease once they have stopped)."""
    tasks = [asyncio.create_task(logged(name, run), name=name) for name, run in runs]
    try:
        if tasks:
            await asyncio.wait(tasks)
    finally:
        for task in reversed(tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def background(name: str, run: Callable[[], Awaitable[None]]
               ) -> Callable[[web.Application], AsyncIterator[None]]:
    """A ``cleanup_ctx`` entry running ``run()`` for the app's life, cancelled at cleanup; a
    failure is logged as one line (``logged``: the server keeps serving)."""

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(logged(name, run), name=name)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return lifetime


# ---------------------------------------------------------------- serving

EVENT_LOOP_ENV = "MIGFIT_EVENT_LOOP"
_T = TypeVar("_T")


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop the servers run on: uvloop where it is installed, else asyncio's
    (``None``); ``choice`` (default ``$MIGFIT_EVENT_LOOP``) may say ``uvloop`` or
    ``asyncio``. UsageError for another value, or for uvloop when it is not installed."""
    if choice is None:
        choice = os.environ.get(EVENT_LOOP_ENV, "")
    choice = choice.strip().lower()
    if choice == "asyncio":
        return None
    if choice not in ("", "uvloop"):
        raise errors.UsageError(
            f"{EVENT_LOOP_ENV}={choice!r}: use uvloop or asyncio (unset: uvloop where it "
            f"is installed)")
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise errors.UsageError(
                f"{EVENT_LOOP_ENV}=uvloop: uvloop is not installed (pip install uvloop), or "
                f"set {EVENT_LOOP_ENV}=asyncio") from None
        return None
    return uvloop.new_event_loop


class Interrupted(Exception):
    """A second stop signal cut a graceful shutdown short (``on_signals``); ``run`` ends in
    KeyboardInterrupt for it, which the command line answers with exit status 130."""


_UNRAISABLE_HOOKED = False  # ``run`` wraps sys.unraisablehook once per process


def _unraisable(default: Callable[[Any], object]) -> Callable[[Any], object]:
    """A ``sys.unraisablehook`` that turns the ssl module's failure to decode a client's
    server name (SNI) into one debug line, and hands anything else to ``default``.

    With an SNI callback set (the certificate reloader's), Python decodes the name as ASCII
    before calling it; a name that is not (RFC 6066 allows ASCII host names only) fails the
    handshake, as it should, but Python prints that error with a traceback to stderr, past
    the log's format: one multi-line block per connection any peer could open."""
    def hook(args: Any) -> object:
        exc = args.exc_value
        if (isinstance(exc, UnicodeDecodeError) and exc.encoding == "ascii"
                and isinstance(args.object, bytes)):
            log.debug("TLS handshake refused: the client's server name (SNI) is not ASCII")
            return None
        return default(args)
    return hook


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)`` on the loop ``loop_factory`` chooses; ``Interrupted`` becomes
    KeyboardInterrupt once the loop is closed. A TLS server name that is not ASCII is one
    debug line (``_unraisable``)."""
    global _UNRAISABLE_HOOKED
    if not _UNRAISABLE_HOOKED:
        sys.unraisablehook = _unraisable(sys.unraisablehook)
        _UNRAISABLE_HOOKED = True
    try:
        factory = loop_factory()
    except BaseException:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            return runner.run(main)
        except Interrupted:
            pass
    raise KeyboardInterrupt


def run_until_signal(main: Coroutine[Any, Any, None]) -> NoReturn:
    """``run(main)`` for a server command, which ends on a stop signal (``on_signals``): once
    it has returned (0) or been cut short (130), the process exits at once, its output
    flushed, without the interpreter's teardown. That teardown first puts the default
    signal handlers back, then frees the cluster model (a fifth of a second for the example
    cluster), so a second Ctrl-C 20-100 ms after the first ended ``migfit serve`` by the
    signal itself, with no line; until this exit the handler ``on_signals`` leaves answers
    it (``SIGINT after the shutdown: exiting now``). An error (a port in use, a bad flag)
    propagates as from ``run``."""
    try:
        run(main)
    except KeyboardInterrupt:
        code = 130
    else:
        code = 0
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a reader gone away: nothing left to say
            stream.flush()
    logging.shutdown()
    os._exit(code)


@contextlib.contextmanager
def on_signals(stop: asyncio.Event, hurry: asyncio.Event, *,
               before_exit: Callable[[], None] | None = None) -> Iterator[None]:
    """SIGTERM and SIGINT while the block runs, as the running loop's handlers: the first sets
    ``stop`` (a graceful shutdown begins, ``drain_and_stop``); the next, once ``stop`` is set,
    sets ``hurry`` (that shutdown waits no more: ``drain_and_stop`` closes the connections
    still open, and the server ends in ``Interrupted``), with one log line; a third exits at
    once (128 + the signal's number), should the hurried shutdown itself hang, after
    ``before_exit`` (what must not outlive the process, such as a private key's folder:
    nothing else runs on that way out). Once a signal has stopped the server, one that comes
    after the block, while the process is torn down, exits at once the same way.

    Run the whole shutdown inside the block: a signal between the loop's handlers and none
    finds Python's own, which raises KeyboardInterrupt wherever the loop happens to be; the
    second Ctrl-C of ``migfit serve`` did, and asyncio's teardown then cancelled aiohttp's
    half-stopped connection handlers, which printed tracebacks (InvalidStateError).
    Where handlers cannot be installed (not the main thread), ``stop`` is set by its owner.
    """
    loop = asyncio.get_running_loop()
    signalled = False

    def exit_now(sig: signal.Signals, why: str) -> None:
        log.warning("%s %s: exiting now", sig.name, why)
        if before_exit is not None:
            try:
                before_exit()
            except Exception as exc:  # exiting anyway: say what was left behind
                log.warning("exiting without cleaning up: %s", exc)
        logging.shutdown()
        os._exit(128 + sig)

    def received(sig: signal.Signals) -> None:
        nonlocal signalled
        signalled = True
        if not stop.is_set():
            stop.set()
        elif not hurry.is_set():
            log.warning("%s again: closing the open connections now, without waiting for "
                        "requests in flight", sig.name)
            hurry.set()
        else:
            exit_now(sig, "a third time")

    def late(signum: int, _frame: object) -> None:
        exit_now(signal.Signals(signum), "after the shutdown")

    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, received, sig)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
            # A signal stopped the server, so the process is on its way out: one more,
            # while the rest of it is torn down, exits at once as a third would (removing
            # the loop's handler gave it back to Python's default, a KeyboardInterrupt
            # wherever the teardown is, or uvloop's, which ends the process with no line
            # and without ``before_exit``).
            if signalled:
                signal.signal(sig, late)



@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Listen:
    """Where and how one application listens."""

    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None
    limits: Limits = dataclasses.field(default_factory=Limits)
    shutdown_timeout: float = 10.0
    """Seconds requests still being handled get once the listener has closed."""
    drain_delay: float = 0.0
    """Seconds to keep serving after the stop signal, with ``on_drain`` called first (the
    app's /readyz then fails, so that the Service's endpoints drop the pod first)."""
    access_log: bool = False
    port_flag: str = "--port"
    """The command's flag that set ``port``: what a port in use tells the user to change."""


class Started:
    """A serving application: its bound port and the gate counting its connections."""

    def __init__(self, port: int, site: BoundedSite) -> None:
        self.port = port
        self._site = site

    @property
    def open_connections(self) -> int:
        return self._site.gate.open

    @property
    def refused_connections(self) -> int:
        return self._site.gate.refused


async def start(app: web.Application, listen: Listen) -> tuple[web.AppRunner, Started]:
    """Set up ``app`` and start listening; the caller cleans the runner up.

    A port in use, a host that does not resolve or that this machine lacks, or a port it
    may not take is a UsageError naming the flag to change (``cannot listen on HOST port
    PORT: ...``, whichever the loop and TLS); another failure to listen, a MigfitError.
    """
    handler_args: dict[str, Any] = dict(
        access_log=logging.getLogger("aiohttp.access") if listen.access_log else None,
        keepalive_timeout=listen.limits.keepalive_timeout, logger=ClientErrorLog(),
        lingering_time=LINGER_S, max_headers=MAX_HEADERS, max_field_size=MAX_FIELD_SIZE,
        max_line_size=MAX_LINE_SIZE)
    runner = web.AppRunner(app, shutdown_timeout=listen.shutdown_timeout, **handler_args)
    await runner.setup()
    site = BoundedSite(runner, listen.host, listen.port, ssl_context=listen.ssl_context,
                       limits=listen.limits, handler_args=handler_args)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise cannot_listen(exc, listen) from None
    except BaseException:
        await runner.cleanup()
        raise
    port = runner.addresses[0][1] if runner.addresses else listen.port
    return runner, Started(int(port), site)


def check_free(listen: Listen) -> None:
    """Raise ``cannot_listen``'s error now if ``listen``'s port cannot be listened on (in use,
    a host this machine lacks, a privileged port), binding it a moment and letting it go.

    For a command that writes files before it listens (``migfit serve --cert-dir``): a
    second ``migfit serve`` on the ports of a running one rewrote that one's certificate
    files, then failed on the port. Port 0 (any free port) always passes; with
    ``limits.reuse_port`` a port other ``--reuse-port`` processes serve passes too."""
    if listen.port == 0:
        return
    try:
        socks = _listen_sockets(listen.host, listen.port,
                                reuse_port=listen.limits.reuse_port, backlog=1)
    except OSError as exc:
        raise cannot_listen(exc, listen) from None
    for sock in socks:
        sock.close()


def cannot_listen(exc: OSError, listen: Listen) -> errors.MigfitError:
    """One line for a failure to listen where ``listen`` says, with the flag to change.

    Said the same way on every path: asyncio's ``create_server`` words its own (``error
    while attempting to bind on address ('0.0.0.0', 8444): ...``), ``_listen_sockets``
    raises the bind's; only the error number is read."""
    where = f"cannot listen on {listen.host or '*'} port {listen.port}"
    if isinstance(exc, socket.gaierror):
        return errors.UsageError(f"{where}: cannot resolve {listen.host} "
                                 f"({exc.strerror or exc}); give --host an address of this "
                                 f"host (e.g. 127.0.0.1)")
    reason = (os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__).lower()
    if exc.errno == errno.EADDRINUSE:
        return errors.UsageError(f"{where}: {reason}; another process listens there: stop it "
                                 f"or pass {listen.port_flag} a free port")
    if exc.errno == errno.EADDRNOTAVAIL:
        return errors.UsageError(f"{where}: {reason}; give --host an address of this host "
                                 f"(e.g. 127.0.0.1, or '' for every address)")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return errors.UsageError(f"{where}: {reason}; ports below 1024 need privileges: pass "
                                 f"{listen.port_flag} a port from 1024")
    return errors.MigfitError(f"{where}: {reason}")


async def drain_and_stop(runner: web.AppRunner, listen: Listen,
                         on_drain: Callable[[], None] | None = None, *,
                         hurry: asyncio.Event | None = None) -> None:
    """Graceful shutdown: ``on_drain``, serve on for ``drain_delay`` s, then close the
    listener, close idle keep-alive connections and give in-flight requests
    ``shutdown_timeout`` s (aiohttp stops reading then: the drain delay is what keeps a body
    still being uploaded from being cut).

    Once ``hurry`` is set (a second stop signal, ``on_signals``), whenever that is, nothing
    is waited for any more: the drain ends, and the connections still open are aborted, so
    that the requests in flight end at once and aiohttp's own shutdown completes (it is
    never cancelled half-way: that left its handlers to asyncio's teardown, which printed
    tracebacks).
    """
    hurry = hurry if hurry is not None else asyncio.Event()
    cut = asyncio.create_task(_abort_when(hurry, runner), name="shutdown hurry")
    try:
        if listen.drain_delay > 0:
            if on_drain is not None:
                on_drain()
            log.info("shutting down: draining for %ss", listen.drain_delay)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(listen.drain_delay):
                    await hurry.wait()
    finally:
        try:
            await runner.cleanup()
        finally:
            cut.cancel()


async def _abort_when(hurry: asyncio.Event, runner: web.AppRunner) -> None:
    """Once ``hurry`` is set, abort every connection ``runner``'s server still holds."""
    await hurry.wait()
    server = runner.server
    if server is None:
        return
    for handler in server.connections:
        if handler.transport is not None:
            _abort(handler.transport)


async def serve(
    app: web.Application,
    listen: Listen,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[Started], None] | None = None,
    on_drain: Callable[[], None] | None = None,
) -> None:
    """Serve ``app`` until ``stop`` is set or SIGTERM/SIGINT arrives, then drain and stop;
    ``Interrupted`` when a second signal cut that shutdown short (``on_signals``)."""
    stop = stop or asyncio.Event()
    hurry = asyncio.Event()
    runner, started = await start(app, listen)
    stopped = False
    try:
        with on_signals(stop, hurry):
            if on_started is not None:
                on_started(started)
            await stop.wait()
            stopped = True
            await drain_and_stop(runner, listen, on_drain, hurry=hurry)
    finally:
        if not stopped:
            await runner.cleanup()
    if hurry.is_set():
        raise Interrupted

