"""The canonical job table every trace reader produces.

One row per job, as a pandas DataFrame with exactly ``COLUMNS`` in this order and these
dtypes. Units are explicit and uniform:

- ``submit``, ``eligible``, ``start``, ``end``: epoch seconds, UTC (Int64; <NA> if unknown).
  ``eligible`` is when the job could first start (after a dependency or begin time);
  it is <NA> where the trace does not record it.
- ``time_limit``: requested wall-clock limit in seconds (Int64; <NA> if unknown/unlimited).
- ``nodes``, ``gpus``, ``cpus``: requested (or allocated, where only that is known) counts
  (Int64; <NA> if unknown; 0 GPUs means none requested).
- ``exit_code``: the job's exit code (Int64; <NA> if unknown).
- ``job_id``, ``user``, ``name``, ``partition``, ``state``: strings ("" if unknown).

Derived quantities (wait = start - submit, run = end - start) are computed by callers,
never stored, so they can never disagree with the times.
"""

from __future__ import annotations

import pandas as pd

COLUMNS: tuple[str, ...] = (
    "job_id",
    "user",
    "name",
    "partition",
    "state",
    "submit",
    "eligible",
    "start",
    "end",
    "time_limit",
    "nodes",
    "gpus",
    "cpus",
    "exit_code",
)

STRING_COLUMNS: tuple[str, ...] = ("job_id", "user", "name", "partition", "state")
INT_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c not in STRING_COLUMNS)

DTYPES: dict[str, str] = {
    **{c: "string" for c in STRING_COLUMNS},
    **{c: "Int64" for c in INT_COLUMNS},
}


def empty_table() -> pd.DataFrame:
    """A canonical table with no rows."""
    return conform(pd.DataFrame({c: [] for c in COLUMNS}))


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """Return ``df`` with exactly the canonical columns, order and dtypes.

    Missing columns are added as all-unknown; extra columns are dropped.
    """
    out = pd.DataFrame(index=df.index)
    for col in COLUMNS:
        series = df[col] if col in df.columns else pd.Series([pd.NA] * len(df), index=df.index)
        if col in STRING_COLUMNS:
            out[col] = series.astype("string").fillna("")
        else:
            out[col] = pd.to_numeric(series, errors="coerce").round().astype("Int64")
    return out.reset_index(drop=True)
