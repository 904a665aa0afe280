"""Issue a private CA and the serving certificates it signs, as PEM bytes (no files, no CLI).

kube-apiserver reaches a webhook through its Service and checks the serving certificate
against ``<service>.<namespace>.svc`` (WIRE.md §2.2); kube-scheduler checks the extender's
against ``tlsConfig.serverName`` or the URL host (WIRE.md §1.3). Go's crypto/x509 ignores the
Common Name for hostname checks, so every name a client may dial goes into the SANs.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from migfit import errors

KeyType = Literal["ecdsa", "rsa"]
KEY_TYPES: tuple[KeyType, ...] = get_args(KeyType)
RSA_BITS: tuple[int, ...] = (2048, 3072)

DEFAULT_CA_DAYS = 3650
DEFAULT_SERVING_DAYS = 365
# Certificates start a little in the past so that a client whose clock lags still accepts them.
_BACKDATE = datetime.timedelta(minutes=5)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

# RFC 1123 DNS names; a leading "*." wildcard label is allowed in extra SANs.
_DNS_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_DNS_NAME = re.compile(rf"^(\*\.)?{_DNS_LABEL}(\.{_DNS_LABEL})*$")
# Service names are RFC 1035 labels; namespaces are RFC 1123 labels (Kubernetes validation).
_DNS1035_LABEL = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_DNS1123_LABEL = re.compile(rf"^{_DNS_LABEL}$")


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its private key, both PEM (the key unencrypted PKCS#8)."""

    cert_pem: bytes
    key_pem: bytes


def generate_key(*, key_type: KeyType = "ecdsa", rsa_bits: int = 2048) -> PrivateKey:
    """A new private key: ECDSA P-256 (the default) or RSA with 2048 or 3072 bits."""
    if key_type == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        if rsa_bits not in RSA_BITS:
            raise errors.UsageError(
                f"RSA key size {rsa_bits} is not supported: use one of "
                + ", ".join(str(b) for b in RSA_BITS)
            )
        return rsa.generate_private_key(public_exponent=65537, key_size=rsa_bits)
    raise errors.UsageError(f"unknown key type {key_type!r}: use one of {', '.join(KEY_TYPES)}")


def key_type_of(key: PrivateKey) -> tuple[KeyType, int]:
    """The key type and size in bits of ``key`` (to issue a replacement of the same kind)."""
    if isinstance(key, rsa.RSAPrivateKey):
        return "rsa", key.key_size
    return "ecdsa", key.curve.key_size


def serving_sans(service: str, namespace: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The SANs of a Service's serving certificate: the four names a pod may dial, then extras.

    Raises UsageError for a service or namespace that Kubernetes would not accept, or an
    extra SAN that is neither a DNS name nor an IP address.
    """
    if not _DNS1035_LABEL.match(service):
        raise errors.UsageError(
            f"service name {service!r} is not a valid Service name: use lower-case letters, "
            "digits and '-', starting with a letter, at most 63 characters"
        )
    if not _DNS1123_LABEL.match(namespace):
        raise errors.UsageError(
            f"namespace {namespace!r} is not a valid namespace: use lower-case letters, "
            "digits and '-', at most 63 characters"
        )
    names = [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]
    for san in extra:
        normal = normalize_san(san)
        if normal not in names:
            names.append(normal)
    return tuple(names)


def normalize_san(san: str) -> str:
    """``san`` as written in a certificate: an IP address in canonical form or a lower-case DNS
    name. Raises UsageError for anything else."""
    text = san.strip()
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    name = text.lower().rstrip(".")
    if len(name) > 253 or not _DNS_NAME.match(name):
        raise errors.UsageError(
            f"SAN {san!r} is neither an IP address nor a DNS name (e.g. 127.0.0.1, localhost, "
            "migfit-webhook.example.com)"
        )
    return name


MAX_COMMON_NAME = 64


def create_ca(
    *,
    common_name: str = "migfit CA",
    days: int = DEFAULT_CA_DAYS,
    key_type: KeyType = "ecdsa",
    rsa_bits: int = 2048,
    now: datetime.datetime | None = None,
) -> Issued:
    """A self-signed CA (basicConstraints CA:true pathlen 0, keyCertSign + cRLSign)."""
    _check_days(days)
    key = generate_key(key_type=key_type, rsa_bits=rsa_bits)
    start = (now or _utcnow()) - _BACKDATE
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "migfit"),
            # RFC 5280 ub-common-name: at most 64 characters; the CN of a CA is a label only.
            x509.NameAttribute(NameOID.COMMON_NAME, common_name[:MAX_COMMON_NAME]),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return Issued(cert_pem=_cert_pem(cert), key_pem=_key_pem(key))


def issue_serving(
    *,
    ca: Issued,
    sans: Sequence[str],
    days: int = DEFAULT_SERVING_DAYS,
    key_type: KeyType = "ecdsa",
    rsa_bits: int = 2048,
    now: datetime.datetime | None = None,
) -> Issued:
    """A serving certificate for ``sans`` (serverAuth), signed by ``ca``.

    The Common Name is the first DNS SAN (informational only). The validity never extends
    past the CA's own ``not_valid_after``: it is cut there, since no client would accept it
    beyond that point anyway.
    """
    if not sans:
        raise errors.UsageError("a serving certificate needs at least one SAN")
    names = list(dict.fromkeys(normalize_san(s) for s in sans))
    general: list[x509.GeneralName] = []
    for n in names:
        if _is_ip(n):
            general.append(x509.IPAddress(ipaddress.ip_address(n)))
        else:
            general.append(x509.DNSName(n))
    dns = [n for n in names if not _is_ip(n)]
    return _issue_leaf(
        ca=ca,
        common_name=(dns or names)[0],
        sans=general,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        days=days,
        key_type=key_type,
        rsa_bits=rsa_bits,
        now=now,
    )


def issue_client(
    *,
    ca: Issued,
    common_name: str,
    days: int = DEFAULT_SERVING_DAYS,
    key_type: KeyType = "ecdsa",
    rsa_bits: int = 2048,
    now: datetime.datetime | None = None,
) -> Issued:
    """A client certificate (clientAuth) for ``common_name``, signed by ``ca``: what a server
    started with a client CA (``reloading.server_context(client_ca=...)``) accepts."""
    if not common_name:
        raise errors.UsageError("a client certificate needs a common name")
    return _issue_leaf(
        ca=ca,
        common_name=common_name,
        sans=[],
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        days=days,
        key_type=key_type,
        rsa_bits=rsa_bits,
        now=now,
    )


def _issue_leaf(
    *,
    ca: Issued,
    common_name: str,
    sans: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
    days: int,
    key_type: KeyType,
    rsa_bits: int,
    now: datetime.datetime | None,
) -> Issued:
    _check_days(days)
    ca_cert = load_certificate(ca.cert_pem)
    ca_key = load_private_key(ca.key_pem)
    if not _is_ca(ca_cert):
        raise errors.UsageError("the issuing certificate is not a CA (basicConstraints CA:false)")
    if ca_cert.public_key() != ca_key.public_key():
        raise errors.UsageError("the CA key does not belong to the CA certificate")
    key = generate_key(key_type=key_type, rsa_bits=rsa_bits)
    start = (now or _utcnow()) - _BACKDATE
    end = min(start + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
    if end <= start:
        raise errors.UsageError("the CA has expired: create a new CA (rotate --new-ca)")
    is_rsa = isinstance(key, rsa.RSAPrivateKey)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                # RSA key exchange (TLS 1.2 non-ECDHE suites) needs keyEncipherment.
                key_encipherment=is_rsa,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert_pem=_cert_pem(cert), key_pem=_key_pem(key))


THROWAWAY_CA_NAME = "migfit throwaway localhost CA"
"""The common name of ``self_signed_for_localhost``'s CA (``migfit serve`` knows its own)."""


def self_signed_for_localhost(*, days: int = 30, also: Sequence[str] = ()
                              ) -> tuple[bytes, bytes, bytes]:
    """A throwaway CA and a serving certificate for localhost, 127.0.0.1 and ::1 (and the
    names or addresses ``also``).

    Returns ``(cert_pem, key_pem, ca_pem)``: the server loads the first two; a client trusts
    ``ca_pem`` (``curl --cacert``, ``ssl.create_default_context(cadata=...)``).
    """
    ca = create_ca(common_name=THROWAWAY_CA_NAME, days=days)
    sans = ["localhost", "127.0.0.1", "::1"]
    sans += [name for name in also if name not in sans]
    serving = issue_serving(ca=ca, sans=sans, days=days)
    return serving.cert_pem, serving.key_pem, ca.cert_pem


def load_certificate(pem: bytes) -> x509.Certificate:
    """The first certificate in ``pem``; UsageError when there is none or it does not parse."""
    certs = load_certificates(pem)
    if not certs:
        raise errors.UsageError("no PEM certificate found")
    return certs[0]


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle, in order (an empty list for none)."""
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        return []
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise errors.UsageError(f"a PEM certificate does not parse: {exc}") from None


def load_private_key(pem: bytes) -> PrivateKey:
    """An unencrypted PEM private key (ECDSA or RSA); UsageError otherwise."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        # The message names the problem, never the key material.
        raise errors.UsageError(f"the private key does not parse: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise errors.UsageError("the private key must be ECDSA or RSA")
    return key


def not_valid_after(cert_pem: bytes) -> datetime.datetime:
    """When the (first) certificate in ``cert_pem`` expires, timezone-aware UTC."""
    return load_certificate(cert_pem).not_valid_after_utc


def not_valid_before(cert_pem: bytes) -> datetime.datetime:
    """When the (first) certificate in ``cert_pem`` becomes valid, timezone-aware UTC."""
    return load_certificate(cert_pem).not_valid_before_utc


def sans_of(cert_pem: bytes) -> tuple[str, ...]:
    """The DNS and IP SANs of the (first) certificate in ``cert_pem``, in certificate order."""
    cert = load_certificate(cert_pem)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    out: list[str] = []
    for name in ext:
        if isinstance(name, x509.DNSName):
            out.append(name.value)
        elif isinstance(name, x509.IPAddress):
            out.append(str(name.value))
    return tuple(out)


def is_issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether the (first) certificate in ``cert_pem`` carries a valid signature by ``ca_pem``."""
    cert = load_certificate(cert_pem)
    ca = load_certificate(ca_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def fingerprint(cert: x509.Certificate) -> str:
    """The SHA-256 fingerprint of ``cert`` as lower-case hex."""
    return cert.fingerprint(hashes.SHA256()).hex()


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _check_days(days: int) -> None:
    if days < 1:
        raise errors.UsageError(f"validity of {days} days: use a positive number of days")


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
