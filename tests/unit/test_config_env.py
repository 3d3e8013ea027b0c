"""`$MIRAGE_CONFIG` names the configuration; `[log] level` sets Mirage's log level."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.daemon.config import ConfigError, config_from_dict, load_config


def test_mirage_config_names_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text('[daemon]\ncluster = "site-a"\n', encoding="utf-8")
    monkeypatch.setenv("MIRAGE_CONFIG", str(cfg))
    assert load_config().daemon.cluster == "site-a"
    assert load_config(tmp_path / "site.toml").daemon.cluster == "site-a"
    monkeypatch.setenv("MIRAGE_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match=r"missing\.toml"):  # named, so it must exist
        load_config()


def test_log_level_is_checked_and_applied(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[log\]: level 'loud'; valid: debug, info"):
        config_from_dict({"log": {"level": "loud"}})
    cfg = tmp_path / "quiet.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path}"\n[log]\nlevel = "warning"\n', encoding="utf-8"
    )
    monkeypatch.setenv("MIRAGE_CONFIG", str(cfg))
    mirage_log = logging.getLogger("mirage")
    before = mirage_log.level
    try:
        res = CliRunner().invoke(main, ["status", "--json"])
        assert res.exit_code == 0, res.output
        assert mirage_log.level == logging.WARNING
        res = CliRunner().invoke(main, ["-v", "status", "--json"])
        assert res.exit_code == 0, res.output
        assert mirage_log.level == logging.DEBUG  # -v wins over the file
    finally:
        mirage_log.setLevel(before)
