"""``mirage trace`` commands (CliRunner), the summary, and the Slurm accounting import."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import mirage.trace.cli as trace_cli
from mirage.slurm.types import (
    JobState,
    SlurmError,
    SlurmJob,
)
from mirage.trace.accounting import CHUNK_S, from_slurm_jobs, import_accounting
from mirage.trace.cli import trace
from mirage.trace.readers import FORMATS, load_trace
from mirage.trace.schema import COLUMNS
from tests.fakes import NullSlurmClient

REPO = Path(__file__).resolve().parents[2]
LS6_SLICE = REPO / "traces" / "ls6-a100-slice.log.gz"
SWF_SLICE = REPO / "traces" / "hpc2n-head300.swf.gz"
DAY = 86400


def job(job_id: str, submit: int | None, start: int | None = None, end: int | None = None,
        state: JobState = JobState.COMPLETED) -> SlurmJob:  # fmt: skip
    return SlurmJob(
        job_id=job_id,
        name="train.1",
        user="alice",
        account="proj",
        partition="gpu",
        state=state,
        reason="None",
        submit=submit,
        eligible=submit,
        start=start,
        end=end,
        time_limit=None,
        nodes=2,
        cpus=64,
        gpus=8,
        priority=10,
        dependency="",
        comment="",
        exit_code=0,
    )


class FakeClient(NullSlurmClient):
    def __init__(self, jobs: Sequence[SlurmJob], fail: bool = False) -> None:
        self.jobs = list(jobs)
        self.calls: list[tuple[int, int | None]] = []
        self.fail = fail

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        self.calls.append((start, end))
        if self.fail:
            raise SlurmError(["sacct"], 1, "sacct: error: slurmdbd unreachable")
        hi = end if end is not None else 2**62
        return [j for j in self.jobs if (j.submit or 0) < hi and (j.end is None or j.end >= start)]


# --------------------------------------------------------------------------- accounting


def test_from_slurm_jobs() -> None:
    df = from_slurm_jobs([job("1", 100, 200, 300), job("2_3", None, state=JobState.PENDING)])
    assert tuple(df.columns) == COLUMNS
    assert list(df["job_id"]) == ["1", "2_3"]
    assert list(df["state"]) == ["COMPLETED", "PENDING"]
    assert df["start"].iloc[0] == 200
    assert pd.isna(df["submit"].iloc[1])
    assert pd.isna(df["time_limit"].iloc[0])  # INFINITE
    assert (df["gpus"].iloc[0], df["nodes"].iloc[0], df["cpus"].iloc[0]) == (8, 2, 64)
    assert from_slurm_jobs([]).empty


def test_import_one_call_for_a_short_span() -> None:
    client = FakeClient([job("1", 100, 200, 300), job("2", 150, 400, 900)])
    load = import_accounting(client, 0, 10 * DAY)
    assert client.calls == [(0, 10 * DAY)]
    assert list(load.jobs["job_id"]) == ["1", "2"]
    assert load.format == "slurm"
    assert load.tz == "UTC"


def test_import_chunks_a_long_span_and_dedups() -> None:
    long_job = job("9", 1 * DAY, 2 * DAY, 20 * DAY)  # active in three 7-day windows
    client = FakeClient([long_job, job("1", 40 * DAY, 40 * DAY + 5, 41 * DAY)])
    load = import_accounting(client, 0, 60 * DAY)
    assert len(client.calls) == 9
    assert client.calls[0] == (0, CHUNK_S)
    assert client.calls[-1][1] == 60 * DAY
    assert load.rows_read == 4
    assert list(load.jobs["job_id"]) == ["9", "1"]
    with pytest.raises(ValueError, match="after start"):
        import_accounting(client, 10, 10)


# --------------------------------------------------------------------------- CLI


def test_formats_match() -> None:
    assert trace_cli._FORMATS == FORMATS


def test_inspect_json_on_slice() -> None:
    result = CliRunner().invoke(trace, ["inspect", str(LS6_SLICE), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["jobs"] == 1999
    assert out["skipped"] == 1
    assert out["skipped_rows"][0]["line"] == 1503
    assert out["users"] == 149
    assert out["ambiguous_times"] == 2
    assert out["span"]["first_submit"] == "2022-10-05T16:52:48Z"
    assert out["wait_s"]["p50"] == 854.0
    assert out["wait_s"]["max"] == 3361620.0
    assert out["wait_from_eligible_s"]["count"] == 0
    assert out["time_limit_s"][:2] == [[172800, 534], [1800, 221]]
    assert out["nodes"][0] == [1, 1666]
    assert out["gpus"] == []
    assert (out["chains"]["chains"], out["chains"]["jobs_in_chains"]) == (299, 964)


def test_inspect_rich_and_swf() -> None:
    result = CliRunner().invoke(trace, ["inspect", str(SWF_SLICE)])
    assert result.exit_code == 0, result.output
    assert "swf" in result.output
    assert "300 kept" in result.output


def test_convert_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "ls6.parquet"
    result = CliRunner().invoke(trace, ["convert", str(LS6_SLICE), str(out), "--format", "ls6"])
    assert result.exit_code == 0, result.output
    assert "1999 jobs" in result.output
    pd.testing.assert_frame_equal(load_trace(out).jobs, load_trace(LS6_SLICE).jobs)
    again = CliRunner().invoke(trace, ["inspect", str(out), "--json"])
    assert json.loads(again.stdout)["jobs"] == 1999


def test_errors_are_one_clean_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a trace\n")
    runner = CliRunner()
    for args in (
        ["inspect", str(bad)],
        ["inspect", str(tmp_path / "missing.log")],
        ["inspect", str(LS6_SLICE), "--tz", "Nowhere/Land"],
        ["convert", str(bad), str(tmp_path / "x.parquet")],
        ["convert", str(LS6_SLICE), str(tmp_path / "no" / "dir" / "x.parquet")],
    ):
        result = runner.invoke(trace, args)
        assert result.exit_code == 1, args
        assert result.output.startswith("Error: "), result.output
        assert "Traceback" not in result.output
        assert not isinstance(result.exception, (TypeError, KeyError, AttributeError))


def test_import_with_injected_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient([job("1", 1_700_000_000, 1_700_000_100, 1_700_000_200)])
    out = tmp_path / "acct.parquet"
    args = ["import", "--start", "2023-11-01", "--end", "2023-11-30T00:00:00+00:00"]
    result = CliRunner().invoke(trace, [*args, "--out", str(out)], obj={"slurm_client": client})
    assert result.exit_code == 0, result.output
    assert client.calls == [(1698796800, 1701302400)]
    assert list(load_trace(out).jobs["job_id"]) == ["1"]

    monkeypatch.setattr(trace_cli, "make_slurm_client", lambda: FakeClient([], fail=True))
    result = CliRunner().invoke(trace, [*args, "--out", str(out)])
    assert result.exit_code == 1
    assert "slurmdbd unreachable" in result.output

    result = CliRunner().invoke(trace, ["import", "--start", "x", "--end", "y", "--out", "o"])
    assert result.exit_code == 2
    assert "not an ISO date" in result.output


def test_inspect_prints_trace_text_that_looks_like_markup(tmp_path: Path) -> None:
    swf = tmp_path / "a[red]x[b].swf"  # a path, a zone and a skip reason with markup
    swf.write_text(
        "; UnixStartTime: 1000000000\n; TimeZoneString: [/dim]\n"
        "1 0 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1\n"
        "2 [/] 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1\n"
    )
    result = CliRunner().invoke(trace, ["inspect", str(swf)])
    assert result.exit_code == 0, result.output
    assert "[/dim]" in result.output
    assert "a[red]x[b].swf" in result.output.replace("\n", "")
