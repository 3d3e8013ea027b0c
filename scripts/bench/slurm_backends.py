"""The CLI and pyslurm backends side by side on a real cluster: wall, CPU, slurmctld RPCs.

    .venv/bin/python scripts/bench/slurm_backends.py [--jobs 100,1000,10000] [--repeat 5]
        [--partition P] [--json]

NOT RUN YET (issue 29): it needs the Slurm test cluster to itself, and pyslurm built into
the environment (scripts/build-pyslurm.sh). For each job count it submits that many held
single jobs (``sbatch --hold``; an array's pending tasks would stay one record, so
``--array`` submitting one array is only a smoke test), then times ``--repeat`` calls of
each backend's ``queue()`` and ``start_estimates()``, and ``accounting()`` over the last
hour, and cancels the jobs. Per call: wall seconds, this process's CPU seconds plus its
children's (the CLI's squeue/sacct), and slurmctld's RPC counts by type from ``sdiag``
before and after (``REQUEST_JOB_INFO`` for a queue read; ``sdiag -r`` is not used: it
resets the counters for everyone).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.client import SlurmClient
from mirage.slurm.pyslurm_backend import PyslurmClient, check_pyslurm, load_pyslurm
from mirage.slurm.types import SubmitRequest

_RPC_LINE = re.compile(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", re.MULTILINE)


def rpc_counts() -> dict[str, int]:
    """slurmctld's RPC counts by message type (``sdiag``'s per-type section)."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    return {m.group(1): int(m.group(2)) for m in _RPC_LINE.finditer(out)}


def cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(call: Callable[[], Any], repeat: int) -> dict[str, Any]:
    before = rpc_counts()
    walls, cpus = [], []
    for _ in range(repeat):
        c0, w0 = cpu_s(), time.perf_counter()
        call()
        walls.append(time.perf_counter() - w0)
        cpus.append(cpu_s() - c0)
    after = rpc_counts()
    rpcs = {k: (after.get(k, 0) - before.get(k, 0)) for k in after}
    return {
        "wall_s": min(walls),
        "wall_s_median": sorted(walls)[len(walls) // 2],
        "cpu_s": min(cpus),
        # sdiag itself costs one REQUEST_STATS_INFO per reading
        "rpcs_per_call": {k: v / repeat for k, v in rpcs.items() if v and "STATS" not in k},
    }


def submit_held(cli: CliSlurmClient, n: int, partition: str | None, array: bool) -> list[str]:
    script = b"#!/bin/sh\nsleep 60\n"
    if array:
        req = SubmitRequest(
            script=script, job_name="bench", hold=True, time_limit=60, partition=partition,
            extra_args=(f"--array=0-{n - 1}",),
        )  # fmt: skip
        return [cli.submit(req)]
    req = SubmitRequest(script=script, job_name="bench", hold=True, time_limit=60,
                        partition=partition)  # fmt: skip
    return [cli.submit(req) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--partition", default=None)
    ap.add_argument("--array", action="store_true", help="one array of N (smoke test)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cli = CliSlurmClient()
    module = load_pyslurm()
    version = check_pyslurm(module, cli)
    backends: dict[str, SlurmClient] = {
        "cli": cli,
        "pyslurm": PyslurmClient(cli, module=module, slurm_version=version),
    }
    results: list[dict[str, Any]] = []
    for n in (int(x) for x in args.jobs.split(",")):
        ids = submit_held(cli, n, args.partition, args.array)
        try:
            since = int(time.time()) - 3600
            for name, client in backends.items():
                for what, call in (
                    ("queue", client.queue),
                    ("start_estimates", client.start_estimates),
                    ("accounting", lambda c=client, t=since: c.accounting(t)),
                ):
                    row = {"jobs": n, "backend": name, "call": what}
                    row.update(measure(call, args.repeat))
                    results.append(row)
                    if not args.json:
                        print(
                            f"{n:>6} {name:<8} {what:<16} wall {row['wall_s']:.3f}s "
                            f"cpu {row['cpu_s']:.3f}s rpcs {row['rpcs_per_call']}"
                        )
        finally:
            cli.cancel(ids)
    if args.json:
        print(json.dumps({"slurm": version, "pid": os.getpid(), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
