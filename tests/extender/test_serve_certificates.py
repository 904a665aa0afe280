"""`migfit serve`'s throwaway certificate: a temporary folder goes when the server stops."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from migfit.certs import certificates
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
