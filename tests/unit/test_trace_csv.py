"""The csv reader: CSV exports read through a column mapping (sacct, slurmdbd's job table)."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.trace import inspect
from mirage.trace.csvmap import ColumnMapError, load_columns_file, parse_columns, state_text
from mirage.trace.load import TraceFormatError
from mirage.trace.readers import load_trace

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces"
LS6_SLICE = REPO / "traces" / "ls6-a100-slice.log.gz"
DBD = REPO / "tests" / "data" / "trace" / "slurmdbd-job-table.csv"

#: Site-style column names for a re-export of the canonical table.
SITE = {
    "job_id": "JobID",
    "user": "User",
    "name": "JobName",
    "partition": "Partition",
    "state": "State",
    "submit": "SubmitTime",
    "start": "StartTime",
    "end": "EndTime",
    "time_limit": "Timelimit",
    "nodes": "NNodes",
    "gpus": "NGPUs",
}
DBD_COLUMNS = (
    "job_id=id_job,user=id_user,name=job_name,partition=partition,state=state,"
    "submit=time_submit,eligible=time_eligible,start=time_start,end=time_end,"
    "time_limit=timelimit,nodes=nodes_alloc,cpus=cpus_req,tres_alloc=tres_alloc,"
    "tres_req=tres_req,gpu_tres_id=1001"
)


def _shared_traces() -> list[tuple[Path, str]]:
    """The shared traces to re-export (the bundled ls6 slice when the share is absent)."""
    found = [
        (SHARED / "tacc_ls6_a100" / "ls6-a100.log.gz", "ls6"),
        (SHARED / "nrel_eagle_sample" / "sample_eagle_data.csv", "eagle"),
        (SHARED / "hpc2n_seth_head" / "hpc2n.swf.gz", "swf"),
    ]
    present = [(p, f) for p, f in found if p.is_file()]
    return present or [(LS6_SLICE, "ls6")]


def _duration(seconds: Any) -> str:
    """Seconds as Slurm's D-HH:MM:SS ("" when unknown)."""
    if pd.isna(seconds):
        return "UNLIMITED"
    s = int(str(seconds))
    return f"{s // 86400}-{s % 86400 // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _iso(epoch: Any) -> str:
    if pd.isna(epoch):
        return "Unknown"
    return datetime.fromtimestamp(int(str(epoch)), tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def reexport(jobs: pd.DataFrame, path: Path, times: str) -> None:
    """The canonical table as a site-style CSV (times ISO UTC or epoch, limits D-HH:MM:SS)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Comment", *SITE.values()])  # an unmapped column too
        records: list[dict[Any, Any]] = jobs.to_dict("records")
        for rec in records:
            out = []
            for key in SITE:
                value = rec[key]
                if key in {"submit", "start", "end"}:
                    out.append(
                        _iso(value) if times == "iso" else ("0" if pd.isna(value) else str(value))
                    )
                elif key == "time_limit":
                    out.append(_duration(value))
                else:
                    out.append("" if pd.isna(value) else str(value))
            w.writerow(["x", *out])


@pytest.mark.parametrize("times", ["iso", "epoch"])
def test_reexport_of_shared_traces_reads_back(tmp_path: Path, times: str) -> None:
    cmap = parse_columns(",".join(f"{k}={v}" for k, v in SITE.items()))
    for path, fmt in _shared_traces():
        original = load_trace(path, fmt).jobs
        out = tmp_path / f"{fmt}-{times}.csv"
        reexport(original, out, times)
        back = load_trace(out, columns=cmap)
        assert back.format == "csv"
        # Eagle gives every array task the array's id: the csv reader, like sacct's
        # tables, takes a repeated id for the same job read twice and keeps the first.
        dup = original["job_id"].duplicated().to_numpy(dtype=bool)
        assert len(back.skipped) == int(dup.sum()), (path, back.skipped[:3])
        assert all(s.reason.startswith("duplicate job") for s in back.skipped)
        expected = original[~dup].reset_index(drop=True)
        for col in SITE:
            pd.testing.assert_series_equal(back.jobs[col], expected[col], obj=f"{path.name} {col}")


def test_slurmdbd_job_table_dump() -> None:
    load = load_trace(DBD, columns=parse_columns(DBD_COLUMNS))
    jobs = load.jobs.set_index("job_id")
    assert list(jobs.index) == ["101", "102", "103", "104", "105", "106"]
    assert list(jobs["state"]) == [
        "COMPLETED", "TIMEOUT", "FAILED", "CANCELLED", "REQUEUED", "OUT_OF_MEMORY",
    ]  # fmt: skip
    assert jobs.loc["101", "submit"] == 1764290000
    assert jobs.loc["101", "time_limit"] == 600  # timelimit 10 minutes
    assert jobs["time_limit"].isna().tolist()[3]  # job 104: 4294967295 = INFINITE
    assert jobs["start"].isna().tolist()[3]  # job 104: time_start 0 = unset
    assert list(jobs["gpus"]) == [0, 4, 0, 0, 1, 0]  # 1001=4 with gpu_tres_id = 1001
    assert jobs.loc["102", "nodes"] == 2
    assert jobs.loc["102", "cpus"] == 8
    assert [(s.line, s.reason) for s in load.skipped] == [(8, "bad state '99'")]


def test_slurmdbd_without_gpu_tres_id_leaves_gpus_unknown() -> None:
    cmap = parse_columns(DBD_COLUMNS.removesuffix(",gpu_tres_id=1001"))
    load = load_trace(DBD, columns=cmap)
    assert load.jobs["gpus"].isna().all()
    assert any(n.startswith("no gpu_tres_id: GPUs unknown on 6 rows") for n in load.notes)


def test_toml_mapping_and_cli(tmp_path: Path) -> None:
    toml = tmp_path / "dbd.toml"
    items = [kv.split("=", 1) for kv in DBD_COLUMNS.split(",") if not kv.startswith("gpu")]
    toml.write_text("gpu_tres_id = 1001\n[columns]\n" + "".join(f'{k} = "{v}"\n' for k, v in items))
    cmap = load_columns_file(toml)
    assert cmap.gpu_tres_id == 1001
    assert load_trace(DBD, columns=cmap).jobs["gpus"].sum() == 5
    runner = CliRunner()
    res = runner.invoke(main, ["trace", "inspect", str(DBD), "--columns-file", str(toml), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output[res.output.index("{") :])
    res = runner.invoke(main, ["trace", "convert", str(DBD), str(tmp_path / "o.parquet"),
                               "--columns", DBD_COLUMNS])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "6 jobs (1 rows skipped)" in res.output
    assert len(load_trace(tmp_path / "o.parquet").jobs) == 6


def test_sacct_text_values(tmp_path: Path) -> None:
    path = tmp_path / "sacct.csv"
    path.write_text(
        "JobID,Submit,Start,End,Timelimit,NNodes,State,AllocTRES,ExitCode\n"
        "1,2026-01-01T00:00:00,2026-01-01T00:01:00,2026-01-01T01:01:00,1-02:03:04,2,"
        '"CANCELLED by 123","billing=12,cpu=12,gres/gpu=4,mem=12000M,node=2",0:15\n'
        "2,2026-01-01 00:00:00+01:00,Unknown,Unknown,60,1,PENDING,,\n"
    )
    cols = ("job_id=JobID,submit=Submit,start=Start,end=End,time_limit=Timelimit,"
            "nodes=NNodes,state=State,tres_alloc=AllocTRES,exit_code=ExitCode")  # fmt: skip
    load = load_trace(path, tz="UTC", columns=parse_columns(cols))
    jobs = load.jobs
    # GPUs named (gres/gpu=4), not a numeric TRES id: nothing for gpu_tres_id to name.
    assert not any("gpu_tres_id" in n for n in load.notes)
    assert inspect(str(path), tz="UTC", columns=cols)["gpus"] == [[4, 1]]
    assert jobs["state"].tolist() == ["CANCELLED", "PENDING"]
    assert jobs["time_limit"].tolist() == [93784, 3600]
    assert jobs["gpus"].iloc[0] == 4
    assert jobs["cpus"].iloc[0] == 12
    assert jobs["exit_code"].iloc[0] == 0
    assert jobs["submit"].iloc[1] == 1767222000  # the explicit +01:00 honoured


def test_elapsed_instead_of_end(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    path.write_text("s,b,e,l,n\n100,200,01:00:00,30,1\n100,200,90,30,1\n")
    cmap = parse_columns("submit=s,start=b,elapsed=e,time_limit=l,nodes=n")
    jobs = load_trace(path, columns=cmap).jobs
    assert jobs["end"].tolist() == [3800, 290]
    assert jobs["job_id"].tolist() == ["2", "3"]  # no id column: the line number


def test_state_codes() -> None:
    assert [state_text(str(i)) for i in range(12)] == [
        "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
        "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
    ]  # fmt: skip
    assert state_text("12") is None
    assert state_text(str(1 << 10 | 1)) == "REQUEUED"
    assert state_text("CANCELLED by 0") == "CANCELLED"
    assert state_text("") == ""


# ----------------------------------------------------------------------------- errors


def test_mapped_column_not_in_file_lists_the_columns() -> None:
    cmap = parse_columns(DBD_COLUMNS.replace("time_submit", "SubmitTime"))
    with pytest.raises(TraceFormatError) as err:
        load_trace(DBD, columns=cmap)
    text = str(err.value)
    assert "'SubmitTime' (for submit) not in the file" in text
    assert "its columns: job_db_inx, mod_time" in text


def test_required_field_not_mapped_lists_the_required() -> None:
    with pytest.raises(TraceFormatError) as err:
        load_trace(DBD, columns=parse_columns("submit=time_submit,start=time_start"))
    text = str(err.value)
    assert "lacks required field(s) end|elapsed, time_limit, nodes" in text
    assert "required: submit, start, end|elapsed, time_limit, nodes" in text


def test_csv_format_without_mapping_and_detection_hint() -> None:
    with pytest.raises(TraceFormatError, match="needs a column mapping"):
        load_trace(DBD, "csv")
    with pytest.raises(TraceFormatError, match="--columns or --columns-file"):
        load_trace(DBD)


def test_bad_values_are_counted_skips(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        "s,b,e,l,n\n"
        "100,200,300,30,1\n"
        "yesterday,200,300,30,1\n"
        "100,200,300,forever,1\n"
        "100,200,300,30,-2\n"
        "100,200\n"
        "2026-02-30T00:00:00,200,300,30,1\n"
    )
    load = load_trace(path, columns=parse_columns("submit=s,start=b,end=e,time_limit=l,nodes=n"))
    assert len(load.jobs) == 1
    assert load.rows_read == 6
    assert [(s.line, s.reason) for s in load.skipped] == [
        (3, "bad submit time 'yesterday'"),
        (4, "bad time limit 'forever'"),
        (5, "bad nodes count '-2'"),
        (6, "expected 5 CSV fields, got 2"),
        (7, "invalid date"),
    ]
    assert "bad.csv:3: skipped" in caplog.text


def test_bad_mappings() -> None:
    with pytest.raises(ColumnMapError, match="unknown field"):
        parse_columns("sumbit=Submit")
    with pytest.raises(ColumnMapError, match="not field=COLUMN"):
        parse_columns("submit")
    with pytest.raises(ColumnMapError, match="gpu_tres_id"):
        parse_columns("gpu_tres_id=gpu")
    res = CliRunner().invoke(main, ["trace", "inspect", str(DBD), "--columns", "sumbit=x"])
    assert res.exit_code != 0
    assert "unknown field(s) sumbit" in res.output
    res = CliRunner().invoke(main, ["trace", "inspect", str(DBD), "--columns", "submit=x"])
    assert res.exit_code == 1
    assert "lacks required field(s)" in res.output


DBD_TESTBED = REPO / "tests" / "data" / "trace" / "slurmdbd-job-table-testbed.csv"


def test_real_slurmdbd_dump_of_the_test_cluster() -> None:
    """The last 200 rows of the test cluster's own `mirage_job_table` (dumped from its
    MariaDB after a `make test` run, tests/data/trace/README.md), read with the mapping
    the docs give; checked against the raw columns read independently."""
    import csv
    import re

    raw = list(csv.DictReader(DBD_TESTBED.open(newline="")))
    load = load_trace(DBD_TESTBED, columns=parse_columns(DBD_COLUMNS))
    assert not load.skipped
    jobs = load.jobs.set_index("job_id")
    assert len(jobs) == len(raw) == 200
    assert jobs["state"].value_counts().to_dict() == {
        "COMPLETED": 152,
        "CANCELLED": 44,
        "TIMEOUT": 4,
    }  # fmt: skip  (state codes 3, 4 and 6 in the table)
    for row in raw:
        job = jobs.loc[row["id_job"]]
        assert job["submit"] == int(row["time_submit"])
        assert job["time_limit"] == 60 * int(row["timelimit"])  # minutes in the table
        asked = re.search(r"(?:^|,)4=(\d+)", row["tres_req"])  # TRES id 4: node
        # never started: nodes_alloc is 0, the request says how many nodes it asked for
        nodes = int(row["nodes_alloc"]) or (int(asked.group(1)) if asked else 0)
        assert job["nodes"] == nodes, row["id_job"]
        assert nodes >= 1
        tres = row["tres_alloc"] or row["tres_req"]  # never allocated: what it asked for
        gpus = re.search(r"(?:^|,)1001=(\d+)", tres)  # gres/gpu's id in this database
        assert job["gpus"] == (int(gpus.group(1)) if gpus else 0), row["id_job"]
        if int(row["time_start"]):
            assert job["submit"] <= job["start"] <= job["end"] == int(row["time_end"])
        else:
            assert pd.isna(job["start"])  # cancelled while pending: 0 = unset


def test_the_documented_converter_example_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/trace-format.md's Python example, run as written: the Parquet file it writes
    is a trace every command reads, with every value where the docs say."""
    import re

    doc = (REPO / "docs" / "trace-format.md").read_text()
    [code] = re.findall(r"```python\n(.*?)```", doc, re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/trace-format.md", "exec"), {})
    load = load_trace(tmp_path / "jobs.parquet")
    assert load.format == "parquet" and not load.skipped
    jobs = load.jobs.set_index("job_id")
    assert list(jobs.index) == ["1", "2", "3"]
    assert jobs.loc["2", "gpus"] == 8 and jobs.loc["2", "state"] == "TIMEOUT"
    assert jobs["eligible"].isna().all() and jobs.loc["3", "time_limit"] == 7200
