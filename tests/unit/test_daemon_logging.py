"""The daemon says one line at start (default verbosity), other libraries' INFO lines stay
quiet unless -vv, and the start facts are written for `mirage status`."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

import mirage.daemon.service as service_module
from mirage import __version__
from mirage.cli import main
from mirage.daemon import health
from mirage.daemon.config import config_from_dict, load_config
from tests.fakes import cli_setup


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """The CLI sets process-wide logger levels: give the other tests theirs back."""
    root, mirage_log = logging.getLogger(), logging.getLogger("mirage")
    saved = (root.level, list(root.handlers), mirage_log.level)
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    mirage_log.setLevel(saved[2])


def run_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str) -> Path:
    """`mirage [flags] daemon` on the real backend, with a service that only logs what the
    scheduler and a cycle would (no Slurm, no socket)."""
    tmp_path.mkdir(exist_ok=True)
    cfg, _ = cli_setup(tmp_path, "#!/bin/sh\n")

    def service(daemon: Any, config: Any) -> None:
        logging.getLogger("apscheduler.scheduler").info("Added job 'cycle' to job store")
        logging.getLogger("mirage.daemon.service").debug("cycle: acted=True")

    monkeypatch.setattr(service_module, "run_service", service)
    res = CliRunner().invoke(main, [*flags, "daemon", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    return cfg


def messages(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(name)]


def test_default_verbosity_says_the_start_line_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = run_daemon(tmp_path, monkeypatch)
    started = [m for m in messages(caplog, "mirage.daemon.cli") if " started: " in m]
    assert len(started) == 1, caplog.text
    line = started[0]
    assert line.startswith(
        f"mirage {__version__} started: policy qbets [guard: estimate 1/6 of the limit], socket "
    )
    assert f"socket {tmp_path / 'no-daemon.sock'}, metrics off, database sqlite:///" in line
    assert ", models none, lease holder " in line  # a baseline and no cluster: no models
    assert not messages(caplog, "apscheduler")  # a library's INFO: not at default verbosity
    assert not [m for m in messages(caplog, "mirage") if m.startswith("cycle")]  # debug
    # the same facts for `mirage status`
    store = service_module.open_store(load_config(str(cfg)))
    start = health.read(store, health.START_KEY)
    assert start is not None and start["pid"] == os.getpid() and start["version"] == __version__
    assert line.endswith(f"lease holder {start['holder']}")
    shown = CliRunner().invoke(main, ["status", "--json", "--config", str(cfg)])
    assert json.loads(shown.output)["daemon"]["start"]["holder"] == start["holder"]
    human = CliRunner().invoke(main, ["status", "--config", str(cfg)]).output
    assert f"daemon: mirage {__version__} on {start['host']} (pid {os.getpid()})" in human


def test_start_line_names_the_guard() -> None:
    """The guard as the start line shows it, for each kind (reactive: none shown)."""
    from mirage.daemon.cli import guard_text, start_text
    from mirage.daemon.config import PolicySection

    p = PolicySection()
    assert guard_text(p) == "estimate 1/6 of the limit"
    assert guard_text(dataclasses.replace(p, guard_margin_s=24 * 3600)) == "estimate 24 h"
    la = dataclasses.replace(p, guard="lookahead", guard_lookahead_margin_s=7200)
    assert guard_text(la) == "look-ahead +2 h"
    both = dataclasses.replace(la, guard="estimate+lookahead", guard_margin_s=8 * 3600)
    assert guard_text(both) == "estimate 8 h or look-ahead +2 h"
    # a 60 s margin read "estimate 0.0166667 h" in the trial's log and status
    from mirage.policy.guard import vetoes_text

    assert vetoes_text(60 / 3600, -90 / 3600) == "estimate 1m00s or look-ahead -1m30s"
    assert guard_text(dataclasses.replace(p, guard="none")) == "none"
    assert guard_text(dataclasses.replace(p, default="reactive")) == ""
    assert start_text({"policy": "qbets", "guard": "look-ahead +2 h"}, 0).startswith(
        "policy qbets [guard: look-ahead +2 h], socket -"
    )


def test_v_is_mirages_debug_and_vv_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run_daemon(tmp_path / "v", monkeypatch, "-v")
    assert "cycle: acted=True" in messages(caplog, "mirage.daemon.service")
    assert not messages(caplog, "apscheduler")
    caplog.clear()
    run_daemon(tmp_path / "vv", monkeypatch, "-vv")
    assert "cycle: acted=True" in messages(caplog, "mirage.daemon.service")
    assert messages(caplog, "apscheduler") == ["Added job 'cycle' to job store"]


def test_start_facts_hide_the_database_password() -> None:
    from mirage.daemon.cli import start_info

    cfg = config_from_dict(
        {
            "daemon": {"database_url": "postgresql+psycopg://mirage:s3cret@db.example/mirage"},
            "metrics": {"address": "127.0.0.1", "port": 9750},
            "policy": {"models_dir": "/srv/models", "cluster": "ls6"},
        }
    )
    daemon = SimpleNamespace(
        holder="login1:7:ab",
        policy_summary=lambda: {
            "policy": "xgb",
            "model": "xgb (ls6, trained 2026-11-20T00:00:00Z)",
            "model_created_at": 100,
            "fallback": "",
        },
    )
    info = start_info(daemon, cfg, 1000)  # type: ignore[arg-type]
    assert "s3cret" not in info.database and info.database.startswith("postgresql+psycopg://")
    assert (info.metrics, info.models_dir, info.holder) == (
        "127.0.0.1:9750",
        "/srv/models/ls6",
        "login1:7:ab",
    )
    assert (info.model_created_at, info.started_at) == (100, 1000)
