"""`mirage evaluate` on the bundled ls6 slice: table, JSON and PNG plots."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.evaluate.lookahead import LOOKAHEAD_VERSION
from mirage.evaluate.probes import PROBES
from mirage.evaluate.protocol import Block, blocks
from mirage.learn.rolling import past_samples

H = 3600
REPO = Path(__file__).resolve().parents[2]


def _slice_args(tmp_path: Path, every_h: str) -> list[str]:
    """`mirage evaluate` on the bundled slice at load 2, 4 h chains (splits to be added)."""
    return [
        "evaluate", "--cluster", "ls6",
        "--trace", str(REPO / "traces" / "ls6-a100-slice.log.gz"),
        "--profile", str(REPO / "models" / "ls6" / "profile.toml"),
        "--load", "2", "--time-limit-h", "4", "--step-min", "30", "--every-h", every_h,
        "--window-h", "10", "--warmup-h", "12",
        "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
    ]  # fmt: skip


def test_evaluate_smoke(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    args = [
        *_slice_args(tmp_path, "12"), "--boot", "200",
        "--tune-split", "2022-11-06:2022-11-14", "--test-split", "2023-03-08:2023-03-11",
    ]  # fmt: skip
    caplog.set_level(logging.INFO, logger="mirage.progress")
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    # Issue 28: off a terminal, progress is log lines: samples done, and the last says so
    said = [r.getMessage() for r in caplog.records if r.name == "mirage.progress"]
    assert any(re.match(r"probes test: (\d+)/\1 \(100%\) after ", line) for line in said), said
    assert "[all]" in res.output and "oracle" in res.output
    report = json.loads((tmp_path / "out" / "eval-ls6-load2.json").read_text())
    load = report["loads"]["2"]
    assert load["nodes"] == 40 and load["samples"]["test"] > 0
    cell = load["table"]["oracle"]["all"]["mean_J_h"]
    assert cell["n"] == load["samples"]["test"]
    assert cell["value"] <= load["table"]["reactive"]["all"]["mean_J_h"]["value"]
    top = load["ceiling_removed"]["all"]
    assert top == load["table"]["oracle"]["all"]["removed"]
    assert f"[all] {top['value']:.0%} [{top['lo']:.0%}, {top['hi']:.0%}]" in res.output
    gain = load["oracle_gain"]["all"]
    react, orc = (load["table"][m]["all"]["mean_J_h"]["value"] for m in ("reactive", "oracle"))
    assert gain["oracle_gain_h"]["value"] == pytest.approx(react - orc)
    assert "reactive" not in gain["methods"] and "oracle" not in gain["methods"]
    assert f"[all] n = {cell['n']}, oracle gain" in res.output
    # 12 samples over three days: every level too small to count, and said so
    assert any(w.startswith("too few samples to count") for w in load["warnings"])
    for png in load["plots"]:
        assert Path(png).stat().st_size > 1000
    again = CliRunner().invoke(main, [*args, "--json"])  # from the cache
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["loads"]["2"]["table"] == load["table"]
    # --cached-only: two test probes gone from the cache; the report uses the others and
    # records nothing
    test_dir = max((tmp_path / "cache").iterdir(), key=lambda d: max(_probe_times(d)))
    gone = [test_dir / f"{t}{PROBES.suffix}" for t in sorted(_probe_times(test_dir))[-2:]]
    for path in gone:
        path.unlink()
    part = CliRunner().invoke(main, [*args, "--json", "--cached-only"])
    assert part.exit_code == 0, part.output
    counts = json.loads(part.output)["loads"]["2"]["cached_only"]
    n_test = len(_probe_times(test_dir)) + 2
    assert counts["test"] == {"used": n_test - 2, "of": n_test}
    assert counts["tune"]["used"] == counts["tune"]["of"] > 0
    assert not any(p.exists() for p in gone)
    text = CliRunner().invoke(main, [*args, "--cached-only"])
    assert f"(cached only: {n_test - 2} of {n_test} samples)" in text.output


def _probe_times(folder: Path) -> list[int]:
    names = [p.name.removesuffix(PROBES.suffix) for p in folder.glob(f"*{PROBES.suffix}")]
    return [int(n) for n in names if n.isdigit()]


def test_evaluate_rejects_unknown_policy(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["evaluate", "--cluster", "ls6", "--trace", "x", "--policies", "nope"]
    )
    assert res.exit_code != 0


def _rolling_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        *_slice_args(tmp_path, "6"), "--boot", "50", "--json",
        "--tune-split", "2022-11-06:2022-11-10", "--test-split", "2022-11-10:2022-11-14",
        "--policies", "reactive,fixed-lead,running-average,qbets,oracle", *extra,
    ]  # fmt: skip


def test_rolling_recalibration_tunes_each_block_on_its_past_only(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, _rolling_args(tmp_path, "--recalibrate-every-days", "1",
                                                 "--recalibrate-window-days", "2"))  # fmt: skip
    assert res.exit_code == 0, res.output
    entry = json.loads(res.output)["loads"]["2"]
    blocks = entry["tuned"]
    assert len(blocks) >= 3
    assert sum(b["samples"] for b in blocks) == entry["samples"]["test"]
    for b in blocks:
        assert b["tune_from"] == b["start"] - 2 * 86400 and b["tune_samples"] > 0
        assert set(b["tuned"]) == {"fixed-lead", "running-average", "qbets"}
    # at most the 7 six-hourly samples of two days whose 10 h windows are over
    assert 0 < blocks[-1]["tune_samples"] <= 7


def test_a_block_tunes_only_on_samples_over_before_it_starts() -> None:
    b = Block(start=100 * H, end=124 * H, tune_from=52 * H)
    times = list(range(40 * H, 130 * H, 6 * H))  # 40 h, 46 h, ... 124 h
    past = past_samples(times, b, span_s=10 * H)
    assert [times[i] // H for i in past] == [52, 58, 64, 70, 76, 82, 88]  # 94 h ends at 104 h
    assert blocks(0, 10 * 86400, 7 * 86400, 28 * 86400) == [
        Block(0, 7 * 86400, -28 * 86400),
        Block(7 * 86400, 10 * 86400, -21 * 86400),
    ]


def test_one_block_tuned_on_the_tuning_split_is_the_plain_evaluation(tmp_path: Path) -> None:
    """A single block whose window is exactly the tuning split reproduces `evaluate`, the
    method selected on the tuning split included; the runtime oracle, a reference, is
    tuned like the baselines but never selected nor compared against; the look-ahead, a
    policy, is tuned, a candidate, and compared head to head."""
    pick = ("--policies", "reactive,fixed-lead,running-average,qbets,oracle,runtime-oracle,"
            "lookahead,selected")  # fmt: skip
    plain = CliRunner().invoke(main, _rolling_args(tmp_path, *pick))
    week = ("--recalibrate-every-days", "4", "--recalibrate-window-days", "4")
    one = CliRunner().invoke(main, _rolling_args(tmp_path, *week, *pick))
    assert plain.exit_code == 0 and one.exit_code == 0, plain.output + one.output
    a, b = (json.loads(r.output)["loads"]["2"] for r in (plain, one))
    assert b["tuned"][0]["tuned"] == a["tuned"]
    assert b["tuned"][0]["tune_samples"] == a["samples"]["tune"]
    assert b["table"] == a["table"]
    chosen = a["selected"]["chosen"]
    assert b["tuned"][0]["selected"] == chosen != "oracle"
    scores = a["selected"]["tune_mean_J_h"]
    assert "oracle" not in scores and scores[chosen] == min(scores.values())
    assert "runtime-oracle" not in scores and "runtime-oracle" in a["tuned"]
    assert a["table"]["selected"] == a["table"][chosen]  # judged on the test split as itself
    assert a["selected_head_to_head"]["all"]["learned"] == "selected"
    assert a["selected_head_to_head"]["all"]["baseline"] not in ("oracle", "runtime-oracle")
    oracle, runtime = (
        a["table"][m]["all"]["mean_J_h"]["value"] for m in ("oracle", "runtime-oracle")
    )
    assert oracle <= runtime  # the oracle picks each sample's best step
    assert "lookahead" in scores and "lookahead" in a["tuned"]
    ahead = a["lookahead_head_to_head"]["all"]
    assert ahead["learned"] == "lookahead" and ahead["baseline"] != "runtime-oracle"
    assert b["lookahead_head_to_head"] == a["lookahead_head_to_head"]


def test_rolling_recalibration_without_history_is_a_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, _rolling_args(tmp_path, "--recalibrate-every-days", "1",
                                                 "--recalibrate-window-days", "0.2"))  # fmt: skip
    assert res.exit_code != 0 and "lengthen the tuning window" in res.output


def test_lookahead_runtime_settings_are_cached_apart_and_checked(tmp_path: Path) -> None:
    """`--lookahead-draws` and `--lookahead-runtime` record their own curves (beside the
    median's, not over them) and are stated in the JSON; an unknown statistic is refused."""
    pick = ("--policies", "reactive,lookahead")
    for extra in ((), ("--lookahead-draws", "3"), ("--lookahead-runtime", "mean")):
        res = CliRunner().invoke(main, _rolling_args(tmp_path, *pick, *extra))
        assert res.exit_code == 0, res.output
        report = json.loads(res.output)
        assert report["lookahead_draws"] == (3 if "--lookahead-draws" in extra else 1)
        assert report["loads"]["2"]["table"]["lookahead"]["all"]["mean_J_h"]["n"] > 0
    cached = {p.name.split(".", 1)[1] for p in (tmp_path / "cache").rglob("*.lookahead-*")}
    v = f"lookahead-v{LOOKAHEAD_VERSION}"
    assert cached == {f"{v}.npz", f"{v}-draws3.npz", f"{v}-mean.npz"}
    bad = CliRunner().invoke(main, _rolling_args(tmp_path, *pick, "--lookahead-runtime", "avg"))
    assert bad.exit_code != 0 and "unknown run-time statistic 'avg'" in bad.output


def test_default_test_setting_is_the_evaluations_test_split(
    monkeypatch: Any, tmp_path: Path
) -> None:
    from mirage.evaluate import inputs as cli
    from mirage.evaluate.protocol import scaled_nodes

    monkeypatch.setitem(cli.KNOWN_TRACES, "ls6", "ls6-a100-slice.log.gz")  # the bundled slice
    test = cli.default_test_setting("ls6", 1.05, 12)
    split = test.setting.split
    assert split.name == "test"
    assert test.setting.nodes == scaled_nodes(test.profile.partition(None).nodes or 0, 1.05)
    assert test.setting.nodes < (test.profile.partition(None).nodes or 0)
    assert test.partition == "gpu-a100"
    gaps = {b - a for a, b in zip(test.times, test.times[1:], strict=False)}
    assert gaps == {12 * 3600}
    assert split.start <= test.times[0] and test.times[-1] < split.end
    with pytest.raises(SystemExit, match="no nosuch trace"):
        cli.default_test_setting("nosuch", 1.0, 4)
    # a profile and decision step of the caller's (a copy of the calibrated one, elsewhere)
    limits = str(tmp_path / "ls6-own.toml")
    Path(limits).write_bytes((REPO / "models" / "ls6" / "profile.toml").read_bytes())
    tune = cli.default_test_setting("ls6", 1.0, 12, "tune", profile_name=limits, step_min=30)
    assert tune.setting.profile == limits and tune.setting.split.name == "tune"
    assert tune.setting.protocol.step_s == 1800 != test.setting.protocol.step_s


def test_evaluate_and_train_say_how_much_of_the_trace_they_use(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 28: reading a trace for evaluate or train logs how much of it a replay uses,
    and warns when more than 5% is left out (HPC2N's first 300 jobs on Pitzer's 40-CPU
    nodes: 10 ask more CPUs than a node has, 6 never ran)."""
    import logging

    from mirage.evaluate.inputs import read_inputs

    caplog.set_level(logging.INFO, logger="mirage.evaluate.inputs")
    slice_ = str(Path(__file__).resolve().parents[2] / "traces" / "hpc2n-head300.swf.gz")
    read_inputs(slice_, "pitzer")
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("INFO", f"{slice_}: used 284 of 300 jobs (94.7%); left out: no start/end 6, "
            "too many CPUs per node 10; not in the trace: nodes (taken as 1) 284, "
            "partition (taken as gpuserial) 284") in said  # fmt: skip
    assert any(level == "WARNING" and "only 284 of the trace's 300 jobs" in m for level, m in said)
