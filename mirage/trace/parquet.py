"""The canonical table on disk: Parquet with the load's provenance in the file metadata."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mirage.trace.load import READER_VERSION, TraceFormatError, TraceLoad
from mirage.trace.schema import COLUMNS, STRING_COLUMNS, conform

_META_KEY = b"mirage.trace"


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
    """Read a canonical Parquet file written by :func:`write_parquet`."""
    try:
        table = pq.read_table(io.BytesIO(raw))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceFormatError(path, f"unreadable Parquet file ({exc})") from exc
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise TraceFormatError(path, f"Parquet file lacks canonical columns {missing}")
    meta_raw = (table.schema.metadata or {}).get(_META_KEY, b"{}")
    try:
        meta = json.loads(meta_raw)
    except ValueError:
        meta = {}
    if not isinstance(meta, dict):
        meta = {}
    df: pd.DataFrame = table.to_pandas()
    notes = [str(n) for n in meta.get("notes", [])]
    notes.append(
        f"read from canonical Parquet (original source {meta.get('source', '?')}, "
        f"format {meta.get('format', '?')}, reader version {meta.get('reader_version', '?')})"
    )
    return TraceLoad(
        jobs=conform(df),
        source=path,
        format="parquet",
        tz=str(meta.get("tz", "")),
        rows_read=len(df),
        skipped=[],
        ambiguous_times=int(meta.get("ambiguous_times", 0)),
        missing_times=int(meta.get("missing_times", 0)),
        notes=notes,
    )


def read_parquet(path: str | Path) -> TraceLoad:
    """Read a canonical Parquet file from disk."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TraceFormatError(str(path), f"cannot read file: {exc.strerror or exc}") from exc
    return read_parquet_bytes(str(path), raw)
