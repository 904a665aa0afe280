"""A reloaded certificate is the only one served: real handshakes with ``migfit.serving``'s
listeners (asyncio's ``SmallBufferTLS`` and uvloop's ``_Acceptor``, by conftest), whatever key
type the old and the new certificate have.

Loaded into the live context, an RSA pair after an ECDSA one left the old ECDSA certificate
served to every client that accepts ECDSA (kube-apiserver's Go client does), and an ECDSA one
after RSA left the old RSA certificate served to clients that accept only RSA.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509

from migfit import serving
from migfit.certs import certificates, reloading, store

HOST = "localhost"

# TLS 1.2 cipher suites name the certificate's key type (TLS 1.3's do not): a client offering
# only these accepts only that kind of certificate.
ONLY: dict[certificates.KeyType, str] = {
    "ecdsa": "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
    "rsa": "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384",
}


def client(cafile: Path, only: certificates.KeyType | None = None) -> ssl.SSLContext:
    """A verifying client trusting ``cafile``; with ``only``, TLS 1.2 with that key type's
    cipher suites alone."""
    context = ssl.create_default_context(cafile=str(cafile))
    if only is not None:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(ONLY[only])
    return context


async def served_serial(port: int, context: ssl.SSLContext) -> int:
    """The serial of the certificate a new connection is presented (after verifying it)."""
    _, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=HOST), 10)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


@contextlib.asynccontextmanager
async def listening(context: ssl.SSLContext) -> AsyncIterator[int]:
    """An application served over TLS with ``context`` through ``migfit.serving``; its port."""
    runner, started = await serving.start(web.Application(), serving.Listen(
        host="127.0.0.1", port=0, ssl_context=context, limits=serving.Limits()))
    try:
        yield started.port
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("before", "after"), [("ecdsa", "rsa"), ("rsa", "ecdsa")])
async def test_a_reload_to_another_key_type_serves_the_new_certificate_alone(
        tmp_path: Path, before: certificates.KeyType, after: certificates.KeyType) -> None:
    directory = tmp_path / "certs"
    paths = store.CertificateDir(directory)
    store.init(directory, service="migfit-webhook", namespace="migfit-system",
               extra_sans=(HOST,), key_type=before)
    old_ca = tmp_path / "old-ca.crt"
    old_ca.write_bytes(paths.ca_cert.read_bytes())
    old_serial = serial_of(paths.tls_cert)
    reloader = reloading.CertificateReloader(cert_file=paths.tls_cert, key_file=paths.tls_key)
    async with listening(reloader.context) as port:
        assert await served_serial(port, client(old_ca)) == old_serial
        assert await served_serial(port, client(old_ca, only=before)) == old_serial

        # As `migfit certs init --force --key-type ...`: a new CA, a new key type.
        store.init(directory, service="migfit-webhook", namespace="migfit-system",
                   extra_sans=(HOST,), key_type=after, force=True)
        new_serial = serial_of(paths.tls_cert)
        assert reloader.check_once() is True

        # A client trusting only the new CA: every client, and one for the new type alone.
        assert await served_serial(port, client(paths.ca_cert)) == new_serial
        assert await served_serial(port, client(paths.ca_cert, only=after)) == new_serial
        # A client that accepts only the old key type (and still trusts the old CA) finds no
        # certificate it could use: the old one is gone (an alert, or the server's reset).
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            await served_serial(port, client(old_ca, only=before))
        with pytest.raises(ssl.SSLCertVerificationError):
            await served_serial(port, client(old_ca))


async def test_connections_without_a_server_name_get_the_new_certificate(tmp_path: Path) -> None:
    """A client dialling an IP address sends no SNI; OpenSSL calls the callback all the same."""
    directory = tmp_path / "certs"
    paths = store.CertificateDir(directory)
    store.init(directory, service="migfit-webhook", namespace="migfit-system",
               extra_sans=("127.0.0.1",))
    reloader = reloading.CertificateReloader(cert_file=paths.tls_cert, key_file=paths.tls_key)
    async with listening(reloader.context) as port:
        store.init(directory, service="migfit-webhook", namespace="migfit-system",
                   extra_sans=("127.0.0.1",), key_type="rsa", force=True)
        assert reloader.check_once() is True
        _, writer = await asyncio.wait_for(asyncio.open_connection(
            "127.0.0.1", port, ssl=client(paths.ca_cert), server_hostname="127.0.0.1"), 10)
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
        assert x509.load_der_x509_certificate(der).serial_number == serial_of(paths.tls_cert)
