"""Trace readers: bundled slices, hand-made files for every format, and the full shared traces."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mirage.trace.load import TraceFormatError
from mirage.trace.parquet import read_parquet, write_parquet
from mirage.trace.readers import FORMATS, detect_format, load_trace, read_bytes
from mirage.trace.schema import COLUMNS, DTYPES

REPO = Path(__file__).resolve().parents[2]
SLICES = REPO / "traces"
LS6_SLICE = SLICES / "ls6-a100-slice.log.gz"
SWF_SLICE = SLICES / "hpc2n-head300.swf.gz"
SHARED = REPO.parent / "shared" / "traces"

LS6_HEAD = (
    "3\n"
    "       JobID    JobName    UID               Start              Submit                 End"
    "   Priority TimelimitR ExitCode   NNodes\n"
    "------------ ---------- ------ ------------------- ------------------- -------------------"
    " ---------- ---------- -------- --------\n"
)


def ls6_row(job: str, name: str, start: str, submit: str, end: str, limit: int = 60,
            code: str = "0:0", nodes: int = 1, user: str = "00001") -> str:  # fmt: skip
    return "\t".join([job, name, user, start, submit, end, "1000", str(limit), code, str(nodes)])


def cell(df: pd.DataFrame, row: str, col: str) -> Any:
    """One value (typed Any: pandas-stubs cannot type a scalar .loc lookup usefully)."""
    return df.loc[row, col]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"shared traces not present at {SHARED}")
    return SHARED


def check_canonical(df: pd.DataFrame) -> None:
    assert tuple(df.columns) == COLUMNS
    for col in COLUMNS:
        assert str(df[col].dtype) == DTYPES[col], col


# --------------------------------------------------------------------------- bundled slices


def test_ls6_slice() -> None:
    load = load_trace(LS6_SLICE)
    check_canonical(load.jobs)
    assert load.format == "ls6"
    assert load.tz == "America/Chicago"
    assert load.rows_read == 2000
    assert len(load.jobs) == 1999
    assert [(s.line, s.reason) for s in load.skipped] == [
        (1503, "expected 10 tab-separated fields, got 11")
    ]
    assert load.skipped[0].file == str(LS6_SLICE)
    assert (load.ambiguous_times, load.missing_times) == (2, 0)
    first = load.jobs.iloc[0]
    assert first["job_id"] == "478729"
    assert first["name"] == "dimer.10"
    assert first["user"] == "00000"
    assert first["submit"] == 1664988768  # 2022-10-05T11:52:48 CDT = 16:52:48Z
    assert first["start"] == 1667334854  # 2022-11-01T15:34:14 CDT
    assert first["time_limit"] == 2880 * 60
    assert first["nodes"] == 2
    assert first["exit_code"] == 0
    assert first["state"] == "TIMEOUT"  # ran 172,801 s >= its 172,800 s limit
    assert load.jobs["job_id"].is_unique
    assert "746545" not in set(load.jobs["job_id"])


def test_ls6_dst_ambiguous_rows_in_slice() -> None:
    """The two fall-back-hour times are read as CDT (first occurrence).

    Both jobs then look an hour off their limit (a 24 h job ending after 23 h 0 min 26 s,
    a 48 h job running 49 h 0 min 26 s): the data suggest these two were really CST (the
    second occurrence). We keep the documented first-occurrence rule and pin it here.
    """
    jobs = load_trace(LS6_SLICE).jobs.set_index("job_id")
    assert cell(jobs, "531481", "end") == 1667716899  # 2022-11-06T01:41:39 CDT = 06:41:39Z
    assert cell(jobs, "532685", "start") == 1667716940  # 2022-11-06T01:42:20 CDT
    assert cell(jobs, "531481", "end") - cell(jobs, "531481", "start") == 86426 - 3600


def test_swf_slice() -> None:
    load = load_trace(SWF_SLICE)
    check_canonical(load.jobs)
    assert load.format == "swf"
    assert load.tz == "Europe/Stockholm"
    assert len(load.jobs) == 300
    assert not load.skipped
    first = load.jobs.iloc[0]
    assert first["submit"] == 1027839845  # UnixStartTime + 0
    assert first["start"] == 1027839845 + 308434
    assert first["end"] == 1027839845 + 308434 + 31405
    assert first["cpus"] == 30
    assert first["time_limit"] == 37980
    assert first["partition"] == "DEFAULT"
    assert first["state"] == "COMPLETED"
    assert any("MaxJobs 527371" in n for n in load.notes)
    # status -1 with run -1: end unknown, start known
    jobs = load.jobs.set_index("job_id")
    assert pd.isna(cell(jobs, "16", "end"))
    assert cell(jobs, "16", "start") == 1027839845 + 347726 + 5


def test_detection_and_gzip_are_transparent(tmp_path: Path) -> None:
    plain = tmp_path / "ls6.log"
    plain.write_bytes(gzip.decompress(LS6_SLICE.read_bytes()))
    a, b = load_trace(plain), load_trace(LS6_SLICE)
    pd.testing.assert_frame_equal(a.jobs, b.jobs)
    assert detect_format(str(plain), plain.read_bytes()) == "ls6"
    assert detect_format(str(SWF_SLICE), read_bytes(SWF_SLICE)) == "swf"


def test_not_a_trace(tmp_path: Path) -> None:
    path = write(tmp_path, "notes.txt", "hello\nworld\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert str(path) in str(err.value)
    for fmt in FORMATS:
        assert fmt in str(err.value)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "swf"])
def test_forced_wrong_format_is_a_format_error(fmt: str, tmp_path: Path) -> None:
    path = write(tmp_path, "x.txt", "hello world\n")
    with pytest.raises(TraceFormatError):
        load_trace(path, fmt)


def test_missing_file_and_bad_zone(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="cannot read"):
        load_trace(tmp_path / "nope.log")
    with pytest.raises(ValueError, match="unknown time zone"):
        load_trace(LS6_SLICE, tz="Mars/Olympus")
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace(LS6_SLICE, "xlsx")  # "csv" is a format now (with a column mapping)


def test_truncated_gzip_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.log.gz"
    path.write_bytes(LS6_SLICE.read_bytes()[:5000])
    with pytest.raises(TraceFormatError, match="gzip"):
        load_trace(path)


# --------------------------------------------------------------------------- ls6 details


def test_ls6_dst_both_transitions(tmp_path: Path) -> None:
    text = LS6_HEAD + "\n".join(
        [
            # fall back 2022-11-06: 01:30 occurs twice -> first (CDT, UTC-5)
            ls6_row("1", "a", "2022-11-06T01:30:00", "2022-11-06T00:30:00", "2022-11-06T03:00:00"),
            # spring forward 2023-03-12: 02:30 does not exist -> read as CST, = 03:30 CDT
            ls6_row("2", "b", "2023-03-12T02:30:00", "2023-03-12T01:00:00", "2023-03-12T04:00:00"),
            ls6_row("3", "c", "Unknown", "2023-01-01T00:00:00", "Unknown"),
        ]
    )
    load = load_trace(write(tmp_path, "dst.log", text + "\n"), tz="America/Chicago")
    assert (load.ambiguous_times, load.missing_times) == (1, 1)
    j = load.jobs.set_index("job_id")
    assert cell(j, "1", "start") == 1667716200  # 2022-11-06T06:30:00Z
    assert cell(j, "1", "submit") == 1667712600  # 00:30 CDT = 05:30Z
    assert cell(j, "1", "end") == 1667725200  # 03:00 CST = 09:00Z
    assert cell(j, "2", "start") == 1678609800  # 2023-03-12T08:30:00Z (= 03:30 CDT)
    assert pd.isna(cell(j, "3", "start"))
    assert cell(j, "3", "state") == ""
    assert any("ambiguous" in n for n in load.notes)


def test_ls6_bad_rows_are_skipped_with_lines(tmp_path: Path) -> None:
    rows = [
        ls6_row("1", "ok", "2023-01-01T01:00:00", "2023-01-01T00:00:00", "2023-01-01T01:30:00"),
        ls6_row("2", "x", "2023-01-01T01:00:00", "2023-01-01T00:00:00", "2023-01-01T00:30:00"),
        ls6_row("3", "x", "2023-01-01T01:00:00", "2023-01-01T02:00:00", "2023-01-01T03:00:00"),
        ls6_row("4", "x", "2023-02-30T01:00:00", "2023-01-01T00:00:00", "2023-01-01T03:00:00"),
        ls6_row(
            "5",
            "x",
            "2023-01-01T01:00:00",
            "2023-01-01T00:00:00",
            "2023-01-01T03:00:00",
            code="zero",
        ),
        ls6_row("6", "t", "2023-01-01T01:00:00", "2023-01-01T00:00:00", "2023-01-01T02:00:30"),
        ls6_row(
            "7",
            "f",
            "2023-01-01T01:00:00",
            "2023-01-01T00:00:00",
            "2023-01-01T01:10:00",
            code="1:0",
        ),
        ls6_row("8", "cut", "2023-01-01T01:00:00", "2023-01-01T00:00:00", "2023-01-01T01:1"),
    ]
    load = load_trace(write(tmp_path, "bad.log", LS6_HEAD + "\n".join(rows)), "ls6")
    assert list(load.jobs["job_id"]) == ["1", "6", "7"]
    assert list(load.jobs["state"]) == ["COMPLETED", "TIMEOUT", "FAILED"]
    assert list(load.jobs["exit_code"]) == [0, 0, 1]
    reasons = {s.line: s.reason for s in load.skipped}
    assert reasons == {
        5: "end before start",
        6: "start before submit",
        7: "invalid date",
        8: "bad ExitCode 'zero'",
        11: "last line has no line terminator (truncated file?)",
    }
    assert load.rows_read == 8


def test_ls6_only_bad_rows_is_an_error(tmp_path: Path) -> None:
    text = LS6_HEAD + "a\tb\n"
    with pytest.raises(TraceFormatError, match="none of 1 rows"):
        load_trace(write(tmp_path, "x.log", text))


# --------------------------------------------------------------------------- other formats

EAGLE_HEADER = (
    "job_id,user,account,partition,qos,wallclock_req,nodes_req,processors_req,gpus_req,"
    "mem_req,submit_time,start_time,end_time,run_time,state,name,work_dir,submit_line\n"
)


def test_eagle(tmp_path: Path) -> None:
    rows = [
        "1,u1,a,p1,normal,3600.0,2,72,2,0.0,2019-01-01 08:00:00,2019-01-01 08:00:04,"
        "2019-01-01 09:00:04,3600.0,TIMEOUT,n1,w,s",
        "2,u1,a,p1,normal,3600.0,1,36,0,0.0,2019-01-01 08:00:00,,,,PENDING,n2,w,s",
        "3,u2,a,p1,normal,oops,1,36,0,0.0,2019-01-01 08:00:00,,,,PENDING,n2,w,s",
        "4,u2,a,p1",
    ]
    load = load_trace(write(tmp_path, "e.csv", EAGLE_HEADER + "\n".join(rows) + "\n"))
    assert load.format == "eagle"
    assert load.tz == "America/Denver"
    check_canonical(load.jobs)
    j = load.jobs.set_index("job_id")
    assert cell(j, "1", "submit") == 1546354800  # 08:00 MST = 15:00Z
    assert cell(j, "1", "start") - cell(j, "1", "submit") == 4
    assert (cell(j, "1", "nodes"), cell(j, "1", "cpus"), cell(j, "1", "gpus")) == (2, 72, 2)
    assert cell(j, "1", "time_limit") == 3600
    assert cell(j, "1", "state") == "TIMEOUT"
    assert pd.isna(cell(j, "2", "start"))
    assert [s.line for s in load.skipped] == [4, 5]


def test_swf_ext(tmp_path: Path) -> None:
    rows = [
        "0 1356996147 0 56011 64 1 1024 64 86400 687 1 62 1 1 -1 1 1 1 {1,2} q_1d "
        "1:ppn=64:x86_64:cl_zewura#excl",
        "1 1356996695 71 1164297 12 1 1024 12 1209600 912 1 101 1 1 -1 1 1 1 {3} q_2w 2:ppn=12",
        "2 1356996700 5 -1356996705 1 1 1024 1 0 41 1 1229 1 1 -1 1 1 1 {1284} q_4d 1:ppn=1",
    ]
    load = load_trace(write(tmp_path, "w.swf", "\n".join(rows) + "\n"))
    assert load.format == "swf-ext"
    j = load.jobs
    assert list(j["partition"]) == ["q_1d", "q_2w", "q_4d"]
    assert list(j["nodes"]) == [1, 2, 1]
    assert list(j["cpus"]) == [64, 12, 1]
    assert j["submit"].iloc[1] == 1356996695
    assert j["start"].iloc[1] == 1356996695 + 71
    assert pd.isna(j["end"].iloc[2])  # impossible negative run -> unknown end
    assert any("negative run" in n for n in load.notes)


SWF_HEADER = "; Version: 2.2\n; UnixStartTime: 1000000000\n; TimeZoneString: US/Pacific\n"


def test_swf_unknown_wait_and_negative_values(tmp_path: Path) -> None:
    rows = [
        "1 0 -1 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "2 10 20 -1 4 -1 -1 -1 -1 -1 0 -1 1 -1 -1 -1 -1 -1",
        "3 10 -5 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "4 -3 5 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "5 10 5 nan 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "6 99999999999999999999999 5 1 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "7 10 5 99999999999999999999999 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
    ]
    load = load_trace(write(tmp_path, "s.swf", SWF_HEADER + "\n".join(rows) + "\n"))
    assert load.format == "swf"
    assert load.tz == "US/Pacific"
    j = load.jobs.set_index("job_id")
    assert list(j.index) == ["1", "2"]
    assert cell(j, "1", "submit") == 1000000000
    assert pd.isna(cell(j, "1", "start"))
    assert pd.isna(cell(j, "1", "end"))
    assert cell(j, "2", "start") == 1000000030
    assert pd.isna(cell(j, "2", "end"))
    assert cell(j, "2", "cpus") == 4  # allocated, as the request is unknown
    assert cell(j, "2", "user") == ""
    assert cell(j, "2", "state") == "FAILED"
    assert {s.line: s.reason for s in load.skipped} == {
        6: "negative wait",
        7: "negative submit",
        8: "non-numeric SWF field",  # "nan" is no plain number
        9: "SWF field out of range",  # would wrap around to a negative int64
        10: "SWF field out of range",
    }


def test_swf_header_only_is_empty(tmp_path: Path) -> None:
    load = load_trace(write(tmp_path, "e.swf", SWF_HEADER))
    assert load.format == "swf"
    assert load.jobs.empty
    check_canonical(load.jobs)


THETA_HEAD = "; Installation: Theta Argonne\n; MaxJobs: 2\n; MaxNodes: 4392\n; MaxProcs: 4392\n"


def theta_files(tmp_path: Path, aligned: bool = True) -> tuple[Path, Path]:
    a = [
        "639487\t1672529301\t71\t3632\t8\t3600" + "\t-1" * 5 + "\t0" + "\t-1" * 6,
        "639448\t1672507846\t7772\t21654\t256\t21600" + "\t-1" * 5 + "\t77" + "\t-1" * 6,
    ]
    w = [
        "639487\t1672529301\t-1\t3632" + "\t-1" * 3 + "\t8\t3600" + "\t-1" * 9 + "\t0",
        "639448\t1672507846\t-1\t21654" + "\t-1" * 3 + "\t128\t21600" + "\t-1" * 9 + "\t0",
    ]
    if not aligned:
        w.reverse()
    pa = write(tmp_path, "theta_argonne.swf", THETA_HEAD + "\n".join(a) + "\n")
    pw = write(tmp_path, "theta_walltime.swf", THETA_HEAD + "\n".join(w) + "\n")
    return pa, pw


def test_theta_pair_from_either_file(tmp_path: Path) -> None:
    pa, pw = theta_files(tmp_path)
    a, w = load_trace(pa), load_trace(pw)
    pd.testing.assert_frame_equal(a.jobs, w.jobs)
    assert a.format == "theta"
    j = a.jobs.set_index("job_id")
    assert cell(j, "639448", "start") == 1672507846 + 7772
    assert cell(j, "639448", "nodes") == 128  # requested, from the walltime file
    assert cell(j, "639448", "time_limit") == 21600
    assert cell(j, "639448", "user") == "77"
    assert cell(j, "639487", "user") == ""  # user 0 = unknown
    assert pd.isna(cell(j, "639487", "cpus"))
    assert any("not sorted" in n for n in a.notes)


def test_theta_alone_and_misaligned(tmp_path: Path) -> None:
    pa, pw = theta_files(tmp_path, aligned=False)
    with pytest.raises(TraceFormatError, match="row-aligned"):
        load_trace(pa)
    pw.unlink()
    load = load_trace(pa)
    assert load.jobs.set_index("job_id").loc["639448", "nodes"] == 256  # allocated
    pa.unlink()
    pw2 = write(tmp_path, "theta_walltime.swf", THETA_HEAD + "1\t2\t-1" + "\t-1" * 16 + "\n")
    with pytest.raises(TraceFormatError, match="needs its argonne file beside it"):
        load_trace(pw2)


THETA_HEAD40 = REPO / "tests" / "data" / "trace" / "theta-head40-{}.swf"


def cobalt_pair(tmp_path: Path, header: str = "", rows: int = 40) -> tuple[Path, Path]:
    """The Theta fixture pair renamed, its ALCF header replaced by ``header``."""
    paths = []
    for part, name in (("argonne", "cobalt_a.swf"), ("walltime", "cobalt_b.swf")):
        lines = THETA_HEAD40.with_name(THETA_HEAD40.name.format(part)).read_text().splitlines()
        paths.append(write(tmp_path, name, header + "\n".join(lines[4 : 4 + rows]) + "\n"))
    return paths[0], paths[1]


@pytest.mark.parametrize(
    "header",
    ["", "; Version: 2.2\n; Installation: Cobalt at some site\n; UnixStartTime: 0\n"],
)
def test_theta_layout_and_partner_found_by_content(tmp_path: Path, header: str) -> None:
    named = load_trace(THETA_HEAD40.with_name(THETA_HEAD40.name.format("argonne")))
    pa, pb = cobalt_pair(tmp_path, header)
    write(tmp_path, "other.swf", SWF_HEADER + "1 0 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1\n")
    for path in (pa, pb):
        load = load_trace(path)
        assert load.format == "theta"
        pd.testing.assert_frame_equal(load.jobs, named.jobs)
        assert any("from cobalt_b.swf" in n for n in load.notes)
        assert any("read in the Theta/Cobalt layout" in n for n in load.notes)
    # Before: read as SWF, with nodes, time limits and states all unknown.
    assert named.jobs["nodes"].notna().all() and named.jobs["time_limit"].notna().all()


def test_theta_partner_by_content_ambiguous_or_missing(tmp_path: Path) -> None:
    pa, pb = cobalt_pair(tmp_path)
    write(tmp_path, "cobalt_c.swf", pb.read_text())
    with pytest.raises(TraceFormatError, match=r"2 files beside it .*cannot tell which"):
        load_trace(pa)
    assert load_trace(pb).format == "theta"  # its one argonne partner
    for extra in (tmp_path / "cobalt_c.swf", pb):
        extra.unlink()
    load = load_trace(pa)  # alone: allocated nodes, said so
    assert load.format == "theta"
    assert any("no walltime partner beside it" in n for n in load.notes)


def test_theta_layout_on_few_rows_is_swf_with_a_note(tmp_path: Path) -> None:
    pa, _ = cobalt_pair(tmp_path, rows=5)
    load = load_trace(pa)
    assert load.format == "swf"
    assert load.jobs["time_limit"].isna().all()
    assert any("5 of 5 sampled rows look like the Theta/Cobalt layout" in n for n in load.notes)
    forced = load_trace(pa, "theta")
    assert forced.jobs["time_limit"].notna().all() and forced.jobs["nodes"].notna().all()
    pa, _ = cobalt_pair(tmp_path)  # all 40 rows: Theta, unless forced to SWF (then noted)
    notes = load_trace(pa, "swf").notes
    assert any("40 of 40 sampled rows look like the Theta/Cobalt layout" in n for n in notes)


def test_standard_swf_is_not_theta(tmp_path: Path) -> None:
    load = load_trace(SWF_SLICE)
    assert load.format == "swf"
    assert not any("Theta" in n for n in load.notes)
    # CPU time in field 6 in whole minutes, but the requested time in field 9: standard SWF.
    row = "{} {} 10 100 4 120 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1\n"
    rows = "".join(row.format(i, i * 60) for i in range(30))
    load = load_trace(write(tmp_path, "s.swf", SWF_HEADER + rows))
    assert (load.format, set(load.jobs["time_limit"])) == ("swf", {3600})


# --------------------------------------------------------------------------- parquet


def test_parquet_round_trip(tmp_path: Path) -> None:
    load = load_trace(LS6_SLICE)
    out = tmp_path / "t.parquet"
    write_parquet(load, out)
    back = load_trace(out)
    assert back.format == "parquet"
    assert back.tz == "America/Chicago"
    assert back.ambiguous_times == 2
    pd.testing.assert_frame_equal(back.jobs, load.jobs)
    again = read_parquet(out)
    pd.testing.assert_frame_equal(again.jobs, load.jobs)
    assert any("ls6" in n for n in back.notes)


def test_bad_parquet(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"PAR1garbage")
    with pytest.raises(TraceFormatError, match="Parquet"):
        load_trace(path)


# --------------------------------------------------------------------------- full shared traces

FULL = [
    ("tacc_ls6_a100/ls6-a100.log.gz", "ls6", 24776, [19706]),
    ("nrel_eagle_sample/sample_eagle_data.csv", "eagle", 1000, []),
    ("cerit_wagap_2013/wagap-2013.swf.gz", "swf-ext", 17900, []),
    ("hpc2n_seth_head/hpc2n.swf.gz", "swf", 3170, []),
    ("alcf_theta_2023/theta_argonne.swf.gz", "theta", 23387, []),
    ("alcf_theta_2023/theta_walltime.swf.gz", "theta", 23387, []),
    ("nasa_ipsc_1993/NASA-iPSC-1993-3.1-cln.swf.gz", "swf", 18239, []),
]


@pytest.mark.parametrize(("rel", "fmt", "jobs", "skipped"), FULL)
def test_full_shared_trace(shared: Path, rel: str, fmt: str, jobs: int, skipped: list[int]) -> None:
    load = load_trace(shared / rel)
    check_canonical(load.jobs)
    assert load.format == fmt
    assert len(load.jobs) == jobs
    assert [s.line for s in load.skipped] == skipped


def test_full_ls6_figures(shared: Path) -> None:
    load = load_trace(shared / "tacc_ls6_a100/ls6-a100.log.gz")
    j = load.jobs
    # Measured: two local times fall in the 2022-11-06 fall-back hour, none in the
    # 2023-03-12 spring-forward gap (sacct never prints a non-existent local time).
    assert (load.ambiguous_times, load.missing_times) == (2, 0)
    wait = j["start"] - j["submit"]
    assert wait.median() == 25
    assert wait.max() == 3361620  # 3.36 Ms, as the provenance README says
    assert j["user"].nunique() == 366
    assert j["name"].nunique() == 5640
    assert (j["time_limit"] == 2880 * 60).sum() == 5905
    assert (j["nodes"].min(), j["nodes"].max()) == (1, 64)


def test_full_nasa_has_no_starts(shared: Path) -> None:
    load = load_trace(shared / "nasa_ipsc_1993/NASA-iPSC-1993-3.1-cln.swf.gz")
    assert load.jobs["start"].isna().all()
    assert load.jobs["end"].isna().all()
    assert load.tz == "US/Pacific"


def test_full_theta_and_eagle(shared: Path) -> None:
    theta = load_trace(shared / "alcf_theta_2023/theta_argonne.swf.gz").jobs
    assert (theta["user"] == "").sum() == 10203
    assert theta.loc[theta["user"] != "", "user"].nunique() == 49
    assert (theta["start"] - theta["submit"]).median() == 61
    eagle = load_trace(shared / "nrel_eagle_sample/sample_eagle_data.csv").jobs
    assert eagle["state"].value_counts().to_dict() == {"COMPLETED": 985, "TIMEOUT": 15}
    assert eagle["gpus"].value_counts().to_dict() == {0: 996, 2: 3, 16: 1}
    assert (eagle["start"] - eagle["submit"]).median() == 4


# --------------------------------------------------------------------------- bad input


def reasons(load: Any) -> dict[int, str]:
    return {s.line: s.reason for s in load.skipped}


OK_TIMES = ("2023-01-01T01:00:00", "2023-01-01T00:00:00", "2023-01-01T02:00:00")


def test_ls6_one_bad_number_or_year_costs_one_row(tmp_path: Path) -> None:
    good = ls6_row("1", "ok", *OK_TIMES)
    head = good.split("\t")[:7]  # JobID .. Priority

    def row(limit: str, nodes: str) -> str:
        return "\t".join([*head, limit, "0:0", nodes])

    bad = [
        row("60", "\u00b2"),  # "²" passes str.isdigit, not int()
        row("\u00b3", "1"),
        row("60", "99999999999999999999999"),
        row("99999999999999999999", "1"),
        ls6_row("6", "x", "2262-04-11T23:00:00", "2023-01-01T00:00:00", "2262-04-12T00:00:00"),
        ls6_row("7", "x", "\uff12023-01-01T01:00:00", *OK_TIMES[1:]),  # full-width digit
    ]
    load = load_trace(write(tmp_path, "b.log", LS6_HEAD + "\n".join([good, *bad]) + "\n"))
    assert list(load.jobs["job_id"]) == ["1"]
    assert reasons(load) == {
        5: "bad NNodes '²'",
        6: "bad TimelimitR '³'",
        7: "NNodes out of range",
        8: "TimelimitR out of range",
        9: "Start/Submit/End year out of range (not 1970..2199)",
        10: "bad Start/Submit/End time",
    }


def test_ls6_steps_het_components_and_duplicates(tmp_path: Path) -> None:
    ids = ["15", "15.batch", "15.extern", "15.0", "14+0", "14+1", "16", "16"]
    rows = [ls6_row(j, "n", *OK_TIMES) for j in ids]
    load = load_trace(write(tmp_path, "s.log", LS6_HEAD + "\n".join(rows) + "\n"))
    assert list(load.jobs["job_id"]) == ["15", "14+0", "16"]
    assert reasons(load) == {
        5: "job step, not a job",
        6: "job step, not a job",
        7: "job step, not a job",
        9: "heterogeneous job component (only the leader +0 is kept)",
        11: "duplicate job 16 (the first one is kept)",
    }


EAGLE_ROW = (
    "{id},u1,a,p1,normal,{limit},{nodes},36,0,0.0,2019-01-01 08:00:00,2019-01-01 08:00:04,"
    "2019-01-01 09:00:04,3600.0,COMPLETED,{name},w,s"
)


def eagle(job: int, limit: str = "3600.0", nodes: str = "1", name: str = "n") -> str:
    return EAGLE_ROW.format(id=job, limit=limit, nodes=nodes, name=name)


def test_eagle_csv_quotes_and_huge_values(tmp_path: Path) -> None:
    rows = [
        eagle(1, name='"two\nlines"'),  # a quoted newline: one record over lines 2-3
        eagle(2, name='"stray'),  # an unclosed quote: costs this row only
        eagle(3),
        eagle(4, limit="1e300"),
        eagle(5, nodes="1e30"),
        eagle(6, name='"' + "x" * 200_000 + '"'),  # over the csv module's field limit
        eagle(7, nodes="\uff11"),  # full-width digit
        eagle(8),
    ]
    load = load_trace(write(tmp_path, "e.csv", EAGLE_HEADER + "\n".join(rows) + "\n"))
    j = load.jobs
    assert list(j["job_id"]) == ["1", "3", "8"]
    assert j["name"].iloc[0] == "two\nlines"
    r = reasons(load)
    assert set(r) == {4, 6, 7, 8, 9}
    assert r[4] == "expected 18 CSV fields, got 16"
    assert r[6] == "bad wallclock_req '1e300'"
    assert r[7] == r[9] == "bad nodes/processors/gpus count"
    assert "field larger than field limit" in r[8]
    assert load.rows_read == 8


def test_swf_times_range_ids_comments_and_base(tmp_path: Path) -> None:
    rows = [
        "1 0 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "; a comment in the middle of the file",
        "2 1000000000000 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",  # year 33658
        "3 0 4503599627370496 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",  # wait 2**52
        "2.7 5 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "\uff14 5 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "6 1_000 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
        "1 5 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1",
    ]
    head = "; Version: 2.2\n; UnixStartTime: 0\n"
    load = load_trace(write(tmp_path, "s.swf", head + "\n".join(rows) + "\n"))
    assert list(load.jobs["job_id"]) == ["1"]
    assert load.rows_read == 7  # the comment is no row
    assert reasons(load) == {
        5: "submit time out of range (not between 1970 and 2200)",
        6: "start time out of range (not between 1970 and 2200)",
        7: "fractional SWF job or user id",
        8: "non-numeric SWF field",
        9: "non-numeric SWF field",
        10: "duplicate job 1 (the first one is kept)",
    }
    bad_base = write(tmp_path, "b.swf", "; UnixStartTime: soon\n" + rows[0] + "\n")
    assert any("UnixStartTime 'soon' is not an epoch time" in n for n in load_trace(bad_base).notes)


def test_swf_detection_samples_rows_and_theta_needs_the_pair_header(tmp_path: Path) -> None:
    row = "1 0 10 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1\n"
    for first in ("nan" + row[1:], " ".join(row.split()[:17]) + "\n"):
        path = write(tmp_path, "d.swf", SWF_HEADER + first + row.replace("1 ", "2 ", 1))
        load = load_trace(path)
        assert (load.format, list(load.jobs["job_id"]), [s.line for s in load.skipped]) == (
            "swf",
            ["2"],
            [4],
        )
    std = "; Version: 2.2\n; Installation: ANL Theta (SWF)\n; UnixStartTime: 1500000000\n"
    load = load_trace(
        write(tmp_path, "theta_argonne.swf", std + row.replace(" 100 4 ", " 100 64 "))
    )
    assert load.format == "swf"
    assert load.jobs["submit"].iloc[0] == 1500000000  # UnixStartTime applied
    assert load.jobs["time_limit"].iloc[0] == 3600  # field 9, not field 6


def test_theta_bad_row_in_either_file_is_skipped_in_both(tmp_path: Path) -> None:
    pa, pw = theta_files(tmp_path)
    a_text = pa.read_text().replace("\t71\t", "\tx71\t")  # argonne row 1 unreadable
    pa.write_text(a_text)
    load = load_trace(pa)
    assert list(load.jobs["job_id"]) == ["639448"]
    assert [(Path(s.file).name, s.line) for s in load.skipped] == [("theta_argonne.swf", 5)]
    pa.write_text(a_text.replace("\tx71\t", "\t71\t"))
    pw.write_text(pw.read_text().replace("\t21600\t", "\tbad\t"))  # walltime row 2
    load = load_trace(pa)
    assert list(load.jobs["job_id"]) == ["639487"]
    assert [(Path(s.file).name, s.line) for s in load.skipped] == [("theta_walltime.swf", 6)]
    assert load.rows_read == 2


def test_swf_ext_huge_resource_spec(tmp_path: Path) -> None:
    rows = [
        "0 1356996147 0 56011 64 1 1024 64 86400 687 1 62 1 1 -1 1 1 1 {1,2} q_1d 1:ppn=64",
        "1 1356996147 0 56011 64 1 1024 64 86400 687 1 62 1 1 -1 1 1 1 {1} q "
        "99999999999999999999:ppn=1",
    ]
    load = load_trace(write(tmp_path, "w.swf", "\n".join(rows) + "\n"))
    assert list(load.jobs["job_id"]) == ["0"]
    assert reasons(load) == {2: "nodes count out of range"}


def test_forced_format_on_an_empty_file(tmp_path: Path) -> None:
    empty = write(tmp_path, "empty.log", "")
    for fmt in ("swf", "theta", "swf-ext", "ls6"):
        with pytest.raises(TraceFormatError, match="empty file"):
            load_trace(empty, fmt)


# --------------------------------------------------------------------------- bad Parquet


def bad_parquet(tmp_path: Path, meta: bytes | None = None, **cols: Any) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data: dict[str, Any] = {c: ["a", "b"] if c in ("job_id", "user", "name", "partition", "state")
                            else [1, 2] for c in COLUMNS}  # fmt: skip
    data.update(submit=[1000, 1100], start=[1010, 1110], end=[2000, 2100], job_id=["1", "2"])
    data.update(cols)
    table = pa.table(data)
    if meta is not None:
        table = table.replace_schema_metadata({b"mirage.trace": meta})
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    return path


def test_parquet_wrong_column_types_are_format_errors(tmp_path: Path) -> None:
    import pyarrow as pa

    for value in ([1e30, 5.0], [float("inf"), 5.0], [True, False], [[1], [2]],
                  pa.array([pd.Timestamp("2020-01-01"), pd.Timestamp("2020-01-02")])):  # fmt: skip
        with pytest.raises(TraceFormatError, match="Parquet column 'submit' is"):
            load_trace(bad_parquet(tmp_path, submit=value))


def test_parquet_rows_checked_like_text(tmp_path: Path) -> None:
    import pyarrow as pa

    cases: list[tuple[dict[str, Any], str]] = [
        ({"end": [0, 2100]}, "end before start"),
        ({"submit": pa.array([2**64 - 1, 1100], pa.uint64())}, "submit time out of range"),
        ({"submit": [2**63 - 1, 1100]}, "submit time out of range"),
        ({"start": [10**15, 1110]}, "start time out of range"),
        ({"time_limit": [-5, 3600]}, "time limit out of range"),
        ({"job_id": ["2", "2"]}, "duplicate job 2"),
    ]
    for cols, reason in cases:
        load = load_trace(bad_parquet(tmp_path, **cols))
        assert len(load.jobs) == 1, cols
        assert load.rows_read == 2
        assert [(s.line, s.reason.startswith(reason)) for s in load.skipped] == [(1, True)] or [
            (s.line, s.reason.startswith(reason)) for s in load.skipped
        ] == [(2, True)], load.skipped


def test_parquet_bad_metadata_is_ignored_with_a_note(tmp_path: Path) -> None:
    metas = [b'{"notes": 5, "ambiguous_times": "x"}', b'{"notes": "abc", "tz": null}',
             b'{"ambiguous_times": 1e400}', b"\xff\xfe", b'{"tz": "Nowhere/Land"}']  # fmt: skip
    for meta in metas:
        load = load_trace(bad_parquet(tmp_path, meta))
        assert load.ambiguous_times == 0
        assert load.tz == ""
        assert all(isinstance(n, str) and len(n) > 3 for n in load.notes)
        assert any("metadata ignored" in n for n in load.notes), meta
