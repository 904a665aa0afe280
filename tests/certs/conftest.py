"""Fixtures for the certs tests: a fresh certificate directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from certs_tls import EXTRA, NAMESPACE, SERVICE

from migfit.certs import store


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    store.init(directory, service=SERVICE, namespace=NAMESPACE, extra_sans=EXTRA)
    return directory
