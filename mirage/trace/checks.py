"""Row checks every reader (text or Parquet) applies to its table before it is returned.

Each check drops the rows it refuses and records a :class:`SkippedRow` for each, so one
bad row never rejects a file and no absurd value reaches the summaries or the chains.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mirage.trace.load import SkippedRow

#: Job times are epoch seconds from 1970-01-01 up to 2200-01-01 UTC; anything outside is
#: no real job time (a unit slip such as nanoseconds, or a corrupt value) and would break
#: date formatting and the int64 arithmetic of the chains.
TIME_MIN = 0
TIME_MAX = 7_258_118_400
#: Requested or allocated nodes, CPUs or GPUs above this are no real request.
COUNT_MAX = 10**9
#: A time limit above this (about 230 years) is no real limit.
LIMIT_MAX = TIME_MAX

#: sacct job steps: "15.batch", "15.extern", "15.0", "15_3.0", "15+1.batch".
_STEP = r"^[^.]+\.[^.]+$"
#: Heterogeneous job components "14+0", "14+1" (the leader is "+0").
_HET = r"^([0-9]+)\+([0-9]+)$"


@dataclass
class Acc:
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


def _outside(values: pd.Series, lo: int, hi: int) -> np.ndarray:
    v = pd.to_numeric(values, errors="coerce").astype("Float64")
    return ((v < lo) | (v > hi)).fillna(False).to_numpy(dtype=bool)


def check_ranges(acc: Acc, df: pd.DataFrame) -> pd.DataFrame:
    """Drop rows with a time outside 1970..2200, or an absurd time limit or count."""
    for col in ("submit", "eligible", "start", "end"):
        if col in df.columns:
            df = acc.drop(df, _outside(df[col], TIME_MIN, TIME_MAX),
                          f"{col} time out of range (not between 1970 and 2200)")  # fmt: skip
    if "time_limit" in df.columns:
        df = acc.drop(df, _outside(df["time_limit"], 0, LIMIT_MAX), "time limit out of range")
    for col in ("nodes", "cpus", "gpus"):
        if col in df.columns:
            df = acc.drop(df, _outside(df[col], 0, COUNT_MAX), f"{col} count out of range")
    return df


def check_times(acc: Acc, df: pd.DataFrame) -> pd.DataFrame:
    """Drop rows with impossible times: out of range, start < submit or end < start."""
    df = check_ranges(acc, df)
    sub, sta = df["submit"], df["start"]
    df = acc.drop(df, (sta < sub).fillna(False).to_numpy(dtype=bool), "start before submit")
    sta, end = df["start"], df["end"]
    return acc.drop(df, (end < sta).fillna(False).to_numpy(dtype=bool), "end before start")


def drop_non_jobs(acc: Acc, df: pd.DataFrame, unique_ids: bool = True) -> pd.DataFrame:
    """Drop job steps, non-leader heterogeneous components and repeated jobs.

    - ``15.batch``, ``15.extern``, ``15.0``: sacct job steps run inside job 15, not jobs.
    - ``14+1``, ``14+2``: components of heterogeneous job 14; they share its submit and
      start, so only the leader ``14+0`` is kept as the job (its own nodes only).
    - with ``unique_ids``, a job id seen before: the same job read twice (a concatenated
      file, say); the first is kept.
    """
    ids = df["job_id"].astype("string").fillna("")
    df = acc.drop(df, ids.str.match(_STEP).to_numpy(dtype=bool), "job step, not a job")
    ids = df["job_id"].astype("string").fillna("")
    het = ids.str.extract(_HET)[1]
    df = acc.drop(df, (het.notna() & (het != "0")).to_numpy(dtype=bool),
                  "heterogeneous job component (only the leader +0 is kept)")  # fmt: skip
    if not unique_ids:
        return df
    dup = df["job_id"].duplicated(keep="first").to_numpy(dtype=bool)
    for line, job in zip(df["_line"].to_numpy()[dup], df["job_id"].to_numpy()[dup], strict=True):
        acc.skip(int(line), f"duplicate job {job} (the first one is kept)")
    return df[~dup]
