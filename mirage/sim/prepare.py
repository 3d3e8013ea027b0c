"""A trace prepared for replay (dependency holds, cut-off, warm-up), its replay, and the
comparison of simulated with real waits: what `mirage simulate`, `mirage calibrate`, the
evaluation, the demo and the synthetic traces' reports all replay through.

Dependency holds
----------------
A trace's "wait" (start - submit) of a job that sat behind a dependency is not queueing:
ls6 users submit a whole chain at once (``dimer.10`` ... ``dimer.15``), each segment
starting when the previous one ends, so the later segments show waits of days. Where the
trace records an eligible time, it is used (``from_table`` turns it into a begin time), and
it is the whole truth: an eligible time equal to the submit means no hold. Only for jobs
whose eligible time it does not record, :func:`prepare_trace` finds chains with
:func:`mirage.trace.chains.find_chains` and treats a chain link as a *hold* when the
successor was submitted before its predecessor ended. A held successor gets
``afterany:<predecessor>`` in the simulator (so it cannot start before the simulated
predecessor ends), and its real wait is measured from its real eligible time, the
predecessor's real end. If the predecessor is not replayed (dropped: it never ran, or is
larger than the cluster), the successor gets a begin time at the predecessor's real end
instead (counted as ``begin_fallback``).

Jobs are numbered so that a predecessor always gets a lower id than its successor (the
simulator needs the parent to exist); this only reorders jobs submitted at the same
instant, or a successor submitted before its predecessor (counted as ``reordered``).

Partition opening
-----------------
The ls6 trace begins with jobs submitted weeks before the first job started (the
partition opened on 2022-10-30). A job submitted before the trace's first start gets a
begin time at that first start (its real eligible time too), and the comparison leaves out
a warm-up (2 days from the first start by default).

Comparison
----------
Waits are compared from eligible time on both sides (simulated: when the simulator made
the job eligible; real: submit, or the eligible time above), for the jobs submitted after
the warm-up. Waits below ``floor_s`` (Slurm's scheduling latency, which the simulator does
not model; real ls6 waits of a few seconds are the norm) count as zero on both sides in
the KS distance (``latency_floor``: a minute, or the profile's scheduler
interval where it is shorter).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from mirage.profile.schema import ClusterProfile
from mirage.sim.engine import Simulation
from mirage.sim.workload import JobSpec, Workload, from_table
from mirage.trace.chains import ChainParams, Chains, find_chains

DAY = 86400
WARMUP_S = 2 * DAY
COOLDOWN_S = 2 * DAY
FLOOR_S = 60

#: Progress callback: (fraction of the replay done, 0..1).
Progress = Callable[[float], None]


@dataclass
class HoldStats:
    """How dependency holds were found and turned into simulator inputs."""

    # "eligible" (the trace records eligible times), "chains" (it records none: holds are
    # inferred from chains), "eligible+chains" (inferred only for the jobs with none), "off"
    source: str
    chains: int = 0
    links: int = 0
    held: int = 0  # jobs given afterany on their predecessor (or a begin fallback)
    dependencies: int = 0  # of which: afterany dependencies
    begin_fallback: int = 0  # of which: predecessor not replayed -> begin at its real end
    reordered: int = 0  # predecessors numbered before a successor submitted earlier
    trace_eligible: int = 0  # jobs whose trace records an eligible time after submit
    before_open: int = 0  # jobs submitted before the trace's first start
    real_mean_wait_submit_s: float = 0.0  # mean start - submit of the replayed jobs
    real_mean_wait_eligible_s: float = 0.0  # mean start - eligible of the replayed jobs

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Prepared:
    """A workload ready to replay and, per job (same order), what to compare it with."""

    workload: Workload
    real_eligible: np.ndarray  # int64 epoch s, trace clock
    real_start: np.ndarray  # int64 epoch s, trace clock
    measured: np.ndarray  # bool: submitted after the warm-up (part of the comparison)
    holds: HoldStats
    opened: int  # the trace's first start (epoch s)
    cutoff: int | None = None  # only jobs submitted before this were kept

    @property
    def jobs(self) -> list[JobSpec]:
        return self.workload.jobs

    @property
    def real_waits(self) -> np.ndarray:
        """Real waits from eligible time, seconds (every job)."""
        waits: np.ndarray = (self.real_start - self.real_eligible).astype(np.float64)
        return waits


def column(df: pd.DataFrame, name: str) -> np.ndarray:
    return df[name].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)


def restrict(df: pd.DataFrame, before: int | None) -> pd.DataFrame:
    """Rows submitted strictly before ``before`` (epoch s); all rows if None.

    Rows without a submit time are dropped too when a cut-off is given (their place in time
    is unknown, so they could belong to the held-out window).
    """
    if before is None:
        return df
    submit = column(df, "submit")
    keep = ~np.isnan(submit) & (submit < before)
    out: pd.DataFrame = df.loc[keep].reset_index(drop=True)
    return out


def _predecessors(chains: Chains, n: int) -> np.ndarray:
    pred = np.full(n, -1, dtype=np.int64)
    for chain in chains.chains:
        for a, b in itertools.pairwise(chain):
            pred[b] = a
    return pred


@dataclass
class _Times:
    submit: np.ndarray
    start: np.ndarray
    end: np.ndarray
    ran: np.ndarray  # has submit, start and end
    recorded: np.ndarray  # the trace records the job's eligible time (maybe = submit)
    has_elig: np.ndarray  # the trace's eligible time is after submit
    real_elig: np.ndarray  # trace clock


def _times(df: pd.DataFrame) -> _Times:
    submit, start, end = column(df, "submit"), column(df, "start"), column(df, "end")
    eligible = column(df, "eligible")
    ran = ~np.isnan(submit) & ~np.isnan(start) & ~np.isnan(end) & (end >= start)
    recorded = ~np.isnan(eligible)
    has_elig = recorded & (eligible > submit)
    real_elig = np.where(has_elig, eligible, submit)
    return _Times(submit, start, end, ran, recorded, has_elig, real_elig)


def _holds(
    df: pd.DataFrame, t: _Times, chains: Chains | None, params: ChainParams | None
) -> tuple[np.ndarray, HoldStats]:
    """Per row, the held predecessor's row (-1: none); updates ``t.real_elig``.

    A job whose eligible time the trace records is never given a hold from chains: an
    eligible time equal to the submit says it waited on nothing (sacct's Eligible is set
    when the dependency is met). Chains stand in only where nothing is recorded."""
    recorded = t.recorded & t.ran
    source = "eligible" if recorded.any() else "chains"
    if recorded.any() and not recorded[t.ran].all():
        source = "eligible+chains"  # chains only for the jobs with none recorded
    stats = HoldStats(source=source)
    stats.trace_eligible = int((t.has_elig & t.ran).sum())
    found = chains if chains is not None else find_chains(df, params)
    stats.chains, stats.links = len(found.chains), int(found.gaps.size)
    pred = _predecessors(found, len(df))
    pend = np.where(pred >= 0, t.end[np.maximum(pred, 0)], np.nan)
    with np.errstate(invalid="ignore"):
        held = (pred >= 0) & ~t.recorded & t.ran & (t.submit < pend)
    t.real_elig = np.where(held, np.maximum(t.real_elig, pend), t.real_elig)
    return np.where(held, pred, -1), stats


def _numbering(sim_submit: np.ndarray, succ_of: np.ndarray) -> tuple[np.ndarray, int]:
    """Replay order putting every predecessor first, and how many jobs it moved.

    Sort by the earliest submit over a job and everything after it in its chain, then by
    depth in the chain, then by submit order (what ``from_table`` produced).
    """
    key = sim_submit.copy()
    depth = np.zeros(sim_submit.size, dtype=np.int64)
    has_pred = np.zeros(succ_of.size, dtype=bool)
    has_pred[succ_of[succ_of >= 0]] = True
    for head in np.flatnonzero((succ_of >= 0) & ~has_pred).tolist():
        chain = [head]
        while succ_of[chain[-1]] >= 0:
            chain.append(int(succ_of[chain[-1]]))
        depth[chain] = np.arange(len(chain))
        for a, b in zip(reversed(chain[:-1]), reversed(chain[1:]), strict=True):
            key[a] = min(key[a], key[b])
    order = np.lexsort((np.arange(sim_submit.size), depth, key))
    return order, int((key < sim_submit).sum())


def _measured(t: _Times, kept: np.ndarray, after: int, before: int | None,
              cooldown_s: int) -> np.ndarray:  # fmt: skip
    """Which replayed jobs the comparison counts: after the warm-up; with a cut-off, only
    those submitted ``cooldown_s`` before it and really started before it."""
    measured: np.ndarray = t.submit[kept] >= after
    if before is not None:
        measured &= (t.submit[kept] < before - cooldown_s) & (t.start[kept] < before)
    return measured


def prepare_trace(
    df: pd.DataFrame,
    profile: ClusterProfile,
    *,
    arrival_scale: float = 1.0,
    max_nodes: int | None = None,
    holds: bool = True,
    before: int | None = None,
    warmup_s: int = WARMUP_S,
    cooldown_s: int = COOLDOWN_S,
    chain_params: ChainParams | None = None,
    chains: Chains | None = None,
    unknown_limit: str = "runtime",
    procs_per_node: int | Literal["profile"] | None = None,
) -> Prepared:
    """Canonical table -> jobs to replay, with dependency holds made explicit.

    ``before`` (epoch s): drop every row submitted at or after it first (nothing later is
    read). ``chains``: precomputed ``find_chains`` of the (restricted) table, to share
    between calls. ``unknown_limit``, ``procs_per_node``: see ``from_table``. See the
    module docstring for the rules; ``Prepared.workload.use()`` says how much of the table
    was replayed.
    """
    df = restrict(df, before)
    n = len(df)
    t = _times(df)
    opened = int(np.nanmin(t.start[t.ran])) if t.ran.any() else 0
    pred = np.full(n, -1, dtype=np.int64)
    stats = HoldStats(source="off", trace_eligible=int((t.has_elig & t.ran).sum()))
    if holds:
        pred, stats = _holds(df, t, chains, chain_params)
    before_open = t.ran & (t.real_elig < opened)
    stats.before_open = int(before_open.sum())
    real_elig = np.maximum(t.real_elig, opened)

    # Let from_table build the specs; row positions as job ids map specs back to rows.
    keyed = df.copy()
    keyed["job_id"] = pd.array([str(i) for i in range(n)], dtype="string")
    wl = from_table(
        keyed, profile, arrival_scale=arrival_scale, max_nodes=max_nodes,
        unknown_limit=unknown_limit, procs_per_node=procs_per_node,
    )  # fmt: skip
    rows = np.array([int(j.trace_id) for j in wl.jobs], dtype=np.int64)
    t0 = float(t.submit[rows].min()) if rows.size else 0.0

    def sim_time(x: float) -> int:
        return math.floor(t0 + (x - t0) / arrival_scale)

    pos = np.full(n, -1, dtype=np.int64)  # row -> index in wl.jobs
    pos[rows] = np.arange(rows.size)
    succ_of = np.full(rows.size, -1, dtype=np.int64)
    linked = pred[rows] >= 0
    pk = pos[pred[rows][linked]]
    succ_of[pk[pk >= 0]] = np.flatnonzero(linked)[pk >= 0]
    order, stats.reordered = _numbering(np.array([j.submit for j in wl.jobs]), succ_of)
    new_id = np.empty(rows.size, dtype=np.int64)
    new_id[order] = np.arange(rows.size) + 1  # Simulation's first_id

    trace_ids = df["job_id"].astype(str).to_numpy()
    jobs: list[JobSpec] = []
    for k in order.tolist():
        spec, r = wl.jobs[k], int(rows[k])
        changes: dict[str, Any] = {"trace_id": str(trace_ids[r])}
        p = int(pred[r])
        if p >= 0:
            stats.held += 1
            if pos[p] >= 0:
                changes["dependency"] = f"afterany:{int(new_id[pos[p]])}"
                stats.dependencies += 1
            else:
                changes["begin"] = max(spec.begin or 0, sim_time(t.end[p]))
                stats.begin_fallback += 1
        if before_open[r]:
            changes["begin"] = max(changes.get("begin", spec.begin) or 0, sim_time(opened))
        jobs.append(dataclasses.replace(spec, **changes))
    kept = rows[order]
    real_start = t.start[kept].astype(np.int64)
    real_eligible = real_elig[kept].astype(np.int64)
    if kept.size:
        stats.real_mean_wait_submit_s = float((t.start[kept] - t.submit[kept]).mean())
        stats.real_mean_wait_eligible_s = float((real_start - real_eligible).mean())
    return Prepared(
        workload=Workload(jobs=jobs, dropped=wl.dropped, rows=wl.rows, unknown=wl.unknown),
        real_eligible=real_eligible,
        real_start=real_start,
        measured=_measured(t, kept, opened + warmup_s, before, cooldown_s),
        holds=stats,
        opened=opened,
        cutoff=before,
    )


# ---- replay and comparison ---------------------------------------------------------


@dataclass
class Replay:
    """One replay: the simulation, how long it took, whether it ran to the end."""

    sim: Simulation
    nodes: int
    wall_s: float
    complete: bool  # False: stopped at the time budget (jobs left pending or unsubmitted)


def replay(
    prep: Prepared,
    profile: ClusterProfile,
    nodes: int | None = None,
    *,
    budget_s: float | None = None,
    progress: Progress | None = None,
    chunks: int = 200,
) -> Replay:
    """Replay ``prep`` on ``profile`` (``nodes``: the default partition's node count).

    The simulation runs in ``chunks`` slices of simulated time (submit span first, then the
    drain), so that ``progress`` is called and ``budget_s`` (wall seconds) checked between
    slices; a replay over budget stops there (``complete=False``).
    """
    t_wall = time.perf_counter()
    jobs = prep.jobs
    first = min((j.submit for j in jobs), default=0)
    last = max((j.submit for j in jobs), default=0)
    sim = Simulation(profile, nodes=nodes, start_time=first, track_estimates=False)
    sim.add_jobs(jobs)
    step = max(1, (last - first) // max(1, chunks))

    def over() -> bool:
        return budget_s is not None and time.perf_counter() - t_wall > budget_s

    t = first
    complete = True
    while t < last:
        t = min(last, t + step)
        sim.run_until(t)
        if progress is not None:
            progress(0.95 * (t - first) / max(1, last - first))
        if over():
            complete = False
            break
    if complete:
        heap = getattr(sim, "heap", None)
        if heap is None:
            sim.run()
        else:
            left = max(1, len(heap))
            while heap:  # drain what is left, still checking the budget
                sim.run_until(sim.now + step)
                if progress is not None:
                    progress(0.95 + 0.05 * max(0.0, 1 - len(heap) / left))
                if over():
                    complete = False
                    break
    if progress is not None and complete:
        progress(1.0)
    wall = time.perf_counter() - t_wall
    return Replay(sim=sim, nodes=sim.total_nodes, wall_s=wall, complete=complete)


def sim_waits(prep: Prepared, sim: Simulation) -> np.ndarray:
    """Simulated waits from eligible time, per job of ``prep`` (NaN: never started)."""
    out = np.full(len(prep.jobs), np.nan)
    for k, v in enumerate(sim.all_jobs()[: len(prep.jobs)]):
        if v.start is not None:
            out[k] = v.start - (v.eligible if v.eligible is not None else v.spec.submit)
    return out


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance: sup |F_a(x) - F_b(x)| (inf values allowed)."""
    if a.size == 0 or b.size == 0:
        return 1.0
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


@dataclass
class WaitComparison:
    """Simulated vs real waits (from eligible time) over the measured jobs, in seconds."""

    jobs: int  # measured jobs
    unstarted: int  # of which the simulation never started (counted as infinite waits)
    ks: float
    sim_mean_s: float
    sim_median_s: float
    real_mean_s: float
    real_median_s: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def compare(prep: Prepared, sim: Simulation, floor_s: int = FLOOR_S) -> WaitComparison:
    """KS distance, mean and median of simulated vs real waits over the measured jobs."""
    sim_w = sim_waits(prep, sim)[prep.measured]
    real_w = prep.real_waits[prep.measured]
    started = ~np.isnan(sim_w)
    s_ks = np.where(started, sim_w, np.inf)
    s_ks = np.where(s_ks < floor_s, 0.0, s_ks)
    r_ks = np.where(real_w < floor_s, 0.0, real_w)
    s = sim_w[started]

    def stat(x: np.ndarray, f: Callable[[np.ndarray], Any]) -> float:
        return float(f(x)) if x.size else math.nan

    return WaitComparison(
        jobs=int(real_w.size),
        unstarted=int((~started).sum()),
        ks=ks_distance(s_ks, r_ks),
        sim_mean_s=stat(s, np.mean),
        sim_median_s=stat(s, np.median),
        real_mean_s=stat(real_w, np.mean),
        real_median_s=stat(real_w, np.median),
    )


# ---- calibration -------------------------------------------------------------------
