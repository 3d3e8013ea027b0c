"""Prepare a trace for replay (dependency holds, cut-off, warm-up) and calibrate a cluster.

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

Calibration
-----------
:func:`calibrate` replays the trace restricted to jobs submitted before a cut-off (rows at
or after it are removed first, before chain detection, and never reach the simulator) on
a range of node counts, coarse then fine, and picks the one with the smallest KS distance
between simulated and real waits. Jobs submitted before the cut-off still carry their run
times (some end after it: that is their own length, not the held-out window's load), but
the comparison leaves out a cool-down (jobs submitted in the last 2 days before the
cut-off) and any job that really started after the cut-off, so no real start later than
the cut-off enters the loss. Once the size is chosen (and only then), the whole trace is
replayed at that size and compared on the jobs submitted after the cut-off (held out);
a mean wait off by more than ``DRIFT_RATIO`` either way, or a KS distance above
``DRIFT_KS`` and twice the fitted one, gives a warning: the cluster changed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from mirage.fmt import duration
from mirage.profile.schema import ClusterProfile, profile_to_toml
from mirage.sim.engine import Simulation
from mirage.sim.workload import JobSpec, TraceUse, Workload, from_table
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


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    return df[name].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)


def restrict(df: pd.DataFrame, before: int | None) -> pd.DataFrame:
    """Rows submitted strictly before ``before`` (epoch s); all rows if None.

    Rows without a submit time are dropped too when a cut-off is given (their place in time
    is unknown, so they could belong to the held-out window).
    """
    if before is None:
        return df
    submit = _col(df, "submit")
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
    submit, start, end = _col(df, "submit"), _col(df, "start"), _col(df, "end")
    eligible = _col(df, "eligible")
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


@dataclass
class Candidate:
    nodes: int
    settings: dict[str, Any]  # scheduler overrides tried with this node count
    waits: WaitComparison
    wall_s: float
    complete: bool

    @property
    def ks(self) -> float:
        return self.waits.ks

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "settings": dict(self.settings),
            "wall_s": self.wall_s,
            "complete": self.complete,
            **self.waits.as_dict(),
        }


@dataclass
class Calibration:
    candidates: list[Candidate]
    best: Candidate
    profile: ClusterProfile  # the input profile with the best nodes and settings
    holds: HoldStats
    cutoff: int
    jobs: int  # replayed jobs (submitted before the cut-off)
    measured: int  # of which compared (after the warm-up)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    # the best size on the jobs submitted after the cut-off (None: the trace has none)
    held_out: WaitComparison | None = None
    use: TraceUse | None = None  # how much of the rows before the cut-off were replayed

    def as_dict(self) -> dict[str, Any]:
        return {
            "best": self.best.as_dict(),
            "held_out": None if self.held_out is None else self.held_out.as_dict(),
            "trace_use": None if self.use is None else self.use.as_dict(),
            "cutoff": self.cutoff,
            "jobs": self.jobs,
            "measured": self.measured,
            "holds": self.holds.as_dict(),
            "wall_s": self.wall_s,
            "candidates": [c.as_dict() for c in self.candidates],
            "notes": list(self.notes),
        }


def with_settings(
    profile: ClusterProfile, nodes: int | None = None, settings: dict[str, Any] | None = None
) -> ClusterProfile:
    """``profile`` with the default partition's node count and scheduler settings replaced.

    A captured partition names its nodes (``node_list``); at another node count the names
    no longer fit, and the replay gave it nodes of its own (``Simulation`` does, for a
    partition whose count is overridden): the list is dropped, as the replay had it."""
    sched = dataclasses.replace(profile.scheduler, **(settings or {}))
    default = profile.partition().name
    parts = tuple(
        dataclasses.replace(p, nodes=nodes, node_list="" if nodes != p.nodes else p.node_list)
        if nodes is not None and p.name == default
        else p
        for p in profile.partitions
    )
    return dataclasses.replace(profile, scheduler=sched, partitions=parts)


def _fits(df: pd.DataFrame, nodes: int) -> int:
    """The largest job size that fits in ``nodes`` (workloads are equal when this is)."""
    sizes = np.nan_to_num(_col(df, "nodes"), nan=1.0)
    fit = sizes[sizes <= nodes]
    return int(fit.max()) if fit.size else 0


class _Search:
    """Replays candidates once each (workloads cached by the largest job that fits)."""

    def __init__(self, df: pd.DataFrame, profile: ClusterProfile, *, before: int, holds: bool,
                 warmup_s: int, cooldown_s: int, floor_s: int, budget_s: float | None,
                 on_candidate: Callable[[Candidate], None] | None) -> None:  # fmt: skip
        self.df, self.profile, self.before, self.holds = df, profile, before, holds
        self.warmup_s, self.cooldown_s = warmup_s, cooldown_s
        self.floor_s, self.budget_s = floor_s, budget_s
        self.on_candidate = on_candidate
        self.chains = find_chains(df) if holds else None
        self.cache: dict[int, Prepared] = {}
        self.done: dict[tuple[int, str], Candidate] = {}

    def prepared(self, n: int) -> Prepared:
        key = _fits(self.df, n)
        if key not in self.cache:
            self.cache[key] = prepare_trace(
                self.df, self.profile, max_nodes=n, holds=self.holds, before=self.before,
                warmup_s=self.warmup_s, cooldown_s=self.cooldown_s, chains=self.chains)  # fmt: skip
        return self.cache[key]

    def run(self, n: int, settings: dict[str, Any] | None = None) -> Candidate:
        key = (n, repr(sorted((settings or {}).items())))
        if key in self.done:
            return self.done[key]
        prep = self.prepared(n)
        prof = with_settings(self.profile, n, settings)
        rep = replay(prep, prof, n, budget_s=self.budget_s)
        cand = Candidate(nodes=n, settings=dict(settings or {}),
                         waits=compare(prep, rep.sim, self.floor_s), wall_s=rep.wall_s,
                         complete=rep.complete)  # fmt: skip
        self.done[key] = cand
        if self.on_candidate is not None:
            self.on_candidate(cand)
        return cand

    def best(self) -> Candidate:
        return min(self.done.values(), key=lambda c: (c.ks, -c.nodes))


def calibrate(
    df: pd.DataFrame,
    profile: ClusterProfile,
    before: int,
    *,
    nodes_min: int = 40,
    nodes_max: int = 120,
    coarse_step: int = 8,
    settings_grid: Sequence[dict[str, Any]] = (),
    holds: bool = True,
    warmup_s: int | None = None,
    cooldown_s: int | None = None,
    floor_s: int | None = None,
    budget_s: float | None = None,
    stop_ratio: float = 3.0,
    settings_min_gain: float = 0.01,
    on_candidate: Callable[[Candidate], None] | None = None,
) -> Calibration:
    """Find the node count (and, optionally, scheduler settings) that best reproduce waits.

    Only rows submitted before ``before`` are used: they are cut first, so chain detection
    and the simulator never see a later row. Node counts from ``nodes_max`` down to
    ``nodes_min`` in ``coarse_step`` steps, then around the best at half that step, a
    quarter, ... down to 1 (``_halvings``: two replays a step). Going down stops early once
    the simulated mean wait exceeds ``stop_ratio`` times the real one with a worse KS (a
    smaller cluster only waits longer), or a replay runs past ``budget_s``. Each entry of
    ``settings_grid`` (scheduler overrides) is then tried at the best node count; one is
    kept only if it lowers the KS distance by at least ``settings_min_gain`` (smaller
    differences are noise).

    ``warmup_s``/``cooldown_s`` (None: ``WARMUP_S``/``COOLDOWN_S``, or, for a log too short
    for them, a tenth of its span each: :func:`comparison_windows`). A
    :class:`NothingToCompare` error when no job is left to compare. ``floor_s`` (None:
    :func:`latency_floor` of the profile).
    """
    if not 0 < nodes_min <= nodes_max:
        raise ValueError(f"bad node range {nodes_min}..{nodes_max}")
    t0 = time.perf_counter()
    floor_s = latency_floor(profile) if floor_s is None else floor_s
    cut = restrict(df, before)
    warmup_s, cooldown_s, notes = comparison_windows(cut, before, warmup_s, cooldown_s)
    search = _Search(cut, profile, before=before, holds=holds, warmup_s=warmup_s,
                     cooldown_s=cooldown_s, floor_s=floor_s, budget_s=budget_s,
                     on_candidate=on_candidate)  # fmt: skip
    if len(cut) and not search.prepared(nodes_max).measured.any():
        raise NothingToCompare(
            f"no job to compare: none of the {len(cut)} jobs submitted before the cut-off was "
            f"submitted after the warm-up ({duration(warmup_s)} from the first start) and "
            f"before the cool-down ({duration(cooldown_s)} before the cut-off) and started "
            "before the cut-off; give a longer log or a later cut-off (--before)"
        )
    notes += _descend(search, nodes_min, nodes_max, coarse_step, stop_ratio)
    for step in _halvings(coarse_step):  # about the best so far, at halving steps
        centre = search.best().nodes
        for n in (centre - step, centre + step):
            if nodes_min <= n <= nodes_max:
                search.run(n)
    top = search.best()
    for settings in settings_grid:
        search.run(top.nodes, settings)
    tuned = search.best()
    if top.ks - tuned.ks >= settings_min_gain:  # else within noise: keep the profile's
        top = tuned
    tied = sorted(c.nodes for c in search.done.values() if c.ks == top.ks and not c.settings)
    if len(tied) > 1:
        notes.append(
            f"note: KS {top.ks:.3f} at {', '.join(map(str, tied))} nodes alike: the log does "
            f"not tell these sizes apart (the largest, {tied[-1]}, is taken); a busier or "
            "longer log does"
        )
    prep = search.prepared(top.nodes)
    later = _held_out(df, with_settings(profile, top.nodes, top.settings), top.nodes,
                      before=before, holds=holds, floor_s=floor_s, warmup_s=warmup_s)  # fmt: skip
    if later is not None:
        notes.extend(_drift(top.waits, later))
    return Calibration(
        candidates=sorted(search.done.values(), key=lambda c: (c.nodes, repr(c.settings))),
        best=top,
        profile=dataclasses.replace(
            with_settings(profile, top.nodes, top.settings),
            description=f"{profile.description} -- calibrated: {top.nodes} nodes".strip(" -"),
        ),
        holds=prep.holds,
        cutoff=before,
        jobs=len(prep.jobs),
        measured=int(prep.measured.sum()),
        wall_s=time.perf_counter() - t0,
        notes=notes,
        held_out=later,
        use=prep.workload.use(),
    )


def latency_floor(profile: ClusterProfile) -> int:
    """Waits under this count as zero in a calibration's KS distance: Slurm's scheduling
    latency, at most ``FLOOR_S`` (a minute: ls6's ``sched_interval``), less on a cluster
    whose scheduler passes come sooner (the test cluster's 1 s ``sched_interval`` and
    ``bf_interval``, where a minutes-long log's waits are all under a minute)."""
    s = profile.scheduler
    return max(1, min(FLOOR_S, max(s.sched_interval_s, s.bf_interval_s)))


class NothingToCompare(ValueError):
    """A calibration with no job to compare: its loss would mean nothing."""


def comparison_windows(
    df: pd.DataFrame, before: int, warmup_s: int | None, cooldown_s: int | None
) -> tuple[int, int, list[str]]:
    """The warm-up and cool-down of a calibration, and a note when they were shortened.

    Either given: it is kept, and the other, left out, is its default. Both left out:
    ``WARMUP_S`` and ``COOLDOWN_S``, unless the log
    before the cut-off (from its first start to the cut-off or its last submit, whichever
    is earlier) is no longer than the two together: those would leave no job to compare,
    so each is a tenth of that span instead (a few minutes' test log, a week-old cluster).
    """
    if warmup_s is not None or cooldown_s is not None:
        return (WARMUP_S if warmup_s is None else warmup_s,
                COOLDOWN_S if cooldown_s is None else cooldown_s, [])  # fmt: skip
    starts = _col(df, "start")
    submits = _col(df, "submit")
    ran = starts[~np.isnan(starts)]
    if not ran.size or not submits.size:
        return WARMUP_S, COOLDOWN_S, []
    span = int(min(float(before), float(np.nanmax(submits))) - float(ran.min()))
    if span > WARMUP_S + COOLDOWN_S:
        return WARMUP_S, COOLDOWN_S, []
    warm = cool = max(0, span // 10)
    return (
        warm,
        cool,
        [
            f"note: the log before the cut-off spans {duration(span)}, not more than the "
            f"{duration(WARMUP_S)} warm-up and {duration(COOLDOWN_S)} cool-down together: "
            f"warm-up {duration(warm)}, cool-down {duration(cool)} (a tenth of the span each)"
        ],
    )


#: The held-out fit calls the size into doubt when the simulated mean wait after the
#: cut-off is off the real one by more than this factor either way ...
DRIFT_RATIO = 2.0
#: ... or its KS distance is above this and twice the fitted one.
DRIFT_KS = 0.15


def _held_out(
    df: pd.DataFrame, profile: ClusterProfile, nodes: int, *, before: int, holds: bool,
    floor_s: int, warmup_s: int = WARMUP_S,
) -> WaitComparison | None:  # fmt: skip
    """The chosen size on the jobs submitted after the cut-off: the whole trace replayed
    (what came before fills the queue as it did), compared on the later jobs only."""
    submit = _col(df, "submit")
    if not (submit >= before).any():
        return None
    prep = prepare_trace(df, profile, max_nodes=nodes, holds=holds, warmup_s=warmup_s)
    later = np.array([j.real_submit is not None and j.real_submit >= before for j in prep.jobs])
    if not later.any():
        return None
    prep = dataclasses.replace(prep, measured=prep.measured & later)
    return compare(prep, replay(prep, profile, nodes).sim, floor_s)


def _drift(fit: WaitComparison, later: WaitComparison) -> list[str]:
    """A warning when the fitted size does not hold after the cut-off."""
    ratio = later.sim_mean_s / max(1.0, later.real_mean_s)
    if 1 / DRIFT_RATIO <= ratio <= DRIFT_RATIO and not (
        later.ks > DRIFT_KS and later.ks > 2 * fit.ks
    ):
        return []
    return [
        f"warning: after the cut-off the fitted size does not hold: simulated mean wait "
        f"{later.sim_mean_s / 3600:.2f} h against {later.real_mean_s / 3600:.2f} h real "
        f"(x{ratio:.1f}), KS {later.ks:.3f} (fit: {fit.ks:.3f}). The cluster's demand or "
        "capacity changed; calibrate on the months you will simulate, or per period"
    ]


def _descend(search: _Search, lo: int, hi: int, step: int, stop_ratio: float) -> list[str]:
    """The coarse pass, from ``hi`` down; notes on why it stopped early."""
    for n in _descending(lo, hi, step):
        cand = search.run(n)
        if not cand.complete:
            return [f"stopped going down at {n} nodes: replay over {search.budget_s} s budget"]
        ratio = cand.waits.sim_mean_s / max(1.0, cand.waits.real_mean_s)
        if ratio > stop_ratio and cand.ks > search.best().ks:
            return [f"stopped going down at {n} nodes: simulated mean wait {ratio:.1f}x real"]
    return []


def _halvings(step: int) -> list[int]:
    """The fine pass's steps after a coarse one of ``step``: halving down to 1 (8: 4, 2, 1),
    two replays each, so its cost grows with log(step), not with step (a cluster of
    thousands of nodes, calibrated with a coarse step of hundreds, took thousands)."""
    out = []
    while step > 1:
        step = (step + 1) // 2
        out.append(step)
    return out


def _descending(lo: int, hi: int, step: int) -> list[int]:
    out = list(range(hi, lo - 1, -max(1, step)))
    if out[-1] != lo:
        out.append(lo)
    return out


def calibrated_toml(cal: Calibration, trace: str = "", tz: str = "UTC") -> str:
    """The calibrated profile as TOML, with a comment header saying how it was obtained."""
    b = cal.best
    when = pd.Timestamp(cal.cutoff, unit="s", tz="UTC").tz_convert(tz).isoformat()
    settings = ", ".join(f"{k} = {v}" for k, v in b.settings.items())
    head = [
        f"# Calibrated by `mirage calibrate` on {trace or 'a trace'},",
        f"# jobs submitted before {when} ({cal.jobs} jobs; {cal.measured} compared, after",
        "# the warm-up and before the cool-down). Loss: KS distance of waits from eligible",
        "# time, simulated vs real.",
        f"# Best: {b.nodes} nodes{'; ' + settings if settings else ''}; KS {b.ks:.3f}; "
        f"mean wait {b.waits.sim_mean_s / 3600:.2f} h",
        f"# simulated vs {b.waits.real_mean_s / 3600:.2f} h real, median "
        f"{b.waits.sim_median_s:.0f} s vs {b.waits.real_median_s:.0f} s.",
        f"# Dependency holds ({cal.holds.source}): {cal.holds.held} jobs held.",
    ]
    h = cal.held_out
    if h is not None:
        head.append(
            f"# After the cut-off (held out, {h.jobs} jobs): KS {h.ks:.3f}; mean wait "
            f"{h.sim_mean_s / 3600:.2f} h simulated vs {h.real_mean_s / 3600:.2f} h real."
        )
    return "\n".join(head) + "\n" + profile_to_toml(cal.profile)


def write_profile(cal: Calibration, path: str | Path, trace: str = "", tz: str = "UTC") -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(calibrated_toml(cal, trace, tz), encoding="utf-8")


def hours(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds / 3600:.2f}"


def table_rows(cands: Iterable[Candidate]) -> list[list[str]]:
    """Rows for a candidates table: nodes, settings, KS, mean/median sim vs real, wall."""
    rows = []
    for c in cands:
        w = c.waits
        rows.append(
            [
                str(c.nodes),
                ", ".join(f"{k}={v}" for k, v in c.settings.items()) or "-",
                f"{c.ks:.3f}",
                hours(w.sim_mean_s),
                hours(w.real_mean_s),
                "-" if math.isnan(w.sim_median_s) else f"{w.sim_median_s:.0f}",
                f"{w.real_median_s:.0f}",
                f"{c.wall_s:.1f}" + ("" if c.complete else " (budget)"),
            ]
        )
    return rows


TABLE_HEADER = (
    "nodes",
    "settings",
    "KS",
    "mean h sim",
    "mean h real",
    "median s sim",
    "median s real",
    "wall s",
)

#: Scheduler variants ``mirage calibrate --tune-settings`` tries at the best node count.
SETTINGS_GRID: tuple[dict[str, Any], ...] = (
    {"backfill": "easy"},
    {"priority_max_age_s": DAY},
    {"priority_max_age_s": 14 * DAY},
    {"bf_window_s": DAY},
)
