"""Dependency-held chains in synthetic traces.

Real GPU traces hold chains: a user submits a run's segments together, each held by a
dependency until the one before it ends (ls6: about one job in nine). Such a job's wait
from submit is mostly the hold, not the queue, and the held segments fill the queue later
as one long run. A tabular synthesizer cannot express this (a row knows nothing of
another), so chains are a separate, explicit part of the model:

- **fit**: chains of the training split are found by :func:`mirage.trace.chains.find_chains`;
  a link counts as *held* when the successor was submitted before its predecessor ended.
  Maximal runs of held links give the chain lengths (empirical distribution) and the share
  of jobs that sit in a held chain.
- **sample**: segments submitted together arrive as a burst, so held chains are made from
  the arrival process's bursts: bursts of two or more jobs, in random order, are cut into
  chains of drawn lengths until the fitted share of jobs is chained. A burst's jobs already
  share the user and the request.
- **written** as a real trace records a chain that never waited: segment k starts when k-1
  ends (or at its own submit, if later), with one name stem and increasing indices, so that
  chain detection finds it and the replay holds each segment until its predecessor ends
  (``afterany``), exactly as for the real trace.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from mirage.trace.chains import find_chains


@dataclass
class ChainModel:
    job_share: float  # share of the training jobs inside a held chain
    lengths: list[int]  # lengths (>= 2) of the training split's held chains

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChainModel:
        return cls(job_share=float(d["job_share"]), lengths=[int(x) for x in d["lengths"]])


def fit_chains(train: pd.DataFrame) -> ChainModel:
    """Held-chain lengths and share of the jobs of a canonical table (a training split)."""
    found = find_chains(train.reset_index(drop=True))
    submit = train["submit"].astype("Int64").to_numpy(dtype=np.float64, na_value=np.nan)
    end = train["end"].astype("Int64").to_numpy(dtype=np.float64, na_value=np.nan)
    lengths: list[int] = []
    for chain in found.chains:
        run = 1
        for prev, nxt in pairwise(chain):
            if submit[nxt] < end[prev]:  # held: submitted while its predecessor ran
                run += 1
                continue
            if run >= 2:
                lengths.append(run)
            run = 1
        if run >= 2:
            lengths.append(run)
    share = sum(lengths) / len(train) if len(train) else 0.0
    return ChainModel(job_share=float(share), lengths=lengths)


def chain_groups(
    burst: np.ndarray, model: ChainModel, rng: np.random.Generator
) -> list[np.ndarray]:
    """Row positions of each synthetic chain, in chain order, cut from bursts (``burst``:
    burst id per row, rows sorted by submit) until ``model.job_share`` of rows is chained."""
    n = len(burst)
    if not model.lengths or model.job_share <= 0 or n < 2:
        return []
    target = model.job_share * n
    # rows of each burst, in submit order (a stable sort by burst id keeps it)
    by_burst = np.split(
        np.argsort(burst, kind="stable"), np.flatnonzero(np.diff(np.sort(burst))) + 1
    )
    multi = [rows for rows in by_burst if len(rows) >= 2]
    lengths = np.asarray(model.lengths, dtype=np.int64)
    groups: list[np.ndarray] = []
    chained = 0
    for k in rng.permutation(len(multi)).tolist():
        if chained >= target:
            break
        rows = multi[k]
        pos = 0
        while len(rows) - pos >= 2 and chained < target:
            take = min(int(rng.choice(lengths)), len(rows) - pos)
            groups.append(rows[pos : pos + take])
            chained += take
            pos += take
    groups.sort(key=lambda g: int(g[0]))
    return groups


def apply_chains(cols: dict[str, Any], groups: list[np.ndarray]) -> None:
    """Write chains into the columns of a synthetic table (``submit``, ``start``, ``end``,
    ``name``, ``user``): one name stem per chain, every segment submitted with the first
    (as a script submits a chain), segment k starting when k-1 ends. Rows are no longer
    sorted by submit afterwards: the caller sorts them."""
    start = np.asarray(cols["start"], dtype=np.int64).copy()
    end = np.asarray(cols["end"], dtype=np.int64).copy()
    submit = np.asarray(cols["submit"], dtype=np.int64).copy()
    names = list(cols["name"])
    users = np.asarray(cols["user"], dtype=object).copy()
    for c, rows in enumerate(groups, start=1):
        prev_end = None
        for k, r in enumerate(rows.tolist(), start=1):
            run = int(end[r] - start[r])
            submit[r] = submit[rows[0]]
            begin = int(submit[r]) if prev_end is None else max(int(submit[r]), prev_end)
            start[r], end[r] = begin, begin + run
            prev_end = begin + run
            names[r] = f"synth-chain{c}.{k}"
            users[r] = users[rows[0]]
    cols.update(submit=submit, start=start, end=end, name=names, user=users)
