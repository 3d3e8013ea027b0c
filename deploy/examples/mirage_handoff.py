"""The job-side handoff helper: a segment waits for its predecessor's last checkpoint.

One file, standard library only, Python 3.6 or later (so no ``from __future__`` import:
annotations that 3.6 cannot evaluate are strings), so that any ``python3`` on a compute
node runs it:
researchers copy ``deploy/examples/mirage_handoff.py`` (this file, byte for byte) next to
their batch script and run ``python3 -I mirage_handoff.py start "$CKPT"``; with Mirage
installed, ``python3 -m mirage.daemon.handoff start "$CKPT"`` is the same. The job id
comes from ``$SLURM_JOB_ID``.

When a successor starts while its predecessor still runs, Mirage signals the predecessor
(``USR1`` by default) to checkpoint and exit. The successor must not read the checkpoint
before that is complete. Both share the checkpoint directory; the state lives in
``<dir>/.mirage-segment.json``: ``{"job_id": "...", "state": "running" | "checkpointed"}``.

- ``start DIR``: at the beginning of every segment. If another job is recorded as
  ``running`` there, wait for it (below), then record this job as running. Prints the
  seconds waited: that wait is overlap (the allocation is held, training has not resumed).
- ``done DIR``: after the job's last checkpoint, just before it exits.

How long ``start`` waits for its predecessor P:

1. While Slurm lists P as pending, running or completing, for as long as it takes: P may
   be writing its checkpoint. The daemon normally signals P as soon as it sees this job
   run. If it has not (it is down) after ``--grace`` seconds (60), this job signals P
   itself, ``scancel --batch --signal=USR1 P`` (same user: allowed), again every grace
   period while scancel fails. A second signal after the daemon's is harmless to a
   script that checkpoints on it (deploy/examples/train.sbatch). While squeue cannot
   answer (controller down), the wait goes on too: nothing says P stopped writing. This
   job's own time limit bounds it all; a daemon that is down never stops the chain.
2. Once Slurm no longer lists P (or lists it as ended) while the file still says
   ``running``: P ended without ``done`` (killed at its time limit, crashed, its node
   failed), or it wrote ``done`` and a shared filesystem does not show it yet (NFS
   caches attributes and directory entries for up to a minute). ``--timeout`` (60 s)
   bounds this wait only; then this job goes on from P's last complete checkpoint (the
   periodic one: a checkpoint written atomically is never half there), saying so.
3. A state file that exists but cannot be read (permissions, I/O) is read again; after
   ``--timeout`` seconds of that, ``start`` exits 3 (the chain's setup is broken).

After a handoff this job signalled itself, P should exit 0 (the example does): a daemon
that was down has no record of that handoff, and a predecessor that failed stops a chain.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

STATE_FILE = ".mirage-segment.json"
#: ``job_state`` when squeue could not answer.
UNKNOWN = "?"
#: squeue states of a job that will not run again (listed until slurmctld's MinJobAge).
ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
#: Variables that would change what squeue lists or what scancel does (SQUEUE_USERS,
#: SCANCEL_STATE, ...): not passed on from the job's environment.
_SLURM_DEFAULTS = ("SQUEUE_", "SCANCEL_")


def _read(directory: Path) -> "dict[str, str] | None":
    """The state record: {} when there is none (or it is garbled), None when unreadable."""
    try:
        data = json.loads((directory / STATE_FILE).read_text())
    except FileNotFoundError:
        return {}
    except ValueError:
        print(f"handoff: {directory / STATE_FILE} is garbled: ignored", file=sys.stderr)
        return {}
    except OSError as exc:
        print(f"handoff: cannot read {directory / STATE_FILE}: {exc}", file=sys.stderr)
        return None
    return data if isinstance(data, dict) else {}


def _write(directory: Path, job_id: str, state: str) -> None:
    tmp = directory / f"{STATE_FILE}.{job_id}.tmp"
    tmp.write_text(json.dumps({"job_id": job_id, "state": state, "at": int(time.time())}))
    tmp.replace(directory / STATE_FILE)  # atomic on one filesystem


def _slurm(argv: "list[str]") -> "subprocess.CompletedProcess[str]":
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SLURM_DEFAULTS)}
    # stdout=PIPE and universal_newlines: Python 3.6 has no capture_output or text
    return subprocess.run(  # noqa: S603, UP022 - fixed argv, the job id is one argument
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,  # noqa: UP021
        timeout=30,
        check=False,
        env=env,
    )


def job_state(job_id: str) -> str:
    """Slurm's state of the job: squeue's name for it, "" when Slurm no longer lists it,
    UNKNOWN when squeue could not answer."""
    try:
        out = _slurm(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"])
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    if out.returncode != 0:
        return "" if "invalid job id" in out.stderr.lower() else UNKNOWN
    states = out.stdout.split()
    return states[0] if states else ""


def job_alive(job_id: str) -> bool:
    """Whether Slurm may still run the job (True when unsure)."""
    state = job_state(job_id)
    return state == UNKNOWN or (bool(state) and state not in ENDED)


def signal_job(job_id: str, signal: str) -> bool:
    """Send ``signal`` to the job's batch shell, as Mirage's handoff does."""
    try:
        out = _slurm(["scancel", "--batch", f"--signal={signal}", job_id])
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"handoff: scancel failed: {exc}", file=sys.stderr)
        return False
    if out.returncode != 0:
        print(f"handoff: scancel failed: {out.stderr.strip()}", file=sys.stderr)
    return out.returncode == 0


class _Wait:
    """One successor's wait for its predecessor (the module docstring's rules)."""

    def __init__(self, job_id: str, grace: float, timeout: float, signal: str, now: float) -> None:
        self.job_id, self.grace, self.timeout, self.signal = job_id, grace, timeout, signal
        self.began = now
        self.signal_at = now + grace
        self.gone_at: float | None = None  # first seen out of Slurm's queue
        self.unreadable_at: float | None = None
        self.announced = False

    def verdict(self, rec: "dict[str, str] | None", now: float) -> "int | None":
        """None to wait on, else start's exit code."""
        if rec is None:
            self.unreadable_at = now if self.unreadable_at is None else self.unreadable_at
            return 3 if now - self.unreadable_at >= self.timeout else None
        self.unreadable_at = None
        other = rec.get("job_id")
        if not other or other == self.job_id or rec.get("state") != "running":
            return 0
        if not self.announced:
            print(f"handoff: waiting for job {other}'s last checkpoint", file=sys.stderr)
            self.announced = True
        return self._predecessor(other, now)

    def _predecessor(self, other: str, now: float) -> "int | None":
        state = job_state(other)
        if state == UNKNOWN or (state and state not in ENDED):
            self.gone_at = None
            if now >= self.signal_at:
                self._signal(other, now)
            return None
        self.gone_at = now if self.gone_at is None else self.gone_at
        if now - self.gone_at < self.timeout:
            return None  # its "checkpointed" may not be visible here yet
        print(
            f"handoff: job {other} left the queue ({state or 'no longer listed'}) without"
            " recording its last checkpoint (killed at its time limit?): going on from"
            " the last complete checkpoint it wrote",
            file=sys.stderr,
        )
        return 0

    def _signal(self, other: str, now: float) -> None:
        print(
            f"handoff: job {other} still runs after {now - self.began:.0f}s: signalling it"
            f" ({self.signal}) in case Mirage has not",
            file=sys.stderr,
        )
        sent = signal_job(other, self.signal)
        self.signal_at = float("inf") if sent else now + self.grace


def start(
    directory: Path,
    job_id: str,
    *,
    grace: float = 60.0,
    timeout: float = 60.0,
    poll: float = 5.0,
    signal: str = "USR1",
    clock: "Callable[[], float]" = time.monotonic,
    sleep: "Callable[[float], None]" = time.sleep,
) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    wait = _Wait(job_id, grace, timeout, signal, clock())
    code = wait.verdict(_read(directory), clock())
    while code is None:
        sleep(poll)
        code = wait.verdict(_read(directory), clock())
    if code != 0:
        print(f"handoff: {directory / STATE_FILE} stays unreadable", file=sys.stderr)
        return code
    _write(directory, job_id, "running")
    print(int(clock() - wait.began))
    return 0


def done(directory: Path, job_id: str) -> int:
    rec = _read(directory) or {}
    if rec.get("job_id") not in (None, job_id):
        print(f"handoff: {directory} belongs to job {rec.get('job_id')}", file=sys.stderr)
        return 0
    _write(directory, job_id, "checkpointed")
    return 0


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="mirage-handoff", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["start", "done"])
    p.add_argument("directory", type=Path)
    p.add_argument("--job-id", default=os.environ.get("SLURM_JOB_ID", ""))
    p.add_argument(
        "--grace", type=float, default=60.0, help="seconds before signalling the predecessor"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for a predecessor Slurm no longer lists to record its checkpoint",
    )
    p.add_argument("--poll", type=float, default=5.0)
    p.add_argument("--signal", default="USR1", help="the handoff signal (scancel --signal)")
    args = p.parse_args(argv)
    if not args.job_id:
        p.error("no job id: run inside a Slurm job or pass --job-id")
    if args.action == "done":
        return done(args.directory, args.job_id)
    return start(
        args.directory,
        args.job_id,
        grace=args.grace,
        timeout=args.timeout,
        poll=args.poll,
        signal=args.signal,
    )


if __name__ == "__main__":
    sys.exit(main())
