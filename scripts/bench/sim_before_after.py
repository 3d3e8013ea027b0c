"""The simulator's speed before and after a change, measured side by side in one run.

    .venv/bin/python scripts/bench/sim_before_after.py [--base REF] [--rounds 3]
        [--nodes 88] [--probes 200] [--trace PATH]

``--base`` (a git ref; default ``BASE_24``, issue 24's before, else ``main~``) is unpacked
(``git archive``: the ``mirage`` package with its built-in profiles) into a temporary
directory; the working tree is the "after". Each round runs, for both in turn and in
fresh processes (alternating, so that a noisy neighbour hits both alike):

- the full replay of the ls6 trace on ``--nodes`` nodes with the built-in ls6 profile of
  that version (limits included where the version has them): jobs/s;
- the same for the working tree with the ls6 profile's QOS limit (MaxJobsPerUser=8)
  taken out: the before's model, so the engine's own cost apart from the limit's;
- ``--probes`` counterfactual probe samples: the replay warmed up 2 days, then at
  ``--probes`` points over the trace the base simulation is forked (only the fork and its
  run are timed: the base replay is shared by every sample), a 4-node job of 48 h
  injected, and the fork run 2 simulated days (what a training sample costs): ms per probe.
  As mirage.evaluate.probes runs them, without tracking start estimates; ``--estimates``
  tracks them (every pending job's estimate at every backfill pass: the heavier path,
  which the figures of 2026-11-27 and of docs/fidelity.md's first table used).

The best of the rounds is kept for each (the least disturbed), printed with the ratio
after/before. Issue 24's marks: replay >= 10,000 jobs/s; probe cost grows <= 20%.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LS6 = REPO.parent / "shared" / "traces" / "tacc_ls6_a100" / "ls6-a100.log.gz"
BUNDLED = REPO / "traces" / "ls6-a100-slice.log.gz"

# Runs in a fresh interpreter whose sys.path starts with one version's package.
MEASURE = r"""
import json, sys, time
from mirage.profile.schema import load_profile
from mirage.sim import JobSpec, Simulation, from_table
from mirage.trace.readers import load_trace

trace, nodes, probes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
variant, estimates = sys.argv[4], sys.argv[5] == "1"
profile = load_profile("ls6")
if variant == "no-limits":  # the same model as before limits: the engine's own cost
    import dataclasses
    profile = dataclasses.replace(
        profile, qos=(), associations=(),
        partitions=tuple(dataclasses.replace(p, qos="") for p in profile.partitions),
    )
wl = from_table(load_trace(trace).jobs, profile, arrival_scale=1.0, max_nodes=nodes)
jobs = wl.jobs
t0 = time.perf_counter()
sim = Simulation(profile, nodes=nodes, start_time=jobs[0].submit, track_estimates=False)
sim.add_jobs(jobs)
sim.run()
replay = time.perf_counter() - t0

base = Simulation(profile, nodes=nodes, start_time=jobs[0].submit, track_estimates=estimates)
base.add_jobs(jobs)
first, last = jobs[0].submit + 2 * 86400, jobs[-1].submit
points = [first + k * (last - first) // max(1, probes) for k in range(probes)]
probe = 0.0
started = 0
for at in points:
    base.run_until(at)  # the shared base replay: not a probe's cost
    t0 = time.perf_counter()
    fork = base.fork()
    spec = JobSpec(submit=at, run=172800, time_limit=172800, nodes=4, partition=jobs[0].partition)
    job = fork.add_job(spec)
    fork.run_until(at + 2 * 86400)
    probe += time.perf_counter() - t0
    started += fork.view(job).start is not None
print(json.dumps({"jobs": len(jobs), "replay_s": replay, "probe_s": probe,
                  "probes": len(points), "started": started}))
"""


def unpack(ref: str, into: Path) -> str:
    """The ``mirage`` package at ``ref`` under ``into``; returns the commit it names."""
    commit = subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["git", "-C", str(REPO), "rev-parse", "--short", ref],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    blob = subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "mirage"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return commit


def measure(
    root: Path, trace: Path, nodes: int, probes: int, *, variant: str = "", estimates: bool = False
) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(  # noqa: S603 - this interpreter, fixed code
        [
            sys.executable,
            "-c",
            MEASURE,
            str(trace),
            str(nodes),
            str(probes),
            variant,
            "1" if estimates else "0",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


#: Issue 24's "before": main as it was when the work on the simulator began (7f62d2c, the
#: README commit just before it). A commit, not a tag: tags do not travel with a clone.
BASE_24 = "7f62d2c"


def default_base() -> str:
    found = subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["git", "-C", str(REPO), "cat-file", "-e", BASE_24 + "^{commit}"],
        check=False,
        capture_output=True,
        text=True,
    )
    return BASE_24 if found.returncode == 0 else "main~"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--base", default=None, help="git ref of the 'before' (see above)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=88)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--trace", default=None)
    ap.add_argument(
        "--estimates",
        action="store_true",
        help="probes track every pending job's start estimate (default: off, as "
        "mirage.evaluate.probes runs them)",
    )
    args = ap.parse_args()
    trace = Path(args.trace) if args.trace else (LS6 if LS6.exists() else BUNDLED)
    with tempfile.TemporaryDirectory(prefix="mirage-before-") as tmp:
        base_dir = Path(tmp)
        commit = unpack(args.base or default_base(), base_dir)
        sides = {
            f"before ({commit})": (base_dir, ""),
            "after (working tree)": (REPO, ""),
            "after, no QOS limit": (REPO, "no-limits"),
        }
        best: dict[str, dict[str, float]] = {}
        for k in range(args.rounds):
            for label, (root, variant) in sides.items():
                r = measure(
                    root, trace, args.nodes, args.probes, variant=variant, estimates=args.estimates
                )
                print(
                    f"round {k + 1} {label:<24} replay {r['jobs'] / r['replay_s']:8.0f} jobs/s  "
                    f"probe {1000 * r['probe_s'] / r['probes']:7.1f} ms",
                    flush=True,
                )
                old = best.get(label)
                best[label] = {
                    **r,
                    "replay_s": min(r["replay_s"], old["replay_s"] if old else r["replay_s"]),
                    "probe_s": min(r["probe_s"], old["probe_s"] if old else r["probe_s"]),
                }
    print(f"\ntrace {trace.name}, {args.nodes} nodes, best of {args.rounds} rounds")
    print(f"{'':<26} {'jobs':>7} {'replay jobs/s':>14} {'ms/probe':>9} {'probes started':>15}")
    for label, r in best.items():
        print(
            f"{label:<26} {r['jobs']:7.0f} {r['jobs'] / r['replay_s']:14.0f} "
            f"{1000 * r['probe_s'] / r['probes']:9.1f} {r['started']:>9.0f}/{r['probes']:.0f}"
        )
    (before, after, same_model) = best.values()
    print(
        f"after/before: replay speed x{before['replay_s'] / after['replay_s']:.2f}, "
        f"probe cost x{after['probe_s'] / before['probe_s']:.2f} "
        "(marks: replay >= 10,000 jobs/s; probe cost <= x1.20)"
    )
    print(
        "after without ls6's QOS limit (the before's model: what the engine's code costs): "
        f"replay speed x{before['replay_s'] / same_model['replay_s']:.2f}, "
        f"probe cost x{same_model['probe_s'] / before['probe_s']:.2f}"
    )


if __name__ == "__main__":
    main()
