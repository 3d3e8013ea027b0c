"""``mirage simulate`` and ``mirage calibrate`` (CliRunner on the bundled ls6 slice)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mirage.cli import main
from mirage.profile.schema import load_profile

REPO = Path(__file__).resolve().parents[2]
LS6_SLICE = str(REPO / "traces" / "ls6-a100-slice.log.gz")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def simulate_json(*args: str) -> dict[str, Any]:
    res = run("simulate", "--trace", LS6_SLICE, "--json", *args)
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def test_commands_are_registered() -> None:
    res = run("--help")
    assert "simulate" in res.output and "calibrate" in res.output


def test_simulate_json_summary() -> None:
    out = simulate_json("--nodes", "88")
    for key in ("jobs", "started", "span_s", "utilisation", "wall_s", "jobs_per_s", "wait_s",
                "wait_from_eligible_s", "holds", "nodes", "arrival_scale"):  # fmt: skip
        assert key in out
    assert out["nodes"] == 88 and out["profile"] == "ls6"
    assert out["jobs"] == 1999 and out["started"] == out["jobs"]
    assert 0 < out["utilisation"] < 1
    assert out["span_s"] > 100 * 86400  # the slice's two blocks are months apart
    assert out["jobs_per_s"] > 0 and out["wall_s"] >= 0
    for side in ("simulated", "real"):
        stats = out["wait_s"][side]
        assert 0 <= stats["p50"] <= stats["p90"] <= stats["p99"] <= stats["max"]
    holds = out["holds"]
    assert holds["source"] == "chains" and holds["held"] > 0
    assert holds["dependencies"] == holds["held"]
    assert holds["real_mean_wait_eligible_s"] < holds["real_mean_wait_submit_s"]
    elig = out["wait_from_eligible_s"]
    assert 0 <= elig["ks"] <= 1 and elig["jobs"] <= out["jobs"]
    assert elig["real"]["mean"] < out["wait_s"]["real"]["mean"]


def test_no_holds_and_a_higher_arrival_rate() -> None:
    base = simulate_json("--nodes", "88", "--no-holds")
    assert base["holds"]["source"] == "off" and base["holds"]["held"] == 0
    fast = simulate_json("--nodes", "88", "--no-holds", "--arrival-scale", "2")
    assert fast["jobs"] == base["jobs"]
    assert fast["span_s"] < base["span_s"]
    assert fast["wait_s"]["simulated"]["mean"] >= base["wait_s"]["simulated"]["mean"]


def test_simulate_table_output_and_backfill_override() -> None:
    res = run("simulate", "--trace", LS6_SLICE, "--nodes", "60", "--backfill", "easy")
    assert res.exit_code == 0, res.output
    assert "60 nodes, backfill easy" in res.stdout
    for word in ("Waits", "simulated", "real", "utilisation", "jobs per second", "KS"):
        assert word in res.stdout


def test_simulate_before_restricts_the_trace() -> None:
    out = simulate_json("--nodes", "88", "--before", "2022-12-01")
    assert 0 < out["jobs"] < 1999


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--trace", LS6_SLICE], "--nodes"),  # ls6 leaves the node count out
        (["--trace", LS6_SLICE, "--nodes", "8", "--profile", "nosuch"], "nosuch"),
        (["--trace", "/nonexistent/trace.log", "--nodes", "8"], "nonexistent"),
        (["--trace", LS6_SLICE, "--nodes", "8", "--before", "soon"], "--before"),
    ],
)
def test_simulate_errors(args: list[str], needle: str) -> None:
    res = run("simulate", *args)
    assert res.exit_code != 0
    assert needle in res.output
    assert "Traceback" not in res.output


def test_simulate_rejects_a_file_that_is_not_a_trace(tmp_path: Path) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text("this is not a trace\n", encoding="utf-8")
    res = run("simulate", "--trace", str(bad), "--nodes", "8")
    assert res.exit_code != 0
    assert "bad.log" in res.output and "Traceback" not in res.output


def test_calibrate_json_and_profile_file(tmp_path: Path) -> None:
    out = tmp_path / "ls6.toml"
    res = run("calibrate", "--trace", LS6_SLICE, "--before", "2023-03-01", "--nodes-min", "4",
              "--nodes-max", "12", "--step", "4", "--out", str(out), "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    best = data["best"]
    assert 4 <= best["nodes"] <= 12 and 0 <= best["ks"] <= 1
    tried = {c["nodes"] for c in data["candidates"]}
    assert tried >= {8, 12}
    assert 4 in tried or "stopped going down" in data["notes"][0]
    assert data["holds"]["held"] > 0
    assert data["cutoff"] == 1677650400  # 2023-03-01 00:00 America/Chicago
    prof = load_profile(out)
    assert prof.partition().nodes == best["nodes"]


def test_calibrate_table() -> None:
    res = run("calibrate", "--trace", LS6_SLICE, "--before", "2023-03-01", "--nodes-min", "6",
              "--nodes-max", "8", "--step", "2")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "KS" in res.stdout and "best:" in res.stdout
    assert "[[partitions]]" in res.stdout  # the calibrated profile, as TOML
    # Issue 28: a line per replay as it ends, all before the table (stdout and stderr
    # as a terminal shows them, one stream)
    progress = [i for i, ln in enumerate(res.output.splitlines()) if ln.startswith("  nodes=")]
    table = next(i for i, ln in enumerate(res.output.splitlines()) if "Calibration on" in ln)
    assert progress and max(progress) < table


def test_calibrate_help_says_the_default_node_range() -> None:
    """Issue 28: the default range (40-120 nodes, made for ls6) is said, with its reason."""
    out = " ".join(run("calibrate", "--help").output.split())
    assert "by default 120 down to 40" in out and "your partition's size" in out


def test_calibrate_errors() -> None:
    res = run("calibrate", "--trace", LS6_SLICE, "--before", "2023-03-01", "--nodes-min", "9",
              "--nodes-max", "8")  # fmt: skip
    assert res.exit_code != 0 and "--nodes-min" in res.output
    res = run("calibrate", "--trace", LS6_SLICE, "--before", "1999-01-01")
    assert res.exit_code != 0 and "no job" in res.output
    # a log too short to compare anything (6 jobs in the first minute): one line, no traceback
    res = run("calibrate", "--trace", LS6_SLICE, "--before", "2022-10-05T11:53", "--nodes-min",
              "4", "--nodes-max", "8", "--step", "4")  # fmt: skip
    assert res.exit_code == 1 and "no job to compare" in res.output
    assert "Traceback" not in res.output


HPC2N_SLICE = str(REPO / "traces" / "hpc2n-head300.swf.gz")


def test_simulate_on_a_log_shorter_than_the_warm_up_says_there_is_no_distance() -> None:
    """Issue 28: a day of log leaves no job after the 2-day warm-up: the KS distance is
    none (null), not 1.000 for 0 jobs."""
    args = ("simulate", "--trace", LS6_SLICE, "--nodes", "79", "--before", "2022-10-06")
    we = json.loads(run(*args, "--json").stdout)["wait_from_eligible_s"]
    assert we["jobs"] == 0 and we["ks"] is None
    text = run(*args)
    assert text.exit_code == 0 and "warm-up): none, no job was submitted" in text.stdout


def test_simulate_says_how_much_of_the_trace_it_replayed() -> None:
    """Issue 28: HPC2N's first 300 jobs on Pitzer's 40-CPU nodes: the jobs asking more
    CPUs than a node has are left out, which is over 5% of the trace: a warning on
    stderr, the counts in the output, and an error with --strict."""
    res = run("simulate", "--trace", HPC2N_SLICE, "--profile", "pitzer", "--json")
    assert res.exit_code == 0, res.output
    use = json.loads(res.stdout)["trace_use"]
    assert use["rows"] == 300 and use["used"] == 284
    assert use["dropped"] == {"no start/end": 6, "too many CPUs per node": 10}
    assert use["unknown"]["nodes (taken as 1)"] == 284  # SWF gives processors, not nodes
    assert "warning: only 284 of the trace's 300 jobs (94.7%) were replayed" in res.stderr
    strict = run("simulate", "--trace", HPC2N_SLICE, "--profile", "pitzer", "--strict")
    assert strict.exit_code == 1 and "(--strict)" in strict.output
    # the ls6 slice: all replayed but its one malformed row, under 5%
    quiet = run("simulate", "--trace", LS6_SLICE, "--nodes", "79", "--json", "--strict")
    assert quiet.exit_code == 0 and "warning: only" not in quiet.stderr
    assert json.loads(quiet.stdout)["trace_use"]["dropped"] == {"unreadable row": 1}
    text = run("simulate", "--trace", HPC2N_SLICE, "--profile", "pitzer")
    assert "284 of 300 jobs replayed (94.7%)" in text.stdout


def test_procs_per_node_reads_swf_processors_as_nodes() -> None:
    """Issue 28: an SWF log gives processors, not nodes. With --procs-per-node profile,
    HPC2N's 64-processor jobs span two of Pitzer's 40-CPU nodes instead of being left out
    as too many CPUs for one; a number works the same; a bad value is a usage error."""
    base = ("simulate", "--trace", HPC2N_SLICE, "--profile", "pitzer", "--json")
    use = json.loads(run(*base, "--procs-per-node", "profile").stdout)["trace_use"]
    assert use["used"] == 294 and use["dropped"] == {"no start/end": 6}
    assert use["unknown"]["nodes (from CPUs / a node's CPUs; 1 without CPUs)"] == 294
    by_number = json.loads(run(*base, "--procs-per-node", "40").stdout)["trace_use"]
    assert by_number["used"] == 294
    bad = run(*base, "--procs-per-node", "zero")
    assert bad.exit_code == 2 and "--procs-per-node" in bad.output


def test_calibrate_says_how_much_of_the_trace_it_used() -> None:
    """Issue 28: calibrate reports the trace's use at the best size (the same HPC2N slice
    on Pitzer leaves out 16 of 300 jobs: a warning; --strict: an error)."""
    base = ("calibrate", "--trace", HPC2N_SLICE, "--profile", "pitzer", "--before",
            "2030-01-01", "--nodes-min", "60", "--nodes-max", "80", "--step", "10")  # fmt: skip
    res = run(*base, "--json")
    assert res.exit_code == 0, res.output
    use = json.loads(res.stdout)["trace_use"]
    assert (use["rows"], use["used"]) == (300, 284)
    assert "warning: only 284 of the trace's 300 jobs" in res.stderr
    strict = run(*base, "--strict")
    assert strict.exit_code == 1 and "(--strict)" in strict.output


def small_swf(tmp_path: Path, procs: int, limits: list[int]) -> str:
    """An SWF log of jobs all submitted at once, each asking ``procs`` processors for an
    hour, with these requested times (-1: unknown)."""
    rows = "".join(
        f"{i} {i} 0 3600 {procs} -1 -1 {procs} {lim} -1 1 1 1 -1 -1 -1 -1 -1\n"
        for i, lim in enumerate(limits, start=1)
    )
    path = tmp_path / "small.swf"
    path.write_text("; Version: 2.2\n; UnixStartTime: 1700000000\n" + rows)
    return str(path)


def test_utilisation_of_shared_nodes_from_a_trace(tmp_path: Path) -> None:
    """Issue 28: eight 64-CPU jobs on one of ls6's 128-CPU nodes run two at a time and keep
    it full: utilisation 1 (it was 2.0, counting a whole node per job)."""
    trace = small_swf(tmp_path, 64, [7200] * 8)
    res = run("simulate", "--trace", trace, "--nodes", "1", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["started"] == 8 and out["span_s"] == 4 * 3600 + 1
    assert out["utilisation"] == pytest.approx(1.0, abs=1e-3)


def test_unknown_limit_option_from_a_trace(tmp_path: Path) -> None:
    """Issue 28: an SWF log with the requested time unknown (-1) on 3 of 8 jobs: each
    --unknown-limit choice is said in the output, and 'drop' leaves those jobs out."""
    trace = small_swf(tmp_path, 64, [7200] * 5 + [-1] * 3)
    base = ("simulate", "--trace", trace, "--nodes", "4", "--json")
    runtime = json.loads(run(*base).stdout)["trace_use"]
    assert runtime["used"] == 8
    assert runtime["unknown"]["time limit (taken as the run time)"] == 3
    top = json.loads(run(*base, "--unknown-limit", "partition-max").stdout)["trace_use"]
    assert top["used"] == 8
    assert top["unknown"]["time limit (taken as the partition's MaxTime, else the run time)"] == 3
    drop = run(*base, "--unknown-limit", "drop")
    use = json.loads(drop.stdout)["trace_use"]
    assert use["used"] == 5 and use["dropped"] == {"unknown time limit": 3}
    assert "warning: only 5 of the trace's 8 jobs (62.5%) were replayed" in drop.stderr
