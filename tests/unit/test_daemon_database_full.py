"""A database the daemon cannot write, on a real filesystem: a small tmpfs that fills up,
then is remounted read-only. The trial's daemon logged "cycle failed and could not be
recorded" while `mirage status` showed a recent cycle and a reachable Slurm, and a
registration answered "internal error: OperationalError". Now the daemon says why, in
its metrics, in `mirage status` (through the socket, which asks the daemon's process) and
to the user who registers. Needs root (mount); skipped without it."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirage.daemon.api import Api
from mirage.daemon.cli import _daemon_lines
from mirage.daemon.config import Config, DaemonSection
from mirage.daemon.core import Daemon
from mirage.daemon.store import Store
from tests.unit.daemon_support import make_chain, make_config, make_sim, run_cycles

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None, reason="needs root to mount a tmpfs"
)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk))
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc.stderr!r}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True, timeout=30)


def _fill(disk: Path) -> Path:
    ballast = disk / "ballast"
    with ballast.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return ballast


def _register(cwd: Path) -> dict[str, Any]:
    return {
        "op": "register",
        "script_b64": base64.b64encode(b"#!/bin/bash\n#SBATCH --time=10\ntrue\n").decode(),
        "script_path": "job.sbatch",
        "sbatch_args": ["-p", "gpu"],
        "segments": 2,
        "cwd": str(cwd),
        "environ": {"PATH": "/usr/bin"},
    }


def test_a_full_then_read_only_database_is_said_everywhere(
    small_disk: Path, tmp_path: Path
) -> None:
    store = Store.open(f"sqlite:///{small_disk / 'mirage.sqlite'}")
    sim = make_sim()
    for i in range(3):
        make_chain(store, segments=4, limit=1800, name=f"c{i}")
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=300))
    run_cycles([d], sim, 0, 600)
    assert d.database_health() == {"writable": True}
    config = Config(daemon=DaemonSection(allow_root_chains=True))
    api = Api(store, config=config, database_health=d.database_health)
    ballast = _fill(small_disk)
    t = 660
    with pytest.raises(Exception):  # noqa: B017 - whatever SQLite raises, it raises
        run_cycles([d], sim, t, t + 600)
    health = d.database_health()
    assert health["writable"] is False and "full" in health["error"], health
    assert d.metrics.value("mirage_database_writable") == 0
    answer = api.handle(_register(tmp_path), os.getuid(), os.getgid())
    assert answer["ok"] is False
    assert answer["error"].startswith("the daemon's database is full"), answer
    shown = api.handle({"op": "status"}, os.getuid(), os.getgid())["status"]
    assert shown["database"]["writable"] is False
    text = "\n".join(_daemon_lines(shown, t + 600))
    assert "DATABASE NOT WRITABLE since" in text and "no chain advances" in text, text

    ballast.unlink()
    run_cycles([d], sim, t + 660, t + 720)
    assert d.database_health() == {"writable": True}
    assert d.metrics.value("mirage_database_writable") == 1

    store.engine.dispose()  # no file open for writing: the kernel refuses the remount
    _mount("-o", "remount,ro", str(small_disk))
    with pytest.raises(Exception):  # noqa: B017
        run_cycles([d], sim, t + 780, t + 900)
    assert "read-only" in d.database_health()["error"], d.database_health()
    answer = api.handle(_register(tmp_path), os.getuid(), os.getgid())
    assert answer["error"].startswith("the daemon's database is read-only"), answer
    store.engine.dispose()
    _mount("-o", "remount,rw", str(small_disk))
    run_cycles([d], sim, t + 960, t + 1020)
    assert d.database_health() == {"writable": True}
