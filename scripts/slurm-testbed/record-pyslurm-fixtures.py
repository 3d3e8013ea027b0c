"""Record what pyslurm 22.5.3 and the CLI give for the same jobs at the same moment, from
the test cluster, into tests/data/slurm/pyslurm/recorded/ (about 1 minute).

    scripts/slurm-testbed/start.sh
    .venv/bin/python scripts/slurm-testbed/record-pyslurm-fixtures.py [OUTDIR]

Needs pyslurm in the environment (scripts/build-pyslurm.sh .venv). Submits its own jobs
as the current user, waits for their states, reads, and cancels them. Every file keeps
only this run's jobs (the cluster holds other tests' jobs too); otherwise each is the
call's output as it came:

- ``job_get.json``: ``pyslurm.job().get()`` (values; JSON keys are text);
- ``squeue.json``: ``squeue --json`` (the ``jobs`` list filtered, the rest as printed);
- ``squeue-start.txt``: ``squeue --start -h -o START_FORMAT`` lines of these jobs;
- ``slurmdb_jobs_get.json``: ``pyslurm.slurmdb_jobs().get(...)`` with the backend's flags;
- ``sacct.json``: ``sacct --json -a -X -S .. -E ..`` (the backend's accounting call);
- ``tres.txt``: ``sacctmgr -P show tres format=Type,Name,ID``;
- ``recording.txt``: when, versions, and which id is which job.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyslurm

from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.parse import START_FORMAT
from mirage.slurm.pyslurm_backend import ACCOUNTING_FLAGS, local_slurm_time
from mirage.slurm.syntax import format_slurm_time
from mirage.slurm.types import JobState, SlurmJob, SubmitRequest

REPO = Path(__file__).resolve().parents[2]
SLEEP = b"#!/bin/sh\nsleep 600\n"


def jobs_to_submit(jobdir: str) -> dict[str, SubmitRequest]:
    """What each recorded job is (its key in recording.txt) and how it is submitted."""

    def req(name: str, **kw: Any) -> SubmitRequest:
        kw.setdefault("script", SLEEP)
        kw.setdefault("time_limit", 600)
        return SubmitRequest(job_name=f"rec-{name}", chdir=jobdir, **kw)

    return {
        "gpu-running": req("gpu", gres="gpu:2", comment="mirage:mgrecorded00000001"),
        "held-odd-name": req("é ü|x", hold=True, comment="mirage:odd|comment, with spaces é"),
        "array-throttled": req("array", gres="gpu:1", extra_args=("--array=0-5%2",)),
        "never-eligible": req("never", hold=True, time_limit=60),
        "failed-exit-3": req("fail", script=b"#!/bin/sh\nexit 3\n", time_limit=60),
        "completed": req("done", script=b"#!/bin/sh\ntrue\n", time_limit=60),
        "debug-partition": req("debug", time_limit=300, extra_args=("--partition=debug",)),
    }


def wait(cli: CliSlurmClient, job_id: str, ok: Callable[[SlurmJob], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = cli.queue().by_id().get(job_id)
        if job is not None and ok(job):
            return
        time.sleep(1)
    raise SystemExit(f"job {job_id}: not {what} within 60 s")


def ours(record: dict[str, Any], base: set[str]) -> bool:
    """One of this run's jobs: its id, or its array's id (a task has an id of its own)."""
    return any(str(record.get(k)) in base for k in ("job_id", "jobid", "array_job_id"))


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cli = CliSlurmClient(timeout=60.0)
    jobdir = "/tmp"
    since = int(time.time()) - 5
    ids: dict[str, str] = {}
    for key, request in jobs_to_submit(jobdir).items():
        ids[key] = cli.submit(request)
    ids["dependent"] = cli.submit(
        SubmitRequest(script=b"#!/bin/sh\ntrue\n", job_name="rec-dep", time_limit=60,
                      dependency=f"afterok:{ids['gpu-running']}", chdir=jobdir)
    )  # fmt: skip
    cli.cancel([ids["never-eligible"]])
    running = JobState.RUNNING
    wait(cli, ids["gpu-running"], lambda j: j.state is running, "running")
    wait(cli, ids["failed-exit-3"], lambda j: j.state is JobState.FAILED, "failed")
    wait(cli, ids["completed"], lambda j: j.state is JobState.COMPLETED, "completed")
    wait(cli, f"{ids['array-throttled']}_1", lambda j: j.state is running, "task 1 running")
    time.sleep(5)  # accounting catches up with the ends
    base = set(ids.values())
    try:
        record(cli, out, base, since)
    finally:
        cli.cancel(sorted(base))
    lines = [
        f"recorded {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} on the test cluster",
        f"slurm {cli.version()}, pyslurm {pyslurm.version()}",
        f"accounting window: {since} .. the recording (epoch s)",
        *(f"{key}: {job_id}" for key, job_id in ids.items()),
    ]
    (out / "recording.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def record(cli: CliSlurmClient, out: Path, base: set[str], since: int) -> None:
    """Each read through both paths, back to back, kept for this run's jobs only."""
    squeue = json.loads(cli._run("squeue", ["--json"]).stdout)
    queue = pyslurm.job().get()
    start = cli._run("squeue", ["--start", "-h", "-o", START_FORMAT]).stdout
    now = int(time.time())
    window = ["-S", format_slurm_time(since), "-E", format_slurm_time(now)]
    sacct = json.loads(cli._run("sacct", ["--json", "-a", "-X", *window]).stdout)
    db = pyslurm.slurmdb_jobs().get(
        starttime=local_slurm_time(since), endtime=local_slurm_time(now), flags=ACCOUNTING_FLAGS
    )
    tres = cli._run("sacctmgr", ["-P", "show", "tres", "format=Type,Name,ID"]).stdout

    squeue["jobs"] = [j for j in squeue["jobs"] if ours(j, base)]
    sacct["jobs"] = [j for j in sacct["jobs"] if ours(j, base) or ours(j["array"], base)]
    dump(out / "squeue.json", squeue)
    dump(out / "sacct.json", sacct)
    dump(out / "job_get.json", {k: v for k, v in queue.items() if ours(v, base)})
    dump(out / "slurmdb_jobs_get.json", {k: v for k, v in db.items() if ours(v, base)})
    kept = [ln for ln in start.splitlines() if ln.split("|")[0].split("_")[0] in base]
    (out / "squeue-start.txt").write_text("\n".join(kept) + "\n")
    (out / "tres.txt").write_text(tres)


def dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "tests/data/slurm/pyslurm/recorded")
