"""`mirage train --cluster ls6 --policy all` from a cold probe cache (target: 30 minutes).

    .venv/bin/python scripts/bench/train_cost.py [--jobs 2] [--cluster ls6] [--no-sequential]

1. Runs ``mirage train --cluster CLUSTER --policy all --jobs N`` in a fresh probe cache and
   models folder: the whole cost an admin pays the first time (replaying the trace,
   probing every training and tuning sample, fitting the four policies side by side).
2. Then, on the now warm cache, the same command with ``--jobs 1``: the fits one after
   the other. Side by side with a warm ``--jobs N`` rerun, this is what fitting in
   parallel saves; and the models of all runs must be the same (same seed, same model,
   whatever ``--jobs``): the forecasters' files byte for byte, the agents' weights.

Needs ../shared/traces (the full ls6 trace). Prints wall times, the ratio to the target
and PASS/FAIL; about 50 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.learn.artifacts import POLICIES

REPO = Path(__file__).resolve().parents[2]
TARGET_S = 30 * 60


def train(cluster: str, jobs: int, cache: Path, models: Path) -> tuple[float, dict[str, float]]:
    """Wall seconds of one ``mirage train`` and each policy's fit seconds."""
    argv = [str(REPO / ".venv" / "bin" / "mirage"), "train", "--cluster", cluster, "--policy",
            "all", "--jobs", str(jobs), "--cache", str(cache), "--models", str(models),
            "--json"]  # fmt: skip
    t0 = time.perf_counter()
    # the command as an admin runs it (the package's own chokepoint is for Slurm's tools)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"mirage train failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return wall, {k: float(v["fit_s"]) for k, v in out["policies"].items()}


def model_bytes(folder: Path, kind: str) -> bytes:
    """What must not change between runs: the model file, or the agents' weights."""
    path = next(p for p in (folder / kind).iterdir() if p.name.startswith("model"))
    if path.suffix == ".zip":  # SB3's archive also holds reprs with memory addresses
        with zipfile.ZipFile(path) as z:
            return z.read("policy.pth")
    return path.read_bytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="ls6")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-sequential", action="store_true", help="Skip the warm reruns.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mirage-train-cost-") as tmp:
        cache, root = Path(tmp) / "cache", Path(tmp) / "models"
        cold, fits = train(args.cluster, args.jobs, cache, root / "cold")
        verdict = "PASS" if cold <= TARGET_S else "FAIL"
        print(f"cold cache, --jobs {args.jobs}: {cold:.0f} s ({cold / 60:.1f} min), "
              f"{cold / TARGET_S:.2f} of the 30-minute target: {verdict}")  # fmt: skip
        print("  fit s: " + ", ".join(f"{k} {v:.0f}" for k, v in fits.items()))
        if args.no_sequential:
            return
        runs = {f"--jobs {args.jobs}": args.jobs, "--jobs 1": 1}
        walls = {}
        for name, jobs in runs.items():
            walls[name], fits = train(args.cluster, jobs, cache, root / f"warm{jobs}")
            print(f"warm cache, {name}: {walls[name]:.0f} s; fit s: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in fits.items()))  # fmt: skip
        ratio = walls["--jobs 1"] / walls[f"--jobs {args.jobs}"]
        print(f"fits side by side: {ratio:.2f} times as fast as one after the other (warm)")
        names = ["cold", *(f"warm{j}" for j in runs.values())]
        folders = [root / name / args.cluster for name in names]
        same = all(len({model_bytes(f, k) for f in folders}) == 1 for k in POLICIES)
        print(f"models the same in all three runs: {same}")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
