"""The chains a plan evaluation asks about: decision points of the trace's own chains.

A *decision point* is the end of one of a chain's segments (found by
:func:`mirage.trace.chains.find_chains`) with more of the chain to come. At that moment
the chain still has to do the run time of every later segment (``end - start`` of each,
as the trace recorded it) on its next segment's request: that is the work a plan is
asked to shape. Points whose work is under ``min_work_s`` are left out (a chain with less
than the shortest segment limit left has nothing to shape), and the work is capped at
``max_work_s`` (the next ``max_work_s`` of a longer chain: a counterfactual at a quarter
of the GPUs would otherwise run past any horizon).

One sample per ``every_s`` of the split: the first decision point at or after each
``start + k * every_s``, so a busy day does not outweigh a quiet one.

Example::

    pts = chain_points(df, profile, None, split.start, split.end - horizon_s,
                       min_work_s=6 * 3600, max_work_s=96 * 3600)
    samples = thin(pts, every_s=24 * 3600, start=split.start)
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mirage.profile.schema import ClusterProfile
from mirage.trace.chains import find_chains


@dataclass(frozen=True)
class ChainPoint:
    """A chain at one of its segment boundaries: what it asks for and what is left."""

    t: int  # the end of the segment just finished: the decision time
    nodes: int  # the next segment's request
    gpus: int  # over all its nodes (a whole node's GPUs where the trace gives none)
    work_s: int  # run left at that request, capped
    full_work_s: int  # run left, as the trace recorded it
    cpus: int = 0  # over all its nodes (a whole node's CPUs where the trace gives none)


def chain_points(
    df: pd.DataFrame,
    profile: ClusterProfile,
    partition: str | None,
    start: int,
    end: int,
    *,
    min_work_s: int,
    max_work_s: int,
) -> list[ChainPoint]:
    """Every decision point in ``[start, end)`` on ``partition``'s jobs, by time."""
    part = profile.partition(partition)
    named = df["partition"].astype("string").fillna("")
    # a trace without partition names (ls6's) is all the default partition's
    jobs = df[named == part.name] if (named == part.name).any() else df
    jobs = jobs.reset_index(drop=True)
    ends = _ints(jobs["end"])
    run = ends - _ints(jobs["start"])
    nodes = _ints(jobs["nodes"], 1)
    gpus = _ints(jobs["gpus"], 0)
    cpus = _ints(jobs["cpus"], 0)
    out = []
    for chain in find_chains(jobs).chains:
        rest = np.cumsum([max(0, run[i]) for i in chain][::-1])[::-1]  # run from each on
        for k in range(1, len(chain)):
            t, nxt = int(ends[chain[k - 1]]), chain[k]
            if not start <= t < end or rest[k] < min_work_s:
                continue
            n = max(1, int(nodes[nxt]))
            g = int(gpus[nxt]) or n * part.gpus_per_node
            c = int(cpus[nxt]) or n * part.cpus_per_node
            out.append(ChainPoint(t, n, g, int(min(rest[k], max_work_s)), int(rest[k]), c))
    return sorted(out, key=lambda p: p.t)


def thin(points: list[ChainPoint], every_s: int, start: int) -> list[ChainPoint]:
    """The first point at or after each ``start + k * every_s`` (each point once)."""
    if every_s <= 0:
        raise ValueError(f"the sample spacing must be positive, got {every_s}")
    times = [p.t for p in points]
    out: list[ChainPoint] = []
    grid = start
    while points and grid <= times[-1]:
        i = bisect.bisect_left(times, grid)
        if not out or points[i].t != out[-1].t:
            out.append(points[i])
        grid += every_s
    return out


def _ints(col: pd.Series, missing: int = -1) -> np.ndarray:
    return col.astype("Int64").fillna(missing).to_numpy(dtype=np.int64)
