"""Infer per-user limits from a trace: the concurrency no user ever exceeds.

A cluster's QOS or association limits are rarely published with its trace. What a trace
does show is how many jobs (nodes, GPUs) each user had running at once. A ceiling that
many users reach exactly, and none passes, is a limit (MaxJobsPerUser, MaxTRESPerUser);
the highest value reached by one user once is just that user's peak. ``infer_user_limits``
reports, per measure, the highest per-user peak, how many users reach it, and the number
of users at each of the top peaks, and calls it a limit when at least ``min_users`` users
reach it exactly.

Concurrency is counted over [start, end): a job ending at the instant another starts
does not overlap it (Slurm frees a job's slot at its end).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class InferredLimit:
    """One measure's per-user ceiling in a trace."""

    measure: str  # "jobs", "nodes" or "gpus" running at once per user
    ceiling: int  # the highest per-user peak
    users_at_ceiling: int  # users whose peak is exactly the ceiling
    users: int  # users with at least one job that ran
    top_peaks: tuple[tuple[int, int], ...]  # (peak, users with it), highest first
    is_limit: bool  # users_at_ceiling >= min_users

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        tops = ", ".join(f"{p}: {n}" for p, n in self.top_peaks)
        verdict = "a limit" if self.is_limit else "not a limit"
        return (
            f"{self.measure:>5} per user: ceiling {self.ceiling}, reached by "
            f"{self.users_at_ceiling} of {self.users} users ({verdict}); "
            f"users per peak: {tops}"
        )


def user_peaks(
    users: np.ndarray, start: np.ndarray, end: np.ndarray, weight: np.ndarray
) -> dict[str, int]:
    """Each user's highest concurrent sum of ``weight`` over jobs running in [start, end)."""
    peaks: dict[str, int] = {}
    order = np.argsort(users, kind="stable")
    users, start, end, weight = users[order], start[order], end[order], weight[order]
    bounds = np.flatnonzero(users[1:] != users[:-1]) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(users)], strict=True):
        if lo == hi:
            continue
        t = np.concatenate([end[lo:hi], start[lo:hi]])
        d = np.concatenate([-weight[lo:hi], weight[lo:hi]])
        kind = np.concatenate([np.zeros(hi - lo), np.ones(hi - lo)])  # ends first at a tie
        idx = np.lexsort((kind, t))
        peaks[str(users[lo])] = int(np.cumsum(d[idx]).max(initial=0))
    return peaks


def infer_user_limits(
    df: pd.DataFrame, min_users: int = 3, top: int = 5, gpus_per_node: int | None = None
) -> list[InferredLimit]:
    """Per-user ceilings of running jobs, nodes and GPUs in a canonical trace table.

    Rows without a start or an end, or without a user, are left out. GPUs: the trace's
    ``gpus`` where every counted job has it; else ``nodes x gpus_per_node`` when given
    (whole-node jobs, as ls6); else not measured.
    """
    start = df["start"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    end = df["end"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    users = df["user"].astype(str).to_numpy()
    ok = ~np.isnan(start) & ~np.isnan(end) & (end > start) & (users != "") & (users != "<NA>")
    nodes = df["nodes"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    gpus = df["gpus"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    measures: dict[str, np.ndarray] = {"jobs": np.ones(len(df))}
    if not np.isnan(nodes[ok]).any():
        measures["nodes"] = nodes
    if ok.any() and not np.isnan(gpus[ok]).any():
        measures["gpus"] = gpus
    elif gpus_per_node and "nodes" in measures:
        measures["gpus"] = nodes * gpus_per_node
    out = []
    for name, w in measures.items():
        peaks = user_peaks(users[ok], start[ok], end[ok], w[ok].astype(np.int64))
        if not peaks:
            continue
        values = np.array(list(peaks.values()))
        ceiling = int(values.max())
        at = int((values == ceiling).sum())
        distinct, counts = np.unique(values, return_counts=True)
        tops = tuple(
            (int(p), int(n)) for p, n in sorted(zip(distinct, counts, strict=True), reverse=True)
        )[:top]
        out.append(
            InferredLimit(
                measure=name,
                ceiling=ceiling,
                users_at_ceiling=at,
                users=len(peaks),
                top_peaks=tops,
                is_limit=at >= min_users,
            )
        )
    return out
