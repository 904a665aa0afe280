"""Run a pure computation over the in-memory cluster in a forked child, off the event loop.

The cluster model is mutated on the event loop's thread by the watch, so a thread cannot read
it while the loop runs. A forked child gets a copy-on-write snapshot of the whole process at
that instant: it runs the computation over it, writes the pickled result to a pipe and exits
(``os._exit``: no atexit handler, no finaliser, nothing flushed twice). The parent reads the
pipe through the event loop (``connect_read_pipe``), so it is free to answer calls meanwhile,
then reaps the child. Only the unpickling of the result runs on the loop.

The child closes every descriptor it inherited but its end of the pipe at once (a connection
the parent closes must not stay open in it: its peer would write into a socket nobody reads),
dies with the thread that forked it (``PR_SET_PDEATHSIG`` on Linux: no orphan when the parent
is killed), takes SIGTERM and SIGINT as their default (the parent's handlers only wake its
loop), and freezes the inherited objects for the GC (a collection would touch, hence copy,
every page). A child that runs past ``timeout_s``, or a computation that is cancelled, is
killed (SIGKILL) and reaped at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copyreg
import gc
import io
import os
import pickle
import signal
import time
import types
from collections.abc import Callable
from typing import Any, Generic, NoReturn, TypeVar

T = TypeVar("T")

#: Whether this platform can fork (not Windows): otherwise the caller computes inline.
AVAILABLE = hasattr(os, "fork")

_PR_SET_PDEATHSIG = 1
_REAP_POLL_S = 0.005
_REAP_WAIT_S = 5.0  # after the pipe's end, how long a child may take to exit


class ChildFailed(Exception):
    """The child gave no result: ``str()`` says why, in one line."""


def _proxy(mapping: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    return types.MappingProxyType(mapping)


def _reduce_proxy(mapping: types.MappingProxyType[Any, Any]) -> tuple[Any, ...]:
    return (_proxy, (dict(mapping),))


def dumps(value: Any) -> bytes:
    """``value`` pickled; read-only mappings (``MappingProxyType``, which the records use)
    travel as such. The table is this pickler's own: nothing global is registered."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    table = copyreg.dispatch_table.copy()
    table[types.MappingProxyType] = _reduce_proxy
    pickler.dispatch_table = table
    pickler.dump(value)
    return out.getvalue()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _own_memory_kib() -> int:
    """The child's private dirty memory (what it copied or allocated), 0 where unknown."""
    try:
        with open("/proc/self/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Private_Dirty:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _detach(parent: int, keep: int) -> None:
    """In the child, first: close what it inherited, default signals, die with the parent."""
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)
    with contextlib.suppress(ValueError, OSError):  # only the main thread may
        signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
    gc.freeze()


def _child(read: int, write: int, parent: int, compute: Callable[[], Any]) -> NoReturn:
    code = 70
    try:
        os.close(read)
        _detach(parent, write)
        started = time.monotonic()
        result: tuple[Any, ...]
        try:
            result = ("ok", compute(), time.monotonic() - started, _own_memory_kib())
        except BaseException as exc:
            result = ("error", _one_line(exc))
        try:
            data = dumps(result)
        except Exception as exc:
            data = dumps(("error", f"the result cannot be sent back ({_one_line(exc)})"))
        view = memoryview(data)
        while view:
            view = view[os.write(write, view):]
        code = 0
    finally:
        os._exit(code)


class _Collect(asyncio.Protocol):
    def __init__(self, done: asyncio.Future[bytes]) -> None:
        self._chunks: list[bytes] = []
        self._done = done

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(b"".join(self._chunks))


class Done(Generic[T]):
    """What a child computed, how long it took there, and the memory it used of its own."""

    __slots__ = ("fork_s", "memory_kib", "pid", "read_s", "seconds", "value")

    def __init__(self, value: T, seconds: float, memory_kib: int, pid: int, *,
                 fork_s: float, read_s: float) -> None:
        self.value = value
        self.seconds = seconds
        self.memory_kib = memory_kib
        self.pid = pid
        self.fork_s = fork_s  # the fork, on the event loop
        self.read_s = read_s  # the unpickling, on the event loop


def _status(status: int) -> str | None:
    """Why a child that exited so gave nothing, None for a clean exit."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"the process computing it was killed ({name})"
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"the process computing it exited with status {code}"


async def _reap(pid: int) -> int:
    """The exit status of ``pid``, which closed its pipe: it is exiting, so poll for it."""
    deadline = time.monotonic() + _REAP_WAIT_S
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped by a kill meanwhile
            raise ChildFailed("it was stopped") from None
        if done == pid:
            return status
        if time.monotonic() > deadline:
            raise TimeoutError
        await asyncio.sleep(_REAP_POLL_S)


def _kill(pid: int) -> None:
    """SIGKILL ``pid`` and reap it (it cannot ignore the signal, so the wait is short)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


class Child(Generic[T]):
    """A forked child computing a result (``start``): ``result`` awaits it, ``kill`` ends it.
    Whatever happens, the child is reaped once: by ``result`` or by ``kill``."""

    def __init__(self, pid: int, read: int, fork_s: float) -> None:
        self.pid = pid
        self.fork_s = fork_s  # the fork, on the event loop
        self._read: int | None = read
        self._reaped = False

    def kill(self) -> None:
        """SIGKILL and reap the child (nothing when it was reaped already); idempotent."""
        if self._read is not None:
            os.close(self._read)
            self._read = None
        if not self._reaped:
            self._reaped = True
            _kill(self.pid)

    async def result(self, timeout_s: float) -> Done[T]:
        """The child's result. ChildFailed when it raised, crashed, was killed, or ran past
        ``timeout_s`` (it is killed then). Cancelling kills and reaps the child."""
        try:
            return await self._result(timeout_s)
        finally:
            self.kill()

    async def _result(self, timeout_s: float) -> Done[T]:
        if self._read is None:
            raise ChildFailed("it was stopped")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        pipe = open(self._read, "rb", buffering=0)  # noqa: SIM115 - the transport closes it
        self._read = None
        try:
            transport, _ = await loop.connect_read_pipe(lambda: _Collect(done), pipe)
        except BaseException:
            pipe.close()
            raise
        try:
            async with asyncio.timeout(timeout_s):
                data = await done
                status = await _reap(self.pid)
            self._reaped = True
        except TimeoutError:
            raise ChildFailed(f"it took longer than {timeout_s:g}s (killed)") from None
        finally:
            transport.close()
        why = _status(status)
        if why is not None or not data:
            raise ChildFailed(why or "the process computing it sent nothing")
        reading = time.perf_counter()
        try:
            result = pickle.loads(data)
        except Exception as exc:
            raise ChildFailed(f"its result cannot be read ({_one_line(exc)})") from None
        if result[0] != "ok":
            raise ChildFailed(str(result[1]))
        return Done(result[1], float(result[2]), int(result[3]), self.pid,
                    fork_s=self.fork_s, read_s=time.perf_counter() - reading)


def start(compute: Callable[[], T]) -> Child[T]:
    """Fork a child computing ``compute()`` (its result must pickle), now. ChildFailed when
    no process can be forked."""
    read, write = os.pipe()
    forking = time.perf_counter()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read)
        os.close(write)
        raise ChildFailed(f"cannot fork ({_one_line(exc)})") from None
    if pid == 0:  # pragma: no cover - the child never returns (coverage ends with it)
        _child(read, write, os.getppid(), compute)
    fork_s = time.perf_counter() - forking
    os.close(write)
    return Child(pid, read, fork_s)

