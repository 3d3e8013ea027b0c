"""``mirage simulate`` as a Python call: :func:`replay`, plain arguments in, data out.

Replay a trace file through the simulator on a cluster profile and summarise waits,
utilisation and speed, as ``mirage simulate --json`` prints them; the
:class:`~mirage.sim.engine.Simulation` comes back too, for a closer look. The click
command (``mirage simulate``) is a thin wrapper around it. E.g. in a notebook::

    from mirage.sim import replay
    r = replay("traces/ls6-a100-slice.log.gz", "ls6", nodes=88)
    r.summary["utilisation"], r.summary["wait_s"]["simulated"]["p90"]
    r.simulation.all_jobs()  # every replayed job, with its simulated start and end

This module's imports stay light (the engine's package imports it): pandas and the
simulator's calibration code load on the first call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mirage.profile.schema import ClusterProfile
    from mirage.sim.engine import Simulation
    from mirage.sim.prepare import Prepared, Replay
    from mirage.sim.workload import TraceUse
    from mirage.trace.load import TraceLoad

log = logging.getLogger(__name__)

#: Replays of at least this many jobs get a progress bar (``progress=True``, on a terminal).
PROGRESS_MIN_JOBS = 2000
#: What a job without a time limit in the trace gets (``unknown_limit``).
UNKNOWN_LIMITS = ("runtime", "partition-max", "drop")

ProcsPerNode = int | Literal["profile"] | None


class ReplayError(ValueError):
    """An input :func:`replay` cannot use (trace, profile, option): one line saying why.

    ``option`` names the ``mirage simulate`` option at fault when one is (``--before``):
    the command reports it as a bad value of that option.
    """

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


@dataclass
class Replayed:
    """What :func:`replay` measured: ``summary`` (what ``mirage simulate --json`` prints),
    the ``simulation`` it ran, the ``prepared`` trace (jobs, real waits, holds) and the
    ``warning`` given when much of the trace was left out (None if not)."""

    summary: dict[str, Any]
    simulation: Simulation
    prepared: Prepared
    warning: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return self.summary


def replay(
    trace: str,
    profile: str = "ls6",
    *,
    nodes: int | None = None,
    arrival_scale: float = 1.0,
    backfill: str | None = None,
    before: str | None = None,
    holds: bool = True,
    strict: bool = False,
    unknown_limit: str = "runtime",
    procs_per_node: int | str | None = None,
    fmt: str | None = None,
    progress: bool | Callable[[float], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> Replayed:
    """Replay the trace file ``trace`` on ``profile`` (a built-in name or a TOML path).

    The arguments are ``mirage simulate``'s options (see ``mirage simulate --help``):
    ``nodes`` of the default partition (the profile's own by default), ``arrival_scale``
    (2: twice the load), ``backfill`` ("slurm" or "easy": the profile's by default),
    ``before`` (an ISO date: only jobs submitted before it, in the profile's zone),
    ``holds`` (model dependency holds), ``strict`` (more than 5% of the trace left out is
    an error, else a warning), ``unknown_limit`` (one of :data:`UNKNOWN_LIMITS`),
    ``procs_per_node`` (read CPUs as nodes: a number, or "profile"), ``fmt`` (the
    trace's format; default: detected). ``progress``: True for a bar on a terminal (long
    replays), or a callable given the fraction done. ``warn`` is given the warning when
    much of the trace was left out (default: logged). :class:`ReplayError` for inputs
    that cannot be used.
    """
    from mirage.sim.prepare import prepare_trace

    if unknown_limit not in UNKNOWN_LIMITS:
        raise ReplayError(
            f"unknown_limit: one of {', '.join(UNKNOWN_LIMITS)}, got {unknown_limit!r}"
        )
    if not arrival_scale > 0:
        raise ReplayError(f"arrival_scale must be positive, got {arrival_scale}")
    prof = load_profile(profile, nodes, backfill)
    cutoff = cutoff_of(before, prof.timezone)
    t0 = time.perf_counter()
    load = load_trace_file(trace, fmt)
    per_node = procs_per_node_of(procs_per_node)
    n = prof.partition().nodes
    prep = prepare_trace(load.jobs, prof, arrival_scale=arrival_scale, max_nodes=n, holds=holds,
                         before=cutoff, unknown_limit=unknown_limit,
                         procs_per_node=per_node)  # fmt: skip
    load_s = time.perf_counter() - t0
    use = prep.workload.use(unreadable=len(load.skipped))
    said = check_use(use, strict)
    if said:
        (warn or log.warning)(said)
    if not prep.jobs:
        raise ReplayError(f"{trace}: no job to replay (none ran, or all too big)")
    rep = _run(prep, prof, n, progress)
    head = {"trace": trace, "profile": prof.name, "nodes": rep.sim.total_nodes,
            "arrival_scale": arrival_scale, "backfill": prof.scheduler.backfill,
            "before": cutoff}  # fmt: skip
    return Replayed(_summary(head, prep, rep, use, load_s), rep.sim, prep, said)


def _run(prep: Prepared, prof: ClusterProfile, n: int | None, progress: Any) -> Replay:
    """The replay, with the progress asked for; the simulator's refusal as ReplayError."""
    from mirage.progress import fraction_done
    from mirage.sim.errors import SimError
    from mirage.sim.prepare import replay as run_replay

    show = progress is True and len(prep.jobs) >= PROGRESS_MIN_JOBS
    try:
        with fraction_done(f"replaying {len(prep.jobs)} jobs", enabled=show) as bar:
            return run_replay(prep, prof, n, progress=progress if callable(progress) else bar)
    except SimError as exc:
        raise ReplayError(str(exc)) from exc


def _summary(
    head: dict[str, Any], prep: Prepared, rep: Replay, use: TraceUse, load_s: float
) -> dict[str, Any]:
    """The replay's summary, key for key what ``mirage simulate --json`` prints."""
    import numpy as np

    from mirage.sim.prepare import compare, sim_waits
    from mirage.sim.report import summarize, wait_stats

    summ = summarize(rep.sim, rep.wall_s, prep.workload.dropped)
    cmp = compare(prep, rep.sim)
    sim_elig = sim_waits(prep, rep.sim)[prep.measured]
    return {
        **head,
        "jobs": summ.jobs,
        "started": summ.started,
        "dropped": summ.dropped,
        "trace_use": use.as_dict(),
        "span_s": summ.span_s,
        "utilisation": summ.utilisation,
        "load_s": load_s,
        "wall_s": summ.wall_s,
        "jobs_per_s": summ.jobs_per_s,
        "wait_s": {"simulated": summ.sim_wait, "real": summ.real_wait},
        "wait_from_eligible_s": {
            "jobs": cmp.jobs,
            "simulated": wait_stats(sim_elig[~np.isnan(sim_elig)]),
            "real": wait_stats(prep.real_waits[prep.measured]),
            # no job after the warm-up (a log shorter than it): no distance, not a perfect misfit
            "ks": cmp.ks if cmp.jobs else None,
        },
        "holds": prep.holds.as_dict(),
    }


# ---- the inputs, shared with mirage calibrate ------------------------------------------------


def load_trace_file(path: str, fmt: str | None = None) -> TraceLoad:
    """The trace file ``path`` read (format ``fmt``, default: detected)."""
    from mirage.trace.load import TraceFormatError
    from mirage.trace.readers import load_trace

    try:
        return load_trace(path, fmt)
    except (TraceFormatError, ValueError) as exc:
        raise ReplayError(str(exc)) from exc
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def load_profile(
    name: str, nodes: int | None = None, backfill: str | None = None
) -> ClusterProfile:
    """Profile ``name`` with the node count and backfill asked for; every partition must
    have a node count."""
    from mirage.profile.schema import ProfileError
    from mirage.profile.schema import load_profile as read_profile
    from mirage.sim.calibrate import with_settings

    if nodes is not None and nodes < 1:
        raise ReplayError(f"nodes must be at least 1, got {nodes}", "--nodes")
    try:
        prof = read_profile(name)
    except ProfileError as exc:
        raise ReplayError(str(exc)) from exc
    prof = with_settings(prof, nodes, {"backfill": backfill} if backfill else None)
    missing = [p.name for p in prof.partitions if p.nodes is None]
    if missing:
        raise ReplayError(
            f"profile {prof.name!r}: partition {missing[0]!r} has no node count; pass --nodes N"
            " (or calibrate one: mirage calibrate)"
        )
    return prof


def cutoff_of(before: str | None, tz: str) -> int | None:
    """``before`` (an ISO date/time; naive: zone ``tz``) in epoch seconds."""
    if before is None:
        return None
    from mirage.slurm.syntax import parse_when

    try:
        return parse_when(before, tz)
    except ValueError as exc:
        raise ReplayError(f"not an ISO date/time: {before!r}", "--before") from exc


def procs_per_node_of(value: int | str | None) -> ProcsPerNode:
    """``procs_per_node`` checked: a whole number of CPUs, at least 1, or "profile"."""
    if value is None or value == "profile":
        return value  # type: ignore[return-value]
    try:  # a float is no whole number of CPUs
        n = int(value) if isinstance(value, int | str) else 0
    except ValueError:
        n = 0
    if n < 1:
        raise ReplayError(
            f"a whole number of CPUs, at least 1, or 'profile'; got {value!r}", "--procs-per-node"
        )
    return n


def check_use(use: TraceUse, strict: bool) -> str | None:
    """The warning to give when much of the trace was left out (None if not); with
    ``strict``, a ReplayError (:meth:`mirage.sim.workload.TraceUse.check`)."""
    from mirage.sim.workload import TraceUseError

    try:
        return use.check(strict)
    except TraceUseError as exc:
        raise ReplayError(str(exc)) from exc
