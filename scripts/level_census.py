"""Which samples of a split are quiet, without probing them all? Then probe those.

    .venv/bin/python scripts/level_census.py cerit [--profile P] [--load 1]
        [--split test] [--every-h 4] [--step-min 30] [--cache out/probe-cache]
        [--jobs 2] [--record low] [--check 4]

A busy month holds few quiet samples at a spacing its deep probes can afford (CERIT's
February: none at 12 h), and a choice blind to quiet days can harm every one of them
(:data:`mirage.evaluate.shipping.SELECT_MIN_N`). This finds them at a denser spacing and
probes only those; ``scripts/select_shipped.py --every-h H --cached-only`` then judges the
quiet level from them (docs/evaluation.md, CERIT).

The census (:mod:`mirage.evaluate.census`) is one fork per sample, the probe's last: it
reads the probes already cached, records the others (``<t>.reactive-v1.npz`` beside the
probes), and this prints how many samples fall in each level. As a check it also records
it for ``--check`` of the probed samples: the probe's last step is the same fork, so the
gaps must be equal. ``mirage train --quiet-every-h H`` runs the same census and probes for
the shipped choice.

``--record LEVEL`` then records, for every sample of that level not cached yet, what
``mirage evaluate --cached-only`` reads: the probe, the queue features and the look-ahead
curve. The level's report from ``mirage evaluate --every-h H --cached-only`` then holds
every sample of that level at that spacing; the other levels hold only what was cached
before, so only that level's rows are complete.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from mirage.evaluate import probes
from mirage.evaluate.census import CENSUS, gaps, probe_gap
from mirage.evaluate.features import FEATURES
from mirage.evaluate.harness import HOUR
from mirage.evaluate.inputs import default_profile, default_trace, protocol_from, read_inputs
from mirage.evaluate.lookahead import lookahead_recorder
from mirage.evaluate.probes import PROBES, Recorder, record_all
from mirage.evaluate.protocol import (
    Setting,
    default_splits,
    sample_times,
    scaled_nodes,
    spread,
)
from mirage.evaluate.stats import load_levels

LEVELS = ("low", "medium", "heavy")


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
    ap.add_argument("--check", type=int, default=4, help="probed samples to check it on")
    args = ap.parse_args()
    setting, times = setting_for(args)
    print(f"{args.cluster} {args.split} split, load {args.load:g}: {len(times)} samples every "
          f"{args.every_h:g} h")  # fmt: skip
    t0 = time.time()
    found = gaps(setting, times, cache=args.cache, n_jobs=args.jobs,
                 progress=progress("census", t0))  # fmt: skip
    check(setting, times, args.check, args.cache, args.jobs)
    usable = [t for t in times if found[t] is not None]
    level = dict(zip(usable, load_levels(np.array([found[t] for t in usable])), strict=True))
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


def check(setting: Setting, times: list[int], n: int, cache: str, jobs: int) -> None:
    """The census equals the cached probe's last step (the same fork) on ``n`` of them."""
    probed = [t for t in times if probes.is_cached(cache, setting, t, PROBES)]
    picked = spread(probed, n)
    census = {c.t: c.gap for c in record_all(setting, picked, CENSUS, cache=cache, n_jobs=jobs)}
    differ = 0
    for t in picked:
        want = probe_gap(PROBES.load(Path(cache) / setting.key() / f"{t}{PROBES.suffix}"))
        if census[t] != want:
            differ += 1
            print(f"  census differs from the probe at t={t}: {census[t]} against {want}")
    print(f"check against {len(picked)} cached probes: {len(picked) - differ} equal")


if __name__ == "__main__":
    main()
