"""The canonical table on disk: Parquet with the load's provenance in the file metadata."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mirage.trace.checks import Acc, check_times, drop_non_jobs
from mirage.trace.load import READER_VERSION, TraceFormatError, TraceLoad, log_skipped
from mirage.trace.schema import COLUMNS, STRING_COLUMNS, conform
from mirage.trace.tz import zone

_META_KEY = b"mirage.trace"
_INT64_MAX = 2**63 - 1


def _schema() -> pa.Schema:
    return pa.schema([(c, pa.string() if c in STRING_COLUMNS else pa.int64()) for c in COLUMNS])


def write_parquet(load: TraceLoad, out: str | Path) -> None:
    """Write ``load.jobs`` (conformed) with source, format, tz and reader version as metadata."""
    jobs = conform(load.jobs)
    table = pa.Table.from_pandas(jobs, schema=_schema(), preserve_index=False)
    meta = {
        "source": load.source,
        "format": load.format,
        "tz": load.tz,
        "reader_version": READER_VERSION,
        "rows_read": load.rows_read,
        "skipped": len(load.skipped),
        "ambiguous_times": load.ambiguous_times,
        "missing_times": load.missing_times,
        "notes": load.notes,
    }
    existing = table.schema.metadata or {}
    table = table.replace_schema_metadata({**existing, _META_KEY: json.dumps(meta).encode()})
    pq.write_table(table, str(out))


def read_parquet_bytes(path: str, raw: bytes) -> TraceLoad:
    """Read a canonical Parquet file written by :func:`write_parquet`.

    Checked like the text readers: a column of the wrong type (timestamps, floats, lists)
    refuses the file; a row with an impossible value (a time outside 1970..2200, end
    before start, a negative count, a repeated job id) is skipped, its "line" being its
    1-based row number. Metadata fields of the wrong type are ignored, with a note.
    """
    try:
        table = pq.read_table(io.BytesIO(raw))
        df = _canonical_frame(path, table)
    except (pa.ArrowException, OSError, ValueError, TypeError, OverflowError) as exc:
        raise TraceFormatError(path, f"unreadable Parquet file ({exc})") from exc
    meta, notes = _metadata(table)
    acc = Acc(path, rows_read=len(df))
    df["_line"] = np.arange(1, len(df) + 1)
    df = drop_non_jobs(acc, check_times(acc, df))
    if acc.rows_read and df.empty:
        first = acc.skipped[0]
        raise TraceFormatError(
            path, f"none of {acc.rows_read} rows is a valid job; first problem: row "
            f"{first.line}: {first.reason}"
        )  # fmt: skip
    acc.skipped.sort(key=lambda s: s.line)
    log_skipped(acc.skipped)
    return TraceLoad(
        jobs=conform(df),
        source=path,
        format="parquet",
        tz=meta["tz"],
        rows_read=acc.rows_read,
        skipped=acc.skipped,
        ambiguous_times=meta["ambiguous_times"],
        missing_times=meta["missing_times"],
        notes=notes,
    )


def _column(path: str, table: pa.Table, name: str) -> pa.ChunkedArray:
    """Column ``name`` as int64 or string (TraceFormatError for any other kind of value)."""
    col = table.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    want = pa.string() if name in STRING_COLUMNS else pa.int64()
    ok = pa.types.is_null(col.type) or (
        pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
        if name in STRING_COLUMNS
        else pa.types.is_integer(col.type)
    )
    if not ok:
        kind = "strings" if name in STRING_COLUMNS else "integers (epoch seconds, counts)"
        raise TraceFormatError(path, f"Parquet column {name!r} is {col.type}, expected {kind}")
    if pa.types.is_unsigned_integer(col.type):  # above int64: no time or count, see checks
        top = pa.scalar(_INT64_MAX, col.type)
        col = pc.if_else(pc.greater(col, top), top, col)
    return col.cast(want)


def _canonical_frame(path: str, table: pa.Table) -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise TraceFormatError(path, f"Parquet file lacks canonical columns {missing}")
    cols = pa.table({c: _column(path, table, c) for c in COLUMNS})
    types = {pa.int64(): pd.Int64Dtype(), pa.string(): pd.StringDtype()}
    frame: pd.DataFrame = cols.to_pandas(types_mapper=types.get)
    return frame


def _metadata(table: pa.Table) -> tuple[dict[str, Any], list[str]]:
    """The provenance :func:`write_parquet` stored, checked field by field, and the notes."""
    try:
        meta = json.loads((table.schema.metadata or {}).get(_META_KEY, b"{}"))
    except ValueError:
        meta = None
    ignored: list[str] = []
    if not isinstance(meta, dict):
        meta, ignored = {}, ["metadata"]
    notes = meta.get("notes", [])
    if not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        notes, ignored = [], [*ignored, "notes"]
    out: dict[str, Any] = {}
    for key in ("ambiguous_times", "missing_times", "rows_read", "skipped"):
        value = meta.get(key, 0)
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
        out[key] = value if ok else 0
        ignored += [] if ok else [key]
    for key in ("tz", "source", "format", "reader_version"):
        value = meta.get(key, "" if key == "tz" else "?")
        out[key] = value if isinstance(value, str) else "?"
        ignored += [] if isinstance(value, str) else [key]
    if out["tz"] == "?":
        out["tz"] = ""
    elif out["tz"] and not _known_zone(out["tz"]):
        out["tz"], ignored = "", [*ignored, "tz"]
    counts = (
        f": {out['rows_read']} rows read, {out['skipped']} skipped there"
        if "rows_read" in meta
        else ""
    )
    notes = [*notes, (
        f"read from canonical Parquet (original source {out['source']}, format {out['format']}, "
        f"reader version {out['reader_version']}{counts})"
    )]  # fmt: skip
    if ignored:
        notes.append(f"Parquet metadata ignored (wrong type or value): {', '.join(ignored)}")
    return out, notes


def _known_zone(name: str) -> bool:
    try:
        zone(name)
    except ValueError:
        return False
    return True


def read_parquet(path: str | Path) -> TraceLoad:
    """Read a canonical Parquet file from disk."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TraceFormatError(str(path), f"cannot read file: {exc.strerror or exc}") from exc
    return read_parquet_bytes(str(path), raw)
