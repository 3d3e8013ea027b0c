"""Look-ahead curves: what :class:`~mirage.policy.lookahead.LookaheadPolicy` sees, per step.

At every decision step ``tau_k`` of a sample (the base world and steps of
:func:`mirage.evaluate.probes.probe_sample`) this records the look-ahead start of the
successor: :func:`~mirage.policy.lookahead.lookahead_starts` on the simulator's ``squeue``
snapshot (:class:`~mirage.sim.backend.SimSlurmClient`), the same function the daemon calls
on the real one. Run times are predicted from the jobs that finished before ``tau_k``
(:class:`~mirage.policy.lookahead.RunTimes`, fed in end order, as a daemon that has been
running a while knows them; each through :meth:`RunTimes.add`, which
:meth:`RunTimes.observe` calls on accounting records).

The ``lookahead`` method of :mod:`mirage.evaluate.harness` submits at the first step where
that start plus a margin tuned on the tuning split reaches the planned end. Unlike the
runtime oracle it is a deployable policy: it is a candidate of ``selected`` and compared
head to head with the baselines. Records (:data:`LOOKAHEAD_CURVES`) are cached beside the
probes (``<cache>/<setting key>/<t>.lookahead-v<N>[-<stat>|-draws<K>].npz``, N =
:data:`LOOKAHEAD_VERSION`; :func:`lookahead_recorder`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from mirage.evaluate.probes import Recorder, StepRecord, base_world
from mirage.evaluate.protocol import Protocol
from mirage.policy.lookahead import (
    RUN_STATES,
    Request,
    RunTimes,
    check_stat,
    lookahead_starts,
)
from mirage.sim.backend import SimSlurmClient
from mirage.sim.engine import Simulation
from mirage.slurm.types import SlurmJob

#: Bump when the look-ahead or its run-time model changes: cached curves are then redone.
#: 5: running jobs on the nodes they hold (QueuePlan.place).
LOOKAHEAD_VERSION = 5


@dataclass
class LookaheadCurve(StepRecord):
    """A sample's look-ahead successor start at each decision step (empty: unusable)."""

    FIELD = "start"
    start: np.ndarray  # int64 (K+1,)


class TrueRunTimes(RunTimes):
    """Run times known exactly: ``sim``'s own (its jobs' ids are the snapshot's). For
    checking the look-ahead's snapshot simulation against a fork of ``sim``
    (``tests/unit/test_lookahead.py``, ``experiments/lookahead-parity.py``)."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    def predict_job(self, job: SlurmJob, now: int) -> int:
        return self.sim.specs[int(job.job_id) - self.sim.first_id].run


class FinishedRuns:
    """Feeds a :class:`RunTimes` with the simulation's jobs as they finish, in end order."""

    def __init__(self, sim: Simulation, runtimes: RunTimes) -> None:
        self.sim = sim
        self.runtimes = runtimes
        self.active: set[int] = set()
        self.catch_up(first=True)

    def catch_up(self, first: bool = False) -> None:
        sim = self.sim
        now_active = set(sim.running) | set(sim.pending)
        if first:
            gone = [i for i in range(len(sim.specs)) if sim.end[i] is not None]
        else:
            gone = [i for i in self.active - now_active if sim.end[i] is not None]
        self.active = now_active
        for i in sorted(gone, key=lambda i: (sim.end[i] or 0, i)):
            start, end = sim.start[i], sim.end[i]
            # the states RunTimes.observe counts (not cancelled: the daemon skips those too)
            if start is None or end is None or sim.state[i] not in RUN_STATES:
                continue
            self.runtimes.add(sim.specs[i].user, end - start, sim.limit[i])


def lookahead_curve(
    sim: Simulation, protocol: Protocol, stat: str = "median", draws: int = 1
) -> LookaheadCurve:
    """The curve of the sample at ``sim.now`` (``sim`` itself is not changed); run times
    predicted with the statistic ``stat`` (:class:`RunTimes`), or ``draws`` of them
    (:func:`lookahead_starts`)."""
    world = base_world(sim, protocol)
    if world is None:
        return LookaheadCurve(sim.now, -1, np.zeros(0, dtype=np.int64))
    base, spec = world.sim, world.spec
    client = SimSlurmClient(base)
    req = Request(spec.partition, spec.nodes, spec.gpus, int(spec.time_limit or 0))
    base.run_until(world.steps[0])
    runtimes = RunTimes(stat=stat)
    feed = FinishedRuns(base, runtimes)
    out = np.empty(len(world.steps), dtype=np.int64)
    for k, tau in enumerate(world.steps):
        base.run_until(tau)
        feed.catch_up()
        (out[k],) = lookahead_starts(
            client.queue(), base.profile, tau, runtimes, [req], to_limit={world.pred_id},
            draws=draws,
        )  # fmt: skip
    return LookaheadCurve(sim.now, world.pred_start, out)


def _record(
    sim: Simulation, protocol: Protocol, stat: str = "median", draws: int = 1
) -> LookaheadCurve:
    return lookahead_curve(sim, protocol, stat, draws)


def lookahead_recorder(stat: str = "median", draws: int = 1) -> Recorder[LookaheadCurve]:
    """The recorder of curves with run times predicted by ``stat``, or ``draws`` of them
    (cached apart per setting; a partial of a module-level function, so that workers can
    unpickle it)."""
    tag = "" if check_stat(stat) == "median" else f"-{stat}"
    if draws > 1:
        tag = f"-draws{draws}"
    suffix = f".lookahead-v{LOOKAHEAD_VERSION}{tag}.npz"
    rec = partial(_record, stat=stat, draws=max(1, draws))
    return Recorder(suffix, rec, LookaheadCurve.load)


LOOKAHEAD_CURVES: Recorder[LookaheadCurve] = lookahead_recorder()
