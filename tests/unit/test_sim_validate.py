"""``mirage sim validate``: readers, the seeded replay, the report and the command."""

from __future__ import annotations

import calendar
import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mirage.profile.schema import profile_to_toml
from mirage.sim.cli import sim
from mirage.sim.scenario import toy_profile
from mirage.sim.validate import (
    FIDELITY_FIELDS,
    Outcome,
    ValidateError,
    group_stats,
    parse_sacct_text,
    plot_cdf,
    read_sacct,
    render_text,
    replay,
    validate,
)
from mirage.slurm.types import JobState, SlurmJob
from tests.fakes import NullSlurmClient

DATA = Path(__file__).parent.parent / "data" / "slurm"
T0 = 1_800_000_000

# sacct -X -P --noheader -a --format=<FIDELITY_FIELDS>, recorded on the test cluster (TZ=UTC)
FIDELITY_TEXT = "".join(
    line + "\n"
    for line in (
        "687|687|mirage-t-fid-e3ad79-j00|root|gpu|COMPLETED|2026-11-28T04:28:31|2026-11-28T04:28:41|2026-11-28T04:31:34|2026-11-28T04:31:49|1|1|billing=6,cpu=6,gres/gpu=2,mem=6000M,node=1|billing=6,cpu=6,gres/gpu=2,mem=6000M,node=1|BeginTime",
        "689|689|mirage-t-fid-e3ad79-j02|root|gpu|COMPLETED|2026-11-28T04:28:31|2026-11-28T04:28:41|2026-11-28T04:28:41|2026-11-28T04:28:52|2|2|billing=32,cpu=32,gres/gpu=8,mem=32000M,node=2|billing=32,cpu=32,gres/gpu=8,mem=32000M,node=2|BeginTime",
        "693|693|mirage-t-fid-e3ad79-j06|root|gpu|TIMEOUT|2026-11-28T04:28:31|2026-11-28T04:28:41|2026-11-28T04:30:10|2026-11-28T04:31:25|1|1|billing=8,cpu=8,gres/gpu=2,mem=8000M,node=1|billing=8,cpu=8,gres/gpu=2,mem=8000M,node=1|BeginTime",
        "516|516|mg-docs-fill-20370|root|gpu|CANCELLED by 0|2026-11-28T04:28:58|"
        "2026-11-28T04:28:58|None|2026-11-28T04:29:05|2|1|billing=1,cpu=1,gres/gpu=4,mem=1000M,node=1||None",
    )
)


def sj(
    job_id: str,
    submit: int,
    start: int | None,
    end: int | None,
    *,
    nodes: int = 1,
    limit: int | None = 3600,
    eligible: int | None = None,
    partition: str = "gpu",
    state: JobState = JobState.COMPLETED,
    reason: str = "None",
    gpus: int = 0,
    cpus: int = 0,
) -> SlurmJob:
    return SlurmJob(
        job_id=job_id,
        name=f"j{job_id}",
        user="u",
        account="a",
        partition=partition,
        state=state,
        reason=reason,
        submit=submit,
        eligible=submit if eligible is None else eligible,
        start=start,
        end=end,
        time_limit=limit,
        nodes=nodes,
        cpus=cpus,
        gpus=gpus,
        priority=None,
        dependency="",
        comment="",
    )


def errors(rep: Any) -> dict[str, float]:
    return {o.job_id: o.error for o in rep.outcomes}


# ---- readers -------------------------------------------------------------------------------


def test_fidelity_field_list_without_header() -> None:
    acc = parse_sacct_text(FIDELITY_TEXT, "run/sacct.txt")
    assert acc.format == "sacct-text (fidelity fields)"
    assert acc.skipped == {}
    by = {j.job_id: j for j in acc.jobs}
    j02 = by["689"]
    assert (j02.nodes, j02.gpus, j02.cpus, j02.time_limit) == (2, 8, 32, 120)
    assert j02.start is not None and j02.eligible is not None
    assert j02.start - j02.eligible == 0 and j02.submit == j02.eligible - 10
    assert by["693"].state is JobState.TIMEOUT
    cancelled = by["516"]
    assert cancelled.start is None and cancelled.end is not None
    assert (cancelled.state, cancelled.nodes, cancelled.gpus) == (JobState.CANCELLED, 1, 4)


def test_header_line_lower_p_steps_and_odd_rows_are_counted() -> None:
    text = (
        "JobID|Partition|State|Submit|Start|End|Timelimit|NNodes|AllocTRES|\n"
        "1|gpu|COMPLETED|2026-11-28T04:00:00|2026-11-28T04:00:05|2026-11-28T04:01:05|"
        "01:00:00|1|cpu=4,gres/gpu:a100=2,node=1|\n"
        "1.batch|gpu|COMPLETED|2026-11-28T04:00:00|2026-11-28T04:00:05|2026-11-28T04:01:05|"
        "|1|cpu=4|\n"
        "2|gpu|COMPLETED|yesterday|2026-11-28T04:00:05|2026-11-28T04:01:05|01:00:00|1||\n"
        "3|gpu|COMPLETED|2026-11-28T04:00:00\n"
        "4|gpu|PENDING|2026-11-28T04:00:00|Unknown|Unknown|UNLIMITED|0||\n"
    )
    acc = parse_sacct_text(text, "x.txt", tz="Europe/Prague")
    assert acc.format == "sacct-text"
    assert acc.skipped == {"job step": 1, "unreadable time": 1, "wrong number of fields": 1}
    one, four = acc.jobs
    assert (one.gpus, one.cpus, one.time_limit) == (2, 4, 3600)
    # 04:00 in Prague (UTC+1) is 03:00 UTC
    assert one.submit == calendar.timegm((2026, 11, 28, 3, 0, 0))
    assert four.start is None and four.end is None and four.time_limit is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("a|b|c\n1|2|3\n", "not a sacct -P export"),
        ("JobID|State\n1|COMPLETED\n", "the header lacks Submit, Start, End"),
    ],
)
def test_malformed_text_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ValidateError, match=message):
        parse_sacct_text(text, "f")


def test_json_export_and_bad_json(tmp_path: Path) -> None:
    acc = read_sacct(DATA / "sacct-X.json")
    assert acc.format == "sacct-json" and len(acc.jobs) == 15
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValidateError, match="not JSON"):
        read_sacct(bad)
    with pytest.raises(ValidateError, match="cannot read"):
        read_sacct(tmp_path / "missing.txt")


# ---- the replay ----------------------------------------------------------------------------


def test_jobs_running_at_the_start_are_seeded_and_hold_their_nodes() -> None:
    jobs = [
        sj("1", T0 - 500, T0 - 100, T0 + 50, nodes=2),  # running at T0, both nodes
        sj("2", T0 - 30, T0 + 50, T0 + 80),  # pending at T0
        sj("3", T0 + 10, T0 + 50, T0 + 70),  # submitted in the window
    ]
    rep = replay(jobs, toy_profile(2), T0, T0 + 60)
    assert (rep.seeded_running, rep.seeded_running_unplaced, rep.seeded_pending) == (1, 0, 1)
    assert errors(rep) == {"2": 0.0, "3": 0.0}
    seeded = {o.job_id: o.seeded for o in rep.outcomes}
    assert seeded == {"2": True, "3": False}
    # without the seed the cluster would be empty at T0: both start at once
    empty = replay(jobs[1:], toy_profile(2), T0, T0 + 60)
    assert errors(empty) == {"2": -50.0, "3": -40.0}


def test_seeded_pending_job_keeps_its_age() -> None:
    # two pending jobs at T0: the older one's age (from its real eligible time, long before
    # T0) outweighs the other's larger size; counted from T0 it would not, and the 2-node
    # job would go first
    prof = toy_profile(
        2, priority_weight_age=1000, priority_max_age_s=2000, priority_weight_job_size=100
    )
    jobs = [
        sj("1", T0 - 200, T0 - 100, T0 + 20, nodes=2),
        sj("2", T0 - 1000, T0 + 20, T0 + 40),  # old, 1 node
        sj("3", T0 - 50, T0 + 40, T0 + 60, nodes=2),
    ]
    rep = replay(jobs, prof, T0, T0 + 10)
    assert errors(rep) == {"2": 0.0, "3": 0.0}
    assert rep.seeded_pending == 2


def test_unplaceable_running_seed_is_counted_and_dropped() -> None:
    jobs = [
        sj("1", T0 - 500, T0 - 100, T0 + 50, nodes=2),
        sj("2", T0 - 500, T0 - 100, T0 + 50, nodes=1),  # the profile has 2 nodes, not 3
        sj("3", T0 + 5, T0 + 50, T0 + 60),
    ]
    rep = replay(jobs, toy_profile(2), T0, T0 + 60)
    assert (rep.seeded_running, rep.seeded_running_unplaced) == (2, 1)


def test_real_run_time_killed_at_the_limit_held_and_cancelled_jobs() -> None:
    jobs = [
        # ran 300 s in reality past a 100 s limit: the simulation kills it at 100 s
        sj("1", T0, T0, T0 + 300, limit=100, state=JobState.TIMEOUT),
        sj("2", T0 + 1, T0 + 300, T0 + 310),
        # held until T0 + 500 (eligible then): not before, though the node is free
        sj("3", T0 + 2, T0 + 500, T0 + 510, eligible=T0 + 500),
        # cancelled while pending at T0 + 50: it never blocks anyone after that
        sj("4", T0 + 3, None, T0 + 50, nodes=1, state=JobState.CANCELLED),
    ]
    rep = replay(jobs, toy_profile(1), T0, T0 + 600)
    errs = errors(rep)
    assert errs["1"] == 0.0
    assert errs["2"] == -200.0  # starts when job 1 is killed at T0 + 100
    assert errs["3"] == 0.0
    assert rep.cancelled_pending == 1 and rep.not_started_real == 1


def test_left_out_jobs_are_counted() -> None:
    jobs = [
        sj("1", T0 - 900, T0 - 800, T0 - 700),  # ended before the window
        sj("2", T0 + 10, T0 + 10, T0 + 20, partition="nope"),
        sj("3", T0 + 20, T0 + 20, T0 + 30, nodes=9),  # larger than the profile
        sj("4", T0 + 5000, T0 + 5000, T0 + 5010),  # after the window
        sj("5", T0 + 30, T0 + 30, T0 + 40),
    ]
    rep = replay(jobs, toy_profile(2), T0, T0 + 100)
    assert rep.left_out == {
        "ended before the window": 1,
        "partition not in the profile": 1,
        "refused by the profile: too many nodes": 1,
        "submitted after the window": 1,
    }
    assert [o.job_id for o in rep.outcomes] == ["5"]


def test_empty_window_is_a_clear_error() -> None:
    jobs = [sj("1", T0, T0, T0 + 10)]
    with pytest.raises(ValidateError, match="empty window"):
        replay(jobs, toy_profile(2), T0 + 100, T0 + 200)
    with pytest.raises(ValidateError, match="no job with a submit time"):
        replay([sj("1", T0, T0, T0 + 10, partition="nope")], toy_profile(2))


# ---- the report ----------------------------------------------------------------------------


def test_report_rows_quantiles_and_shares(tmp_path: Path) -> None:
    jobs = [
        sj("1", T0, T0, T0 + 100, nodes=2, gpus=8),
        sj("2", T0 + 1, T0 + 1000, T0 + 1010),  # really waited; the simulation starts it at 100
        sj("3", T0 + 2, T0 + 100, T0 + 110, gpus=1),
    ]
    acc = parse_sacct_text("JobID|Submit|Start|End\n", "h")  # header only: nothing read
    acc.jobs = jobs
    report = validate(acc, toy_profile(2), T0, T0 + 10)
    rows = {(g.group, g.label): g for g in report.rows}
    assert set(rows) == {
        ("all", "all"),
        ("partition", "gpu"),
        ("nodes", "1"),
        ("nodes", "2"),
        ("gpus", "0"),
        ("gpus", "1"),
        ("gpus", "5-8"),
    }
    overall = report.overall
    assert overall.jobs == 3 and overall.sim_unstarted == 0
    assert overall.error_quantiles_s["p50"] == 0.0
    assert overall.error_quantiles_s["p5"] == -900.0
    assert overall.within == {"35s": pytest.approx(2 / 3), "5min": pytest.approx(2 / 3), "1h": 1.0}
    assert math.isclose(overall.real_mean_wait_s, (0 + 999 + 98) / 3)
    assert math.isclose(overall.sim_mean_wait_s, (0 + 99 + 98) / 3)
    data = json.loads(json.dumps(report.as_dict()))
    assert data["compared"] == 3 and data["seeded"]["running"] == 0
    assert data["jobs"][1] == {
        "job_id": "2",
        "partition": "gpu",
        "nodes": 1,
        "gpus": 0,
        "submit": T0 + 1,
        "real_start": T0 + 1000,
        "sim_start": T0 + 100,
        "seeded_pending": False,
    }
    text = render_text(report)
    assert "seeded from the real state" in text and "partition=gpu" in text
    png = tmp_path / "cdf.png"
    plot_cdf(report, png)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_job_the_simulation_never_starts_counts_as_a_miss() -> None:
    outs = [
        Outcome("1", "gpu", 1, 0, T0, T0 + 10, T0 + 10, seeded=False),
        Outcome("2", "gpu", 1, 0, T0, T0 + 10, None, seeded=False),
    ]
    g = group_stats("all", "all", outs)
    assert (g.jobs, g.sim_unstarted) == (2, 1)
    assert g.within["35s"] == 0.5 and g.within["1h"] == 0.5
    assert g.ks == 0.5  # the unstarted job's wait is infinite
    assert g.sim_mean_wait_s == 10.0 and g.real_mean_wait_s == 10.0
    assert g.error_quantiles_s["p50"] == 0.0
    json.dumps(g.as_dict(), allow_nan=False)


def test_ks_floor_counts_short_waits_as_zero() -> None:
    # every real start a second after the simulated one (Slurm's submit latency)
    outs = [Outcome(str(k), "gpu", 1, 0, T0, T0 + 1, T0, seeded=False) for k in range(5)]
    assert group_stats("all", "all", outs).ks == 1.0
    assert group_stats("all", "all", outs, ks_floor_s=2).ks == 0.0


# ---- the command ---------------------------------------------------------------------------


def _profile_file(tmp_path: Path, nodes: int = 4) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(profile_to_toml(toy_profile(nodes)))
    return path


def test_cli_on_a_fidelity_recording(tmp_path: Path) -> None:
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(FIDELITY_TEXT)
    plot = tmp_path / "cdf.png"
    args = ["validate", "--sacct", str(sacct), "--profile", str(_profile_file(tmp_path))]
    result = CliRunner().invoke(sim, [*args, "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["compared"] == 3 and data["rows"][0]["label"] == "all"
    assert plot.exists()
    text = CliRunner().invoke(sim, args)
    assert text.exit_code == 0 and "err p50" in text.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("garbage without pipes\n", "not a sacct -P export"),
        ("{]", "not JSON"),
        (
            FIDELITY_TEXT.replace("2026-11-28T04:28:31", "2027-01-01T00:00:00"),
            "empty window",
        ),
    ],
)
def test_cli_errors_are_clear(tmp_path: Path, content: str, message: str) -> None:
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(content)
    prof = _profile_file(tmp_path)
    args = ["validate", "--sacct", str(sacct), "--profile", str(prof)]
    if message == "empty window":
        args += ["--start", "2026-11-28T04:28:00", "--end", "2026-11-28T04:29:00"]
    result = CliRunner().invoke(sim, args)
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output


def test_cli_needs_a_source_and_an_ordered_window(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(sim, ["validate"]).exit_code == 2
    bad = runner.invoke(sim, ["validate", "--start", "now", "--end", "1000"])
    assert bad.exit_code == 2 and "must be after --start" in bad.output
    zone = runner.invoke(sim, ["validate", "--start", "2026-11-28T00:00", "--tz", "Bad/Zone"])
    assert zone.exit_code == 2 and "unknown time zone" in zone.output
    when = runner.invoke(sim, ["validate", "--start", "yesterday-ish"])
    assert when.exit_code == 2 and "not 'now'" in when.output


class _Accounting(NullSlurmClient):
    def __init__(self, jobs: list[SlurmJob]) -> None:
        self.jobs = jobs
        self.calls: list[tuple[int, int | None]] = []

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        self.calls.append((start, end))
        return self.jobs


def test_cli_reads_the_window_through_the_client(tmp_path: Path) -> None:
    client = _Accounting(
        [sj("1", T0 - 100, T0 - 50, T0 + 30, nodes=4), sj("2", T0 + 5, T0 + 30, T0 + 40)]
    )
    args = ["validate", "--start", str(T0), "--end", str(T0 + 60), "--json"]
    args += ["--profile", str(_profile_file(tmp_path))]
    result = CliRunner().invoke(sim, args, obj={"slurm_client": client})
    assert result.exit_code == 0, result.output
    assert client.calls == [(T0, T0 + 60)]
    data = json.loads(result.output)
    assert data["seeded"] == {"running": 1, "running_not_placed": 0, "pending": 0}
    assert data["rows"][0]["start_error_s"]["p50"] == 0.0


def test_fidelity_fields_are_the_suites() -> None:
    assert FIDELITY_FIELDS[0] == "JobID" and FIDELITY_FIELDS[-1] == "NodeList"
    assert len(FIDELITY_FIELDS) == 16


def test_reads_recordings_with_and_without_node_lists() -> None:
    """The suite's recordings before 2026-11-28 have every field but NodeList."""
    old = (DATA.parent / "fidelity" / "ls6-held" / "run-1" / "sacct.txt").read_text()
    first = old.splitlines()[0]
    newer = "\n".join(line + "|gpu1" for line in old.splitlines() if line.strip())
    assert len(first.split("|")) == len(FIDELITY_FIELDS) - 1
    a, b = parse_sacct_text(old), parse_sacct_text(newer)
    assert len(a.jobs) == len(b.jobs) > 0
    assert [j.start for j in a.jobs] == [j.start for j in b.jobs]
