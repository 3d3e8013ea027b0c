"""The job-side handoff helper: a segment waits for its predecessor's last checkpoint.

When a successor starts while its predecessor still runs, Mirage signals the predecessor
(``USR1`` by default) to checkpoint and exit. The successor must not read the checkpoint
before that is complete. Both sides share the checkpoint directory; the state lives in
``<dir>/.mirage-segment.json``: ``{"job_id": "...", "state": "running" | "checkpointed"}``.

- ``start DIR``: at the beginning of every segment. If another job is recorded as
  ``running`` there, wait until it writes ``checkpointed`` or leaves Slurm's queue (or
  ``--timeout`` passes: exit 3), then record this job as running. Prints the seconds
  waited: that wait is overlap (the allocation is held, training has not resumed).
- ``done DIR``: after the job's last checkpoint, just before it exits.

Standard library only, so that it can be copied to compute nodes:
``python3 -m mirage.daemon.handoff start "$CKPT"`` or ``python3 handoff.py start "$CKPT"``.
The job id comes from ``$SLURM_JOB_ID``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STATE_FILE = ".mirage-segment.json"


def _read(directory: Path) -> dict[str, str]:
    try:
        data = json.loads((directory / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(directory: Path, job_id: str, state: str) -> None:
    tmp = directory / f"{STATE_FILE}.{job_id}.tmp"
    tmp.write_text(json.dumps({"job_id": job_id, "state": state, "at": int(time.time())}))
    tmp.replace(directory / STATE_FILE)  # atomic on one filesystem


def job_alive(job_id: str) -> bool:
    """Whether Slurm still runs (or is ending) the job; True when unsure."""
    try:
        out = subprocess.run(  # noqa: S603 - fixed argv, the job id is one argument
            ["squeue", "-h", "-j", job_id, "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    if out.returncode != 0:
        return "invalid job id" not in out.stderr.lower()
    return bool(out.stdout.strip())


def start(directory: Path, job_id: str, timeout: float, poll: float) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    while True:
        rec = _read(directory)
        other = rec.get("job_id")
        if not other or other == job_id or rec.get("state") != "running":
            break
        if not job_alive(other):
            break
        if time.monotonic() - began > timeout:
            print(f"handoff: {other} still running after {timeout:.0f}s", file=sys.stderr)
            return 3
        time.sleep(poll)
    _write(directory, job_id, "running")
    print(int(time.monotonic() - began))
    return 0


def done(directory: Path, job_id: str) -> int:
    rec = _read(directory)
    if rec.get("job_id") not in (None, job_id):
        print(f"handoff: {directory} belongs to job {rec.get('job_id')}", file=sys.stderr)
        return 0
    _write(directory, job_id, "checkpointed")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mirage-handoff", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["start", "done"])
    p.add_argument("directory", type=Path)
    p.add_argument("--job-id", default=os.environ.get("SLURM_JOB_ID", ""))
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--poll", type=float, default=5.0)
    args = p.parse_args(argv)
    if not args.job_id:
        p.error("no job id: run inside a Slurm job or pass --job-id")
    if args.action == "start":
        return start(args.directory, args.job_id, args.timeout, args.poll)
    return done(args.directory, args.job_id)


if __name__ == "__main__":
    sys.exit(main())
