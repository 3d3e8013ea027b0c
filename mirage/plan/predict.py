"""A chain's predicted completion for each candidate shape, ranked.

For a shape of time limit ``L`` and restart overhead ``o`` (loading the checkpoint,
warming up, and the work lost since the last checkpoint, per segment), each segment
does ``L - o`` of useful work, so the work ``W`` (at the shape's size, :mod:`.work`)
takes ``n = ceil(W / (L - o))`` segments and ``W + n o`` of run. Then

    completion = now + first wait + W + n o + (n - 1) x later wait

- **first wait**: the shape's predicted start from the present queue (:mod:`.queue`);
  with the cluster's wait calibration (``Options.calibration``, :mod:`.calibrate`), a
  start between that one and the one with every job at its time limit, by the shape's
  width.
- **later waits**: persistence: each later segment waits as long as the first would
  now (x ``later_wait_share``). The look-ahead cannot say more: it sees no later
  arrivals, so its queue drains and a segment submitted days on would start at once,
  while on a busy cluster arrivals replace what drains. The present wait is the usual
  forecast a few hours on (the forecasters learn the same from the queue as it is now).
  ``later_wait_share`` < 1 credits a daemon that pre-submits each successor (Mirage
  hides part of each wait, :mod:`mirage.policy`); 1 (the default) is a chain submitted
  segment after segment.
- **with a trained forecaster** (``forecast``: its median and stated 90% interval of a
  submission's wait for each shape, e.g. the daemon's ``rf``/``xgb``): the later waits
  are its median, and the interval is every wait at its low (high) end.
- **without one**: the interval is the 10-90% spread over ``draws`` queue passes, each
  with every queued job's run drawn from its history (:meth:`RunTimes.drawn`), about
  their median, put around the point: the uncertainty of the present queue's run times
  only, not of later arrivals. With no draws the interval is the point itself.

The recommendation is the earliest predicted completion; ties go to the shape that
requests fewer GPU-hours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mirage.plan.calibrate import Limits, WaitCalibration
from mirage.plan.draws import FastDraw
from mirage.plan.queue import COARSE_STEP_S, Snapshot, spread, start_times
from mirage.plan.shapes import Shape
from mirage.plan.work import PlanInputError, Work
from mirage.policy.lookahead import HORIZON_S, MAX_DRAWS, RunTimes
from mirage.profile.schema import ClusterProfile

HOUR = 3600
#: (low, median, high) of a submission's wait (s), per shape; None where it has none.
WaitForecast = Callable[[Sequence[Shape]], Sequence[tuple[int, int, int] | None]]


@dataclass(frozen=True)
class Options:
    overhead_s: int = 0
    later_wait_share: float = 1.0
    draws: int = 0
    method: str = "plan"
    horizon_s: int = HORIZON_S
    # the cluster's wait calibration (mirage.plan.calibrate): each start between the
    # run-based plan and the limit-based one, by the shape's width
    calibration: WaitCalibration | None = None


@dataclass(frozen=True)
class Candidate:
    shape: Shape
    segments: int
    run_s: int  # all segments' run, overheads included
    first_wait_s: int
    later_wait_s: int  # each later segment's
    completion: int
    interval: tuple[int, int]
    resource_hours: float  # GPU-hours (node-hours for work in nodes) requested
    source: str  # what the later waits and interval come from: "lookahead" or "forecast"

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.shape.to_dict(),
            "gpus": self.shape.gpus,
            "segments": self.segments,
            "run_s": self.run_s,
            "first_wait_s": self.first_wait_s,
            "later_wait_s": self.later_wait_s,
            "completion": self.completion,
            "interval": list(self.interval),
            "resource_hours": round(self.resource_hours, 1),
            "source": self.source,
        }


@dataclass(frozen=True)
class Plan:
    """Candidates ranked by predicted completion; the first is the recommendation."""

    now: int
    work: Work
    options: Options
    candidates: tuple[Candidate, ...]
    habitual: Candidate | None = None
    queue_jobs: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def recommended(self) -> Candidate:
        return self.candidates[0]

    def to_dict(self) -> dict[str, Any]:
        o = self.options
        return {
            "now": self.now,
            "work": self.work.to_dict(),
            "overhead_s": o.overhead_s,
            "later_wait_share": o.later_wait_share,
            "method": o.method,
            "draws": o.draws,
            "queue_jobs": self.queue_jobs,
            "recommended": self.recommended.to_dict(),
            "habitual": None if self.habitual is None else self.habitual.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "notes": list(self.notes),
        }


def segments_for(work_s: int, limit_s: int, overhead_s: int) -> int:
    useful = limit_s - overhead_s
    if useful <= 0:
        raise PlanInputError(
            f"a {limit_s} s segment leaves no time for work after the {overhead_s} s overhead"
        )
    return max(1, -(-work_s // useful))


def plan_chain(
    q: Snapshot,
    work: Work,
    shapes: Sequence[Shape],
    *,
    options: Options = Options(),
    forecast: WaitForecast | None = None,
    habitual: Shape | None = None,
) -> Plan:
    """Rank ``shapes`` (and ``habitual``, shown for comparison) by predicted completion.

    Example (a queue snapshot ``snap`` of a cluster ``profile`` at ``now``)::

        work = parse_work("96h@4gpu", scaling="linear")
        shapes = candidates(profile, work, overhead_s=600)
        plan = plan_chain(Snapshot(snap, profile, now, RunTimes()), work, shapes,
                          options=Options(overhead_s=600))
        plan.recommended.shape, plan.recommended.completion
    """
    if not 0 <= options.later_wait_share <= 1:
        raise PlanInputError("later_wait_share must be between 0 and 1")
    every = list(dict.fromkeys([*shapes, *([habitual] if habitual else [])]))
    starts = start_times(q, every, method=options.method, horizon_s=options.horizon_s)
    if options.calibration is not None:
        starts = _calibrated(q, every, starts, options)
    drawn = _drawn_starts(q, every, options)
    waits = list(forecast(every)) if forecast is not None else [None] * len(every)
    rows = {
        s: _candidate(q.now, work, s, start, [d[k] for d in drawn], waits[k], options)
        for k, (s, start) in enumerate(zip(every, starts, strict=True))
    }
    capped = capped_partitions(q.profile)
    ranked = sorted((rows[s] for s in shapes), key=lambda c: _rank(c, capped))
    return Plan(
        now=q.now,
        work=work,
        options=options,
        candidates=tuple(ranked),
        habitual=rows[habitual] if habitual else None,
        queue_jobs=len(q.snapshot.jobs),
        notes=_notes(q, options, forecast is not None),
    )


def _calibrated(q: Snapshot, shapes: Sequence[Shape], starts: list[int], o: Options) -> list[int]:
    """Each start placed between the run-based one and the one with every job at its
    limit, by the cluster's calibration for the shape's width."""
    assert o.calibration is not None
    at_limits = Snapshot(q.snapshot, q.profile, q.now, Limits(), q.to_limit, q.user)
    limits = start_times(at_limits, shapes, method=o.method, horizon_s=o.horizon_s)
    return [
        o.calibration.start(r, lim, s, q.profile)
        for s, r, lim in zip(shapes, starts, limits, strict=True)
    ]


def capped_partitions(profile: ClusterProfile) -> frozenset[str]:
    """Partitions whose QOS limits what one user or all may run (a per-user job or GPU
    cap): among shapes that finish together, one there ranks after one without, since the
    cap holds back the chain's successor and the user's other jobs alike."""
    limited = {q.name for q in profile.qos if q.has_limits}
    return frozenset(p.name for p in profile.partitions if p.qos and p.qos in limited)


def _rank(c: Candidate, capped: frozenset[str] = frozenset()) -> tuple[int, float, bool, Shape]:
    return (c.completion, c.resource_hours, c.shape.partition in capped, c.shape)


def _drawn_starts(q: Snapshot, shapes: Sequence[Shape], o: Options) -> list[list[int]]:
    """Starts per draw (one list per draw), or none without draws."""
    if o.draws <= 0:
        return []
    if not isinstance(q.runtimes, RunTimes):
        raise PlanInputError("draws need run-time histories (RunTimes)")
    if o.draws > MAX_DRAWS:
        raise PlanInputError(f"at most {MAX_DRAWS} draws")
    return [
        start_times(
            Snapshot(q.snapshot, q.profile, q.now, FastDraw(q.runtimes, k), q.to_limit, q.user),
            shapes,
            method=o.method,
            horizon_s=o.horizon_s,
            step_s=COARSE_STEP_S,
        )
        for k in range(o.draws)
    ]


def _candidate(  # noqa: PLR0917 - one shape's figures, each from its own source
    now: int,
    work: Work,
    shape: Shape,
    start: int,
    drawn: Sequence[int],
    waits: tuple[int, int, int] | None,
    o: Options,
) -> Candidate:
    need = work.run_at(shape.size(work.unit))
    n = segments_for(need, shape.time_limit, o.overhead_s)
    run = need + n * o.overhead_s
    first = max(0, start - now)
    later = first if waits is None else waits[1]
    later = round(later * o.later_wait_share)
    completion = now + first + run + (n - 1) * later
    if waits is not None:
        lo, _, hi = waits
        share = o.later_wait_share
        interval = (
            now + lo + run + round((n - 1) * lo * share),
            now + hi + run + round((n - 1) * hi * share),
        )
    elif drawn:
        # the draws' spread about their own median, around the point (their coarser
        # step may shift them all: mirage.plan.queue.COARSE_STEP_S)
        ends = [w + round((n - 1) * w * o.later_wait_share)
                for w in (max(0, s - now) for s in drawn)]  # fmt: skip
        lo, hi = spread(ends)
        mid = spread(ends, 0.5, 0.5)[0]
        interval = (max(now + run, completion + lo - mid), completion + max(0, hi - mid))
    else:
        interval = (completion, completion)
    hours = n * shape.time_limit * shape.size(work.unit) / HOUR
    return Candidate(shape, n, run, first, later, completion, interval, hours,
                     "forecast" if waits is not None else "lookahead")  # fmt: skip


def _notes(q: Snapshot, o: Options, forecast: bool) -> tuple[str, ...]:
    out = []
    if not forecast:
        out.append("later waits: each as the first would be now (persistence)")
    if not isinstance(q.runtimes, RunTimes) or len(q.runtimes) == 0:
        out.append("no finished jobs seen: queued jobs are predicted to run to their limits")
    if o.method == "plan":
        out.append("starts from one planning pass over the queue (mirage.plan.queue)")
    if o.calibration is not None:
        out.append("starts calibrated by the shape's width between run-based and limit-based "
                   "plans (the cluster's plan.toml, mirage.plan.calibrate)")  # fmt: skip
    return tuple(out)
