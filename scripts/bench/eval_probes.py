"""Probe generation throughput: samples per second, serial vs joblib processes.

    .venv/bin/python scripts/bench/eval_probes.py [--trace PATH] [--profile P]
        [--samples 8] [--jobs 2]

Probes the first ``--samples`` samples of ls6's test split (Mirage's protocol: 1 node,
48 h, 10-minute steps) once serially and once with ``--jobs`` processes, without a cache,
and checks that both give the same outcome curves.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.evaluate.probes import generate
from mirage.evaluate.protocol import Setting, default_splits, sample_times

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--trace", default=str(REPO.parent / "shared/traces/tacc_ls6_a100/ls6-a100.log.gz")
    )
    ap.add_argument("--profile", default=str(REPO / "models/ls6/profile.toml"))
    ap.add_argument("--nodes", type=int, default=79)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    split = default_splits("ls6", "America/Chicago", 0, 0)["test"]
    setting = Setting(args.trace, args.profile, args.nodes, 1.0, split)
    times = sample_times(split, setting.protocol, 0)[: args.samples]
    t0 = time.perf_counter()
    serial = generate(setting, times, n_jobs=1, tasks=1)
    t_serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    par = generate(setting, times, n_jobs=args.jobs)
    t_par = time.perf_counter() - t0
    same = all(np.array_equal(a.succ_start, b.succ_start) for a, b in zip(serial, par, strict=True))
    steps = sum(len(r.steps) for r in serial)
    print(f"{len(times)} samples, {steps} probe steps (2 forks each)")
    print(f"serial:        {t_serial:7.1f} s ({t_serial / len(times):.2f} s/sample, incl. replay)")
    print(f"{args.jobs} processes:   {t_par:7.1f} s ({t_par / len(times):.2f} s/sample)")
    print(f"same curves: {same}")


if __name__ == "__main__":
    main()
