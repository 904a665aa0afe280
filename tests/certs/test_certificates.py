"""certs.certificates: what the CA and the serving certificate contain, checked by openssl."""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

import pytest
from certs_tls import NAMESPACE, SANS, SERVICE
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from migfit import errors
from migfit.certs import certificates


def openssl_verify(tmp_path: Path, *, ca_pem: bytes, cert_pem: bytes) -> tuple[int, str]:
    ca = tmp_path / "verify-ca.pem"
    cert = tmp_path / "verify-cert.pem"
    ca.write_bytes(ca_pem)
    cert.write_bytes(cert_pem)
    done = subprocess.run(
        ["openssl", "verify", "-purpose", "sslserver", "-CAfile", str(ca), str(cert)],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def ca() -> certificates.Issued:
    return certificates.create_ca()


def test_serving_sans_are_the_four_service_names_then_extras() -> None:
    assert certificates.serving_sans(SERVICE, NAMESPACE, ("127.0.0.1", "localhost")) == SANS


def test_extra_sans_are_normalised_and_deduplicated() -> None:
    sans = certificates.serving_sans("svc", "ns", ("LocalHost.", "0:0::1", "svc.ns", "::1"))
    assert sans[4:] == ("localhost", "::1")


@pytest.mark.parametrize("bad", ["", "under_score", "-x", "a..b", "http://x", "x" * 64])
def test_an_extra_san_that_is_no_name_nor_address_is_refused(bad: str) -> None:
    with pytest.raises(errors.UsageError, match="neither an IP address nor a DNS name"):
        certificates.serving_sans("svc", "ns", (bad,))


@pytest.mark.parametrize(("service", "namespace"), [("Svc", "ns"), ("1svc", "ns"), ("s", "n.s")])
def test_invalid_service_or_namespace_names_are_refused(service: str, namespace: str) -> None:
    with pytest.raises(errors.UsageError, match="not a valid"):
        certificates.serving_sans(service, namespace)


def test_the_ca_is_a_self_signed_ca_for_signing_certificates(
    ca: certificates.Issued, tmp_path: Path
) -> None:
    cert = certificates.load_certificate(ca.cert_pem)
    assert cert.issuer == cert.subject
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert days == certificates.DEFAULT_CA_DAYS


def test_the_serving_certificate_verifies_against_the_ca_with_openssl(
    ca: certificates.Issued, tmp_path: Path
) -> None:
    serving = certificates.issue_serving(ca=ca, sans=SANS)
    rc, out = openssl_verify(tmp_path, ca_pem=ca.cert_pem, cert_pem=serving.cert_pem)
    assert rc == 0, out
    assert ": OK" in out


def test_openssl_rejects_the_serving_certificate_against_another_ca(
    ca: certificates.Issued, tmp_path: Path
) -> None:
    serving = certificates.issue_serving(ca=ca, sans=SANS)
    other = certificates.create_ca()
    rc, out = openssl_verify(tmp_path, ca_pem=other.cert_pem, cert_pem=serving.cert_pem)
    assert rc != 0, out


def test_the_serving_certificate_carries_sans_server_auth_and_no_ca_rights(
    ca: certificates.Issued,
) -> None:
    serving = certificates.issue_serving(ca=ca, sans=SANS)
    cert = certificates.load_certificate(serving.cert_pem)
    assert certificates.sans_of(serving.cert_pem) == SANS
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.issuer == certificates.load_certificate(ca.cert_pem).subject
    assert certificates.is_issued_by(serving.cert_pem, ca.cert_pem)
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert days == certificates.DEFAULT_SERVING_DAYS


def test_days_sets_the_validity(ca: certificates.Issued) -> None:
    now = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    serving = certificates.issue_serving(ca=ca, sans=SANS, days=30, now=now)
    assert certificates.not_valid_after(serving.cert_pem) - now < datetime.timedelta(days=30)
    assert certificates.not_valid_after(serving.cert_pem) - now > datetime.timedelta(days=29)
    assert certificates.not_valid_before(serving.cert_pem) <= now


def test_the_serving_validity_stops_at_the_ca_expiry() -> None:
    short_ca = certificates.create_ca(days=10)
    serving = certificates.issue_serving(ca=short_ca, sans=SANS, days=365)
    assert certificates.not_valid_after(serving.cert_pem) == certificates.not_valid_after(
        short_ca.cert_pem
    )


@pytest.mark.parametrize("days", [0, -5])
def test_non_positive_days_are_refused(ca: certificates.Issued, days: int) -> None:
    with pytest.raises(errors.UsageError, match="positive number of days"):
        certificates.issue_serving(ca=ca, sans=SANS, days=days)


def test_a_non_ca_cannot_sign(ca: certificates.Issued) -> None:
    serving = certificates.issue_serving(ca=ca, sans=SANS)
    with pytest.raises(errors.UsageError, match="not a CA"):
        certificates.issue_serving(ca=serving, sans=SANS)


@pytest.mark.parametrize("bits", [2048, 3072])
def test_rsa_keys(ca: certificates.Issued, tmp_path: Path, bits: int) -> None:
    serving = certificates.issue_serving(ca=ca, sans=SANS, key_type="rsa", rsa_bits=bits)
    key = certificates.load_private_key(serving.key_pem)
    assert isinstance(key, rsa.RSAPrivateKey)
    assert key.key_size == bits
    cert = certificates.load_certificate(serving.cert_pem)
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_encipherment
    rc, out = openssl_verify(tmp_path, ca_pem=ca.cert_pem, cert_pem=serving.cert_pem)
    assert rc == 0, out


def test_other_rsa_sizes_are_refused() -> None:
    with pytest.raises(errors.UsageError, match="RSA key size 1024"):
        certificates.create_ca(key_type="rsa", rsa_bits=1024)


def test_self_signed_for_localhost(tmp_path: Path) -> None:
    cert_pem, key_pem, ca_pem = certificates.self_signed_for_localhost()
    assert certificates.sans_of(cert_pem) == ("localhost", "127.0.0.1", "::1")
    rc, out = openssl_verify(tmp_path, ca_pem=ca_pem, cert_pem=cert_pem)
    assert rc == 0, out
    key = certificates.load_private_key(key_pem)
    assert key.public_key() == certificates.load_certificate(cert_pem).public_key()


def test_unparseable_pem_is_a_usage_error_without_content() -> None:
    with pytest.raises(errors.UsageError, match="no PEM certificate"):
        certificates.not_valid_after(b"garbage")
    with pytest.raises(errors.UsageError, match="private key does not parse") as info:
        certificates.load_private_key(
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
        )
    assert "AAAA" not in str(info.value)
