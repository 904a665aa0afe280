"""`migfit serve`'s throwaway certificate: a temporary folder goes when the server stops."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from migfit import errors
from migfit.certs import certificates, store
from migfit.commands import serve


def test_a_temporary_certificate_folder_is_removed_on_exit() -> None:
    with serve.certificate_files(None) as (cert, key, ca):
        folder = cert.parent
        assert key.parent == ca.parent == folder
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert len(certificates.load_certificates(ca.read_bytes())) == 1
    assert not folder.exists()


def test_a_temporary_folder_is_removed_when_the_server_fails() -> None:
    with pytest.raises(RuntimeError), serve.certificate_files(None) as (cert, _key, _ca):
        folder = cert.parent
        raise RuntimeError("port in use")
    assert not folder.exists()


def test_a_given_certificate_folder_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "certs"
    with serve.certificate_files(target) as (cert, key, ca):
        assert cert.parent == target
    assert cert.is_file() and key.is_file() and ca.is_file()


def test_a_folder_an_earlier_serve_wrote_is_used_again(tmp_path: Path) -> None:
    target = tmp_path / "certs"
    with serve.certificate_files(target) as (_cert, _key, ca):
        first = ca.read_bytes()
    with serve.certificate_files(target) as (_cert, _key, ca):
        assert ca.read_bytes() != first  # a new throwaway CA, in the same folder


def test_a_certs_init_folder_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """It was overwritten: ca.crt, tls.crt and tls.key became the throwaway localhost ones
    beside the old ca.key, and `migfit certs rotate` then failed on that folder."""
    target = tmp_path / "pki"
    store.init(target, service="migfit-webhook", namespace="migfit-system")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(errors.UsageError, match="pass a new or empty folder"), \
            serve.certificate_files(target):
        pass
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    store.rotate(target)  # still a consistent certificate folder


@pytest.mark.parametrize(("files", "said"), [
    (["notes.txt"], r"is not empty \(it holds notes.txt\)"),
    (["tls.crt", "tls.key", "ca.crt"], "already holds ca.crt, tls.crt, tls.key, which"),
])
def test_a_folder_holding_other_files_is_refused(tmp_path: Path, files: list[str],
                                                 said: str) -> None:
    for name in files:
        (tmp_path / name).write_text("mine\n")
    with pytest.raises(errors.UsageError, match=said), \
            serve.certificate_files(tmp_path):
        pass
    assert all((tmp_path / name).read_text() == "mine\n" for name in files)
