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
- ``theta``: the ALCF Theta pair ``theta_argonne.swf`` (wait; field 5 nodes, field 6
  requested walltime) + ``theta_walltime.swf`` (field 8 requested nodes, field 9 requested
  walltime), row-aligned; given either file, the partner is looked for beside it
  (``argonne`` <-> ``walltime`` in the name). User 0 means unknown (-> "").
- ``eagle``: the NREL Eagle CSV (site-local times, default America/Denver).
- ``parquet``: the canonical table written by :func:`mirage.trace.parquet.write_parquet`.

Handling of doubtful rows (every skip is a ``SkippedRow`` with file and 1-based line):

- wrong field count, non-numeric numbers, unparseable times: skipped.
- SWF -1 ("unknown") wait: start and end become <NA> (kept, counted in a note); -1 run:
  end <NA>; a run below -1 (CERIT has two rows whose end was recorded as epoch 0) is
  treated as unknown too (end <NA>, counted in a note); a negative submit or a wait below
  -1: skipped.
- start < submit or end < start (both known): skipped as impossible.
- a last line without a line terminator (a truncated file) is skipped, never guessed at.
- blank lines are ignored; rows are kept in file order (not sorted).
"""

from __future__ import annotations

import csv
import gzip
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mirage.trace.load import SkippedRow, TraceFormatError, TraceLoad, log_skipped
from mirage.trace.schema import conform
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
_ISO_T = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")
_ISO_SPACE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
_EXIT = re.compile(r"^(\d+):(\d+)$")
_UNKNOWN_TIMES = frozenset({"", "Unknown", "None", "NONE", "N/A"})
_UNLIMITED = frozenset({"UNLIMITED", "Partition_Limit", "INFINITE"})
_SWF_STATUS = {1: "COMPLETED", 0: "FAILED", 5: "CANCELLED"}
_SPEC_NODES = re.compile(r"^(\d+)(?::|$)")


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


@dataclass
class _Acc:
    """Accumulates parsed rows column-wise, with their line numbers and skips."""

    path: str
    cols: dict[str, list[object]] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)
    skipped: list[SkippedRow] = field(default_factory=list)
    rows_read: int = 0

    def add(self, line: int, **values: object) -> None:
        for key, value in values.items():
            self.cols.setdefault(key, []).append(value)
        self.lines.append(line)

    def skip(self, line: int, reason: str) -> None:
        self.skipped.append(SkippedRow(self.path, line, reason))

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.cols)
        df["_line"] = self.lines
        return df

    def drop(self, df: pd.DataFrame, mask: np.ndarray | pd.Series, reason: str) -> pd.DataFrame:
        bad = np.asarray(mask, dtype=bool)
        for line in df["_line"].to_numpy()[bad]:
            self.skip(int(line), reason)
        return df[~bad]


def _data_rows(t: _Text, first: int, acc: _Acc) -> list[tuple[int, str]]:
    """(1-based line, text) of the non-blank data lines from index ``first`` on."""
    rows = [(i + 1, ln) for i, ln in enumerate(t.lines[first:], start=first) if ln.strip()]
    if rows and not t.terminated and rows[-1][0] == len(t.lines):
        line, _ = rows.pop()
        acc.rows_read += 1
        acc.skip(line, "last line has no line terminator (truncated file?)")
    acc.rows_read += len(rows)
    return rows


def _local_times_to_utc(
    acc: _Acc, df: pd.DataFrame, fmt: str, tz: str
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
    return _check_times(acc, df), amb, miss


def _check_times(acc: _Acc, df: pd.DataFrame) -> pd.DataFrame:
    """Drop rows whose known times are impossible (start < submit, end < start)."""
    sub, sta, end = df["submit"], df["start"], df["end"]
    df = acc.drop(df, (sta < sub).fillna(False).to_numpy(dtype=bool), "start before submit")
    sta, end = df["start"], df["end"]
    return acc.drop(df, (end < sta).fillna(False).to_numpy(dtype=bool), "end before start")


def _finish(  # noqa: PLR0917
    acc: _Acc, df: pd.DataFrame, fmt: str, tz: str, notes: list[str], amb: int = 0, miss: int = 0
) -> TraceLoad:
    if acc.rows_read and df.empty:
        first = acc.skipped[0] if acc.skipped else None
        detail = f"; first problem: line {first.line}: {first.reason}" if first else ""
        raise TraceFormatError(
            acc.path, f"none of {acc.rows_read} rows is a valid {fmt} row{detail}"
        )
    acc.skipped.sort(key=lambda s: (s.file, s.line))
    log_skipped(acc.skipped)
    if amb or miss:
        notes.append(
            f"{amb} ambiguous local times (fall-back hour) read as the first (DST) occurrence; "
            f"{miss} non-existent local times (spring-forward gap) shifted forward by the gap"
        )
    return TraceLoad(
        jobs=conform(df),
        source=acc.path,
        format=fmt,
        tz=tz,
        rows_read=acc.rows_read,
        skipped=acc.skipped,
        ambiguous_times=amb,
        missing_times=miss,
        notes=notes,
    )


def _int_or_none(text: str) -> int | None:
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or value != round(value):
        return None
    return round(value)


def _seconds_or_none(text: str) -> int | None:
    """A non-negative (possibly fractional) number of seconds, rounded; None if not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return round(value)


# --------------------------------------------------------------------------- ls6 (sacct text)


def _is_ls6(t: _Text) -> bool:
    return (
        len(t.lines) >= 3
        and t.lines[0].strip().isdigit()
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


def read_ls6(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """The Mirage/TACC Lonestar6 ``sacct`` text export."""
    tz = tz or DEFAULT_TZ["ls6"]
    zone(tz)
    t = _text(path, raw)
    if not _is_ls6(t):
        raise TraceFormatError(path, "not an ls6 sacct export (count, header, dashed rule)")
    acc = _Acc(path)
    notes: list[str] = []
    for line, text in _data_rows(t, 3, acc):
        f = [x.strip() for x in text.split("\t")]
        if len(f) != 10:
            acc.skip(line, f"expected 10 tab-separated fields, got {len(f)}")
            continue
        job, name, uid, start, submit, end, _prio, limit, exit_code, nnodes = f
        times = [("" if x in _UNKNOWN_TIMES else x) for x in (start, submit, end)]
        if not job or " " in job:
            acc.skip(line, f"bad JobID {job!r}")
        elif any(x and not _ISO_T.match(x) for x in times):
            acc.skip(line, "bad Start/Submit/End time")
        elif not (limit.isdigit() or limit in _UNLIMITED):
            acc.skip(line, f"bad TimelimitR {limit!r}")
        elif not (m := _EXIT.match(exit_code)):
            acc.skip(line, f"bad ExitCode {exit_code!r}")
        elif not nnodes.isdigit():
            acc.skip(line, f"bad NNodes {nnodes!r}")
        else:
            acc.add(
                line,
                job_id=job,
                name=name,
                user=uid,
                start=times[0],
                submit=times[1],
                end=times[2],
                time_limit=int(limit) * 60 if limit.isdigit() else None,
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
    return _finish(acc, df, "ls6", tz, notes, amb, miss)


# --------------------------------------------------------------------------- Eagle CSV


def _is_eagle(t: _Text) -> bool:
    return bool(t.lines) and t.lines[0].strip().split(",") == _EAGLE_COLUMNS


def read_eagle(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """The NREL Eagle sample CSV (site-local times)."""
    tz = tz or DEFAULT_TZ["eagle"]
    zone(tz)
    t = _text(path, raw)
    if not _is_eagle(t):
        raise TraceFormatError(path, "not the NREL Eagle CSV (header mismatch)")
    acc = _Acc(path)
    rows = _data_rows(t, 1, acc)
    parsed = csv.reader([text for _, text in rows])
    for (line, _), f in zip(rows, parsed, strict=True):
        if len(f) != len(_EAGLE_COLUMNS):
            acc.skip(line, f"expected {len(_EAGLE_COLUMNS)} CSV fields, got {len(f)}")
            continue
        rec = dict(zip(_EAGLE_COLUMNS, (x.strip() for x in f), strict=True))
        times = [("" if rec[k] in _UNKNOWN_TIMES else rec[k]) for k in _EAGLE_COLUMNS[10:13]]
        nums = {k: _seconds_or_none(rec[k]) for k in ("nodes_req", "processors_req", "gpus_req")}
        limit = _seconds_or_none(rec["wallclock_req"]) if rec["wallclock_req"] else None
        if not rec["job_id"]:
            acc.skip(line, "empty job_id")
        elif any(x and not _ISO_SPACE.match(x) for x in times):
            acc.skip(line, "bad submit/start/end time")
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
                run_time=_seconds_or_none(rec["run_time"]),
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
    return _finish(acc, df, "eagle", tz, notes, amb, miss)


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


def _first_data_fields(t: _Text, start: int) -> list[str]:
    for ln in t.lines[start:]:
        if ln.strip() and not ln.lstrip().startswith(";"):
            return ln.split()
    return []


def _numeric(fields: list[str]) -> bool:
    return all(_finite(x) for x in fields)


def _finite(x: str) -> bool:
    try:
        return math.isfinite(float(x))
    except ValueError:
        return False


def _is_theta(t: _Text) -> bool:
    header, _, start = _swf_header(t)
    fields = _first_data_fields(t, start)
    return "Theta" in header.get("Installation", "") and len(fields) in (18, 19)


def _is_swf_ext(t: _Text) -> bool:
    _, _, start = _swf_header(t)
    fields = _first_data_fields(t, start)
    return len(fields) == 21 and _numeric(fields[:18]) and fields[18].startswith("{")


def _is_swf(t: _Text) -> bool:
    header, _, start = _swf_header(t)
    fields = _first_data_fields(t, start)
    if len(fields) == 18 and _numeric(fields):
        return True
    return bool(header) and start == len(t.lines)  # header only: an empty SWF


#: Larger SWF numbers are no times or counts (about 2.9e11 years in seconds).
SWF_MAX = 2**53


def _swf_matrix(acc: _Acc, rows: list[tuple[int, str]], width: int,
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
        try:
            nums = [float(x) for x in f[:numeric]]
        except ValueError:
            acc.skip(line, "non-numeric SWF field")
            continue
        if not all(math.isfinite(v) for v in nums):
            acc.skip(line, "non-finite SWF field")
            continue
        if any(abs(v) > SWF_MAX for v in nums):  # would wrap around as int64 (and sums of them)
            acc.skip(line, "SWF field out of range")
            continue
        values.append(nums)
        extra.append(f[numeric:])
        lines.append(line)
    matrix = np.array(values, dtype=float).reshape(len(values), numeric)
    return np.rint(matrix).astype(np.int64), extra, lines


def _swf_frame(acc: _Acc, m: np.ndarray, lines: list[int], base: int,
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


def read_swf(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """Standard Workload Format (v2.x, 18 fields)."""
    t = _text(path, raw)
    header, partitions, first = _swf_header(t)
    acc = _Acc(path)
    notes: list[str] = []
    base = _int_or_none(header.get("UnixStartTime", ""))
    if base is None:
        base = 0
        notes.append("no UnixStartTime in the header: submit times read as absolute epoch s")
    if not tz:
        tz = header.get("TimeZoneString", "")
        if tz:
            try:
                zone(tz)
            except ValueError:
                notes.append(f"header TimeZoneString {tz!r} is not an IANA zone (times are epoch)")
    m, _, lines = _swf_matrix(acc, _data_rows(t, first, acc), 18, 18)
    df = _swf_frame(acc, m, lines, base, notes)
    df["partition"] = [
        partitions.get(str(p), str(p)) if p >= 0 else "" for p in df.pop("_partition_no")
    ]
    df = _check_times(acc, df)
    if header.get("MaxJobs") and header["MaxJobs"] != str(acc.rows_read):
        notes.append(f"header MaxJobs {header['MaxJobs']} but {acc.rows_read} rows in the file")
    return _finish(acc, df, "swf", tz, notes)


def read_swf_ext(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """The 21-field extended SWF of CERIT-SC (absolute epoch submits, queue names)."""
    t = _text(path, raw)
    _, _, first = _swf_header(t)
    acc = _Acc(path)
    notes: list[str] = []
    m, extra, lines = _swf_matrix(acc, _data_rows(t, first, acc), 21, 18)
    df = _swf_frame(acc, m, lines, 0, notes)
    kept = [e for e, k in zip(extra, _kept_mask(m, lines, df), strict=True) if k]
    df = df.drop(columns="_partition_no")
    df["partition"] = [e[1] for e in kept]
    df["nodes"] = [int(g.group(1)) if (g := _SPEC_NODES.match(e[2])) else None for e in kept]
    df = _check_times(acc, df)
    return _finish(acc, df, "swf-ext", tz or "", notes)


def _kept_mask(m: np.ndarray, lines: list[int], df: pd.DataFrame) -> np.ndarray:
    return np.isin(np.asarray(lines, dtype=np.int64), df["_line"].to_numpy())


def _theta_partner(path: str) -> Path | None:
    p = Path(path)
    for a, b in (("argonne", "walltime"), ("walltime", "argonne")):
        if a in p.name:
            stem = p.name.replace(a, b)
            for cand in (stem, stem.removesuffix(".gz"), stem + ".gz"):
                if (p.parent / cand).is_file():
                    return p.parent / cand
    return None


def read_theta(path: str, raw: bytes, tz: str | None = None) -> TraceLoad:
    """The ALCF Theta pair (argonne: wait, nodes, walltime; walltime: requested nodes/time)."""
    t = _text(path, raw)
    _, _, first = _swf_header(t)
    width = len(_first_data_fields(t, first))
    partner = _theta_partner(path)
    if width == 19:  # given the walltime file: the wait is only in the argonne file
        if partner is None:
            raise TraceFormatError(path, "theta_walltime file needs theta_argonne beside it")
        return _read_theta_pair(str(partner), read_bytes(partner), path, raw, tz)
    if partner is None:
        return _read_theta_pair(path, raw, None, None, tz)
    return _read_theta_pair(path, raw, str(partner), read_bytes(partner), tz)


def _read_theta_pair(apath: str, araw: bytes, wpath: str | None, wraw: bytes | None,
                     tz: str | None) -> TraceLoad:  # fmt: skip
    t = _text(apath, araw)
    _, _, first = _swf_header(t)
    acc = _Acc(apath)
    notes: list[str] = []
    m, _, lines = _swf_matrix(acc, _data_rows(t, first, acc), 18, 18)
    df = _swf_frame(acc, m, lines, 0, notes)
    keep = _kept_mask(m, lines, df)
    df = df.drop(columns=["_partition_no", "cpus"])  # Theta counts are nodes, not CPUs
    df["nodes"] = np.where(m[keep, 4] >= 0, m[keep, 4], -1)
    df["time_limit"] = np.where(m[keep, 5] >= 0, m[keep, 5], -1)
    unknown_user = int((df["user"] == "0").sum())
    df.loc[df["user"] == "0", "user"] = ""
    notes.append(f"user 0 (unknown) on {unknown_user} rows -> ''")
    if wpath is not None and wraw is not None:
        wt = _text(wpath, wraw)
        _, _, wfirst = _swf_header(wt)
        wacc = _Acc(wpath)
        w, _, _ = _swf_matrix(wacc, _data_rows(wt, wfirst, wacc), 19, 19)
        if w.shape[0] != m.shape[0] or not np.array_equal(w[:, [0, 1, 3]], m[:, [0, 1, 3]]):
            raise TraceFormatError(
                wpath, f"not row-aligned with {apath} (job id, submit and run must match)"
            )
        wk = w[keep]
        differ = int(((wk[:, 8] >= 0) & (wk[:, 8] != df["time_limit"].to_numpy())).sum())
        df["nodes"] = np.where(wk[:, 7] >= 0, wk[:, 7], df["nodes"])
        df["time_limit"] = np.where(wk[:, 8] >= 0, wk[:, 8], df["time_limit"])
        notes.append(
            f"requested nodes/walltime from {Path(wpath).name} (walltime differs from "
            f"argonne field 6 on {differ} rows)"
        )
    else:
        notes.append("no theta_walltime partner: nodes are allocated nodes (field 5)")
    for col in ("nodes", "time_limit"):
        df[col] = df[col].astype("Int64").mask(df[col] < 0)
    df = _check_times(acc, df)
    sub = df["submit"].to_numpy(dtype=float)
    if len(sub) > 1 and bool((np.diff(sub) < 0).any()):
        notes.append("rows are not sorted by submit (kept in file order)")
    return _finish(acc, df, "theta", tz or "", notes)


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
    raise TraceFormatError(path, "not a recognised job trace", FORMATS)


def load_trace(path: str | Path, fmt: str | None = None, tz: str | None = None) -> TraceLoad:
    """Read any supported trace (gzip or not) into a :class:`TraceLoad`.

    ``fmt`` forces a format (one of ``FORMATS``); ``tz`` overrides the trace's zone.
    Raises TraceFormatError (never anything else for bad content) and ValueError for an
    unknown time zone or format name.
    """
    name = str(path)
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r} (known: {', '.join(FORMATS)})")
    if tz is not None:
        zone(tz)
    raw = read_bytes(path)
    fmt = fmt or detect_format(name, raw)
    if fmt == "parquet":
        from mirage.trace.parquet import read_parquet_bytes

        return read_parquet_bytes(name, raw)
    readers: dict[str, Reader] = {
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
