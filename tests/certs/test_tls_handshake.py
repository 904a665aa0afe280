"""Real TLS handshakes against certs.reloading.server_context: hostnames, versions, client CA."""

from __future__ import annotations

import ssl
import warnings
from pathlib import Path

import pytest
from certs_tls import SANS, client_context, connect, serial_of, served_serial, tls_server

from migfit import errors
from migfit.certs import certificates, reloading, store


def serving_context(cert_dir: Path, **kwargs: Path) -> ssl.SSLContext:
    paths = store.CertificateDir(cert_dir)
    return reloading.server_context(cert_file=paths.tls_cert, key_file=paths.tls_key, **kwargs)


async def test_a_hostname_checking_client_accepts_every_san(cert_dir: Path) -> None:
    paths = store.CertificateDir(cert_dir)
    client = client_context(cafile=paths.ca_cert)
    async with tls_server(serving_context(cert_dir)) as port:
        for name in SANS:
            assert await served_serial(port, client, name) == serial_of(paths.tls_cert)


@pytest.mark.parametrize(
    "name", ["other-service.migfit-system.svc", "migfit-webhook.default.svc", "127.0.0.2"]
)
async def test_a_hostname_checking_client_refuses_another_name(cert_dir: Path, name: str) -> None:
    client = client_context(cafile=store.CertificateDir(cert_dir).ca_cert)
    async with tls_server(serving_context(cert_dir)) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            await connect(port, client, name)


async def test_a_client_trusting_another_ca_refuses_the_server(cert_dir: Path) -> None:
    other = certificates.create_ca()
    client = client_context(cadata=other.cert_pem)
    async with tls_server(serving_context(cert_dir)) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
            await connect(port, client, "localhost")


def legacy_client(cafile: Path, version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client that offers exactly ``version``. OpenSSL 3 forbids TLS 1.1 at the default
    security level; level 0 lets this client offer it, so any refusal comes from the server."""
    client = client_context(cafile=cafile)
    client.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # ssl.TLSVersion.TLSv1_1
        client.minimum_version = version
        client.maximum_version = version
    return client


async def test_a_tls_1_1_client_is_refused_and_the_same_client_on_tls_1_2_accepted(
    cert_dir: Path,
) -> None:
    paths = store.CertificateDir(cert_dir)
    tls11 = legacy_client(paths.ca_cert, ssl.TLSVersion.TLSv1_1)
    # Control: this client really speaks TLS 1.1 with a server that allows it.
    permissive = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    permissive.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        permissive.minimum_version = ssl.TLSVersion.TLSv1_1
    permissive.load_cert_chain(paths.tls_cert, paths.tls_key)
    async with tls_server(permissive) as port:
        conn = await connect(port, tls11, "localhost")
        assert conn.writer.get_extra_info("ssl_object").version() == "TLSv1.1"
        await conn.close()

    async with tls_server(serving_context(cert_dir)) as port:
        # The server aborts the handshake (a protocol_version alert or a reset).
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await connect(port, tls11, "localhost")

        tls12 = legacy_client(paths.ca_cert, ssl.TLSVersion.TLSv1_2)
        conn = await connect(port, tls12, "localhost")
        try:
            assert conn.writer.get_extra_info("ssl_object").version() == "TLSv1.2"
            assert await conn.echo() == b"ping\n"
        finally:
            await conn.close()


def test_server_context_requires_tls_1_2(cert_dir: Path) -> None:
    context = serving_context(cert_dir)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE


async def test_rsa_serving_certificates_work_too(tmp_path: Path) -> None:
    directory = tmp_path / "rsa"
    store.init(directory, service="svc", namespace="ns", extra_sans=["localhost"], key_type="rsa")
    client = client_context(cafile=store.CertificateDir(directory).ca_cert)
    async with tls_server(serving_context(directory)) as port:
        await served_serial(port, client, "svc.ns.svc")


async def test_with_client_ca_a_certificate_not_from_it_is_refused_and_none_is_let_through(
    cert_dir: Path, tmp_path: Path
) -> None:
    """Every client is asked for a certificate and one not from the client CA fails the
    handshake; a client with none gets through it (the extender then answers it only its
    probes and metrics: tests/extender/test_extender_tls.py)."""
    # The client CA and a client certificate, as kube-scheduler's tlsConfig.certFile would be.
    client_ca = certificates.create_ca(common_name="scheduler client CA")
    client_ca_file = tmp_path / "client-ca.crt"
    client_ca_file.write_bytes(client_ca.cert_pem)
    client_pair = certificates.issue_client(ca=client_ca, common_name="kube-scheduler")
    (tmp_path / "client.crt").write_bytes(client_pair.cert_pem)
    (tmp_path / "client.key").write_bytes(client_pair.key_pem)
    paths = store.CertificateDir(cert_dir)
    context = serving_context(cert_dir, client_ca=client_ca_file)
    assert context.verify_mode == ssl.CERT_OPTIONAL

    async with tls_server(context) as port:
        await served_serial(port, client_context(cafile=paths.ca_cert), "localhost")

        # A client certificate from another CA is refused as well.
        stranger = certificates.issue_client(ca=certificates.create_ca(), common_name="x")
        (tmp_path / "stranger.crt").write_bytes(stranger.cert_pem)
        (tmp_path / "stranger.key").write_bytes(stranger.key_pem)
        wrong = client_context(cafile=paths.ca_cert)
        wrong.load_cert_chain(tmp_path / "stranger.crt", tmp_path / "stranger.key")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            conn = await connect(port, wrong, "localhost")
            reply = await conn.echo()
            await conn.close()
            if reply == b"":
                raise ConnectionError("closed by the server")

        known = client_context(cafile=paths.ca_cert)
        known.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")
        await served_serial(port, known, "localhost")


def test_server_context_names_the_files_that_do_not_load(cert_dir: Path) -> None:
    paths = store.CertificateDir(cert_dir)
    other_key = certificates.issue_serving(ca=certificates.create_ca(), sans=["x"]).key_pem
    paths.tls_key.write_bytes(other_key)
    with pytest.raises(errors.ConfigError, match="does not belong") as info:
        serving_context(cert_dir)
    assert str(paths.tls_cert) in str(info.value)
    with pytest.raises(errors.ConfigError, match="No such file"):
        reloading.server_context(cert_file=cert_dir / "missing.crt", key_file=paths.tls_key)


async def test_context_from_pem_serves_the_throwaway_localhost_certificate() -> None:
    cert_pem, key_pem, ca_pem = certificates.self_signed_for_localhost()
    context = reloading.context_from_pem(cert_pem=cert_pem, key_pem=key_pem)
    async with tls_server(context) as port:
        for name in ("localhost", "127.0.0.1"):
            await served_serial(port, client_context(cadata=ca_pem), name)
