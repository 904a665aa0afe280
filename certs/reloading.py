"""Server TLS contexts whose certificate is re-read when the mounted files change.

A Secret volume gives no inotify event: kubelet writes the new files into a fresh timestamped
directory and swaps the ``..data`` symlink atomically. So the reloader polls a SHA-256 digest
of the files' content. When it changes and the new pair loads, the pair is loaded into the
SAME ``ssl.SSLContext`` the server was started with: handshakes after that use the new
certificate, connections already open keep theirs.

``SSLContext.load_cert_chain`` on a live context is not atomic: when the certificate loads
but the key does not match, the context is left with no usable key. So every candidate pair
is first loaded into a scratch context, from exactly the bytes that were read (not from the
paths again, which may have changed meanwhile), and only then into the live one; if even that
fails, the last good pair is put back. A broken or half-written pair keeps the old certificate
and logs one warning per distinct content (never any file content).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from migfit import errors
from migfit.certs import certificates

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 10.0

StrPath = str | os.PathLike[str]

# What loading a pair can raise: the ssl module's errors, unreadable files, non-PEM input
# (ValueError), and our own parse errors.
_LOAD_ERRORS = (OSError, ValueError, errors.MigfitError)


@dataclass(frozen=True, slots=True)
class _Material:
    """The bytes of one certificate/key pair (and the optional client CA), and their digest."""

    cert: bytes
    key: bytes
    client_ca: bytes | None

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (self.cert, self.key, self.client_ca or b""):
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
        return h.hexdigest()


def new_server_context() -> ssl.SSLContext:
    """A server-side context with TLS 1.2 as the minimum and no certificate loaded yet."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return context


def server_context(
    *, cert_file: StrPath, key_file: StrPath, client_ca: StrPath | None = None
) -> ssl.SSLContext:
    """A server context (TLS 1.2+) serving ``cert_file``/``key_file``.

    With ``client_ca``, clients must present a certificate signed by one of its CAs
    (``CERT_REQUIRED``), e.g. kube-scheduler's ``tlsConfig.certFile``. Raises ConfigError
    naming the files when they do not load.
    """
    context = new_server_context()
    ca_path = None if client_ca is None else Path(client_ca)
    try:
        _load_into(context, _read(Path(cert_file), Path(key_file), ca_path))
    except _LOAD_ERRORS as exc:
        raise errors.ConfigError(_describe_failure(cert_file, key_file, client_ca, exc)) from None
    return context


def context_from_pem(
    *, cert_pem: bytes, key_pem: bytes, client_ca_pem: bytes | None = None
) -> ssl.SSLContext:
    """A server context (TLS 1.2+) from PEM bytes, e.g. ``certificates.self_signed_for_localhost``
    for ``migfit serve``. Raises ConfigError when the pair does not load."""
    context = new_server_context()
    try:
        _load_into(context, _Material(cert=cert_pem, key=key_pem, client_ca=client_ca_pem))
    except _LOAD_ERRORS as exc:
        raise errors.ConfigError(_describe_failure("<memory>", "<memory>", None, exc)) from None
    return context


class CertificateReloader:
    """Keeps a server ``SSLContext`` serving the current content of a certificate/key pair.

    Create it before the server, pass ``reloader.context`` to the server, then run
    ``await reloader.run(interval)`` as a background task (it never returns; cancel it on
    shutdown). ``check_once()`` does one poll synchronously.

    A changed ``client_ca`` file is re-read too, but OpenSSL can only add CAs to a live
    context: a CA removed from that file stays trusted until the process restarts.
    """

    def __init__(
        self,
        *,
        cert_file: StrPath,
        key_file: StrPath,
        client_ca: StrPath | None = None,
        context: ssl.SSLContext | None = None,
        on_reload: Callable[[], None] | None = None,
    ) -> None:
        """Load the pair now (ConfigError when it does not load) into ``context``, or into a
        new ``new_server_context()``. ``on_reload`` is called after each successful reload."""
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.client_ca = None if client_ca is None else Path(client_ca)
        self._on_reload = on_reload
        self._context = context if context is not None else new_server_context()
        try:
            material = _read(self.cert_file, self.key_file, self.client_ca)
            _load_into(self._context, material)
        except _LOAD_ERRORS as exc:
            raise errors.ConfigError(
                _describe_failure(self.cert_file, self.key_file, self.client_ca, exc)
            ) from None
        self._good = material
        self._seen = material.digest
        self._not_after = _not_after(material.cert)
        self.reloads = 0

    @property
    def context(self) -> ssl.SSLContext:
        """The context to serve with; the same object for the reloader's whole life."""
        return self._context

    @property
    def not_valid_after(self) -> datetime.datetime:
        """Expiry of the certificate currently served (UTC)."""
        return self._not_after

    def expiry_timestamp(self) -> float:
        """Expiry of the certificate currently served, in Unix seconds (for a gauge)."""
        return self._not_after.timestamp()

    def check_once(self) -> bool:
        """Poll once. True when a changed pair was loaded; False when nothing changed, the
        files cannot be read, or the new pair does not load (the old one is kept)."""
        return self._consider(self._try_read())

    async def run(self, interval: float = DEFAULT_INTERVAL) -> None:
        """Poll every ``interval`` seconds until cancelled. File reads run in a thread so a
        slow volume never blocks the event loop."""
        if interval <= 0:
            raise errors.UsageError(f"reload interval {interval}: use a positive number")
        while True:
            await asyncio.sleep(interval)
            try:
                # Read in a thread; load on the loop's thread, so that no handshake of this
                # loop creates a connection from the context while it is being changed.
                self._consider(await asyncio.to_thread(self._try_read))
            except Exception:  # never let one bad poll stop reloading for good
                log.exception("TLS certificate reload check failed")

    def _try_read(self) -> _Material | OSError:
        try:
            return _read(self.cert_file, self.key_file, self.client_ca)
        except OSError as exc:
            return exc

    def _consider(self, material: _Material | OSError) -> bool:
        if isinstance(material, OSError):
            # Between kubelet's writes, or a file removed: keep serving, warn once per state.
            state = f"unreadable:{type(material).__name__}:{material.errno}"
            if state != self._seen:
                self._seen = state
                log.warning(
                    "TLS files %s, %s cannot be read (%s); still serving the previous certificate",
                    self.cert_file,
                    self.key_file,
                    material.strerror or type(material).__name__,
                )
            return False
        digest = material.digest
        if digest == self._seen:
            return False
        self._seen = digest
        if digest == self._good.digest:
            return False
        try:
            _load_into(new_server_context(), material)
        except _LOAD_ERRORS as exc:
            log.warning(
                "%s; still serving the previous certificate (valid until %s)",
                _describe_failure(self.cert_file, self.key_file, self.client_ca, exc),
                self._not_after.isoformat(),
            )
            return False
        try:
            _load_into(self._context, material)
        except _LOAD_ERRORS as exc:  # pragma: no cover - defensive
            log.error("reloading TLS files into the live context failed (%s); restoring", exc)
            _load_into(self._context, self._good)
            return False
        self._good = material
        self._not_after = _not_after(material.cert)
        self.reloads += 1
        log.info(
            "reloaded TLS certificate from %s (serial %x, valid until %s)",
            self.cert_file,
            certificates.load_certificate(material.cert).serial_number,
            self._not_after.isoformat(),
        )
        if self._on_reload is not None:
            self._on_reload()
        return True


def _read(cert_file: Path, key_file: Path, client_ca: Path | None) -> _Material:
    return _Material(
        cert=cert_file.read_bytes(),
        key=key_file.read_bytes(),
        client_ca=None if client_ca is None else client_ca.read_bytes(),
    )


def _load_into(context: ssl.SSLContext, material: _Material) -> None:
    """Load exactly these bytes into ``context`` (the ssl module only loads chains from files,
    so they go through private, immediately removed files)."""
    if b"-----BEGIN" not in material.cert or b"-----BEGIN" not in material.key:
        raise ValueError("not PEM")
    # Parse first: a clear error for a truncated certificate, and its expiry is known.
    certificates.load_certificate(material.cert)
    with _private_files(material.cert, material.key) as (cert_path, key_path):
        context.load_cert_chain(cert_path, key_path)
    if material.client_ca is not None:
        context.load_verify_locations(cadata=material.client_ca.decode("ascii", "replace"))
        context.verify_mode = ssl.CERT_REQUIRED


@contextlib.contextmanager
def _private_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """Two readable paths holding ``cert`` and ``key``: anonymous memory files on Linux (works
    with a read-only root filesystem), else a private temporary directory."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and os.path.isdir("/proc/self/fd"):
        fds: list[int] = []
        try:
            for data in (cert, key):
                fd = memfd_create("migfit-tls", getattr(os, "MFD_CLOEXEC", 0))
                fds.append(fd)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="migfit-tls-") as tmp:
        paths = []
        for name, data in (("tls.crt", cert), ("tls.key", key)):
            path = os.path.join(tmp, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            paths.append(path)
        yield paths[0], paths[1]


def _not_after(cert_pem: bytes) -> datetime.datetime:
    return certificates.not_valid_after(cert_pem)


def _describe_failure(
    cert_file: StrPath, key_file: StrPath, client_ca: StrPath | None, exc: BaseException
) -> str:
    """One line naming the files and the kind of failure, never their content."""
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or "TLS library error"
        if "KEY_VALUES_MISMATCH" in str(reason).upper():
            reason = "the key does not belong to the certificate"
    elif isinstance(exc, OSError):
        reason = exc.strerror or type(exc).__name__
    elif isinstance(exc, errors.MigfitError):
        reason = exc.message
    else:
        reason = "not a PEM certificate and key"
    files = f"{cert_file} and {key_file}" + (f" (client CA {client_ca})" if client_ca else "")
    return f"cannot load TLS certificate and key from {files}: {reason}"
