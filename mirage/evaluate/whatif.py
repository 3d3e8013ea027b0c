"""No-arrival what-if probes: how far run-time knowledge alone could take a policy.

The oracle knows everything about the future. To tell how much of the gap between a
learned policy and the oracle is the run times of jobs already in the system (unknown to
Slurm, which plans with time limits) and how much is jobs not yet submitted, this records,
at every decision step ``tau_k`` of a sample (the same base world and steps as
:func:`mirage.evaluate.probes.probe_sample`), when the successor would start if it were
submitted at ``tau_k`` *and no other job arrived after* ``tau_k``, every job already
queued or running keeping its true run time: a fork of the base world at ``tau_k`` with
its future submissions dropped (:meth:`~mirage.sim.engine.Simulation.drop_future_submits`).

The ``runtime-oracle`` reference of :mod:`mirage.evaluate.harness` submits at the first
step where that start plus a tuned margin reaches the planned end. No deployed policy can
see those run times: like the oracle it is a reference, never a baseline to beat, and it
is left out of the head-to-head comparisons and of ``selected``.

Records (:data:`NO_ARRIVALS`, for :func:`mirage.evaluate.probes.record_all`) are cached
beside the probes (``<cache>/<setting key>/<t>.noarr.npz``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from mirage.evaluate.probes import Recorder, StepRecord, base_world
from mirage.evaluate.protocol import Protocol
from mirage.sim.engine import Simulation


@dataclass
class NoArrivalCurve(StepRecord):
    """A sample's no-arrival successor start at each decision step (-1: did not start
    within the window; empty: the sample is unusable)."""

    FIELD = "start"
    start: np.ndarray  # int64 (K+1,)


def no_arrival_curve(sim: Simulation, protocol: Protocol) -> NoArrivalCurve:
    """The curve of the sample at ``sim.now`` (``sim`` itself is not changed)."""
    world = base_world(sim, protocol)
    if world is None:
        return NoArrivalCurve(sim.now, -1, np.zeros(0, dtype=np.int64))
    base = world.sim
    out = np.empty(len(world.steps), dtype=np.int64)
    for k, tau in enumerate(world.steps):
        base.run_until(tau)
        fork = base.fork()
        fork.drop_future_submits()
        job = fork.add_job(dataclasses.replace(world.spec, submit=tau, name="succ"))
        start = fork.run_until_started(job, until=world.cap)
        out[k] = -1 if start is None else start
    return NoArrivalCurve(sim.now, world.pred_start, out)


def _record(sim: Simulation, protocol: Protocol) -> NoArrivalCurve:
    return no_arrival_curve(sim, protocol)


NO_ARRIVALS: Recorder[NoArrivalCurve] = Recorder(".noarr.npz", _record, NoArrivalCurve.load)


def runtime_oracle_step(start: np.ndarray, planned_end: int, margin_s: float) -> int:
    """The first step whose no-arrival start plus ``margin_s`` reaches the planned end
    (the last step, the reactive submission, if none does before it). A successor that
    would not start within the window even then (-1) is late: submit."""
    last = len(start) - 1
    head = start[:last]
    hit = np.flatnonzero((head < 0) | (head + margin_s >= planned_end))
    return int(hit[0]) if hit.size else last
