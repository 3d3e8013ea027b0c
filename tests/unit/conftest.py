"""Fixtures shared by the unit tests of more than one module."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirage.daemon.api import Api, ApiServer
from mirage.daemon.config import Config, DaemonSection
from tests.unit.daemon_support import make_store


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ApiServer, Path]]:
    sockdir = Path(tempfile.mkdtemp(prefix="mirage-api-"))
    sockdir.chmod(0o755)
    # the test registers as itself, which may be root (refused by default)
    config = Config(daemon=DaemonSection(allow_root_chains=True))
    srv = ApiServer(sockdir / "mirage.sock", Api(make_store(tmp_path), config=config))
    srv.start()
    yield srv, sockdir / "mirage.sock"
    srv.stop()
    sockdir.rmdir()
