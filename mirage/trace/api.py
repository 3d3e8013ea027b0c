"""``mirage trace inspect`` as a Python call: :func:`inspect`, plain arguments in, data out.

Read a trace file (sacct export, SWF, CSV with a column mapping, Parquet) and summarise
it: jobs, skipped rows, span, users, waits, requests, dependency chains, as
``mirage trace inspect --json`` prints them. The click command is a thin wrapper around
it. E.g. in a notebook::

    from mirage.trace import inspect
    s = inspect("traces/ls6-a100-slice.log.gz")
    s["jobs"], s["skipped"], s["wait_s"]["p50"], s["chains"]["chains"]
    cols = "submit=Submit,start=Start,end=End,time_limit=Timelimit,nodes=NNodes"
    inspect("jobs.csv", columns=cols, tz="UTC")

This module's imports stay light (the package imports it): the readers load on the
first call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mirage.trace.csvmap import ColumnMap
    from mirage.trace.load import TraceLoad


class TraceInputError(ValueError):
    """An input :func:`inspect` cannot use (the file, its format or zone, a column
    mapping): one line saying why. ``option`` names the ``mirage trace`` option at fault
    when one is (``--columns/--columns-file``)."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


def inspect(
    path: str,
    fmt: str | None = None,
    tz: str | None = None,
    *,
    columns: str | ColumnMap | None = None,
    columns_file: str | None = None,
) -> dict[str, Any]:
    """The summary of the trace file ``path``, as plain JSON-able values (what
    ``mirage trace inspect --json`` prints).

    ``fmt`` skips format detection (parquet, ls6, eagle, theta, swf-ext, swf, csv); ``tz``
    is the IANA zone of the trace's local times (default: per format). ``columns`` reads
    the file as CSV with this column mapping ("submit=Submit,start=Start,..." or a
    :class:`~mirage.trace.csvmap.ColumnMap`), ``columns_file`` from a TOML mapping
    (docs/trace-csv.md); both: the file's mapping with ``columns`` over it.
    :class:`TraceInputError` for a file or option that cannot be used.
    """
    from mirage.trace.summary import summarize

    return summarize(read(path, fmt, tz, column_map(columns, columns_file)))


def read(path: str, fmt: str | None = None, tz: str | None = None,
         cmap: ColumnMap | None = None) -> TraceLoad:  # fmt: skip
    """The trace file ``path`` read (format ``fmt``, zone ``tz``, CSV mapping ``cmap``)."""
    from mirage.trace.load import TraceFormatError
    from mirage.trace.readers import load_trace

    try:
        return load_trace(path, fmt, tz, cmap)
    except (TraceFormatError, ValueError) as exc:
        raise TraceInputError(str(exc)) from exc


def column_map(columns: str | ColumnMap | None, columns_file: str | None) -> ColumnMap | None:
    """The column mapping of ``columns`` and ``columns_file`` (None if neither is given)."""
    from mirage.trace.csvmap import ColumnMapError, load_columns_file, parse_columns

    if columns is None and columns_file is None:
        return None
    try:
        given = parse_columns(columns) if isinstance(columns, str) else columns
        if columns_file is not None:
            return load_columns_file(columns_file, given)
        return given
    except ColumnMapError as exc:
        raise TraceInputError(str(exc), "--columns/--columns-file") from exc
