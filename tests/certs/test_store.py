"""certs.store: the directory layout, file modes, refusing to overwrite, rotation, CA roll."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from certs_tls import SANS, client_context, serial_of, served_serial, tls_server
from cryptography.x509.oid import NameOID

from migfit import errors
from migfit.certs import certificates, reloading, store


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_writes_the_five_files_with_private_keys_0600(cert_dir: Path) -> None:
    assert sorted(p.name for p in cert_dir.iterdir()) == sorted(store.FILES)
    paths = store.CertificateDir(cert_dir)
    assert mode(paths.ca_key) == 0o600
    assert mode(paths.tls_key) == 0o600
    assert mode(paths.tls_cert) == 0o644
    assert mode(cert_dir) == 0o700
    assert paths.ca_bundle.read_bytes() == paths.ca_cert.read_bytes()
    assert certificates.sans_of(paths.tls_cert.read_bytes()) == SANS
    assert certificates.is_issued_by(paths.tls_cert.read_bytes(), paths.ca_cert.read_bytes())


def test_init_refuses_to_overwrite_without_force(cert_dir: Path) -> None:
    before = {p.name: p.read_bytes() for p in cert_dir.iterdir()}
    with pytest.raises(errors.UsageError, match=r"already holds.*--force"):
        store.init(cert_dir, service="svc", namespace="ns")
    assert {p.name: p.read_bytes() for p in cert_dir.iterdir()} == before

    store.init(cert_dir, service="svc", namespace="ns", force=True)
    paths = store.CertificateDir(cert_dir)
    assert paths.ca_cert.read_bytes() != before[store.CA_CERT]
    assert certificates.sans_of(paths.tls_cert.read_bytes())[0] == "svc"
    assert mode(paths.tls_key) == 0o600


def test_init_into_an_existing_empty_directory_is_fine(tmp_path: Path) -> None:
    store.init(tmp_path, service="svc", namespace="ns")
    assert (tmp_path / store.TLS_CERT).exists()


def test_init_refuses_a_file_as_directory(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(errors.UsageError, match="not a directory"):
        store.init(target, service="svc", namespace="ns")


def test_no_temporary_files_are_left_behind(cert_dir: Path) -> None:
    store.rotate(cert_dir)
    store.rotate(cert_dir, new_ca=True)
    assert sorted(p.name for p in cert_dir.iterdir()) == sorted(store.FILES)


def test_rotate_issues_a_new_serving_certificate_from_the_same_ca(cert_dir: Path) -> None:
    paths = store.CertificateDir(cert_dir)
    ca_before = paths.ca_cert.read_bytes()
    old_serial = serial_of(paths.tls_cert)
    old_key = paths.tls_key.read_bytes()
    store.rotate(cert_dir, days=30)
    assert paths.ca_cert.read_bytes() == ca_before
    assert serial_of(paths.tls_cert) != old_serial
    assert paths.tls_key.read_bytes() != old_key
    assert mode(paths.tls_key) == 0o600
    cert = paths.tls_cert.read_bytes()
    assert certificates.sans_of(cert) == SANS
    assert certificates.is_issued_by(cert, ca_before)
    span = certificates.not_valid_after(cert) - certificates.not_valid_before(cert)
    assert span.days == 30


def test_rotate_keeps_the_key_type_unless_told(tmp_path: Path) -> None:
    store.init(tmp_path, service="svc", namespace="ns", key_type="rsa")
    store.rotate(tmp_path)
    key = certificates.load_private_key((tmp_path / store.TLS_KEY).read_bytes())
    assert certificates.key_type_of(key) == ("rsa", 2048)


def test_rotate_with_new_sans(cert_dir: Path) -> None:
    store.rotate(cert_dir, sans=certificates.serving_sans("migfit-extender", "gpu"))
    cert = (cert_dir / store.TLS_CERT).read_bytes()
    assert certificates.sans_of(cert)[2] == "migfit-extender.gpu.svc"


def test_rotate_without_a_ca_says_to_run_init(tmp_path: Path) -> None:
    with pytest.raises(errors.UsageError, match=r"no CA certificate.*certs init"):
        store.rotate(tmp_path / "nothing")


def test_rotate_with_a_foreign_ca_key_is_refused(cert_dir: Path) -> None:
    (cert_dir / store.CA_KEY).write_bytes(certificates.create_ca().key_pem)
    with pytest.raises(errors.UsageError, match="does not belong"):
        store.rotate(cert_dir)


def test_new_ca_bundle_carries_old_and_new_ca(cert_dir: Path) -> None:
    paths = store.CertificateDir(cert_dir)
    old_ca = paths.ca_cert.read_bytes()
    summary = store.rotate(cert_dir, new_ca=True)
    new_ca = paths.ca_cert.read_bytes()
    assert new_ca != old_ca
    assert mode(paths.ca_key) == 0o600
    bundle = certificates.load_certificates(paths.ca_bundle.read_bytes())
    assert [certificates.fingerprint(c) for c in bundle] == [
        certificates.fingerprint(certificates.load_certificate(old_ca)),
        certificates.fingerprint(certificates.load_certificate(new_ca)),
    ]
    assert summary.bundle_fingerprints == tuple(certificates.fingerprint(c) for c in bundle)
    assert certificates.is_issued_by(paths.tls_cert.read_bytes(), new_ca)
    assert not certificates.is_issued_by(paths.tls_cert.read_bytes(), old_ca)


async def test_during_a_ca_roll_a_client_trusting_the_bundle_accepts_old_and_new_servers(
    cert_dir: Path, tmp_path: Path
) -> None:
    paths = store.CertificateDir(cert_dir)
    # The server still presents the certificate from the old CA ...
    old_server = reloading.server_context(cert_file=paths.tls_cert, key_file=paths.tls_key)
    old_client = client_context(cafile=paths.ca_cert)  # a client that never got the bundle
    store.rotate(cert_dir, new_ca=True)
    # ... while clients already received the new bundle, and new servers the new certificate.
    new_server = reloading.server_context(cert_file=paths.tls_cert, key_file=paths.tls_key)
    bundle_client = client_context(cafile=paths.ca_bundle)
    async with tls_server(old_server) as old_port, tls_server(new_server) as new_port:
        for name in ("migfit-webhook.migfit-system.svc", "localhost"):
            await served_serial(old_port, bundle_client, name)
            await served_serial(new_port, bundle_client, name)
        await served_serial(old_port, old_client, "localhost")

    # After retiring the old CA, the bundle trusts only the new one.
    retired = store.retire_old_ca(cert_dir)
    assert len(retired) == 1
    assert paths.ca_bundle.read_bytes() == paths.ca_cert.read_bytes()
    retired_client = client_context(cafile=paths.ca_bundle)
    async with tls_server(old_server) as old_port, tls_server(new_server) as new_port:
        await served_serial(new_port, retired_client, "localhost")
        with pytest.raises(Exception, match="certificate verify failed"):
            await served_serial(old_port, retired_client, "localhost")


def test_a_second_roll_before_retiring_keeps_every_unexpired_ca_once(cert_dir: Path) -> None:
    store.rotate(cert_dir, new_ca=True)
    store.rotate(cert_dir, new_ca=True)
    store.rotate(cert_dir)  # a plain rotation keeps the bundle
    bundle = certificates.load_certificates((cert_dir / store.CA_BUNDLE).read_bytes())
    assert len({certificates.fingerprint(c) for c in bundle}) == len(bundle) == 3
    assert store.retire_old_ca(cert_dir) and store.retire_old_ca(cert_dir) == ()


def test_retire_refuses_while_the_serving_certificate_is_from_another_ca(
    cert_dir: Path,
) -> None:
    paths = store.CertificateDir(cert_dir)
    stale = paths.tls_cert.read_bytes(), paths.tls_key.read_bytes()
    store.rotate(cert_dir, new_ca=True)
    paths.tls_cert.write_bytes(stale[0])
    paths.tls_key.write_bytes(stale[1])
    with pytest.raises(errors.UsageError, match=r"not signed by.*rotate"):
        store.retire_old_ca(cert_dir)
    assert len(certificates.load_certificates(paths.ca_bundle.read_bytes())) == 2


def test_check_serving_accepts_a_pair_from_the_ca_or_an_old_ca_of_the_bundle(
    cert_dir: Path,
) -> None:
    paths = store.CertificateDir(cert_dir)
    store.check_serving(cert_dir)
    stale = paths.tls_cert.read_bytes(), paths.tls_key.read_bytes()
    store.rotate(cert_dir, new_ca=True)
    store.check_serving(cert_dir)
    # mid-roll, the old CA's pair still verifies against the bundle the clients trust
    paths.tls_cert.write_bytes(stale[0])
    paths.tls_key.write_bytes(stale[1])
    store.check_serving(cert_dir)


def test_check_serving_refuses_a_key_of_another_certificate(
    cert_dir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    store.init(other, service="svc", namespace="ns")
    (cert_dir / store.TLS_KEY).write_bytes((other / store.TLS_KEY).read_bytes())
    with pytest.raises(errors.UsageError,
                       match=r"tls\.key does not belong to .*tls\.crt.*certs rotate --out"):
        store.check_serving(cert_dir)


def test_check_serving_refuses_a_pair_of_another_ca(cert_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    store.init(other, service="svc", namespace="ns")
    for name in (store.TLS_CERT, store.TLS_KEY):
        (cert_dir / name).write_bytes((other / name).read_bytes())
    with pytest.raises(errors.UsageError,
                       match=r"tls\.crt is signed neither by .*ca\.crt nor by a CA in "
                             r".*ca-bundle\.crt.*certs rotate --out"):
        store.check_serving(cert_dir)


def test_write_atomic_replaces_content_and_mode(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_bytes(b"old")
    target.chmod(0o644)
    store.write_atomic(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert mode(target) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]


def test_ca_roll_for_a_long_service_name_keeps_the_common_name_within_64(tmp_path: Path) -> None:
    """RFC 5280 caps a CN at 64 characters; `rotate --new-ca` appends a timestamp to it."""
    out = tmp_path / "certs"
    store.init(out, service="migfit-extender-with-a-rather-long-name",
               namespace="migfit-system-of-the-platform-team")
    store.rotate(out, new_ca=True)
    ca = certificates.load_certificate((out / store.CA_CERT).read_bytes())
    (cn,) = ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert len(str(cn.value)) <= 64
    served = (out / store.TLS_CERT).read_bytes()
    assert certificates.is_issued_by(served, (out / store.CA_CERT).read_bytes())
