"""The shipped choice's candidates on ls6 month by month, and the weekly re-choice.

    .venv/bin/python experiments/month-by-month.py months 1,1.05 \
        [--label "qbets 0.9, guard: estimate 24 h" ...]
    .venv/bin/python experiments/month-by-month.py weekly 1,1.05 2022-12-01 2023-04-01 \
        [--label "qbets 0.75, guard: estimate 24 h"]

Both read the cached probes and look-ahead curves of ls6's three splits (training months
November 2022 to January 2023, tuning February, test March; `experiments/guard-frontier.py
ls6 models/ls6/profile.toml 1,1.05 --split train --lookahead` names what is cached)
on the calibrated profile with the per-user limit, and walk every candidate of the
selection grid (:mod:`mirage.evaluate.shipping`) once on all of them.

``months``: per candidate (all, or the ``--label`` ones) and load, the quiet level's paired
upper bound against reactive in each month, and the pooled levels of every month but the
tuning one. ``weekly``: before each week from START to END, the rule of ``mirage train``
(safe on every level of 5 samples or more at every load, upper bound 0; least summed mean
J) on the samples of the 30 days before whose windows are over, as the recalibration timer
does; the choice runs that week. Prints each week's choice, then the test span's levels
for the re-choice, the fixed default and each ``--label``.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np

from mirage.evaluate.harness import HOUR, LOOKAHEAD, Outcomes, Walker, factory, guarded
from mirage.evaluate.protocol import Protocol
from mirage.evaluate.shipping import (
    GRID,
    SAFE_BOUND_H,
    SELECT_MIN_N,
    Candidate,
    guards,
    inner_submits,
)
from mirage.evaluate.stats import Gain, gains
from mirage.policy.cost import HELD_TWICE, CostModel
from mirage.profile.schema import load_profile
from mirage.slurm.syntax import parse_when

PROFILE = "models/ls6/profile.toml"
TZ = "America/Chicago"
DEFAULT = "qbets 0.9, guard: estimate 24 h"
MONTHS = ("2022-11-01", "2022-12-01", "2023-01-01", "2023-02-01", "2023-03-01", "2023-04-01")
TUNING = "2023-02-01"
DAY = 86400


def select_shipped() -> Any:
    """scripts/select_shipped.py (its tuning_walker builds a split's walker)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "select_shipped.py"
    spec = importlib.util.spec_from_file_location("select_shipped", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Load:
    """One load's samples over the three splits, reactive, the oracle and every candidate."""

    def __init__(self, load: float, cost_model: CostModel) -> None:
        opts = argparse.Namespace(trace=None, step_min=10, every_h=4, cached_only=True,
                                  cache="out/probe-cache", jobs=1, no_lookahead=False)  # fmt: skip
        tw = select_shipped().tuning_walker
        parts = [tw("ls6", PROFILE, load, opts, split) for split in ("train", "tune", "test")]
        prof = load_profile(PROFILE)
        w = Walker([s for p in parts for s in p.samples], parts[0].protocol, prof,
                   prof.partition(None).name,
                   lookahead=[c for p in parts for c in p.curves[LOOKAHEAD]])  # fmt: skip
        self.cost_model = cost_model
        self.times = np.array([s.t for s in w.samples])
        self.reactive = w.run(factory("reactive", None))
        self.oracle = w.oracle(cost_model)
        self.cands: dict[str, Outcomes] = {}
        for method, constants in GRID.items():
            for c in constants:
                submits = inner_submits(w, method, c)
                for m, la in guards(True):
                    label = Candidate(method, c, m, la).label()
                    self.cands[label] = guarded(w, submits, _s(m), _s(la))

    def idx(self, lo: int, hi: int, *, over_by: int | None = None) -> list[int]:
        """Samples from lo to hi; with ``over_by``, only those whose window ended by it."""
        keep = (self.times >= lo) & (self.times < hi)
        if over_by is not None:
            keep &= self.times + Protocol().window_s <= over_by
        return [int(i) for i in np.flatnonzero(keep)]

    def levels(self, x: Outcomes, idx: list[int], min_n: int) -> dict[str, Gain]:
        """Per level of those samples (``min_n`` or more), ``x`` against reactive."""
        res = {"reactive": self.reactive.take(idx), "oracle": self.oracle.take(idx),
               "x": x.take(idx)}  # fmt: skip
        return {lv: g.methods["x"] for lv, g in gains(res, self.cost_model, min_n=min_n).items()}


def _s(hours: float | None) -> float | None:
    return None if hours is None else hours * HOUR


def when(day: str) -> int:
    return parse_when(day, TZ)


def months(loads: dict[float, Load], labels: list[str]) -> None:
    for ld, data in loads.items():
        for label in labels or list(data.cands):
            x = data.cands[label]
            cells = []
            for a, b in itertools.pairwise(MONTHS):
                low = data.levels(x, data.idx(when(a), when(b)), SELECT_MIN_N).get("low")
                h = None if low is None else low.harm
                cells.append(f"{a[:7]} -" if h is None else
                             f"{a[:7]} n={h.n} {h.value:+.2f} [{h.hi:+.2f}]")  # fmt: skip
            feb = set(data.idx(when(TUNING), when(MONTHS[4])))
            rest = [i for i in range(data.times.size) if i not in feb]
            per = data.levels(x, rest, 30)
            pooled = "  ".join(f"{lv} n={g.harm.n} {g.share:4.0%} [{g.harm.lo:+.2f}, "
                               f"{g.harm.hi:+.2f}]" for lv, g in per.items())  # fmt: skip
            print(f"load {ld:g} {label:45s} " + "  ".join(cells) + " | not Feb: " + pooled)


def choose(loads: dict[float, Load], start: int, window_s: int) -> str | None:
    """The rule on the samples of ``window_s`` before ``start`` (windows over by then)."""
    best, best_j = None, math.inf
    idx = {ld: d.idx(start - window_s, start, over_by=start) for ld, d in loads.items()}
    for label in next(iter(loads.values())).cands:
        total, safe = 0.0, True
        for ld, d in loads.items():
            x = d.cands[label]
            per = d.levels(x, idx[ld], SELECT_MIN_N)
            if any(lv != "all" and g.harm.hi > SAFE_BOUND_H for lv, g in per.items()):
                safe = False
                break
            total += float(x.take(idx[ld]).cost(d.cost_model).mean()) / HOUR
        if safe and total < best_j:
            best, best_j = label, total
    return best


def weekly(loads: dict[float, Load], start: int, end: int, labels: list[str]) -> None:
    picks: list[tuple[int, int, str | None]] = []
    b = start
    while b < end:
        e = min(b + 7 * DAY, end)
        picks.append((b, e, choose(loads, b, 30 * DAY)))
        print(f"week from {b}: {picks[-1][2] or 'reactive (none safe)'}", flush=True)
        b = e
    for name in ("weekly re-choice", DEFAULT, *labels):
        for ld, d in loads.items():
            parts = [(d.idx(a, z), name if name != "weekly re-choice" else lab)
                     for a, z, lab in picks]  # fmt: skip
            every = [j for i, _ in parts for j in i]
            x = Outcomes.concat([(d.cands[lab] if lab else d.reactive).take(i) for i, lab in parts])
            res = {"reactive": d.reactive.take(every), "oracle": d.oracle.take(every), "x": x}
            cells = "  ".join(
                f"{lv} n={g.methods['x'].harm.n} {g.methods['x'].share:4.0%} "
                f"[{g.methods['x'].harm.lo:+.2f}, {g.methods['x'].harm.hi:+.2f}]"
                for lv, g in gains(res, d.cost_model).items()
            )
            print(f"{name} load {ld:g}: {cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("months", "weekly"))
    ap.add_argument("loads", help="comma-separated load factors (1, 1.05: probed on all splits)")
    ap.add_argument("start", nargs="?", default="2023-03-01")
    ap.add_argument("end", nargs="?", default="2023-04-01")
    ap.add_argument("--label", action="append", default=[], help="a candidate, as labelled")
    args = ap.parse_args()
    cost_model = HELD_TWICE
    loads = {float(x): Load(float(x), cost_model) for x in args.loads.split(",")}
    if args.mode == "months":
        months(loads, args.label)
    else:
        weekly(loads, when(args.start), when(args.end), args.label)


if __name__ == "__main__":
    main()
