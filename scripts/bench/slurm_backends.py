"""The CLI and pyslurm backends side by side on a real cluster: wall, CPU, slurmctld RPCs.

    .venv/bin/python scripts/bench/slurm_backends.py [--jobs 100,1000,10000] [--repeat 5]
        [--partition P] [--json]

Needs the Slurm test cluster to itself (scripts/slurm-testbed/start.sh; its MaxJobCount
leaves room for 10,000 queued jobs) and pyslurm built into the environment
(scripts/build-pyslurm.sh). For each job count it submits that many held single jobs
(``sbatch --hold``; an array's pending tasks stay one record, so ``--array``, one array,
is only a smoke test), then times ``--repeat`` calls of each backend, and cancels them.

Backends: ``cli`` (squeue/sacct), ``pyslurm`` (in this process: the C API's own cost) and
``pyslurm-worker`` (what the daemon runs: pyslurm in a child process,
mirage/slurm/worker.py; the records cross a pipe). Calls: ``queue``, ``start_estimates``,
``accounting`` over the last hour (plain, ``sacct -S -E``), and ``poll``: the daemon's
one poll, ``queue()`` then ``accounting(since, every_state=True)`` (selection by state is
sacct's alone, so pyslurm's poll reads accounting through sacct too).

Per call: wall seconds (best of ``--repeat``), CPU seconds of this process, its finished
children (the CLI's commands) and the worker child, and slurmctld's RPC counts by type
from ``sdiag`` before and after (``sdiag -r`` is not used: it resets the counters for
everyone).
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
from mirage.slurm.pyslurm_backend import (
    PyslurmClient,
    check_pyslurm,
    load_pyslurm,
    open_pyslurm_client,
)
from mirage.slurm.types import SubmitRequest
from mirage.slurm.worker import ProcessClient

_RPC_LINE = re.compile(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", re.MULTILINE)


def rpc_counts() -> dict[str, int]:
    """slurmctld's RPC counts by message type (``sdiag``'s per-type section)."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    section = out.partition("by message type")[2].partition("by user")[0]
    return {m.group(1): int(m.group(2)) for m in _RPC_LINE.finditer(section)}


def cpu_s(worker_pid: int | None = None) -> float:
    """CPU seconds of this process, its waited-for children and the live worker child
    (a child is counted in RUSAGE_CHILDREN only once it has exited)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    if worker_pid is not None:
        fields = Path(f"/proc/{worker_pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(
    call: Callable[[], Any], repeat: int, worker: Callable[[], int | None]
) -> dict[str, Any]:
    call()  # a worker's child starts on its first call: not timed
    before = rpc_counts()
    walls, cpus = [], []
    for _ in range(repeat):
        c0, w0 = cpu_s(worker()), time.perf_counter()
        call()
        walls.append(time.perf_counter() - w0)
        cpus.append(cpu_s(worker()) - c0)
    after = rpc_counts()
    # the untimed first call is outside before/after; sdiag's own reads are left out below
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


def worker_pid(client: SlurmClient) -> Callable[[], int | None]:
    def pid() -> int | None:
        proc = client._proc if isinstance(client, ProcessClient) else None
        return int(proc.pid) if proc is not None else None

    return pid


def calls(client: SlurmClient, since: int) -> dict[str, Callable[[], Any]]:
    def poll() -> None:
        client.queue()
        client.accounting(since, every_state=True)

    return {
        "queue": client.queue,
        "start_estimates": client.start_estimates,
        "accounting": lambda: client.accounting(since),
        "poll": poll,
    }


def table(rows: list[dict[str, Any]], backends: list[str]) -> str:
    """One line per (jobs, call), the backends side by side, and pyslurm-worker / cli."""
    head = f"{'jobs':>6} {'call':<16}" + "".join(f" {b + ' wall/cpu s':>24}" for b in backends)
    lines = [head + "   worker/cli wall   RPCs per call (cli | pyslurm)"]
    keys = sorted({(r["jobs"], r["call"]) for r in rows}, key=lambda k: (k[0], k[1]))
    by = {(r["jobs"], r["call"], r["backend"]): r for r in rows}
    for n, call in keys:
        cells = []
        for b in backends:
            r = by[(n, call, b)]
            cells.append(f" {r['wall_s']:>11.3f} / {r['cpu_s']:>8.3f}")
        ratio = by[(n, call, "pyslurm-worker")]["wall_s"] / max(
            by[(n, call, "cli")]["wall_s"], 1e-9
        )
        rpc = " | ".join(_rpcs(by[(n, call, b)]["rpcs_per_call"]) for b in ("cli", "pyslurm"))
        lines.append(f"{n:>6} {call:<16}" + "".join(cells) + f"   {ratio:>15.2f}   {rpc}")
    return "\n".join(lines)


def _rpcs(counts: dict[str, float]) -> str:
    short = {k.removeprefix("REQUEST_"): v for k, v in counts.items()}
    return ", ".join(f"{k} {v:g}" for k, v in sorted(short.items())) or "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--partition", default=None)
    ap.add_argument("--array", action="store_true", help="one array of N (smoke test)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cli = CliSlurmClient(timeout=120.0)
    module = load_pyslurm()
    version = check_pyslurm(module, cli)
    backends: dict[str, SlurmClient] = {
        "cli": cli,
        "pyslurm": PyslurmClient(cli, module=module, slurm_version=version),
        "pyslurm-worker": open_pyslurm_client(cli),
    }
    results: list[dict[str, Any]] = []
    for n in (int(x) for x in args.jobs.split(",")):
        t0 = time.perf_counter()
        ids = submit_held(cli, n, args.partition, args.array)
        print(f"{n} held jobs submitted in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        try:
            since = int(time.time()) - 3600
            for name, client in backends.items():
                for what, call in calls(client, since).items():
                    row = {"jobs": n, "backend": name, "call": what}
                    row.update(measure(call, args.repeat, worker_pid(client)))
                    results.append(row)
                    print(f"  {n} {name} {what}: {row['wall_s']:.3f} s", file=sys.stderr)
        finally:
            cli.cancel(ids)
    if args.json:
        print(json.dumps({"slurm": version, "pid": os.getpid(), "results": results}, indent=1))
    else:
        print(f"Slurm {version}; best of {args.repeat} calls; CPU = this process + children")
        print(table(results, list(backends)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
