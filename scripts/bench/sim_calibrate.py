"""Calibrate the ls6 node count on the trace's months before the evaluation window.

.venv/bin/python scripts/bench/sim_calibrate.py [--trace PATH] [--before 2023-03-01]
    [--nodes-min 40] [--nodes-max 120] [--step 8] [--budget-s 120] [--tune-settings]
    [--no-holds] [--out models/ls6/profile.toml]

Only jobs submitted before --before (America/Chicago) are read into the calibration; March
2023 stays unseen. Prints one line per replay as it finishes, then the table, the chosen
settings and the calibrated profile.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import LS6, REPO

from mirage.profile.schema import load_profile
from mirage.sim.calibrate import (
    SETTINGS_GRID,
    TABLE_HEADER,
    Candidate,
    calibrate,
    calibrated_toml,
    table_rows,
    write_profile,
)
from mirage.slurm.syntax import parse_when
from mirage.trace.readers import load_trace


def fmt(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(LS6))
    ap.add_argument("--profile", default="ls6")
    ap.add_argument("--before", default="2023-03-01")
    ap.add_argument("--nodes-min", type=int, default=40)
    ap.add_argument("--nodes-max", type=int, default=120)
    ap.add_argument("--step", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=120.0, help="wall seconds per replay")
    ap.add_argument("--tune-settings", action="store_true")
    ap.add_argument("--no-holds", action="store_true")
    ap.add_argument("--out", default=None, help="write the calibrated profile here")
    args = ap.parse_args()
    shown = os.path.relpath(Path(args.trace).resolve(), REPO)  # as seen from the repo root
    profile = load_profile(args.profile)
    cutoff = parse_when(args.before, profile.timezone)
    t0 = time.perf_counter()
    df = load_trace(args.trace).jobs
    print(f"trace {shown}: {len(df)} jobs, loaded in {time.perf_counter() - t0:.1f} s")

    def progress(c: Candidate) -> None:
        print("  " + fmt([list(TABLE_HEADER), table_rows([c])[0]])[1], flush=True)

    result = calibrate(
        df,
        profile,
        cutoff,
        nodes_min=args.nodes_min,
        nodes_max=args.nodes_max,
        coarse_step=args.step,
        settings_grid=SETTINGS_GRID if args.tune_settings else (),
        holds=not args.no_holds,
        budget_s=args.budget_s,
        on_candidate=progress,
    )
    h = result.holds
    print(f"\njobs submitted before {args.before} ({profile.timezone}): {result.jobs}, "
          f"compared (after warm-up, before cool-down): {result.measured}")  # fmt: skip
    print(f"dependency holds ({h.source}): {h.chains} chains, {h.held} jobs held "
          f"({h.dependencies} afterany, {h.begin_fallback} begin fallback, {h.reordered} "
          f"reordered), {h.before_open} submitted before the first start; real mean wait "
          f"{h.real_mean_wait_submit_s / 3600:.2f} h from submit -> "
          f"{h.real_mean_wait_eligible_s / 3600:.2f} h from eligible")  # fmt: skip
    print()
    print("\n".join(fmt([list(TABLE_HEADER), *table_rows(result.candidates)])))
    for note in result.notes:
        print(note)
    b = result.best
    print(f"\nchosen: {b.nodes} nodes {b.settings or '(profile settings)'}, KS {b.ks:.3f}; "
          f"calibration took {result.wall_s:.0f} s")  # fmt: skip
    if args.out:
        write_profile(result, args.out, shown, profile.timezone)
        print(f"wrote {args.out}")
    else:
        print()
        print(calibrated_toml(result, shown, profile.timezone), end="")


if __name__ == "__main__":
    main()
