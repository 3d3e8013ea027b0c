"""`mirage evaluate` on the bundled ls6 slice: table, JSON and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from mirage.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_evaluate_smoke(tmp_path: Path) -> None:
    args = [
        "evaluate", "--cluster", "ls6",
        "--trace", str(REPO / "traces" / "ls6-a100-slice.log.gz"),
        "--profile", str(REPO / "models" / "ls6" / "profile.toml"),
        "--load", "2", "--time-limit-h", "4", "--step-min", "30", "--every-h", "12",
        "--window-h", "10", "--warmup-h", "12",
        "--tune-split", "2022-11-06:2022-11-14", "--test-split", "2023-03-08:2023-03-11",
        "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"), "--boot", "200",
    ]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "[all]" in res.output and "oracle" in res.output
    report = json.loads((tmp_path / "out" / "eval-ls6-load2.json").read_text())
    load = report["loads"]["2"]
    assert load["nodes"] == 40 and load["samples"]["test"] > 0
    cell = load["table"]["oracle"]["all"]["mean_J_h"]
    assert cell["n"] == load["samples"]["test"]
    assert cell["value"] <= load["table"]["reactive"]["all"]["mean_J_h"]["value"]
    for png in load["plots"]:
        assert Path(png).stat().st_size > 1000
    again = CliRunner().invoke(main, [*args, "--json"])  # from the cache
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["loads"]["2"]["table"] == load["table"]


def test_evaluate_rejects_unknown_policy(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["evaluate", "--cluster", "ls6", "--trace", "x", "--policies", "nope"]
    )
    assert res.exit_code != 0
