"""Readers for every trace format Mirage knows, into the canonical job table.

Formats (``FORMATS``; detection is by content, never by file name):

- ``ls6``: the Mirage/TACC ``sacct`` text export (line 1 a count, line 2 a fixed-width
  header, line 3 a dashed rule, then tab-separated ``JobID JobName UID Start Submit End
  Priority TimelimitR ExitCode NNodes``). Times are site-local (default America/Chicago),
  ``TimelimitR`` is in minutes, ``ExitCode`` is ``code:signal``. The file has no state, so
  ``state`` is DERIVED (see ``derive_ls6_state``).
- ``swf``: Standard Workload Format (18 fields, ``;`` header). Submit is relative to the
  header's ``UnixStartTime`` (absolute epoch seconds if the header has none); the header's
  ``TimeZoneString`` is reported as the trace's zone (no conversion is needed).
- ``swf-ext``: the 21-field extended SWF of the CERIT-SC/MetaCentrum logs (no header,
  absolute epoch submits, field 20 = queue name -> ``partition``, field 21 = PBS resource
  spec whose leading ``N:`` gives ``nodes``).
- ``theta``: the ALCF Theta/Cobalt pair ``theta_argonne.swf`` (wait; field 5 nodes, field
  6 requested walltime) + ``theta_walltime.swf`` (19 fields: field 8 requested nodes, field
  9 requested walltime), row-aligned. Recognised by its rows (``_argonne_shape``,
  ``_walltime_shape``) under any name or header; given either file, the partner is the
  file beside it named like ALCF's (``argonne`` <-> ``walltime``), else the one file there
  in the other layout whose first rows are the same jobs. User 0 means unknown (-> "").
- ``eagle``: the NREL Eagle CSV (site-local times, default America/Denver).
- ``parquet``: the canonical table written by :func:`mirage.trace.parquet.write_parquet`.

Handling of doubtful rows (every skip is a ``SkippedRow`` with file and 1-based line):

- wrong field count, non-numeric numbers, unparseable times: skipped.
- SWF -1 ("unknown") wait: start and end become <NA> (kept, counted in a note); -1 run:
  end <NA>; a run below -1 (CERIT has two rows whose end was recorded as epoch 0) is
  treated as unknown too (end <NA>, counted in a note); a negative submit or a wait below
  -1: skipped.
- start < submit or end < start (both known): skipped as impossible.
- a time outside 1970..2200, an absurd time limit or count: skipped (``checks``).
- sacct job steps (``15.batch``), heterogeneous components other than the leader
  (``14+1``) and a job id seen before (not in Eagle, whose sample gives every array
  task the array's id): skipped (``checks.drop_non_jobs``).
- a last line without a line terminator (a truncated file) is skipped, never guessed at.
- blank lines, and ``;`` lines anywhere in an SWF file, are ignored; rows are kept in
  file order (not sorted).
"""

from __future__ import annotations

import csv
import gzip
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mirage.slurm.syntax import digits
from mirage.trace.checks import COUNT_MAX, LIMIT_MAX, TIME_MAX, Acc, check_times
from mirage.trace.csvmap import CSV_FORMAT, ColumnMap
from mirage.trace.finish import finish
from mirage.trace.load import TraceFormatError, TraceLoad
from mirage.trace.tz import local_to_epoch, zone

FORMATS: tuple[str, ...] = ("parquet", "ls6", "eagle", "theta", "swf-ext", "swf")

DEFAULT_TZ: dict[str, str] = {"ls6": "America/Chicago", "eagle": "America/Denver"}

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_LS6_COLUMNS = [
    "JobID",
    "JobName",
    "UID",
    "Start",
    "Submit",
    "End",
    "Priority",
    "TimelimitR",
    "ExitCode",
    "NNodes",
]
_EAGLE_COLUMNS = [
    "job_id",
    "user",
    "account",
    "partition",
    "qos",
    "wallclock_req",
    "nodes_req",
    "processors_req",
    "gpus_req",
    "mem_req",
    "submit_time",
    "start_time",
    "end_time",
    "run_time",
    "state",
    "name",
    "work_dir",
    "submit_line",
]
# re.ASCII: "\\d" would also take other scripts' digits, which the parsers refuse.
_ISO_T = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$", re.ASCII)
_ISO_SPACE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", re.ASCII)
_EXIT = re.compile(r"^(\d{1,9}):(\d{1,9})$", re.ASCII)
#: A plain decimal number ("12", "-1", "552.21", "1e3"); float() also takes "1_000",
#: "nan", "inf" and non-ASCII digits, none of which belongs in a trace.
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$", re.ASCII)
#: Years the site-local text times may have (a wider range overflows the time parser).
_YEARS = range(1970, 2200)
_UNKNOWN_TIMES = frozenset({"", "Unknown", "None", "NONE", "N/A"})
_UNLIMITED = frozenset({"UNLIMITED", "Partition_Limit", "INFINITE"})
_SWF_STATUS = {1: "COMPLETED", 0: "FAILED", 5: "CANCELLED"}
_SPEC_NODES = re.compile(r"^(\d+)(?::|$)", re.ASCII)


# --------------------------------------------------------------------------- text input


@dataclass
class _Text:
    path: str
    lines: list[str]
    terminated: bool  # the data ended with a line terminator


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, gunzipped if it is gzip (TraceFormatError if unreadable)."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TraceFormatError(name, f"cannot read file: {exc.strerror or exc}") from exc
    if raw.startswith(_GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(name, f"corrupt or truncated gzip data ({exc})") from exc
    return raw


def _text(path: str, raw: bytes) -> _Text:
    text = raw.decode("utf-8", errors="replace")
    terminated = text.endswith("\n") or text == ""
    lines = text.split("\n")
    if terminated:
        lines.pop()
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    return _Text(path=path, lines=lines, terminated=terminated)


def _data_rows(t: _Text, first: int, acc: Acc, comment: str = "") -> list[tuple[int, str]]:
    """(1-based line, text) of the non-blank data lines from index ``first`` on.

    Lines starting with ``comment`` (SWF ";", also mid-file) are comments, not rows.
    """
    rows = [
        (i + 1, ln)
        for i, ln in enumerate(t.lines[first:], start=first)
        if ln.strip() and not (comment and ln.lstrip().startswith(comment))
    ]
    if rows and not t.terminated and rows[-1][0] == len(t.lines):
        line, _ = rows.pop()
        acc.rows_read += 1
        acc.skip(line, "last line has no line terminator (truncated file?)")
    acc.rows_read += len(rows)
    return rows


def _local_times_to_utc(
    acc: Acc, df: pd.DataFrame, fmt: str, tz: str
) -> tuple[pd.DataFrame, int, int]:
    """Site-local submit/start/end text to UTC epoch seconds; drop unparseable rows.

    Returns the table and the counts of ambiguous and non-existent local times.
    """
    bad = np.zeros(len(df), dtype=bool)
    amb = miss = 0
    for col in ("submit", "start", "end"):
        conv = local_to_epoch(df[col], fmt, tz)
        df[col] = conv.epoch.to_numpy()
        bad |= conv.unparseable
        amb += conv.ambiguous
        miss += conv.missing
    df = acc.drop(df, bad, "invalid date")
    return check_times(acc, df), amb, miss


def _number(text: str) -> float | None:
    """A plain ASCII decimal number (see ``_NUMBER``) as a finite float; None if not one."""
    if not _NUMBER.match(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _int_or_none(text: str) -> int | None:
    value = _number(text)
    if value is None or value != round(value):
        return None
    return round(value)


def _seconds_or_none(text: str, maximum: int) -> int | None:
    """A number in [0, maximum] (possibly fractional), rounded; None if not one."""
    value = _number(text)
    if value is None or not 0 <= value <= maximum:
        return None
    return round(value)


# --------------------------------------------------------------------------- ls6 (sacct text)


def _is_ls6(t: _Text) -> bool:
    return (
        len(t.lines) >= 3
        and digits(t.lines[0].strip())
        and t.lines[1].split() == _LS6_COLUMNS
        and set(t.lines[2].strip()) <= {"-", " "}
        and "-" in t.lines[2]
    )


def derive_ls6_state(start: pd.Series, end: pd.Series, limit: pd.Series, code: pd.Series,
                     signal: pd.Series) -> pd.Series:  # fmt: skip
    """The ls6 export has no state column, so derive one (documented heuristic).

    - no start or no end: "" (unknown: never ran or still running at export time);
    - ran for at least its limit (end - start >= time_limit): "TIMEOUT";
    - exit code 0 and signal 0: "COMPLETED";
    - otherwise (non-zero code or signal): "FAILED".
    """
    ran = end - start
    state = pd.Series("FAILED", index=start.index, dtype="string")
    state[((code == 0) & (signal == 0)).fillna(False).to_numpy(dtype=bool)] = "COMPLETED"
    state[(ran >= limit).fillna(False).to_numpy(dtype=bool)] = "TIMEOUT"
    state[(start.isna() | end.isna()).to_numpy(dtype=bool)] = ""
    return state


def _bounded(text: str, maximum: int) -> bool:
    """ASCII digits for a number up to ``maximum`` (the length test keeps int() cheap)."""
    return digits(text) and len(text) <= len(str(maximum)) and int(text) <= maximum


def _ls6_problem(job: str, times: list[str], limit: str, exit_code: str,
                 nnodes: str) -> str | None:  # fmt: skip
    """Why an ls6 row cannot be a job; None when it can."""
    if not job or " " in job:
        return f"bad JobID {job!r}"
    if any(x and not _ISO_T.match(x) for x in times):
        return "bad Start/Submit/End time"
    if any(x and int(x[:4]) not in _YEARS for x in times):
        return "Start/Submit/End year out of range (not 1970..2199)"
    if not (digits(limit) or limit in _UNLIMITED):
        return f"bad TimelimitR {limit!r}"
    if digits(limit) and not _bounded(limit, LIMIT_MAX // 60):
        return "TimelimitR out of range"
    if not _EXIT.match(exit_code):
        return f"bad ExitCode {exit_code!r}"
    if not digits(nnodes):
        return f"bad NNodes {nnodes!r}"
    if not _bounded(nnodes, COUNT_MAX):
        return "NNodes out of range"
    return None


def read_ls6(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """The Mirage/TACC Lonestar6 ``sacct`` text export."""
    tz = tz or DEFAULT_TZ["ls6"]
    zone(tz)
    t = _text(path, raw)
    if not _is_ls6(t):
        raise TraceFormatError(path, "not an ls6 sacct export (count, header, dashed rule)")
    acc = Acc(path)
    notes: list[str] = []
    for line, text in _data_rows(t, 3, acc):
        f = [x.strip() for x in text.split("\t")]
        if len(f) != 10:
            acc.skip(line, f"expected 10 tab-separated fields, got {len(f)}")
            continue
        job, name, uid, start, submit, end, _prio, limit, exit_code, nnodes = f
        times = [("" if x in _UNKNOWN_TIMES else x) for x in (start, submit, end)]
        problem = _ls6_problem(job, times, limit, exit_code, nnodes)
        if problem:
            acc.skip(line, problem)
        elif m := _EXIT.match(exit_code):
            acc.add(
                line,
                job_id=job,
                name=name,
                user=uid,
                start=times[0],
                submit=times[1],
                end=times[2],
                time_limit=int(limit) * 60 if digits(limit) else None,
                exit_code=int(m.group(1)),
                signal=int(m.group(2)),
                nodes=int(nnodes),
            )
    df = acc.frame()
    amb = miss = 0
    if not df.empty:
        df, amb, miss = _local_times_to_utc(acc, df, "%Y-%m-%dT%H:%M:%S", tz)
        for col in ("submit", "start", "end", "time_limit", "exit_code", "signal"):
            df[col] = df[col].astype("Int64")
        df["state"] = derive_ls6_state(
            df["start"], df["end"], df["time_limit"], df["exit_code"], df["signal"]
        )
    count = t.lines[0].strip()
    notes.append(f"header count line says {count}; {acc.rows_read} data rows read")
    notes.append(
        "state derived (no state column): TIMEOUT if end-start >= limit, else COMPLETED "
        "for exit 0:0, else FAILED; GPUs and partition not in the file (<NA>/'')"
    )
    return finish(acc, df, "ls6", tz, notes, amb, miss)


# --------------------------------------------------------------------------- Eagle CSV


def _is_eagle(t: _Text) -> bool:
    return bool(t.lines) and t.lines[0].strip().split(",") == _EAGLE_COLUMNS


def _eagle_records(t: _Text, acc: Acc) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each CSV record after the header; unreadable ones skipped.

    One CSV parser reads the whole text, so a quoted field may hold a newline. A record
    that spans lines yet has the wrong field count comes from a stray quote: its lines
    are read again one by one, so the quote costs one row, not the rest of the file.
    """
    reader = csv.reader(ln + "\n" for ln in t.lines[1:])
    last = 1  # line numbers: the header is line 1, reader.line_num counts from line 2
    while True:
        first = last + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # e.g. a field over the csv module's size limit
            last = reader.line_num + 1
            if last > first:  # perhaps after a stray quote: try the lines one by one
                yield from _eagle_lines(t, first, last, acc)
            else:
                acc.rows_read += 1
                acc.skip(first, f"unreadable CSV record ({exc})")
            continue
        last = reader.line_num + 1
        if first == last and not t.lines[first - 1].strip():
            continue  # a blank line
        if not t.terminated and last == len(t.lines):
            acc.rows_read += 1
            acc.skip(first, "last line has no line terminator (truncated file?)")
        elif len(fields) != len(_EAGLE_COLUMNS) and last > first:
            yield from _eagle_lines(t, first, last, acc)
        else:
            acc.rows_read += 1
            yield first, fields


def _eagle_lines(t: _Text, first: int, last: int, acc: Acc) -> Iterator[tuple[int, list[str]]]:
    """Lines ``first``..``last`` read as one CSV record each (after a stray quote)."""
    for line in range(first, last + 1):
        text = t.lines[line - 1]
        if not text.strip():
            continue
        acc.rows_read += 1
        try:
            yield line, next(csv.reader([text]))
        except csv.Error as exc:
            acc.skip(line, f"unreadable CSV record ({exc})")


def read_eagle(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """The NREL Eagle sample CSV (site-local times)."""
    tz = tz or DEFAULT_TZ["eagle"]
    zone(tz)
    t = _text(path, raw)
    if not _is_eagle(t):
        raise TraceFormatError(path, "not the NREL Eagle CSV (header mismatch)")
    acc = Acc(path)
    for line, f in _eagle_records(t, acc):
        if len(f) != len(_EAGLE_COLUMNS):
            acc.skip(line, f"expected {len(_EAGLE_COLUMNS)} CSV fields, got {len(f)}")
            continue
        rec = dict(zip(_EAGLE_COLUMNS, (x.strip() for x in f), strict=True))
        times = [("" if rec[k] in _UNKNOWN_TIMES else rec[k]) for k in _EAGLE_COLUMNS[10:13]]
        counts = ("nodes_req", "processors_req", "gpus_req")
        nums = {k: _seconds_or_none(rec[k], COUNT_MAX) for k in counts}
        limit = _seconds_or_none(rec["wallclock_req"], LIMIT_MAX) if rec["wallclock_req"] else None
        if not rec["job_id"]:
            acc.skip(line, "empty job_id")
        elif any(x and not _ISO_SPACE.match(x) for x in times):
            acc.skip(line, "bad submit/start/end time")
        elif any(x and int(x[:4]) not in _YEARS for x in times):
            acc.skip(line, "submit/start/end year out of range (not 1970..2199)")
        elif any(v is None for v in nums.values()):
            acc.skip(line, "bad nodes/processors/gpus count")
        elif rec["wallclock_req"] and limit is None:
            acc.skip(line, f"bad wallclock_req {rec['wallclock_req']!r}")
        else:
            acc.add(
                line,
                job_id=rec["job_id"],
                user=rec["user"],
                name=rec["name"],
                partition=rec["partition"],
                state=rec["state"].split(" ")[0],
                submit=times[0],
                start=times[1],
                end=times[2],
                time_limit=limit,
                nodes=nums["nodes_req"],
                cpus=nums["processors_req"],
                gpus=nums["gpus_req"],
                run_time=_seconds_or_none(rec["run_time"], TIME_MAX),
            )
    df = acc.frame()
    amb = miss = 0
    notes: list[str] = []
    if not df.empty:
        df, amb, miss = _local_times_to_utc(acc, df, "%Y-%m-%d %H:%M:%S", tz)
        run = pd.to_numeric(df["run_time"]).astype("Int64")
        ran = df["end"].astype("Int64") - df["start"].astype("Int64")
        differ = int((ran != run).fillna(False).sum())
        if differ:
            notes.append(f"run_time differs from end-start (UTC) on {differ} rows")
    return finish(acc, df, "eagle", tz, notes, amb, miss)


# --------------------------------------------------------------------------- SWF family


def _swf_header(t: _Text) -> tuple[dict[str, str], dict[str, str], int]:
    """(header fields, partition names by number, index of the first non-header line)."""
    header: dict[str, str] = {}
    partitions: dict[str, str] = {}
    i = 0
    while i < len(t.lines) and (t.lines[i].lstrip().startswith(";") or not t.lines[i].strip()):
        body = t.lines[i].lstrip()[1:].strip()
        key, sep, value = body.partition(":")
        if sep and key.strip() and " " not in key.strip():
            key, value = key.strip(), value.strip()
            if key == "Partition" and value.split():
                number, *rest = value.split()
                partitions[number] = " ".join(rest)
            header.setdefault(key, value)
        i += 1
    return header, partitions, i


#: How many data rows format detection looks at (one odd first row must not hide a format).
_SAMPLE = 20


def _sample_fields(t: _Text, start: int, n: int = _SAMPLE) -> list[list[str]]:
    """The fields of the first ``n`` data rows (blank and ";" lines left out)."""
    rows = (ln for ln in t.lines[start:] if ln.strip() and not ln.lstrip().startswith(";"))
    return [ln.split() for _, ln in zip(range(n), rows, strict=False)]


def _mostly(sample: list[list[str]], test: Callable[[list[str]], bool]) -> bool:
    """At least half of the sampled rows (and at least one) pass ``test``."""
    good = sum(1 for fields in sample if test(fields))
    return good > 0 and 2 * good >= len(sample)


def _numeric(fields: list[str]) -> bool:
    return all(_number(x) is not None for x in fields)


#: Rows content-only Theta detection samples, and the fewest it decides on (fewer rows
#: in the Theta layout read as SWF, with a note saying so).
_THETA_SAMPLE = 100
_THETA_MIN_ROWS = 10
#: Share of the sampled rows that must have the layout's shape (a few odd rows allowed).
_THETA_SHARE = 0.9


def _numbers(sample: list[list[str]], width: int) -> list[list[float]]:
    """The sampled rows of ``width`` fields that are all numbers, as numbers."""
    rows = [[_number(x) for x in f] for f in sample if len(f) == width]
    return [[v for v in r if v is not None] for r in rows if None not in r]


def _whole_minutes(value: float) -> bool:
    return value > 0 and value % 60 == 0


def _argonne_shape(row: list[float]) -> bool:
    """Theta's argonne file: SWF's requested processors and time (fields 8, 9) are -1, field
    5 holds nodes and field 6 the requested walltime, a whole number of minutes. A standard
    SWF has its CPU time in field 6, which is seldom whole minutes (1% of HPC2N's
    rows); where it fills field 9, that field is its requested time."""
    return row[7] == -1 and row[8] == -1 and row[4] >= 1 and _whole_minutes(row[5])


def _walltime_shape(row: list[float]) -> bool:
    """Theta's walltime file: 19 fields (SWF has 18), the wait (field 3) -1, requested nodes
    and walltime in fields 8 and 9."""
    return row[2] == -1 and row[7] >= 1 and _whole_minutes(row[8])


@dataclass(frozen=True)
class _ThetaSample:
    """How many sampled data rows have each Theta file's shape."""

    sampled: int
    numeric18: int  # rows of 18 numbers
    argonne: int  # ... of which in the argonne file's shape
    walltime: int  # rows of 19 numbers in the walltime file's shape

    def layout(self) -> bool:
        """Either file's shape on nearly every row (enough rows for an 18-field file)."""
        if self.walltime:  # no other format has 19 numbers a row
            return self.walltime >= _THETA_SHARE * self.sampled
        return self.numeric18 >= _THETA_MIN_ROWS and self.argonne >= _THETA_SHARE * self.numeric18


def _theta_sample(t: _Text, start: int) -> _ThetaSample:
    sample = _sample_fields(t, start, _THETA_SAMPLE)
    rows18 = _numbers(sample, 18)
    return _ThetaSample(
        sampled=len(sample),
        numeric18=len(rows18),
        argonne=sum(map(_argonne_shape, rows18)),
        walltime=sum(map(_walltime_shape, _numbers(sample, 19))),
    )


def _theta_doubt(t: _Text, start: int) -> str:
    """A note when an SWF file read as standard SWF (detected so, or forced with --format)
    may be in the Theta layout ("" if not)."""
    s = _theta_sample(t, start)
    if not s.argonne or 2 * s.argonne < s.numeric18:
        return ""
    return (
        f"read as standard SWF although {s.argonne} of {s.numeric18} sampled rows look like "
        "the Theta/Cobalt layout (fields 8-9 -1, field 6 whole minutes): if field 6 is the "
        "requested walltime and field 5 nodes, read it with --format theta"
    )


def _is_theta(t: _Text) -> bool:
    """The ALCF Theta/Cobalt layout, by its rows' contents (``_argonne_shape``,
    ``_walltime_shape``), or as the ALCF pair's header names it: exactly this Installation,
    no Version or UnixStartTime, tab-separated rows of 18 or 19 numbers."""
    header, _, start = _swf_header(t)
    if _theta_sample(t, start).layout():
        return True
    if header.get("Installation") != "Theta Argonne" or {"Version", "UnixStartTime"} & set(header):
        return False
    first = next((ln for ln in t.lines[start:] if ln.strip()), "")
    return "\t" in first and _mostly(
        _sample_fields(t, start), lambda f: len(f) in {18, 19} and _numeric(f)
    )


def _is_swf_ext(t: _Text) -> bool:
    _, _, start = _swf_header(t)
    return _mostly(
        _sample_fields(t, start),
        lambda f: len(f) == 21 and _numeric(f[:18]) and f[18].startswith("{"),
    )


def _is_swf(t: _Text) -> bool:
    header, _, start = _swf_header(t)
    sample = _sample_fields(t, start)
    if _mostly(sample, lambda f: len(f) == 18 and _numeric(f)):
        return True
    return bool(header) and not sample  # header only: an empty SWF


#: Larger SWF numbers are no ids, times or counts: above it a float loses integers (and
#: submit + wait + run of three could wrap int64). Times, limits and counts get the tighter
#: checks of ``check_times`` once the header's base time is added.
SWF_MAX = 2**53
#: SWF fields (1-based) that are identifiers: a fraction there is no id at all.
_SWF_ID_FIELDS = (1, 12)


def _swf_problem(f: list[str], numeric: int) -> tuple[str, list[float]]:
    """(why the row is refused or "", its first ``numeric`` fields as numbers)."""
    nums = [_number(x) for x in f[:numeric]]
    if any(v is None for v in nums):
        return "non-numeric SWF field", []
    values = [v for v in nums if v is not None]
    if any(abs(v) > SWF_MAX for v in values):  # would wrap around as int64 (and sums)
        return "SWF field out of range", []
    if any(values[k - 1] != round(values[k - 1]) for k in _SWF_ID_FIELDS if k <= numeric):
        return "fractional SWF job or user id", []
    return "", values


def _swf_matrix(acc: Acc, rows: list[tuple[int, str]], width: int,
                numeric: int) -> tuple[np.ndarray, list[list[str]], list[int]]:  # fmt: skip
    """Split rows into fields; keep those with ``width`` fields and ``numeric`` numbers."""
    values: list[list[float]] = []
    extra: list[list[str]] = []
    lines: list[int] = []
    for line, text in rows:
        f = text.split()
        if len(f) != width:
            acc.skip(line, f"expected {width} fields, got {len(f)}")
            continue
        problem, nums = _swf_problem(f, numeric)
        if problem:
            acc.skip(line, problem)
            continue
        values.append(nums)
        extra.append(f[numeric:])
        lines.append(line)
    matrix = np.array(values, dtype=float).reshape(len(values), numeric)
    return np.rint(matrix).astype(np.int64), extra, lines


def _swf_frame(acc: Acc, m: np.ndarray, lines: list[int], base: int,
               notes: list[str]) -> pd.DataFrame:  # fmt: skip
    """Standard SWF columns (1-based field k is m[:, k-1]) into canonical columns.

    Rows with a negative submit, or a wait/run below -1, are dropped (skipped).
    """
    submit, wait, run = m[:, 1], m[:, 2], m[:, 3]
    bad_submit = submit < 0
    bad_wait = (wait < -1) & ~bad_submit
    for mask, reason in ((bad_submit, "negative submit"), (bad_wait, "negative wait")):
        for line in np.asarray(lines)[mask]:
            acc.skip(int(line), reason)
    keep = ~(bad_submit | bad_wait)
    m = m[keep]
    submit, wait, run = m[:, 1] + base, m[:, 2], m[:, 3]
    start = pd.array(np.where(wait >= 0, submit + wait, 0), dtype="Int64")
    start[wait < 0] = pd.NA
    end = pd.array(np.where((wait >= 0) & (run >= 0), submit + wait + run, 0), dtype="Int64")
    end[(wait < 0) | (run < 0)] = pd.NA
    n_wait = int((wait < 0).sum())
    if n_wait:
        notes.append(f"wait unknown (-1) on {n_wait} rows: start and end set to <NA>")
    n_run = int(((run == -1) & (wait >= 0)).sum())
    if n_run:
        notes.append(f"run time unknown (-1) on {n_run} rows with a known start: end <NA>")
    n_neg = int((run < -1).sum())
    if n_neg:
        notes.append(f"impossible negative run time on {n_neg} rows: treated as unknown (end <NA>)")
    req, alloc = m[:, 7], m[:, 4]
    cpus = pd.array(np.where(req >= 0, req, alloc), dtype="Int64")
    cpus[(req < 0) & (alloc < 0)] = pd.NA
    limit = pd.array(m[:, 8], dtype="Int64")
    limit[m[:, 8] < 0] = pd.NA
    user = [str(u) if u >= 0 else "" for u in m[:, 11]]
    return pd.DataFrame(
        {
            "job_id": [str(j) for j in m[:, 0]],
            "user": user,
            "state": [_SWF_STATUS.get(int(s), "") for s in m[:, 10]],
            "submit": pd.array(submit, dtype="Int64"),
            "start": start,
            "end": end,
            "time_limit": limit,
            "cpus": cpus,
            "_line": np.asarray(lines, dtype=np.int64)[keep],
            "_partition_no": m[:, 15],
        }
    )


def _swf_base(header: dict[str, str]) -> tuple[int, str]:
    """The epoch the header's submit times count from, and a note where there is none."""
    text = header.get("UnixStartTime")
    if text is None:
        return 0, "no UnixStartTime in the header: submit times read as absolute epoch s"
    base = _int_or_none(text)
    if base is None or not 0 <= base <= TIME_MAX:
        return 0, (
            f"header UnixStartTime {text!r} is not an epoch time between 1970 and 2200: "
            "ignored, submit times read as absolute epoch s"
        )
    return base, ""


def read_swf(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """Standard Workload Format (v2.x, 18 fields)."""
    t = _text(path, raw)
    header, partitions, first = _swf_header(t)
    acc = Acc(path)
    base, note = _swf_base(header)
    notes = [note] if note else []
    if not tz:
        tz = header.get("TimeZoneString", "")
        if tz:
            try:
                zone(tz)
            except ValueError:
                notes.append(f"header TimeZoneString {tz!r} is not an IANA zone (times are epoch)")
    if doubt := _theta_doubt(t, first):
        notes.append(doubt)
    m, _, lines = _swf_matrix(acc, _data_rows(t, first, acc, ";"), 18, 18)
    df = _swf_frame(acc, m, lines, base, notes)
    df["partition"] = [
        partitions.get(str(p), str(p)) if p >= 0 else "" for p in df.pop("_partition_no")
    ]
    df = check_times(acc, df)
    if header.get("MaxJobs") and header["MaxJobs"] != str(acc.rows_read):
        notes.append(f"header MaxJobs {header['MaxJobs']} but {acc.rows_read} rows in the file")
    return finish(acc, df, "swf", tz, notes)


def read_swf_ext(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """The 21-field extended SWF of CERIT-SC (absolute epoch submits, queue names)."""
    t = _text(path, raw)
    _, _, first = _swf_header(t)
    acc = Acc(path)
    notes: list[str] = []
    m, extra, lines = _swf_matrix(acc, _data_rows(t, first, acc, ";"), 21, 18)
    df = _swf_frame(acc, m, lines, 0, notes)
    kept = [e for e, k in zip(extra, _kept_mask(m, lines, df), strict=True) if k]
    df = df.drop(columns="_partition_no")
    df["partition"] = [e[1] for e in kept]
    specs = [_SPEC_NODES.match(e[2]) for e in kept]
    nodes = [int(g.group(1)) if g and _bounded(g.group(1), COUNT_MAX) else None for g in specs]
    df["nodes"] = pd.array(nodes, dtype="Int64")
    huge = np.array([g is not None and n is None for g, n in zip(specs, nodes, strict=True)])
    df = acc.drop(df, huge, "nodes count out of range")
    df = check_times(acc, df)
    return finish(acc, df, "swf-ext", tz or "", notes)


def _kept_mask(m: np.ndarray, lines: list[int], df: pd.DataFrame) -> np.ndarray:
    return np.isin(np.asarray(lines, dtype=np.int64), df["_line"].to_numpy())


def _named_partner(p: Path) -> Path | None:
    """The other file of the pair as ALCF named it (``argonne`` <-> ``walltime``)."""
    for a, b in (("argonne", "walltime"), ("walltime", "argonne")):
        if a in p.name:
            stem = p.name.replace(a, b)
            for cand in (stem, stem.removesuffix(".gz"), stem + ".gz"):
                if (p.parent / cand).is_file():
                    return p.parent / cand
    return None


#: The partner search reads this much of each file beside the given one (its first rows,
#: gunzipped) and looks at no more files than this in the directory.
_HEAD_BYTES = 1 << 16
_PARTNER_FILES = 1000
#: Job id, submit and run time (0-based fields): equal on aligned rows of the two files.
_KEY_FIELDS = (0, 1, 3)


def _head_text(path: Path) -> _Text | None:
    """The first complete lines of a file (gunzipped); None if it cannot be read."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(_HEAD_BYTES)
        if raw.startswith(_GZIP_MAGIC):
            raw = zlib.decompressobj(wbits=31).decompress(raw, _HEAD_BYTES)
    except (OSError, zlib.error):
        return None
    t = _text(str(path), raw)
    if not t.terminated and t.lines:
        t.lines.pop()  # cut off mid-line
    return t


def _row_keys(t: _Text, width: int) -> list[tuple[float, ...]]:
    """(job id, submit, run) of the first rows of ``width`` numbers."""
    _, _, start = _swf_header(t)
    return [tuple(r[k] for k in _KEY_FIELDS) for r in _numbers(_sample_fields(t, start), width)]


def _content_partners(p: Path, t: _Text, width: int) -> list[Path]:
    """Files beside ``p`` of the pair's other width whose first rows are ``t``'s jobs."""
    keys = _row_keys(t, width)
    if not keys:
        return []
    other = 19 if width == 18 else 18
    try:
        entries = sorted(p.parent.iterdir())[:_PARTNER_FILES]
    except OSError:
        return []
    found = []
    for cand in entries:
        head = _head_text(cand) if cand.is_file() and cand.name != p.name else None
        if head is not None and _row_keys(head, other)[: len(keys)] == keys:
            found.append(cand)
    return found


def _theta_partner(path: str, t: _Text, width: int) -> Path | None:
    """The pair's other file: by ALCF's names, else the one file beside it in the other
    layout with the same first jobs (TraceFormatError when several are)."""
    p = Path(path)
    named = _named_partner(p)
    if named is not None:
        return named
    found = _content_partners(p, t, width)
    if len(found) > 1:
        names = ", ".join(f.name for f in found)
        raise TraceFormatError(
            path, f"{len(found)} files beside it have its jobs in the other Theta layout "
            f"({names}): cannot tell which is its partner; leave one beside it"
        )  # fmt: skip
    return found[0] if found else None


def read_theta(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """The ALCF Theta pair (argonne: wait, nodes, walltime; walltime: requested nodes/time)."""
    t = _text(path, raw)
    _, _, first = _swf_header(t)
    widths = [len(f) for f in _sample_fields(t, first)]
    width = max(set(widths), key=widths.count) if widths else 18
    partner = _theta_partner(path, t, width)
    if width == 19:  # given the walltime file: the wait is only in the argonne file
        if partner is None:
            raise TraceFormatError(
                path, "a Theta walltime file (19 fields) needs its argonne file beside it "
                "(18 fields, the same job ids, submits and run times)"
            )  # fmt: skip
        return _read_theta_pair(str(partner), read_bytes(partner), path, raw, tz)
    if partner is None:
        return _read_theta_pair(path, raw, None, None, tz)
    return _read_theta_pair(path, raw, str(partner), read_bytes(partner), tz)


@dataclass
class _SwfRows:
    """One SWF file's data rows and what its parser kept of them."""

    rows: list[tuple[int, str]]  # (line, text) of every data row (truncated last excluded)
    m: np.ndarray  # the kept rows' numbers
    lines: list[int]  # the kept rows' lines
    acc: Acc
    header: dict[str, str] = field(default_factory=dict)

    def positions(self, lines: list[int]) -> np.ndarray:
        """0-based data-row positions of ``lines`` (a truncated last row comes last)."""
        pos = {line: i for i, (line, _) in enumerate(self.rows)}
        return np.array([pos.get(line, len(self.rows)) for line in lines], dtype=np.int64)


def _swf_rows(path: str, raw: bytes, width: int, acc: Acc) -> _SwfRows:
    t = _text(path, raw)
    header, _, first = _swf_header(t)
    rows = _data_rows(t, first, acc, ";")
    m, _, lines = _swf_matrix(acc, rows, width, width)
    return _SwfRows(rows, m, lines, acc, header)


def _theta_align(a: _SwfRows, wpath: str, wraw: bytes) -> tuple[_SwfRows, np.ndarray]:
    """The argonne rows and the walltime numbers, row for row.

    The files are aligned by data row, so a row one file's parser skipped is dropped from
    the other too; it counts once, as the skip (file, line, reason) where it is bad. Rows
    readable in both must agree on job id, submit and run time, or the pair is refused.
    """
    w = _swf_rows(wpath, wraw, 19, Acc(wpath))
    if w.acc.rows_read != a.acc.rows_read:
        raise TraceFormatError(
            wpath, f"not row-aligned with {a.acc.path} ({w.acc.rows_read} rows, "
            f"{a.acc.path} has {a.acc.rows_read})"
        )  # fmt: skip
    a_pos, w_pos = a.positions(a.lines), w.positions(w.lines)
    both = np.intersect1d(a_pos, w_pos)
    a_keep, w_keep = np.isin(a_pos, both), np.isin(w_pos, both)
    wm = w.m[w_keep]
    kept = _SwfRows(a.rows, a.m[a_keep], [ln for ln, k in zip(a.lines, a_keep, strict=True) if k],
                    a.acc, a.header)  # fmt: skip
    if not np.array_equal(wm[:, [0, 1, 3]], kept.m[:, [0, 1, 3]]):
        raise TraceFormatError(
            wpath, f"not row-aligned with {a.acc.path} (job id, submit and run must match)"
        )
    a_bad = set(range(a.acc.rows_read)) - set(a_pos.tolist())
    w_skip_pos = w.positions([s.line for s in w.acc.skipped]).tolist()
    a.acc.skipped += [s for s, p in zip(w.acc.skipped, w_skip_pos, strict=True) if p not in a_bad]
    return kept, wm


def _theta_base(header: dict[str, str]) -> tuple[int, list[str]]:
    """The epoch submits count from (ALCF's files have absolute submits and no
    UnixStartTime), and notes on how the file was read."""
    notes = []
    if header.get("Installation") != "Theta Argonne":
        notes.append(
            "read in the Theta/Cobalt layout: field 5 = nodes, field 6 = requested walltime "
            "(s); a 19-field partner's fields 8-9 = requested nodes and walltime"
        )
    if "UnixStartTime" not in header:
        return 0, notes
    base, note = _swf_base(header)
    return base, notes + ([note] if note else [])


def _read_theta_pair(apath: str, araw: bytes, wpath: str | None, wraw: bytes | None,
                     tz: str | None) -> TraceLoad:  # fmt: skip
    acc = Acc(apath)
    a = _swf_rows(apath, araw, 18, acc)
    w: np.ndarray | None = None
    if wpath is not None and wraw is not None:
        a, w = _theta_align(a, wpath, wraw)
    m, lines = a.m, a.lines
    base, notes = _theta_base(a.header)
    df = _swf_frame(acc, m, lines, base, notes)
    keep = _kept_mask(m, lines, df)
    df = df.drop(columns=["_partition_no", "cpus"])  # Theta counts are nodes, not CPUs
    df["nodes"] = np.where(m[keep, 4] >= 0, m[keep, 4], -1)
    df["time_limit"] = np.where(m[keep, 5] >= 0, m[keep, 5], -1)
    unknown_user = int((df["user"] == "0").sum())
    df.loc[df["user"] == "0", "user"] = ""
    notes.append(f"user 0 (unknown) on {unknown_user} rows -> ''")
    if wpath is not None and w is not None:
        wk = w[keep]
        differ = int(((wk[:, 8] >= 0) & (wk[:, 8] != df["time_limit"].to_numpy())).sum())
        df["nodes"] = np.where(wk[:, 7] >= 0, wk[:, 7], df["nodes"])
        df["time_limit"] = np.where(wk[:, 8] >= 0, wk[:, 8], df["time_limit"])
        notes.append(
            f"requested nodes/walltime from {Path(wpath).name} (walltime differs from "
            f"argonne field 6 on {differ} rows)"
        )
    else:
        notes.append(
            "no walltime partner beside it (19 fields, the same jobs): nodes are allocated "
            "nodes (field 5)"
        )
    for col in ("nodes", "time_limit"):
        df[col] = df[col].astype("Int64").mask(df[col] < 0)
    df = check_times(acc, df)
    sub = df["submit"].to_numpy(dtype=float)
    if len(sub) > 1 and bool((np.diff(sub) < 0).any()):
        notes.append("rows are not sorted by submit (kept in file order)")
    return finish(acc, df, "theta", tz or "", notes)


# --------------------------------------------------------------------------- dispatch

Reader = Callable[[str, bytes, "str | None"], TraceLoad]

_DETECT: tuple[tuple[str, Callable[[_Text], bool]], ...] = (
    ("ls6", _is_ls6),
    ("eagle", _is_eagle),
    ("theta", _is_theta),
    ("swf-ext", _is_swf_ext),
    ("swf", _is_swf),
)


def detect_format(path: str, raw: bytes) -> str:
    """The format of a trace, by content (TraceFormatError naming all formats tried)."""
    if raw.startswith(_PARQUET_MAGIC):
        return "parquet"
    t = _text(path, raw[:1_000_000])
    t.lines = t.lines[:200]
    for name, test in _DETECT:
        if test(t):
            return name
    raise TraceFormatError(
        path,
        "not a recognised job trace (a CSV export of sacct or of slurmdbd's job table "
        "reads with a column mapping: --columns or --columns-file, see docs/trace-csv.md)",
        FORMATS,
    )


def _load_csv(name: str, fmt: str | None, tz: str | None, columns: ColumnMap | None) -> TraceLoad:
    from mirage.trace.csvmap import REQUIRED, read_csv_mapped

    if fmt not in {None, CSV_FORMAT}:
        raise ValueError(f"a column mapping reads format {CSV_FORMAT}, not {fmt!r}")
    if columns is None:
        required = ", ".join("|".join(r) for r in REQUIRED)
        raise TraceFormatError(
            name, f"format {CSV_FORMAT} needs a column mapping (--columns or "
            f"--columns-file) naming at least: {required}"
        )  # fmt: skip
    if tz is not None:
        zone(tz)
    raw = read_bytes(name)
    try:
        return read_csv_mapped(name, raw, columns, tz)
    except TraceFormatError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, OverflowError, csv.Error) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith("unknown time zone"):
            raise
        raise TraceFormatError(name, f"cannot read as {CSV_FORMAT}: {exc}") from exc


def load_trace(
    path: str | Path, fmt: str | None = None, tz: str | None = None,
    columns: ColumnMap | None = None,
) -> TraceLoad:  # fmt: skip
    """Read any supported trace (gzip or not) into a :class:`TraceLoad`.

    ``fmt`` forces a format (one of ``FORMATS``, or ``"csv"``); ``tz`` overrides the
    trace's zone. ``columns`` (a :class:`~mirage.trace.csvmap.ColumnMap`) reads the file
    as a CSV export with that column mapping (format ``csv``, which needs one).
    Raises TraceFormatError (never anything else for bad content) and ValueError for an
    unknown time zone or format name.
    """
    name = str(path)
    if columns is not None or fmt == CSV_FORMAT:
        return _load_csv(name, fmt, tz, columns)
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(
            f"unknown trace format {fmt!r} (known: {', '.join(FORMATS)}, {CSV_FORMAT})"
        )
    if tz is not None:
        zone(tz)
    raw = read_bytes(path)
    if fmt is not None and not raw.strip():  # as detection would refuse it
        raise TraceFormatError(name, f"empty file: no {fmt} header or rows")
    fmt = fmt or detect_format(name, raw)
    from mirage.trace.parquet import read_parquet_bytes

    readers: dict[str, Reader] = {
        "parquet": lambda p, r, _tz: read_parquet_bytes(p, r),
        "ls6": read_ls6,
        "eagle": read_eagle,
        "theta": read_theta,
        "swf-ext": read_swf_ext,
        "swf": read_swf,
    }
    try:
        return readers[fmt](name, raw, tz)
    except TraceFormatError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, OverflowError, csv.Error) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith("unknown time zone"):
            raise
        raise TraceFormatError(name, f"cannot read as {fmt}: {exc}") from exc
