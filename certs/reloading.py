"""Server TLS contexts whose certificate is re-read when the mounted files change.

A Secret volume gives no inotify event: kubelet writes the new files into a fresh timestamped
directory and swaps the ``..data`` symlink atomically. So the reloader polls a SHA-256 digest
of the files' content. When it changes and the new pair passes the checks below, it is loaded
into a NEW ``ssl.SSLContext`` (made by the same factory as the first one: same TLS versions,
options and ciphers), and that context becomes the current one. The context the servers hold
never changes: its SNI callback (which OpenSSL calls for every ClientHello, with or without a
server name, under asyncio's TLS and uvloop's alike) moves each new connection onto the
current context before the server picks its certificate. Handshakes after a reload present
exactly the new certificate; connections already open keep theirs.

Loading into the live context instead is wrong: OpenSSL keeps one certificate per key type
in a context, so an ECDSA pair replaced by an RSA one left the old ECDSA certificate served to
every client that accepts ECDSA (and RSA to ECDSA left the old RSA one to RSA-only clients),
while the log said "reloaded". And a client CA removed from its file stayed trusted; with a
new context, the new file is the whole trust.

A candidate pair is refused, the last good one kept, with one warning per distinct content
(never any file content), when it does not load (half-written, not PEM, the key of another
certificate), when the key file holds no private key or a key of another type than the
certificate's, or when the certificate has expired or is not valid yet (its notBefore more
than ``NOT_BEFORE_SKEW`` ahead of this machine's clock; such a pair is looked at again once
that time has come). At start-up the same faults are a ConfigError (exit status 2): a server
started with an expired certificate fails every handshake, so it must not look healthy.
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

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from migfit import errors
from migfit.certs import certificates

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 10.0

# How far ahead of this machine's clock a certificate's notBefore may be (an issuer whose clock
# runs a little fast): more, and the certificate is not valid yet, so it is not served.
NOT_BEFORE_SKEW = datetime.timedelta(minutes=5)

# What to do about a certificate that has expired, in the words of the CLI.
RENEW_HINT = ("renew it (`migfit certs rotate --out DIR`, then apply the Secret; or let "
              "cert-manager renew it)")

StrPath = str | os.PathLike[str]

# What loading a pair can raise: the ssl module's errors, unreadable files, non-PEM input
# (ValueError), and our own parse errors.
_LOAD_ERRORS = (OSError, ValueError, errors.MigfitError)


class _Refused(errors.ConfigError):
    """A pair that loads but must not be served, or that is plainly not a pair; the message
    is the whole sentence, naming the files."""


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

    With ``client_ca``, every client is asked for a certificate, and one not signed by its
    CAs fails the handshake (``CERT_OPTIONAL``: a client with none gets through, and the
    application decides what it may have), e.g. kube-scheduler's ``tlsConfig.certFile``.
    Raises ConfigError naming the files when they do not load, are not a pair, or the
    certificate has expired.
    """
    ca_path = None if client_ca is None else Path(client_ca)
    try:
        material = _read(Path(cert_file), Path(key_file), ca_path)
        return _build(new_server_context, material, cert_file=cert_file, key_file=key_file)
    except _LOAD_ERRORS as exc:
        raise errors.ConfigError(_describe_failure(cert_file, key_file, client_ca, exc)) from None


def context_from_pem(
    *, cert_pem: bytes, key_pem: bytes, client_ca_pem: bytes | None = None
) -> ssl.SSLContext:
    """A server context (TLS 1.2+) from PEM bytes, e.g. ``certificates.self_signed_for_localhost``
    for ``migfit serve``. Raises ConfigError when the pair does not load."""
    material = _Material(cert=cert_pem, key=key_pem, client_ca=client_ca_pem)
    try:
        return _build(new_server_context, material, cert_file="<memory>", key_file="<memory>")
    except _LOAD_ERRORS as exc:
        raise errors.ConfigError(_describe_failure("<memory>", "<memory>", None, exc)) from None


class CertificateReloader:
    """Keeps a server ``SSLContext`` serving the current content of a certificate/key pair.

    Create it before the server, pass ``reloader.context`` to the server, then run
    ``await reloader.run(interval)`` as a background task (it never returns; cancel it on
    shutdown). ``check_once()`` does one poll synchronously.

    Each reload makes a new context with ``new_context`` and loads the new pair (and the
    ``client_ca`` file, re-read too) into it; ``context``'s SNI callback (the reloader's own:
    do not set another) hands new connections to it.
    """

    def __init__(
        self,
        *,
        cert_file: StrPath,
        key_file: StrPath,
        client_ca: StrPath | None = None,
        new_context: Callable[[], ssl.SSLContext] = new_server_context,
        on_reload: Callable[[], None] | None = None,
    ) -> None:
        """Load the pair now (ConfigError when it does not load, is not a pair, or the
        certificate has expired or is not valid yet) into a context from ``new_context``, as
        every reload does. ``on_reload`` is called after each successful reload."""
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.client_ca = None if client_ca is None else Path(client_ca)
        self._on_reload = on_reload
        self._new_context = new_context
        try:
            material = _read(self.cert_file, self.key_file, self.client_ca)
            context = self._build(material)
        except _LOAD_ERRORS as exc:
            raise errors.ConfigError(
                _describe_failure(self.cert_file, self.key_file, self.client_ca, exc)
            ) from None
        context.sni_callback = self._select
        self._context = context
        self._current = context
        self._good = material
        self._seen = material.digest
        # A refused pair that is not valid YET is looked at again from this time on.
        self._retry_at: datetime.datetime | None = None
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
        files cannot be read, or the new pair is refused (the old one is kept)."""
        return self._consider(self._try_read())

    async def run(self, interval: float = DEFAULT_INTERVAL) -> None:
        """Poll every ``interval`` seconds until cancelled. File reads run in a thread so a
        slow volume never blocks the event loop."""
        if interval <= 0:
            raise errors.UsageError(f"reload interval {interval}: use a positive number")
        while True:
            await asyncio.sleep(interval)
            try:
                self._consider(await asyncio.to_thread(self._try_read))
            except Exception:  # never let one bad poll stop reloading for good
                log.exception("TLS certificate reload check failed")

    def _select(self, conn: ssl.SSLObject, server_name: str | None,
                context: ssl.SSLContext) -> None:
        """The SNI callback: a handshake begun on ``context`` goes on with the current one
        (``SSL_set_SSL_CTX``: its certificate, key and trust store)."""
        current = self._current
        if current is not context:
            conn.context = current

    def _build(self, material: _Material) -> ssl.SSLContext:
        return _build(self._new_context, material, cert_file=self.cert_file,
                      key_file=self.key_file)

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
        retry_at, self._retry_at = self._retry_at, None
        if digest == self._seen and (retry_at is None or _now() < retry_at):
            self._retry_at = retry_at
            return False
        warned = digest == self._seen  # a not-yet-valid pair looked at again
        self._seen = digest
        if digest == self._good.digest:
            return False
        try:
            context = self._build(material)
        except _LOAD_ERRORS as exc:
            if isinstance(exc, _NotYetValid):
                self._retry_at = exc.valid_from
            if not warned:
                log.warning(
                    "%s; still serving the previous certificate (valid until %s)",
                    _describe_failure(self.cert_file, self.key_file, self.client_ca, exc),
                    self._not_after.isoformat(),
                )
            return False
        # One reference assignment: the next ClientHello's SNI callback reads it.
        self._current = context
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


class _NotYetValid(_Refused):
    """A certificate whose notBefore is too far ahead; ``valid_from`` is when it may be served
    (notBefore less the skew)."""

    def __init__(self, message: str, *, valid_from: datetime.datetime) -> None:
        super().__init__(message)
        self.valid_from = valid_from


def _read(cert_file: Path, key_file: Path, client_ca: Path | None) -> _Material:
    return _Material(
        cert=cert_file.read_bytes(),
        key=key_file.read_bytes(),
        client_ca=None if client_ca is None else client_ca.read_bytes(),
    )


def _build(
    new_context: Callable[[], ssl.SSLContext],
    material: _Material,
    *,
    cert_file: StrPath,
    key_file: StrPath,
) -> ssl.SSLContext:
    """A new context from ``new_context`` serving exactly these bytes, after ``_check``."""
    _check(material, cert_file=cert_file, key_file=key_file)
    context = new_context()
    _load_into(context, material)
    return context


def _check(material: _Material, *, cert_file: StrPath, key_file: StrPath) -> None:
    """Refuse, naming the files, what OpenSSL would load but must not be served (a certificate
    that has expired or is not valid yet) and what it would refuse only in its own words (a
    certificate given as the key, a key of another type than the certificate's)."""
    if b"-----BEGIN" not in material.cert or b"-----BEGIN" not in material.key:
        raise ValueError("not PEM")
    if b"-----BEGIN CERTIFICATE-----" not in material.cert and b"PRIVATE KEY-----" in material.cert:
        raise _Refused(f"{cert_file} holds no certificate (it looks like a private key): pass "
                       f"the certificate (tls.crt) as the certificate file")
    if b"PRIVATE KEY-----" not in material.key and b"-----BEGIN CERTIFICATE-----" in material.key:
        raise _Refused(f"{key_file} holds no private key (it looks like a certificate): pass "
                       f"the private key (tls.key) as the key file")
    # Parse first: a clear error for a truncated certificate, and its validity is known.
    cert = certificates.load_certificate(material.cert)
    # A key that does not parse here (encrypted, say) is left to OpenSSL, which says why.
    with contextlib.suppress(ValueError, TypeError, UnsupportedAlgorithm):
        key = serialization.load_pem_private_key(material.key, password=None).public_key()
        key_kind, cert_kind = _kind(key), _kind(cert.public_key())
        if key_kind != cert_kind:
            raise _Refused(f"the key in {key_file} is {key_kind} key, the certificate in "
                           f"{cert_file} holds {cert_kind} key: they are not a pair; pass the "
                           f"key that was issued with the certificate")
        if _spki(key) != _spki(cert.public_key()):
            raise _Refused(f"the key in {key_file} does not belong to the certificate in "
                           f"{cert_file}: pass the key that was issued with the certificate")
    now = _now()
    if cert.not_valid_after_utc <= now:
        raise _Refused(f"the TLS certificate in {cert_file} expired at "
                       f"{cert.not_valid_after_utc.isoformat()}: {RENEW_HINT}")
    if cert.not_valid_before_utc > now + NOT_BEFORE_SKEW:
        raise _NotYetValid(
            f"the TLS certificate in {cert_file} is not valid until "
            f"{cert.not_valid_before_utc.isoformat()}, more than "
            f"{NOT_BEFORE_SKEW.total_seconds() / 60:g} minutes from now: check the clock of "
            f"this machine and of the one that issued it",
            valid_from=cert.not_valid_before_utc - NOT_BEFORE_SKEW,
        )


def _kind(public_key: object) -> str:
    """A key's type as a sentence says it: "an RSA", "an ECDSA", "an Ed25519"..."""
    if isinstance(public_key, rsa.RSAPublicKey):
        return "an RSA"
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        return "an ECDSA"
    name = type(public_key).__name__.removeprefix("_").removesuffix("PublicKey")
    return f"a {name or 'different'}"


def _spki(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER,
                                   serialization.PublicFormat.SubjectPublicKeyInfo)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _load_into(context: ssl.SSLContext, material: _Material) -> None:
    """Load exactly these bytes into ``context`` (the ssl module only loads chains from files,
    so they go through private, immediately removed files)."""
    with _private_files(material.cert, material.key) as (cert_path, key_path):
        context.load_cert_chain(cert_path, key_path)
    if material.client_ca is not None:
        context.load_verify_locations(cadata=material.client_ca.decode("ascii", "replace"))
        # Asked of every client and verified when given; a client without one gets through
        # the handshake, and the extender answers only its probes and metrics
        # (``extender.server._certified``): the kubelet's probes present none.
        context.verify_mode = ssl.CERT_OPTIONAL
        # No session tickets: a resumed session skips the client certificate, and a ticket's
        # keys outlive every reload, so a client whose CA was removed from the file got in
        # by resuming. kube-scheduler opens few, long-lived connections: a full handshake
        # each time costs nothing worth keeping tickets for.
        context.options |= ssl.OP_NO_TICKET
        context.num_tickets = 0


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
    if isinstance(exc, _Refused):
        return exc.message
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
