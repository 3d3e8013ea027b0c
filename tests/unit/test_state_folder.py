"""The database folder is the daemon's alone: install.md's `install -d /var/lib/mirage/models`
creates /var/lib/mirage 0755 before the daemon ever starts, and the trial found it so."""

from __future__ import annotations

from pathlib import Path

from mirage.daemon.config import Config, DaemonSection
from mirage.daemon.service import open_store


def test_a_state_folder_made_0755_by_someone_else_becomes_0700(tmp_path: Path) -> None:
    state = tmp_path / "var-lib-mirage"
    (state / "models").mkdir(parents=True)
    state.chmod(0o755)
    url = f"sqlite:///{state / 'mirage.sqlite'}"
    open_store(Config(daemon=DaemonSection(database_url=url)))
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / "mirage.sqlite").stat().st_mode & 0o077 == 0
