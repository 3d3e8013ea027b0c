"""Defaults come from the current directory and the environment (mirage.paths), never from
where the package is installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.evaluate.inputs import default_profile, default_trace
from mirage.paths import models_root, trace_roots

REPO = Path(__file__).resolve().parents[2]


def test_models_and_traces_follow_the_current_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MIRAGE_MODELS", raising=False)
    monkeypatch.delenv("MIRAGE_TRACES", raising=False)
    monkeypatch.chdir(tmp_path)  # not a checkout: nothing found, nothing invented
    assert models_root() == Path("models")
    assert default_trace("ls6") is None
    assert default_profile("ls6") == "ls6"  # the built-in profile
    (tmp_path / "traces" / "tacc_ls6_a100").mkdir(parents=True)
    (tmp_path / "traces" / "tacc_ls6_a100" / "ls6-a100.log.gz").write_bytes(b"")
    (tmp_path / "models" / "ls6").mkdir(parents=True)
    (tmp_path / "models" / "ls6" / "profile.toml").write_text("")
    assert default_trace("ls6") == str(Path("traces/tacc_ls6_a100/ls6-a100.log.gz"))
    assert default_profile("ls6") == str(Path("models/ls6/profile.toml"))


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MIRAGE_MODELS", str(tmp_path / "m"))
    monkeypatch.setenv("MIRAGE_TRACES", str(tmp_path / "t"))
    assert models_root() == tmp_path / "m"
    assert trace_roots() == [tmp_path / "t"]


def test_train_help_names_no_installed_path() -> None:
    res = CliRunner().invoke(main, ["train", "--help"])
    assert res.exit_code == 0
    assert str(REPO) not in res.output
    assert "$MIRAGE_MODELS" in res.output
