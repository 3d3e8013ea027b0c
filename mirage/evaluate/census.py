"""A split's quiet samples, found without probing them all.

A sample's level (:func:`mirage.evaluate.stats.load_levels`) is fixed by its reactive gap:
how long the successor waits when it is submitted at the predecessor's planned end. That
is one fork of its probe (:func:`mirage.evaluate.probes.probe_sample`, the last step), so
a census of every sample of a split costs a small part of their probes: on CERIT's March,
the 101 samples at a 4 h spacing not probed yet took 11 minutes on 2 cores, where one deep
probe takes up to 40 minutes on one.

A busy month holds few quiet samples at the spacing its deep probes can afford (CERIT's
February: none at 12 h), and a choice blind to them can harm every quiet day of the month
after (:data:`mirage.evaluate.shipping.SELECT_MIN_N`). :func:`quiet_times` finds them at a
denser spacing, so that only they are probed (``mirage train --quiet-every-h``,
``scripts/level_census.py``). Each census is cached beside the probes
(``<t>.reactive-v1.npz``, same setting key: the spacing is not part of it); a sample whose
probe is cached is read from the probe instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from mirage.evaluate.probes import (
    PROBES,
    Progress,
    Recorder,
    SampleResult,
    StepRecord,
    base_world,
    is_cached,
    record_all,
)
from mirage.evaluate.protocol import Protocol, Setting
from mirage.evaluate.stats import load_levels
from mirage.sim.engine import Simulation


@dataclass
class ReactiveGap(StepRecord):
    """The successor's start when submitted at the planned end, and that end (-1, -1 and
    ``pred_start`` -1: the sample is unusable)."""

    FIELD = "start_end"
    start_end: np.ndarray  # int64 (2,)

    @property
    def gap(self) -> int | None:
        """The reactive gap (s); None when the sample is unusable."""
        return None if self.pred_start < 0 else max(0, int(self.start_end[0] - self.start_end[1]))


def reactive_gap(sim: Simulation, protocol: Protocol) -> ReactiveGap:
    """The probe's last fork alone, for the sample at ``sim.now`` (``sim`` unchanged)."""
    world = base_world(sim, protocol)
    if world is None:
        return ReactiveGap(sim.now, -1, np.array([-1, -1], np.int64))
    base, end = world.sim, world.steps[-1]
    base.run_until(end)
    fork = base.fork()
    job = fork.add_job(replace(world.spec, submit=end, name="succ"))
    start = fork.run_until_started(job, until=world.cap)
    start = world.cap if start is None else start
    return ReactiveGap(sim.now, world.pred_start, np.array([start, end], np.int64))


def _load(path: Path) -> ReactiveGap:
    return ReactiveGap.load(path)


CENSUS: Recorder[ReactiveGap] = Recorder(".reactive-v1.npz", reactive_gap, _load)


def probe_gap(sample: SampleResult) -> int | None:
    """The reactive gap a probe recorded (its last step); None when it is unusable."""
    if not sample.ok:
        return None
    return max(0, int(sample.succ_start[-1]) - sample.planned_end)


def gaps(
    setting: Setting,
    times: list[int],
    *,
    cache: str | None,
    n_jobs: int = 1,
    progress: Progress | None = None,
) -> dict[int, int | None]:
    """Each sample's reactive gap: from its probe where one is cached, else a census."""
    probed = [t for t in times if cache is not None and is_cached(cache, setting, t, PROBES)]
    out: dict[int, int | None] = {}
    if probed:
        for s in record_all(setting, probed, PROBES, cache=cache):
            out[s.t] = probe_gap(s)
    todo = [t for t in times if t not in out]
    for c in record_all(setting, todo, CENSUS, cache=cache, n_jobs=n_jobs, progress=progress):
        out[c.t] = c.gap
    return out


def quiet_times(
    setting: Setting,
    times: list[int],
    *,
    cache: str | None,
    n_jobs: int = 1,
    progress: Progress | None = None,
) -> list[int]:
    """The times of ``times`` whose sample is usable and at the low level."""
    found = gaps(setting, times, cache=cache, n_jobs=n_jobs, progress=progress)
    usable = [t for t in times if found[t] is not None]
    level = load_levels(np.array([found[t] for t in usable], np.int64))
    return [t for t, lv in zip(usable, level, strict=True) if lv == "low"]
