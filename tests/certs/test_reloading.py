"""certs.reloading.CertificateReloader under a running asyncio TLS server."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import shutil
import socket
import ssl
from pathlib import Path

import pytest
from certs_tls import SANS, client_context, connect, serial_of, served_serial, tls_server
from prometheus_client import CollectorRegistry, generate_latest

from migfit import errors
from migfit.certs import certificates, metrics, reloading, store

HOST = "migfit-webhook.migfit-system.svc"


def reloader_for(cert_dir: Path, **kwargs: object) -> reloading.CertificateReloader:
    paths = store.CertificateDir(cert_dir)
    return reloading.CertificateReloader(
        cert_file=paths.tls_cert,
        key_file=paths.tls_key,
        **kwargs,  # type: ignore[arg-type]
    )


def assert_no_secrets_logged(text: str, *pems: bytes) -> None:
    assert "PRIVATE KEY" not in text
    assert "BEGIN CERTIFICATE" not in text
    for pem in pems:
        for line in pem.decode().splitlines()[1:-1]:
            assert line not in text


async def test_new_connections_get_the_new_certificate_open_ones_keep_working(
    cert_dir: Path,
) -> None:
    paths = store.CertificateDir(cert_dir)
    reloader = reloader_for(cert_dir)
    context = reloader.context
    client = client_context(cafile=paths.ca_bundle)
    old_serial = serial_of(paths.tls_cert)
    async with tls_server(context) as port:
        assert await served_serial(port, client, HOST) == old_serial
        still_open = await connect(port, client, HOST)
        assert reloader.check_once() is False  # nothing changed yet

        store.rotate(cert_dir)
        new_serial = serial_of(paths.tls_cert)
        assert new_serial != old_serial
        assert reloader.check_once() is True
        assert reloader.context is context
        assert reloader.reloads == 1

        assert await served_serial(port, client, HOST) == new_serial
        assert await still_open.echo(b"still here\n") == b"still here\n"
        assert still_open.serial == old_serial
        await still_open.close()
        assert reloader.check_once() is False


def write_secret_volume(root: Path, files: dict[str, bytes], generation: int) -> None:
    """What kubelet does for a Secret volume: files in a timestamped directory, ``..data``
    pointing at it (swapped by an atomic rename), and each key a symlink through ``..data``."""
    root.mkdir(exist_ok=True)
    target = root / f"..2024_01_01_00_00_0{generation}.000000000"
    target.mkdir()
    for name, data in files.items():
        (target / name).write_bytes(data)
    tmp = root / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, root / "..data")
    for name in files:
        link = root / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    for old in root.glob("..2024_*"):
        if old != target:
            shutil.rmtree(old)


async def test_a_secret_volume_symlink_swap_is_picked_up(cert_dir: Path, tmp_path: Path) -> None:
    paths = store.CertificateDir(cert_dir)
    volume = tmp_path / "volume"

    def publish(generation: int) -> None:
        write_secret_volume(
            volume,
            {
                "tls.crt": paths.tls_cert.read_bytes(),
                "tls.key": paths.tls_key.read_bytes(),
                "ca.crt": paths.ca_cert.read_bytes(),
            },
            generation,
        )

    publish(1)
    reloader = reloading.CertificateReloader(
        cert_file=volume / "tls.crt", key_file=volume / "tls.key"
    )
    client = client_context(cafile=paths.ca_bundle)
    async with tls_server(reloader.context) as port:
        first = await served_serial(port, client, HOST)
        store.rotate(cert_dir, new_ca=True)
        client = client_context(cafile=paths.ca_bundle)  # trusts both CAs
        publish(2)
        assert reloader.check_once() is True
        second = await served_serial(port, client, HOST)
        assert second == serial_of(paths.tls_cert) != first


async def test_a_broken_or_half_written_file_keeps_the_old_certificate(
    cert_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = store.CertificateDir(cert_dir)
    reloader = reloader_for(cert_dir)
    client = client_context(cafile=paths.ca_bundle)
    old_serial = serial_of(paths.tls_cert)
    old_key = paths.tls_key.read_bytes()
    store.rotate(cert_dir)
    new_cert, new_key = paths.tls_cert.read_bytes(), paths.tls_key.read_bytes()
    caplog.set_level(logging.INFO, logger="certs.reloading")
    async with tls_server(reloader.context) as port:
        # Half a certificate (a writer that does not rename).
        paths.tls_cert.write_bytes(new_cert[: len(new_cert) // 2])
        assert reloader.check_once() is False
        assert await served_serial(port, client, HOST) == old_serial
        # Not PEM at all.
        paths.tls_cert.write_bytes(b"garbage\n")
        assert reloader.check_once() is False
        assert await served_serial(port, client, HOST) == old_serial
        # The new certificate with the old key: they do not belong together.
        paths.tls_cert.write_bytes(new_cert)
        paths.tls_key.write_bytes(old_key)
        assert reloader.check_once() is False
        assert await served_serial(port, client, HOST) == old_serial
        # The same broken content warns only once.
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 3
        assert reloader.check_once() is False
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 3
        assert "does not belong" in warnings[-1].getMessage()
        assert str(paths.tls_cert) in warnings[-1].getMessage()

        # The complete pair arrives: it is loaded.
        paths.tls_key.write_bytes(new_key)
        assert reloader.check_once() is True
        assert await served_serial(port, client, HOST) == serial_of(paths.tls_cert)
    assert_no_secrets_logged(caplog.text, new_cert, new_key, old_key)


async def test_missing_files_keep_serving_and_their_return_is_no_reload(
    cert_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = store.CertificateDir(cert_dir)
    reloader = reloader_for(cert_dir)
    key = paths.tls_key.read_bytes()
    paths.tls_key.unlink()
    with caplog.at_level(logging.WARNING, logger="certs.reloading"):
        assert reloader.check_once() is False
    assert "cannot be read" in caplog.text
    client = client_context(cafile=paths.ca_bundle)
    async with tls_server(reloader.context) as port:
        await served_serial(port, client, HOST)
    paths.tls_key.write_bytes(key)
    assert reloader.check_once() is False
    assert reloader.reloads == 0


async def test_run_polls_in_the_background_until_cancelled(cert_dir: Path) -> None:
    paths = store.CertificateDir(cert_dir)
    reloaded = asyncio.Event()
    reloader = reloader_for(cert_dir, on_reload=reloaded.set)
    task = asyncio.create_task(reloader.run(interval=0.02))
    try:
        client = client_context(cafile=paths.ca_bundle)
        async with tls_server(reloader.context) as port:
            store.rotate(cert_dir)
            await asyncio.wait_for(reloaded.wait(), timeout=30)
            assert await served_serial(port, client, HOST) == serial_of(paths.tls_cert)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_run_refuses_a_non_positive_interval(cert_dir: Path) -> None:
    with pytest.raises(errors.UsageError, match="positive"):
        await reloader_for(cert_dir).run(interval=0)


def test_expiry_follows_the_served_certificate(cert_dir: Path) -> None:
    paths = store.CertificateDir(cert_dir)
    reloader = reloader_for(cert_dir)
    expected = certificates.not_valid_after(paths.tls_cert.read_bytes())
    assert reloader.not_valid_after == expected
    assert reloader.expiry_timestamp() == expected.timestamp()
    store.rotate(cert_dir, days=7)
    assert reloader.check_once()
    assert (
        reloader.expiry_timestamp()
        == certificates.not_valid_after(paths.tls_cert.read_bytes()).timestamp()
    )


def test_the_expiry_gauge_reads_the_reloader_at_scrape_time(cert_dir: Path) -> None:
    reloader = reloader_for(cert_dir)
    registry = CollectorRegistry()
    metrics.register(registry, server="webhook", source=reloader)
    value = registry.get_sample_value(metrics.METRIC, {"server": "webhook"})
    assert value == reloader.expiry_timestamp()
    store.rotate(cert_dir, days=3)
    reloader.check_once()
    assert registry.get_sample_value(metrics.METRIC, {"server": "webhook"}) == (
        reloader.expiry_timestamp()
    )
    assert b"# TYPE migfit_certificate_expiry_timestamp_seconds gauge" in generate_latest(registry)


def test_a_pair_that_does_not_load_at_start_is_a_config_error(cert_dir: Path) -> None:
    (cert_dir / store.TLS_CERT).write_bytes(b"not a certificate")
    with pytest.raises(errors.ConfigError, match="cannot load TLS certificate") as info:
        reloader_for(cert_dir)
    assert str(cert_dir / store.TLS_CERT) in str(info.value)


async def test_client_verification_survives_a_reload(cert_dir: Path, tmp_path: Path) -> None:
    client_ca = certificates.create_ca(common_name="client CA")
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem)
    pair = certificates.issue_client(ca=client_ca, common_name="kube-scheduler")
    (tmp_path / "c.crt").write_bytes(pair.cert_pem)
    (tmp_path / "c.key").write_bytes(pair.key_pem)
    reloader = reloader_for(cert_dir, client_ca=tmp_path / "client-ca.crt")
    # Asked for and verified when given (the extender requires one per route).
    assert reloader.context.verify_mode == ssl.CERT_OPTIONAL
    store.rotate(cert_dir)
    assert reloader.check_once() is True
    assert reloader.context.verify_mode == ssl.CERT_OPTIONAL
    client = client_context(cafile=cert_dir / store.CA_BUNDLE)
    client.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
    async with tls_server(reloader.context) as port:
        assert await served_serial(port, client, HOST) == serial_of(cert_dir / store.TLS_CERT)


async def test_every_context_comes_from_the_given_factory(cert_dir: Path) -> None:
    """A reload makes a new context with the same settings as the first: here a server that
    speaks TLS 1.2 at most keeps doing so after a reload."""
    made: list[ssl.SSLContext] = []

    def tls12_only() -> ssl.SSLContext:
        context = reloading.new_server_context()
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        made.append(context)
        return context

    paths = store.CertificateDir(cert_dir)
    reloader = reloader_for(cert_dir, new_context=tls12_only)
    assert made == [reloader.context]
    client = client_context(cafile=paths.ca_bundle)
    async with tls_server(reloader.context) as port:
        store.rotate(cert_dir, key_type="rsa")
        assert reloader.check_once() is True
        assert len(made) == 2 and reloader.context is made[0]
        conn = await connect(port, client, HOST)
        try:
            assert conn.serial == serial_of(paths.tls_cert)
            assert conn.writer.get_extra_info("ssl_object").version() == "TLSv1.2"
        finally:
            await conn.close()


async def test_a_client_ca_removed_from_its_file_is_no_longer_trusted_after_a_reload(
    cert_dir: Path, tmp_path: Path
) -> None:
    """The new context holds only what the file holds now (CAs used to be added, never
    removed, until a restart)."""
    cas = {name: certificates.create_ca(common_name=f"client CA {name}") for name in "ab"}
    clients = {}
    for name, ca in cas.items():
        pair = certificates.issue_client(ca=ca, common_name=f"client {name}")
        (tmp_path / f"{name}.crt").write_bytes(pair.cert_pem)
        (tmp_path / f"{name}.key").write_bytes(pair.key_pem)
        clients[name] = client_context(cafile=cert_dir / store.CA_BUNDLE)
        clients[name].load_cert_chain(tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(cas["a"].cert_pem + cas["b"].cert_pem)
    reloader = reloader_for(cert_dir, client_ca=client_ca)
    serial = serial_of(cert_dir / store.TLS_CERT)
    async with tls_server(reloader.context) as port:
        assert await served_serial(port, clients["a"], HOST) == serial
        client_ca.write_bytes(cas["b"].cert_pem)
        assert reloader.check_once() is True
        assert await served_serial(port, clients["b"], HOST) == serial
        # TLS 1.3 finishes the client's side of the handshake before the server checks the
        # client certificate, so the refusal may surface at the first read.
        with pytest.raises((ssl.SSLError, ConnectionError)):
            conn = await connect(port, clients["a"], HOST)
            reply = await conn.echo()
            await conn.close()
            if reply == b"":
                raise ConnectionError("closed by the server")


def issue_into(cert_dir: Path, *, now: datetime.datetime | None = None,
               key_type: certificates.KeyType = "ecdsa", days: int = 1) -> certificates.Issued:
    """A serving certificate from the directory's CA for the fixture's names, issued as if at
    ``now`` (its notBefore is 5 minutes earlier), written over tls.crt and tls.key."""
    paths = store.CertificateDir(cert_dir)
    ca = certificates.Issued(cert_pem=paths.ca_cert.read_bytes(),
                             key_pem=paths.ca_key.read_bytes())
    pair = certificates.issue_serving(ca=ca, sans=SANS, days=days, key_type=key_type, now=now)
    paths.tls_key.write_bytes(pair.key_pem)
    paths.tls_cert.write_bytes(pair.cert_pem)
    return pair


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def test_an_expired_certificate_is_refused_on_reload_and_the_old_one_kept(
    cert_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It replaced the valid one with an INFO line; with failurePolicy Fail every annotated
    pod's creation then failed."""
    paths = store.CertificateDir(cert_dir)
    reloader = reloader_for(cert_dir)
    old_serial = serial_of(paths.tls_cert)
    expiry = reloader.expiry_timestamp()
    client = client_context(cafile=paths.ca_bundle)
    caplog.set_level(logging.INFO, logger="migfit.certs.reloading")
    async with tls_server(reloader.context) as port:
        issue_into(cert_dir, now=utcnow() - datetime.timedelta(days=10))
        assert reloader.check_once() is False
        assert reloader.check_once() is False  # the same files: no second line
        assert await served_serial(port, client, HOST) == old_serial
    assert reloader.reloads == 0 and reloader.expiry_timestamp() == expiry
    [warning] = warnings_in(caplog)
    message = warning.getMessage()
    assert f"the TLS certificate in {paths.tls_cert} expired at " in message
    assert "migfit certs rotate" in message
    assert "still serving the previous certificate" in message
    assert warning.exc_info is None
    assert "reloaded" not in caplog.text


async def test_a_certificate_not_valid_yet_is_served_once_its_time_has_come(
    cert_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A notBefore up to NOT_BEFORE_SKEW ahead of the clock is served at once; further ahead,
    the pair is refused with one line and loaded when the clock gets there."""
    paths = store.CertificateDir(cert_dir)
    reloader = reloader_for(cert_dir)
    caplog.set_level(logging.INFO, logger="migfit.certs.reloading")
    async with tls_server(reloader.context) as port:
        issue_into(cert_dir, now=utcnow() + datetime.timedelta(minutes=8))  # notBefore +3 min
        assert reloader.check_once() is True
        # (served; a client whose clock agrees with this one's refuses it for 3 minutes)
        trusting = client_context(cafile=paths.ca_bundle)
        trusting.check_hostname = False
        trusting.verify_mode = ssl.CERT_NONE
        assert await served_serial(port, trusting, HOST) == serial_of(paths.tls_cert)

        served = serial_of(paths.tls_cert)
        issue_into(cert_dir, now=utcnow() + datetime.timedelta(hours=1))
        assert reloader.check_once() is False
        assert await served_serial(port, trusting, HOST) == served
        [warning] = warnings_in(caplog)
        assert f"the TLS certificate in {paths.tls_cert} is not valid until " in (
            warning.getMessage())
        assert "more than 5 minutes from now: check the clock" in warning.getMessage()

        # notBefore 5 min + 3 s ahead (certificate times have whole seconds: 2 to 3 s).
        issue_into(cert_dir, now=utcnow() + datetime.timedelta(minutes=10, seconds=3))
        assert reloader.check_once() is False
        await asyncio.sleep(3.5)
        assert reloader.check_once() is True
        assert await served_serial(port, trusting, HOST) == serial_of(paths.tls_cert)
    assert len(warnings_in(caplog)) == 2
    assert reloader.reloads == 2
    assert datetime.timedelta(minutes=5) == reloading.NOT_BEFORE_SKEW  # as the README says


def test_an_expired_or_not_yet_valid_certificate_at_start_is_a_config_error(
    cert_dir: Path,
) -> None:
    paths = store.CertificateDir(cert_dir)
    issue_into(cert_dir, now=utcnow() - datetime.timedelta(days=10))
    with pytest.raises(errors.ConfigError) as info:
        reloader_for(cert_dir)
    assert str(info.value).startswith(f"the TLS certificate in {paths.tls_cert} expired at ")
    assert "migfit certs rotate --out DIR" in str(info.value)
    issue_into(cert_dir, now=utcnow() + datetime.timedelta(days=1))
    with pytest.raises(errors.ConfigError, match=r"is not valid until .*: check the clock"):
        reloader_for(cert_dir)


@pytest.mark.parametrize(("cert_type", "key_type", "words"), [
    ("ecdsa", "rsa", ("an RSA", "an ECDSA")), ("rsa", "ecdsa", ("an ECDSA", "an RSA"))])
async def test_a_key_of_another_type_is_refused_on_reload_naming_both_types(
    cert_dir: Path, caplog: pytest.LogCaptureFixture, cert_type: certificates.KeyType,
    key_type: certificates.KeyType, words: tuple[str, str],
) -> None:
    """OpenSSL said only NO_CERTIFICATE_ASSIGNED."""
    paths = store.CertificateDir(cert_dir)
    issue_into(cert_dir, key_type=cert_type)
    reloader = reloader_for(cert_dir)
    old_serial = serial_of(paths.tls_cert)
    caplog.set_level(logging.INFO, logger="migfit.certs.reloading")
    new = issue_into(cert_dir, key_type=cert_type)
    other = issue_into(cert_dir, key_type=key_type)  # only its key is used
    paths.tls_key.write_bytes(other.key_pem)
    paths.tls_cert.write_bytes(new.cert_pem)
    async with tls_server(reloader.context) as port:
        assert reloader.check_once() is False
        assert reloader.check_once() is False
        client = client_context(cafile=paths.ca_bundle)
        assert await served_serial(port, client, HOST) == old_serial
    [warning] = warnings_in(caplog)
    assert warning.getMessage() == (
        f"the key in {paths.tls_key} is {words[0]} key, the certificate in {paths.tls_cert} "
        f"holds {words[1]} key: they are not a pair; pass the key that was issued with the "
        f"certificate; still serving the previous certificate (valid until "
        f"{reloader.not_valid_after.isoformat()})")
    assert warning.exc_info is None
    with pytest.raises(errors.ConfigError, match=f"is {words[0]} key, the certificate"):
        reloader_for(cert_dir)


async def test_the_certificate_given_as_the_key_is_refused_on_reload_saying_so(
    cert_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenSSL said only "TLS library error"."""
    paths = store.CertificateDir(cert_dir)
    reloader = reloading.CertificateReloader(cert_file=paths.tls_cert, key_file=paths.tls_key)
    old_serial = serial_of(paths.tls_cert)
    caplog.set_level(logging.INFO, logger="migfit.certs.reloading")
    store.rotate(cert_dir)
    paths.tls_key.write_bytes(paths.tls_cert.read_bytes())
    async with tls_server(reloader.context) as port:
        assert reloader.check_once() is False
        client = client_context(cafile=paths.ca_bundle)
        assert await served_serial(port, client, HOST) == old_serial
    [warning] = warnings_in(caplog)
    assert warning.getMessage().startswith(
        f"{paths.tls_key} holds no private key (it looks like a certificate): pass the private "
        f"key (tls.key) as the key file; still serving the previous certificate")
    assert warning.exc_info is None
    with pytest.raises(errors.ConfigError, match="holds no private key"):
        reloader_for(cert_dir)
    # And the other way round: the key given as the certificate.
    with pytest.raises(errors.ConfigError) as info:
        reloading.CertificateReloader(cert_file=paths.ca_key, key_file=paths.ca_key)
    assert str(info.value).startswith(f"{paths.ca_key} holds no certificate (it looks like a "
                                      f"private key)")


def _resumed(port: int, context: ssl.SSLContext, session: ssl.SSLSession | None
             ) -> tuple[ssl.SSLSession | None, bool]:
    """One echo over a new connection offering ``session``: the session the server left the
    client (its TLS 1.3 tickets come after the handshake, with the echo) and whether the
    server resumed the one offered."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=HOST, session=session) as tls:
        tls.sendall(b"ping\n")
        assert tls.recv(64) == b"ping\n"
        return tls.session, tls.session_reused


async def test_with_a_client_ca_no_session_is_resumed(cert_dir: Path, tmp_path: Path) -> None:
    """A resumed session skips the client certificate, and a ticket's keys outlive a reload:
    a client whose CA was taken out of the file got in again by resuming. The server issues
    no tickets when it checks client certificates."""
    ca = certificates.create_ca(common_name="client CA")
    pair = certificates.issue_client(ca=ca, common_name="kube-scheduler")
    (tmp_path / "c.crt").write_bytes(pair.cert_pem)
    (tmp_path / "c.key").write_bytes(pair.key_pem)
    (tmp_path / "client-ca.crt").write_bytes(ca.cert_pem)
    context = client_context(cafile=cert_dir / store.CA_BUNDLE)
    context.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
    reloader = reloader_for(cert_dir, client_ca=tmp_path / "client-ca.crt")
    async with tls_server(reloader.context) as port:
        session, _ = await asyncio.to_thread(_resumed, port, context, None)
        _, reused = await asyncio.to_thread(_resumed, port, context, session)
        assert not reused
