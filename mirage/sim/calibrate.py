"""Calibrate a cluster: the node count (and scheduler settings) whose replay of a trace
best matches its real waits, with a held-out check.

The replay and the comparison are :mod:`mirage.sim.prepare`'s.

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
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mirage.fmt import duration
from mirage.profile.schema import ClusterProfile, profile_to_toml
from mirage.sim.prepare import (
    COOLDOWN_S,
    DAY,
    FLOOR_S,
    WARMUP_S,
    HoldStats,
    Prepared,
    WaitComparison,
    column,
    compare,
    prepare_trace,
    replay,
    restrict,
)
from mirage.sim.workload import TraceUse
from mirage.trace.chains import find_chains


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
    sizes = np.nan_to_num(column(df, "nodes"), nan=1.0)
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
    starts = column(df, "start")
    submits = column(df, "submit")
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
    submit = column(df, "submit")
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
