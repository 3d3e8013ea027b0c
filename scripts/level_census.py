"""Which samples of a split are quiet, without probing them all? Then probe those.

    .venv/bin/python scripts/level_census.py cerit [--profile P] [--load 1]
        [--split test] [--every-h 4] [--step-min 30] [--cache out/probe-cache]
        [--jobs 2] [--record low] [--check 4]

A busy month holds few quiet samples at a spacing its deep probes can afford (CERIT's
February: none at 12 h), and a choice blind to quiet days can harm every one of them
(:data:`mirage.evaluate.shipping.SELECT_MIN_N`). This finds them at a denser spacing and
probes only those; ``scripts/select_shipped.py --every-h H --cached-only`` then judges the
quiet level from them (docs/evaluation.md, CERIT).

A level (:func:`mirage.evaluate.stats.load_levels`) is fixed by the sample's reactive gap:
how long the successor waits when it is submitted at the predecessor's planned end. That
is one fork of the probe's 97 (its last step): on CERIT the census of the 101 samples of
March at a 4 h spacing not probed yet took 11 minutes on 2 cores, where one deep probe
takes up to 40 minutes on one. This records it for each sample not probed yet
(``<t>.reactive-v1.npz`` beside the probes, same setting key: the sample spacing is not
part of it), reads it from the probes already cached, and prints how many samples fall in
each level. As a check it also records it for ``--check`` of the probed samples: the probe's
last step is the same fork, so the gaps must be equal.

``--record LEVEL`` then records, for every sample of that level not cached yet, what
``mirage evaluate --cached-only`` reads: the probe, the queue features and the look-ahead
curve. The level's report from ``mirage evaluate --every-h H --cached-only`` then holds
every sample of that level at that spacing; the other levels hold only what was cached
before, so only that level's rows are complete.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mirage.evaluate import probes
from mirage.evaluate.features import FEATURES
from mirage.evaluate.harness import HOUR
from mirage.evaluate.inputs import default_profile, default_trace, protocol_from, read_inputs
from mirage.evaluate.lookahead import lookahead_recorder
from mirage.evaluate.probes import PROBES, Recorder, StepRecord, base_world, record_all
from mirage.evaluate.protocol import (
    Protocol,
    Setting,
    default_splits,
    sample_times,
    scaled_nodes,
    spread,
)
from mirage.evaluate.stats import load_levels
from mirage.sim.engine import Simulation


@dataclass
class ReactiveGap(StepRecord):
    """The successor's start when submitted at the planned end (array of one; -1: the
    sample is unusable), and the planned end, for the gap."""

    FIELD = "start_end"
    start_end: np.ndarray  # int64 (2,): successor start, planned end


def reactive_gap(sim: Simulation, protocol: Protocol) -> ReactiveGap:
    """The probe's last fork alone (:func:`mirage.evaluate.probes.probe_sample`)."""
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


LEVELS = ("low", "medium", "heavy")
CENSUS: Recorder[ReactiveGap] = Recorder(".reactive-v1.npz", reactive_gap, _load)


def setting_for(args: argparse.Namespace) -> tuple[Setting, list[int]]:
    opts = {"nodes": 1, "gpus": 0, "time_limit_h": 48.0, "step_min": args.step_min,
            "window_h": 120.0, "warmup_h": 48.0, "alpha": 0.5}  # fmt: skip
    protocol = protocol_from(opts, every_s=round(args.every_h * HOUR))
    trace = default_trace(args.cluster)
    if trace is None:
        raise SystemExit(f"no {args.cluster} trace found")
    prof_name = args.profile or default_profile(args.cluster)
    prof, df = read_inputs(trace, prof_name)
    part = prof.partition(protocol.partition)
    assert part.nodes is not None
    first, last = int(df["submit"].min()), int(df["submit"].max())
    split = default_splits(args.cluster, prof.timezone, first, last)[args.split]
    setting = Setting(trace, prof_name, scaled_nodes(part.nodes, args.load), args.load, split,
                      protocol)  # fmt: skip
    return setting, sample_times(split, protocol, first)


def progress(what: str, t0: float) -> probes.Progress:
    return lambda done, n: print(f"  {what} {done}/{n} ({time.time() - t0:.0f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cluster")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--split", default="test")
    ap.add_argument("--every-h", type=float, default=4.0)
    ap.add_argument("--step-min", type=float, default=30.0)
    ap.add_argument("--cache", default="out/probe-cache")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--record", choices=LEVELS, default=None)
    ap.add_argument(
        "--check",
        type=int,
        default=4,
        help="also census this many probed samples, to check it against them",
    )
    args = ap.parse_args()
    setting, times = setting_for(args)
    print(f"{args.cluster} {args.split} split, load {args.load:g}: {len(times)} samples every "
          f"{args.every_h:g} h")  # fmt: skip
    probed = [t for t in times if probes.is_cached(args.cache, setting, t, PROBES)]
    checked = spread(probed, args.check)
    todo = sorted(set(times) - set(probed) | set(checked))
    print(f"census (one fork each) of {len(todo)}: the {len(times) - len(probed)} not probed "
          f"yet and {len(checked)} probed ones, as a check")  # fmt: skip
    t0 = time.time()
    census = record_all(setting, todo, CENSUS, cache=args.cache, n_jobs=args.jobs,
                        progress=progress("census", t0))  # fmt: skip
    gaps = {c.t: gap_of(c) for c in census}
    check(setting, gaps, checked, args.cache)
    for t in probed:
        gaps[t] = probe_gap(setting, t, args.cache)
    usable = [t for t in times if gaps[t] is not None]
    level = dict(zip(usable, load_levels(np.array([gaps[t] for t in usable])), strict=True))
    counts = ", ".join(f"{lv} {sum(v == lv for v in level.values())}" for lv in LEVELS)
    print(f"{len(usable)} usable: {counts}")
    if args.record:
        pick = [t for t in usable if level[t] == args.record]
        print(f"recording the {len(pick)} {args.record} samples (cached ones are read back):")
        recs: list[Recorder[Any]] = [PROBES, FEATURES, lookahead_recorder("median", 1)]
        for rec in recs:
            t1 = time.time()
            record_all(setting, pick, rec, cache=args.cache, n_jobs=args.jobs,
                       progress=progress(rec.suffix, t1))  # fmt: skip


def gap_of(c: ReactiveGap) -> int | None:
    return None if c.pred_start < 0 else max(0, int(c.start_end[0] - c.start_end[1]))


def probe_gap(setting: Setting, t: int, cache: str) -> int | None:
    s = PROBES.load(Path(cache) / setting.key() / f"{t}{PROBES.suffix}")
    return max(0, int(s.succ_start[-1]) - s.planned_end) if s.ok else None


def check(setting: Setting, gaps: dict[int, int | None], checked: list[int], cache: str) -> None:
    """The census gap equals the cached probe's last step (the same fork)."""
    differ = [t for t in checked if gaps[t] != probe_gap(setting, t, cache)]
    for t in differ:
        print(f"  census differs from the probe at t={t}: {gaps[t]} against "
              f"{probe_gap(setting, t, cache)}")  # fmt: skip
    print(f"check against {len(checked)} cached probes: {len(checked) - len(differ)} equal")


if __name__ == "__main__":
    main()
