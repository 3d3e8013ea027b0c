"""How close to the hindsight-best shape planners with more information get, scored on the
first shape of each decision point from the pairs of ``plan-wait-pairs.py``.

    python experiments/plan-wait-pairs.py --cluster cerit --every-h 6 \
        --test-split 2013-01-29T23:23:04:2013-02-28T23:23:04 --out out/plans/pairs-feb6.csv
    python experiments/plan-wait-pairs.py --cluster cerit --every-h 6 --out out/plans/pairs-mar.csv
    python experiments/plan-wait-ceiling.py out/plans/pairs-feb6.csv out/plans/pairs-mar.csv

For each of: the planner by predicted runs, by limits, by true runs (what no live
planner knows), and each of those calibrated with alphas chosen on the first file
(mirage.plan.calibrate.fit, as ``--plan-fit`` chooses them), it prints the mean true
completion of the first shape picked over the mean of the best in hindsight, minus one,
on every file; and, as the ceiling of calibrations of this form, each file scored with
alphas fitted on itself from a finer grid (0 to 1 by 1/8). No re-planning: ``mirage
evaluate --plans`` measures that.
"""

from __future__ import annotations

import sys

import pandas as pd

from mirage.plan.calibrate import WaitCalibration, WaitPairs, fit, picked_mean_s

#: The in-sample fit's alphas: 0 to 1 by 1/8.
FINE = tuple(k / 8 for k in range(9))


def pairs(d: pd.DataFrame, first: str) -> WaitPairs:
    width = d.nodes * d.cpn / 80  # CERIT's 80-CPU nodes
    return WaitPairs(
        sample=pd.factorize(d.t)[0], widths=width.to_numpy(float),
        segments=d.segments.to_numpy(float), runs_s=d.run.to_numpy(float),
        by_runs_s=d[first].to_numpy(float), by_limits_s=d.first_limits.to_numpy(float),
        true_done_s=(d.done - d.t).to_numpy(float),
    )  # fmt: skip


def vs_best(d: pd.DataFrame, p: WaitPairs, cal: WaitCalibration) -> float:
    best = (d.groupby("t").done.min() - d.groupby("t").t.first()).mean()
    return picked_mean_s(cal, p) / best - 1


def main() -> None:
    files = sys.argv[1:]
    frames = [pd.read_csv(f) for f in files]
    zero, one = (WaitCalibration((0.125, 0.25, 0.5, 1, 2), (a,) * 6) for a in (0.0, 1.0))
    for label, first in (("predicted runs", "first"), ("true runs", "first_true")):
        fitted = fit(pairs(frames[0], first))
        rows = {
            f"by {label}": zero,
            f"by {label}, calibrated {fitted.alpha}": fitted,
        }
        if first == "first":
            rows["by limits"] = one
        for name, cal in rows.items():
            cells = [f"{f}: {vs_best(d, pairs(d, first), cal):+.0%}"
                     for f, d in zip(files, frames, strict=True)]  # fmt: skip
            print(f"{name:60s} {'  '.join(cells)}")
        # the family's ceiling: each file scored with alphas fitted on itself, on a finer
        # grid (what no calibration chosen beforehand can beat on that file)
        cells = []
        for f, d in zip(files, frames, strict=True):
            own = fit(pairs(d, first), levels=FINE)
            cells.append(f"{f}: {vs_best(d, pairs(d, first), own):+.0%} {own.alpha}")
        print(f"{f'by {label}, calibrated on the file itself':60s} {'  '.join(cells)}")


if __name__ == "__main__":
    main()
