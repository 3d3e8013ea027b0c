"""The ``csv`` reader: any CSV job export (sacct, slurmdbd's job table), by a column mapping.

Site and public Slurm logs often come as CSV with the site's own column names and the
accounting database's encodings. Nothing in such a file says which column is which, so
this reader is never chosen by detection: it needs a :class:`ColumnMap` (canonical field
-> the file's column), given as ``--columns submit=Submit,start=Start,...`` or as a TOML
file with a ``[columns]`` table (see docs/trace-csv.md).

Values understood (Slurm's own syntax from :mod:`mirage.slurm.syntax` where it applies):

- times (submit, eligible, start, end): epoch seconds (slurmdbd's ``time_*``; 0 = unset)
  or ISO ``YYYY-MM-DD[T ]HH:MM:SS`` (site-local in ``tz``, default UTC; an explicit
  ``Z``/offset is honoured); ``Unknown``, ``None``, empty: unknown.
- time_limit: a Slurm duration (``1-02:03:04``, ``2:00:00``) or a bare number of MINUTES
  (sacct's ``TimelimitRaw``, slurmdbd's ``timelimit``); ``UNLIMITED``, ``Partition_Limit``,
  ``INFINITE`` and slurmdbd's NO_VAL/INFINITE sentinels: unknown.
- elapsed (used where ``end`` is not mapped or empty): a Slurm duration or bare SECONDS.
- state: sacct's text (``CANCELLED by 123``, ``COMPLETED``, ``OUT_OF_MEMORY``) or
  slurmdbd's number (``enum job_states`` of slurm.h: 0 PENDING ... 11 OOM, plus the
  ``JOB_STATE_FLAGS`` bits, e.g. REQUEUED), both read with :func:`map_state`.
- tres_alloc / tres_req: sacct's ``cpu=12,gres/gpu=4,node=2`` or slurmdbd's numeric
  ``1=12,4=2,1001=4`` (ids 1 cpu, 2 mem, 3 energy, 4 node, 5 billing; gres/gpu has a
  site-specific id >= 1000, named by ``gpu_tres_id``). GPUs (and CPUs, and nodes where no
  nodes column is mapped) come from the allocated TRES, else the requested one.
- gres: a gres spec (``gpu:a100:4``), for GPUs when no gpus column or TRES names them.
- exit_code: sacct's ``code:signal`` or a plain number (the code).

Every row that cannot be read is a :class:`SkippedRow` with its line, as in every reader.
"""

from __future__ import annotations

import csv
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from mirage.slurm.parse import map_state
from mirage.slurm.syntax import SlurmSyntaxError, gres_gpus, parse_limit, parse_tres, tres_gpus
from mirage.slurm.types import JobState
from mirage.trace.checks import COUNT_MAX, Acc, check_times
from mirage.trace.finish import finish
from mirage.trace.load import TraceFormatError, TraceLoad
from mirage.trace.schema import COLUMNS
from mirage.trace.tz import local_to_epoch, zone

CSV_FORMAT = "csv"

#: Canonical fields a mapping may name (the canonical table's columns, plus the inputs
#: ``elapsed``, ``tres_alloc``, ``tres_req`` and ``gres`` they are derived from).
FIELDS: tuple[str, ...] = (*COLUMNS, "elapsed", "tres_alloc", "tres_req", "gres")
#: Fields every mapping must name; ("end", "elapsed") means one of the two.
REQUIRED: tuple[tuple[str, ...], ...] = (
    ("submit",),
    ("start",),
    ("end", "elapsed"),
    ("time_limit",),
    ("nodes",),
)

#: slurmdbd's TRES ids (``TRES_CPU = 1`` ... in src/common/slurmdb_defs.h).
TRES_IDS: dict[int, str] = {1: "cpu", 2: "mem", 3: "energy", 4: "node", 5: "billing"}
#: slurm.h ``enum job_states`` (JOB_STATE_BASE = state & 0xff), as sacct prints them.
STATE_CODES: tuple[str, ...] = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)
#: slurm.h ``JOB_STATE_FLAGS`` bits that job_state_string() reports instead of the base.
_STATE_FLAGS: tuple[tuple[int, str], ...] = (
    (1 << 15, "COMPLETING"),
    (1 << 14, "CONFIGURING"),
    (1 << 13, "RESIZING"),
    (1 << 10, "REQUEUED"),
    (1 << 11, "REQUEUE_HOLD"),
    (1 << 12, "SPECIAL_EXIT"),
    (1 << 16, "STOPPED"),
)
_UNKNOWN = frozenset({"", "Unknown", "UNKNOWN", "None", "NONE", "N/A", "(null)"})
_INT = re.compile(r"^[+-]?\d+$", re.ASCII)
_ISO = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d$", re.ASCII)
_EXIT = re.compile(r"^(\d{1,9})(?::(\d{1,9}))?$", re.ASCII)
#: slurmdbd's NO_VAL / INFINITE (uint32) in a minutes column: no limit known.
_LIMIT_SENTINELS = frozenset({0xFFFFFFFE, 0xFFFFFFFF})


class ColumnMapError(ValueError):
    """A mapping that cannot be right whatever the file (bad syntax, unknown field)."""


@dataclass(frozen=True)
class ColumnMap:
    """Canonical field -> the CSV file's column name, and how to read the values."""

    columns: Mapping[str, str]
    gpu_tres_id: int | None = None  # slurmdbd's id of gres/gpu (site-specific, >= 1000)
    delimiter: str = ","
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.columns) - set(FIELDS))
        if unknown:
            raise ColumnMapError(
                f"unknown field(s) {', '.join(unknown)} in the column mapping "
                f"(known: {', '.join(FIELDS)})"
            )
        if self.gpu_tres_id is not None and self.gpu_tres_id < 1:
            raise ColumnMapError(f"gpu_tres_id must be a positive TRES id, not {self.gpu_tres_id}")
        if len(self.delimiter) != 1:
            raise ColumnMapError(f"delimiter must be one character, not {self.delimiter!r}")

    def missing_required(self) -> list[str]:
        """The required fields (``end|elapsed`` for a choice) this mapping leaves out."""
        return ["|".join(r) for r in REQUIRED if not set(r) & set(self.columns)]


def parse_columns(text: str, gpu_tres_id: int | None = None) -> ColumnMap:
    """``submit=Submit,start=Start,...`` -> a ColumnMap (ColumnMapError if malformed)."""
    columns: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ColumnMapError(f"--columns item {item!r} is not field=COLUMN")
        if key == "gpu_tres_id":
            gpu_tres_id = _tres_id(value)
            continue
        if key in columns:
            raise ColumnMapError(f"field {key!r} mapped twice in --columns")
        columns[key] = value
    return ColumnMap(columns, gpu_tres_id)


def _tres_id(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INT.match(value.strip()):
        return int(value)
    raise ColumnMapError(f"gpu_tres_id must be an integer TRES id, not {value!r}")


def load_columns_file(path: str | Path, overrides: ColumnMap | None = None) -> ColumnMap:
    """A TOML mapping: ``[columns]`` table, optional top-level ``gpu_tres_id``/``delimiter``.

    ``overrides`` (from ``--columns``) replace the file's entries field by field.
    """
    try:
        doc = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ColumnMapError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ColumnMapError(f"{path}: not TOML: {exc}") from exc
    unknown = sorted(set(doc) - {"columns", "gpu_tres_id", "delimiter"})
    if unknown:
        raise ColumnMapError(f"{path}: unknown key(s) {', '.join(unknown)}")
    table = doc.get("columns")
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ColumnMapError(f'{path}: needs a [columns] table of field = "Column" strings')
    columns = dict(table)
    gpu = _tres_id(doc["gpu_tres_id"]) if "gpu_tres_id" in doc else None
    delimiter = str(doc.get("delimiter", ","))
    if overrides is not None:
        columns.update(overrides.columns)
        gpu = overrides.gpu_tres_id if overrides.gpu_tres_id is not None else gpu
    return ColumnMap(columns, gpu, delimiter)


# --------------------------------------------------------------------------- values


def _time(text: str) -> tuple[str, int | None, str]:
    """("bad"/"naive"/"" , epoch, naive ISO text) for one time cell."""
    if text in _UNKNOWN:
        return "", None, ""
    if _INT.match(text):
        n = int(text)
        return ("", n or None, "") if n >= 0 else ("bad", None, "")
    if _ISO.match(text):
        return "naive", None, text.replace(" ", "T")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return "bad", None, ""
    if when.tzinfo is None:
        return "bad", None, ""
    return "", int(when.timestamp()), ""


def _limit(text: str) -> tuple[bool, int | None]:
    """(ok, seconds) of a time limit: a Slurm duration or bare minutes."""
    if text in _UNKNOWN:
        return True, None
    if _INT.match(text):
        n = int(text)
        return (True, None) if n in _LIMIT_SENTINELS else (n >= 0, n * 60 if n >= 0 else None)
    try:
        return True, parse_limit(text)
    except SlurmSyntaxError:
        return False, None


def _elapsed(text: str) -> tuple[bool, int | None]:
    if text in _UNKNOWN:
        return True, None
    try:
        return True, parse_limit(text, bare_unit_s=1)
    except SlurmSyntaxError:
        return False, None


def state_text(text: str) -> str | None:
    """A sacct state string or slurmdbd state number -> the canonical state; None if bad."""
    if text in _UNKNOWN:
        return ""
    if _INT.match(text):
        n = int(text)
        base = n & 0xFF
        if n < 0 or base >= len(STATE_CODES):
            return None
        tokens = [name for bit, name in _STATE_FLAGS if n & bit] + [STATE_CODES[base]]
        return map_state(tokens)[0].value
    state, _ = map_state(text)
    return text.split(" ", maxsplit=1)[0].upper() if state is JobState.UNKNOWN else state.value


def tres_items(text: str, gpu_tres_id: int | None) -> dict[str, str] | None:
    """A TRES string in either form as sacct's names; None if it is no TRES string."""
    items = parse_tres(text)
    if text.strip() and not items:
        return None
    out: dict[str, str] = {}
    for key, value in items.items():
        if _INT.match(key):
            tid = int(key)
            name = "gres/gpu" if tid == gpu_tres_id else TRES_IDS.get(tid, f"tres/{tid}")
            out[name] = value
        else:
            out[key] = value
    return out


def _count(text: str) -> tuple[bool, int | None]:
    if text in _UNKNOWN:
        return True, None
    if not _INT.match(text):
        return False, None
    n = int(text)
    return 0 <= n <= COUNT_MAX, n


# --------------------------------------------------------------------------- reading


_Records = Iterator[tuple[int, list[str]]]


def _records(path: str, raw: bytes, delimiter: str) -> tuple[list[str], _Records]:
    """(header, iterator of (first line, fields)) of a CSV file."""
    text = raw.decode("utf-8-sig", errors="replace")
    lines = text.splitlines(keepends=True)
    reader = csv.reader(lines, delimiter=delimiter)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise TraceFormatError(path, "empty file: no CSV header") from None
    except csv.Error as exc:
        raise TraceFormatError(path, f"unreadable CSV header ({exc})") from exc

    def rows() -> _Records:
        last = reader.line_num
        while True:
            first = last + 1
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                last = reader.line_num
                yield first, [f"\0{exc}"]
                continue
            last = reader.line_num
            if fields and any(f.strip() for f in fields):
                yield first, fields

    return header, rows()


def _check_mapping(path: str, cmap: ColumnMap, header: list[str]) -> None:
    missing = cmap.missing_required()
    if missing:
        raise TraceFormatError(
            path,
            f"column mapping lacks required field(s) {', '.join(missing)} (required: "
            f"{', '.join('|'.join(r) for r in REQUIRED)}; mapped: "
            f"{', '.join(cmap.columns) or 'nothing'})",
        )
    absent = [f"{col!r} (for {key})" for key, col in cmap.columns.items() if col not in header]
    if absent:
        raise TraceFormatError(
            path,
            f"mapped column(s) {', '.join(absent)} not in the file; its columns: "
            f"{', '.join(header)}",
        )


@dataclass
class _Row:
    """One record's values, or the reason it is skipped."""

    values: dict[str, object] = field(default_factory=dict)
    naive: dict[str, str] = field(default_factory=dict)
    problem: str = ""
    numeric_tres: bool = False  # GPUs unknown: slurmdbd's numeric TRES, no gpu_tres_id


_TIMES = ("submit", "eligible", "start", "end")


def _read_times(rec: Mapping[str, str], row: _Row) -> None:
    for key in _TIMES:
        if key not in rec:
            continue
        kind, epoch, naive = _time(rec[key])
        if kind == "bad":
            row.problem = f"bad {key} time {rec[key]!r}"
            return
        row.values[key] = epoch
        row.naive[key] = naive


def _read_numbers(rec: Mapping[str, str], row: _Row) -> None:
    if "time_limit" in rec:
        ok, limit = _limit(rec["time_limit"])
        if not ok:
            row.problem = f"bad time limit {rec['time_limit']!r}"
            return
        row.values["time_limit"] = limit
    if "elapsed" in rec:
        ok, run = _elapsed(rec["elapsed"])
        if not ok:
            row.problem = f"bad elapsed time {rec['elapsed']!r}"
            return
        row.values["elapsed"] = run
    for key in ("nodes", "gpus", "cpus"):
        if key in rec:
            ok, n = _count(rec[key])
            if not ok:
                row.problem = f"bad {key} count {rec[key]!r}"
                return
            row.values[key] = n


def _read_tres(rec: Mapping[str, str], row: _Row, gpu_tres_id: int | None) -> None:
    """GPUs, CPUs and nodes from the allocated TRES, else the requested one, else gres."""
    found: dict[str, int] = {}
    for key in ("tres_req", "tres_alloc"):  # alloc last: it wins
        if not rec.get(key, "").strip():
            continue
        items = tres_items(rec[key], gpu_tres_id)
        if items is None:
            row.problem = f"bad {key} {rec[key]!r}"
            return
        gpus = tres_gpus(items)
        numeric = any(_INT.match(k) for k in parse_tres(rec[key]))
        if gpus is not None or not numeric or gpu_tres_id is not None:
            found["gpus"] = gpus or 0  # a TRES list without GPUs: none
        else:  # which numeric id is gres/gpu is the site's: without it, GPUs are unknown
            row.numeric_tres = True
        for name, out in (("cpu", "cpus"), ("node", "nodes")):
            value = items.get(name, "")
            if _INT.match(value):
                found[out] = int(value)
    if "gpus" not in found and rec.get("gres", "").strip():
        found["gpus"] = gres_gpus(rec["gres"]) or 0
    for out_key, count in found.items():
        # a job runs on one node at least: 0 nodes is slurmdbd's nodes_alloc of a job that
        # never started, whose request (tres_req) says how many it asked for
        if row.values.get(out_key) is None or (out_key == "nodes" and row.values[out_key] == 0):
            row.values[out_key] = count


def _read_row(rec: Mapping[str, str], gpu_tres_id: int | None) -> _Row:
    row = _Row()
    for key in ("job_id", "user", "name", "partition"):
        if key in rec:
            row.values[key] = rec[key]
    if "state" in rec:
        state = state_text(rec["state"])
        if state is None:
            return _Row(problem=f"bad state {rec['state']!r}")
        row.values["state"] = state
    if "exit_code" in rec and rec["exit_code"] not in _UNKNOWN:
        m = _EXIT.match(rec["exit_code"])
        if not m:
            return _Row(problem=f"bad exit code {rec['exit_code']!r}")
        row.values["exit_code"] = int(m.group(1))
    for step in (_read_times, _read_numbers):
        step(rec, row)
        if row.problem:
            return row
    _read_tres(rec, row, gpu_tres_id)
    return row


def _frame(acc: Acc, rows: list[_Row], lines: list[int], tz: str) -> tuple[pd.DataFrame, int, int]:
    """The rows as a table, naive ISO times read as local in ``tz``."""
    keys = sorted({k for row in rows for k in row.values})
    for line, row in zip(lines, rows, strict=True):
        acc.add(line, **{k: row.values.get(k) for k in keys})
    df = acc.frame()
    amb = miss = 0
    bad = np.zeros(len(df), dtype=bool)
    for key in _TIMES:
        if key not in df.columns:
            continue
        epoch = pd.array(df[key].tolist(), dtype="Int64")
        naive = pd.Series([r.naive.get(key, "") for r in rows], dtype="string")
        if bool((naive != "").any()):
            conv = local_to_epoch(naive, "%Y-%m-%dT%H:%M:%S", tz)
            use = (naive != "").to_numpy(dtype=bool)
            epoch[use] = conv.epoch.to_numpy()[use]
            bad |= conv.unparseable
            amb += conv.ambiguous
            miss += conv.missing
        df[key] = epoch
    df = acc.drop(df, bad, "invalid date")
    if "job_id" not in df.columns:  # no id column: the line number names the job
        df["job_id"] = df["_line"].astype(str)
    if "elapsed" in df.columns:
        run = df.pop("elapsed").astype("Int64")
        end = (
            df["end"].astype("Int64")
            if "end" in df.columns
            else pd.Series(pd.NA, index=df.index, dtype="Int64")
        )
        df["end"] = end.fillna(df["start"].astype("Int64") + run)
    return df, amb, miss


def read_csv_mapped(path: str, raw: bytes, cmap: ColumnMap, tz: str | None = None) -> TraceLoad:
    """A CSV job export read through ``cmap`` into the canonical table."""
    tz = tz or "UTC"
    zone(tz)
    header, records = _records(path, raw, cmap.delimiter)
    _check_mapping(path, cmap, header)
    index = {key: header.index(col) for key, col in cmap.columns.items()}
    acc = Acc(path)
    rows: list[_Row] = []
    lines: list[int] = []
    for line, fields in records:
        acc.rows_read += 1
        if len(fields) == 1 and fields[0].startswith("\0"):
            acc.skip(line, f"unreadable CSV record ({fields[0][1:]})")
            continue
        if len(fields) != len(header):
            acc.skip(line, f"expected {len(header)} CSV fields, got {len(fields)}")
            continue
        row = _read_row({k: fields[i].strip() for k, i in index.items()}, cmap.gpu_tres_id)
        if row.problem:
            acc.skip(line, row.problem)
            continue
        rows.append(row)
        lines.append(line)
    notes: list[str] = [f"columns: {', '.join(f'{k}={v}' for k, v in cmap.columns.items())}"]
    df, amb, miss = _frame(acc, rows, lines, tz) if rows else (acc.frame(), 0, 0)
    if not df.empty:
        df = check_times(acc, df)
    if unread := sum(r.numeric_tres and r.values.get("gpus") is None for r in rows):
        notes.append(
            f"no gpu_tres_id: GPUs unknown on {unread} rows whose TRES are numeric ids "
            "(slurmdbd's form; ids >= 1000 are gres, gres/gpu's is the site's tres_table id)"
        )
    return finish(acc, df, CSV_FORMAT, tz, notes, amb, miss)
