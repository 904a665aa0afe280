"""The certificate directory on disk: init, rotate, roll the CA with an overlap, retire it.

Layout (the file names of a ``kubernetes.io/tls`` Secret plus the CA and the trust bundle):

    ca.crt         the current CA certificate
    ca.key         its key (mode 0600)
    tls.crt        the serving certificate, signed by ca.crt
    tls.key        its key (mode 0600)
    ca-bundle.crt  what clients trust: ca.crt, plus the previous CA(s) during a CA roll

A CA roll keeps clients working throughout: ``rotate(new_ca=True)`` writes a bundle with the
old and the new CA and a serving certificate from the new CA. Clients that receive the new
bundle first accept both the old and the new serving certificate. So the bundle must reach
the clients (the webhook's caBundle, kube-scheduler's CA file) before the Secret reaches the
servers: a server presenting the new certificate to a client that trusts only the old CA is
refused. ``retire_old_ca`` then drops the old CA once every server presents the new
certificate.

Every file is written atomically (a temporary file in the same directory, fsync, rename), so a
server polling the directory never reads half a file.
"""

from __future__ import annotations

import datetime
import os
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from migfit import errors
from migfit.certs import certificates

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
CA_BUNDLE = "ca-bundle.crt"
FILES = (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY, CA_BUNDLE)

KEY_MODE = 0o600
CERT_MODE = 0o644
DIR_MODE = 0o700


@dataclass(frozen=True, slots=True)
class CertificateDir:
    """The five file paths of one certificate directory."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.directory / CA_KEY

    @property
    def tls_cert(self) -> Path:
        return self.directory / TLS_CERT

    @property
    def tls_key(self) -> Path:
        return self.directory / TLS_KEY

    @property
    def ca_bundle(self) -> Path:
        return self.directory / CA_BUNDLE


@dataclass(frozen=True, slots=True)
class Summary:
    """What a store operation left on disk, for the CLI to print (no secret material)."""

    paths: CertificateDir
    sans: tuple[str, ...]
    serving_not_after: datetime.datetime
    ca_not_after: datetime.datetime
    ca_fingerprint: str
    bundle_fingerprints: tuple[str, ...]


def init(
    directory: Path,
    *,
    service: str,
    namespace: str,
    extra_sans: Sequence[str] = (),
    days: int = certificates.DEFAULT_SERVING_DAYS,
    ca_days: int = certificates.DEFAULT_CA_DAYS,
    key_type: certificates.KeyType = "ecdsa",
    rsa_bits: int = 2048,
    force: bool = False,
) -> Summary:
    """Create a new CA and a serving certificate for ``service.namespace`` in ``directory``.

    Refuses (UsageError) when any of the five files exists already, unless ``force``.
    """
    paths = CertificateDir(directory)
    sans = certificates.serving_sans(service, namespace, extra_sans)
    if directory.exists() and not directory.is_dir():
        raise errors.UsageError(f"{directory} exists and is not a directory: choose another --out")
    present = [name for name in FILES if (directory / name).exists()]
    if present and not force:
        raise errors.UsageError(
            f"{directory} already holds {', '.join(present)}: use `migfit certs rotate` to "
            "renew, or --force to replace them (clients trusting the old CA will stop working)"
        )
    ca = certificates.create_ca(
        common_name=f"migfit CA for {service}.{namespace}",
        days=ca_days,
        key_type=key_type,
        rsa_bits=rsa_bits,
    )
    serving = certificates.issue_serving(
        ca=ca, sans=sans, days=days, key_type=key_type, rsa_bits=rsa_bits
    )
    _ensure_dir(directory)
    write_atomic(paths.ca_key, ca.key_pem, mode=KEY_MODE)
    write_atomic(paths.ca_cert, ca.cert_pem, mode=CERT_MODE)
    write_atomic(paths.ca_bundle, ca.cert_pem, mode=CERT_MODE)
    write_atomic(paths.tls_key, serving.key_pem, mode=KEY_MODE)
    write_atomic(paths.tls_cert, serving.cert_pem, mode=CERT_MODE)
    return summary(directory)


def rotate(
    directory: Path,
    *,
    days: int = certificates.DEFAULT_SERVING_DAYS,
    sans: Sequence[str] | None = None,
    new_ca: bool = False,
    ca_days: int = certificates.DEFAULT_CA_DAYS,
    key_type: certificates.KeyType | None = None,
    rsa_bits: int | None = None,
) -> Summary:
    """Issue a new serving certificate; with ``new_ca``, from a new CA that joins the bundle.

    SANs and key type default to those of the current serving certificate. Without
    ``new_ca`` the existing CA signs and the bundle keeps its CAs. With ``new_ca`` the bundle
    becomes the old bundle (expired CAs dropped) plus the new CA.
    """
    paths = CertificateDir(directory)
    ca = _read_ca(paths)
    current_cert = _read(paths.tls_cert, what="serving certificate")
    current_key = certificates.load_private_key(_read(paths.tls_key, what="serving key"))
    current_type, current_bits = certificates.key_type_of(current_key)
    the_type = key_type or current_type
    the_bits = rsa_bits or (current_bits if current_type == "rsa" else 2048)
    names = tuple(sans) if sans is not None else certificates.sans_of(current_cert)
    if not names:
        raise errors.UsageError(
            f"{paths.tls_cert} has no SANs to reuse: pass --service and --namespace"
        )

    if new_ca:
        old_bundle = _read_bundle(paths, fallback=ca.cert_pem)
        ca_cert = certificates.load_certificate(ca.cert_pem)
        ca_type, ca_bits = certificates.key_type_of(certificates.load_private_key(ca.key_pem))
        ca = certificates.create_ca(
            common_name=_next_ca_name(ca_cert),
            days=ca_days,
            key_type=key_type or ca_type,
            rsa_bits=rsa_bits or (ca_bits if ca_type == "rsa" else 2048),
        )
        bundle = _bundle_pem([*certificates.load_certificates(old_bundle)], ca.cert_pem)
        # The bundle first: a crash after this line leaves clients trusting one CA too many,
        # never one too few.
        write_atomic(paths.ca_bundle, bundle, mode=CERT_MODE)
        write_atomic(paths.ca_key, ca.key_pem, mode=KEY_MODE)
        write_atomic(paths.ca_cert, ca.cert_pem, mode=CERT_MODE)

    serving = certificates.issue_serving(
        ca=ca, sans=names, days=days, key_type=the_type, rsa_bits=the_bits
    )
    write_atomic(paths.tls_key, serving.key_pem, mode=KEY_MODE)
    write_atomic(paths.tls_cert, serving.cert_pem, mode=CERT_MODE)
    if not paths.ca_bundle.exists():
        write_atomic(paths.ca_bundle, ca.cert_pem, mode=CERT_MODE)
    return summary(directory)


def retire_old_ca(directory: Path) -> tuple[str, ...]:
    """End a CA roll: the bundle becomes ca.crt alone. Returns the retired CAs' fingerprints.

    Refuses (UsageError) while the serving certificate is not signed by the current CA, since
    clients would then reject it.
    """
    paths = CertificateDir(directory)
    ca = _read_ca(paths)
    serving = _read(paths.tls_cert, what="serving certificate")
    if not certificates.is_issued_by(serving, ca.cert_pem):
        raise errors.UsageError(
            f"{paths.tls_cert} is not signed by {paths.ca_cert}: run `migfit certs rotate` first"
        )
    current = certificates.fingerprint(certificates.load_certificate(ca.cert_pem))
    old = certificates.load_certificates(_read_bundle(paths, fallback=ca.cert_pem))
    retired = tuple(fp for fp in (certificates.fingerprint(c) for c in old) if fp != current)
    write_atomic(paths.ca_bundle, ca.cert_pem, mode=CERT_MODE)
    return retired


def summary(directory: Path) -> Summary:
    """Read what is in ``directory`` (certificates only; keys are checked to exist)."""
    paths = CertificateDir(directory)
    ca = _read_ca(paths)
    serving = _read(paths.tls_cert, what="serving certificate")
    _read(paths.tls_key, what="serving key")
    ca_cert = certificates.load_certificate(ca.cert_pem)
    bundle = certificates.load_certificates(_read_bundle(paths, fallback=ca.cert_pem))
    return Summary(
        paths=paths,
        sans=certificates.sans_of(serving),
        serving_not_after=certificates.not_valid_after(serving),
        ca_not_after=ca_cert.not_valid_after_utc,
        ca_fingerprint=certificates.fingerprint(ca_cert),
        bundle_fingerprints=tuple(certificates.fingerprint(c) for c in bundle),
    )


def check_serving(directory: Path) -> None:
    """Refuse (UsageError) a serving pair that no server could present: ``tls.key`` is not the
    key of ``tls.crt``, or ``tls.crt`` is signed by no CA of the directory (``ca.crt`` or one
    in ``ca-bundle.crt``), so clients would reject it."""
    paths = CertificateDir(directory)
    cert_pem = _read(paths.tls_cert, what="serving certificate")
    key = certificates.load_private_key(_read(paths.tls_key, what="serving key"))
    rotate = f"`migfit certs rotate --out {shlex.quote(str(directory))}`"
    if certificates.load_certificate(cert_pem).public_key() != key.public_key():
        raise errors.UsageError(
            f"{paths.tls_key} does not belong to {paths.tls_cert}: put back the key of that "
            f"certificate, or issue a new pair from the CA with {rotate}")
    ca_pem = _read(paths.ca_cert, what="CA certificate")
    cas = [ca_pem, *(c.public_bytes(serialization.Encoding.PEM)
                     for c in certificates.load_certificates(_read_bundle(paths, fallback=ca_pem)))]
    if not any(certificates.is_issued_by(cert_pem, ca) for ca in cas):
        raise errors.UsageError(
            f"{paths.tls_cert} is signed neither by {paths.ca_cert} nor by a CA in "
            f"{paths.ca_bundle}, so clients would reject it: put back the pair that CA "
            f"issued, or issue a new one from it with {rotate}")


def read_bundle(directory: Path) -> bytes:
    """The trust bundle PEM (ca-bundle.crt, else ca.crt)."""
    paths = CertificateDir(directory)
    return _read_bundle(paths, fallback=_read(paths.ca_cert, what="CA certificate"))


def write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new content, never a mix.

    The temporary file is created with ``mode`` from the start (a key is never readable by
    others, not even briefly), fsynced, then renamed over ``path``.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _ensure_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except OSError as exc:
        raise errors.UsageError(f"cannot create {directory}: {exc.strerror}") from None


def _read(path: Path, *, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise _missing(path, what=what) from None
    except OSError as exc:
        raise errors.UsageError(f"cannot read {what} {path}: {exc.strerror}") from None


def _missing(path: Path, *, what: str) -> errors.UsageError:
    """What to do when ``path`` is missing: a ``migfit certs init`` that works (its
    required flags as placeholders), with --force when it would replace files."""
    directory = path.parent
    init = "migfit certs init --out {} --service NAME --namespace NS"
    if is_throwaway_ca(directory / CA_CERT):
        return errors.UsageError(
            f"{directory} holds the throwaway certificate of `migfit serve`, which never "
            f"writes its CA key and makes a new CA at each start: for a certificate that "
            f"migfit certs can rotate, run `{init.format('NEW-DIR')}`")
    present = [name for name in FILES if (directory / name).exists()]
    if not present:
        return errors.UsageError(
            f"no {what} at {path}: run `{init.format(shlex.quote(str(directory)))}` first")
    return errors.UsageError(
        f"no {what} at {path}, though {directory} holds {', '.join(present)}: put it back, or "
        f"start anew with `{init.format(shlex.quote(str(directory)))} --force` (clients "
        f"trusting the old CA will stop working)")


def is_throwaway_ca(ca_file: Path) -> bool:
    """Whether ``ca_file`` is the throwaway CA of a ``migfit serve`` (whose key it never
    writes); False when it is missing or not a certificate."""
    try:
        subject = certificates.load_certificate(ca_file.read_bytes()).subject
    except (OSError, errors.MigfitError):
        return False
    names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return [name.value for name in names] == [certificates.THROWAWAY_CA_NAME]


def _read_ca(paths: CertificateDir) -> certificates.Issued:
    ca = certificates.Issued(
        cert_pem=_read(paths.ca_cert, what="CA certificate"),
        key_pem=_read(paths.ca_key, what="CA key"),
    )
    cert = certificates.load_certificate(ca.cert_pem)
    key = certificates.load_private_key(ca.key_pem)
    if cert.public_key() != key.public_key():
        raise errors.UsageError(f"{paths.ca_key} does not belong to {paths.ca_cert}")
    return ca


def _read_bundle(paths: CertificateDir, *, fallback: bytes) -> bytes:
    try:
        data = paths.ca_bundle.read_bytes()
    except FileNotFoundError:
        return fallback
    return data if certificates.load_certificates(data) else fallback


def _bundle_pem(old: list[x509.Certificate], new_ca_pem: bytes) -> bytes:
    """The old CAs that are still valid, then the new one, each once."""
    now = datetime.datetime.now(datetime.UTC)
    new = certificates.load_certificate(new_ca_pem)
    seen = {certificates.fingerprint(new)}
    out: list[bytes] = []
    for cert in old:
        fp = certificates.fingerprint(cert)
        if fp in seen or cert.not_valid_after_utc <= now:
            continue
        seen.add(fp)
        out.append(cert.public_bytes(serialization.Encoding.PEM))
    out.append(new_ca_pem)
    return b"".join(out)


def _next_ca_name(current: x509.Certificate) -> str:
    attrs = current.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    base = str(attrs[0].value) if attrs else "migfit CA"
    base = base.split(" (")[0]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    room = certificates.MAX_COMMON_NAME - len(stamp) - 3  # " (" + stamp + ")"
    return f"{base[:room].rstrip()} ({stamp})"
