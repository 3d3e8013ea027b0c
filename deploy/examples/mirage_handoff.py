"""The job-side handoff helper: a segment waits for its predecessor's last checkpoint.

One file, standard library only, Python 3.6 or later (so no ``from __future__`` import:
annotations that 3.6 cannot evaluate are strings), so that any ``python3`` on a compute
node runs it:
researchers copy ``deploy/examples/mirage_handoff.py`` (this file, byte for byte) next to
their batch script and run ``python3 -I mirage_handoff.py start "$CKPT"``; with Mirage
installed, ``python3 -m mirage.daemon.handoff start "$CKPT"`` is the same. The job id
comes from ``$SLURM_JOB_ID``.

Who is who. Mirage submits every segment with three variables: ``MIRAGE_CHAIN_ID``,
``MIRAGE_SEGMENT``, its number in the chain (1 for the first), and ``MIRAGE_PREV_JOB_ID``,
the job id of the segment before it (absent for the first). So a segment knows its
predecessor exactly: it
signals that job and no other (never a later segment), and loads a checkpoint only once
that job has recorded its last one. Run by hand without them (plain sbatch), the
predecessor is the job the state file names as running when this one starts.

When a successor starts while its predecessor still runs, the predecessor must
checkpoint and exit (the handoff). The successor's ``start`` signals it at once
(``scancel --batch --signal=USR1 P``, same user: allowed; ``--grace`` seconds after its
own start, 0 by default); the daemon signals it too at its next poll, in case this job
could not (a second signal is harmless to a script that checkpoints on it,
deploy/examples/train.sbatch). Both share the checkpoint directory; the state lives in
``<dir>/.mirage-segment.json``: ``{"job_id": "...", "chain": id or null, "segment": N or
null, "state": "running" | "checkpointed", "at": epoch}``.

- ``start DIR``: at the beginning of every segment. Waits for the predecessor (below),
  then records this job as running. Says on stderr how long it waited: that wait is the
  handoff window (both allocations held, training not yet resumed).
- ``done DIR``: after the job's last checkpoint, just before it exits.
- ``resumed``: once training has resumed (the checkpoint loaded, the first step done).
  From Python, :func:`resumed`; the example training loop calls it after its first step.

What a restart costs, measured. A segment Mirage submits (``MIRAGE_CHAIN_ID`` and
``MIRAGE_SEGMENT`` set) also records its timing in the chain's directory (the submit
directory, ``$SLURM_SUBMIT_DIR``): ``<dir>/.mirage/timing-<chain>-<segment>.json``,
``{"job_id", "chain", "segment", "began", "took_over", "resumed"}`` (epoch seconds):
when ``start`` was called, when it returned (the handoff window, both allocations held,
lies between them) and when training resumed. The daemon reads it with the owner's
rights and charges each chain's transitions with that chain's own restart overhead
(``resumed - took_over``) once it has one. Writing it never stops a segment: a report
that cannot be written is said on stderr and the segment trains on.

How long ``start`` waits for its predecessor P:

1. Until the state file says P ``checkpointed``. While Slurm lists P as pending, running
   or completing, for as long as it takes: P may be writing its checkpoint. P is
   signalled once (again every ``--retry`` seconds while scancel fails). While squeue
   cannot answer (controller down), the wait goes on too: nothing says P stopped
   writing. This job's own time limit bounds it all; a daemon that is down never stops
   the chain.
2. Once Slurm no longer lists P (or lists it as ended) without its ``checkpointed``: P
   ended without ``done`` (killed at its time limit, crashed, its node failed, or it
   never got past its own ``start``), or it wrote ``done`` and a shared filesystem does
   not show it yet (NFS caches attributes and directory entries for up to a minute).
   ``--timeout`` (60 s) bounds this wait only; then this job goes on from the last
   complete checkpoint (the periodic one: a checkpoint written atomically is never half
   there), saying so.
3. A state file that exists but cannot be read (permissions, I/O) is read again; after
   ``--timeout`` seconds of that, ``start`` exits 3 (the chain's setup is broken).
4. A state file that names a *later* segment of the same chain (a higher ``segment``,
   or, run by hand, a third job after P): this segment was overtaken and must not train.
   ``start`` exits 4 and writes nothing; the example script exits 0 then. A record of
   another chain (an earlier chain in the same directory, continuing its training) is
   only a predecessor, never a later segment.

After a handoff this job signalled, P should exit 0 (the example does): a predecessor
that failed stops a chain.
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
#: The folder, in the chain's directory, of each segment's timing report.
REPORT_DIR = ".mirage"
#: ``job_state`` when squeue could not answer.
UNKNOWN = "?"
#: ``start``'s exit codes: the state file stays unreadable; a later segment took over.
UNREADABLE, OVERTAKEN = 3, 4
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
#: Seconds between two squeue calls about the predecessor (the file is read every poll).
SQUEUE_EVERY_S = 5.0


def _read(directory: Path) -> "dict[str, object] | None":
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


def _write(
    directory: Path,
    job_id: str,
    state: str,
    segment: "int | None" = None,
    chain: "str | None" = None,
) -> None:
    tmp = directory / f"{STATE_FILE}.{job_id}.tmp"
    rec = {
        "job_id": job_id,
        "chain": chain,
        "segment": segment,
        "state": state,
        "at": int(time.time()),
    }
    tmp.write_text(json.dumps(rec))
    tmp.replace(directory / STATE_FILE)  # atomic on one filesystem


def report_name(chain: str, segment: int) -> str:
    """The file name of a segment's timing report, in ``<chain dir>/.mirage/``."""
    return f"timing-{chain}-{segment}.json"


def _report(update: "dict[str, object]") -> None:
    """Merge ``update`` into this segment's timing report (nothing when the job was not
    submitted by Mirage: no chain, segment or submit directory to file it under)."""
    chain = os.environ.get("MIRAGE_CHAIN_ID", "")
    segment = _env_int("MIRAGE_SEGMENT")
    where = os.environ.get("SLURM_SUBMIT_DIR", "")
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not (chain and segment is not None and where and job_id):
        return
    folder = Path(where) / REPORT_DIR
    path = folder / report_name(chain, segment)
    try:
        folder.mkdir(exist_ok=True)
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            rec = {}
        if not isinstance(rec, dict) or rec.get("job_id") != job_id:
            rec = {"job_id": job_id, "chain": chain, "segment": segment}
        rec.update(update)
        tmp = folder / f"{path.name}.{job_id}.tmp"
        tmp.write_text(json.dumps(rec))
        tmp.replace(path)
    except OSError as exc:
        print(f"handoff: cannot write the timing report {path}: {exc}", file=sys.stderr)


def resumed() -> int:
    """Record that this segment's training has resumed (its checkpoint loaded, its first
    step done): the end of its restart overhead, which the daemon measures from it."""
    _report({"resumed": round(time.time(), 3)})
    return 0


def _segment_of(rec: "dict[str, object]") -> "int | None":
    seg = rec.get("segment")
    return seg if isinstance(seg, int) and not isinstance(seg, bool) else None


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

    def __init__(
        self,
        job_id: str,
        segment: "int | None",
        pred: "str | None",
        *,
        chain: "str | None",
        grace: float,
        timeout: float,
        retry: float,
        signal: str,
        now: float,
    ) -> None:
        self.job_id, self.segment, self.pred, self.chain = job_id, segment, pred, chain
        self.timeout, self.retry, self.signal = timeout, retry, signal
        self.began = now
        self.signal_at = now + grace
        self.gone_at: float | None = None  # first seen out of Slurm's queue
        self.unreadable_at: float | None = None
        self.state = UNKNOWN  # the predecessor's, as squeue last said
        self.asked_at = float("-inf")
        self.announced = False

    def verdict(self, rec: "dict[str, object] | None", now: float) -> "int | None":
        """None to wait on, else start's exit code."""
        if rec is None:
            self.unreadable_at = now if self.unreadable_at is None else self.unreadable_at
            return UNREADABLE if now - self.unreadable_at >= self.timeout else None
        self.unreadable_at = None
        other, state = rec.get("job_id"), rec.get("state")
        other = other if isinstance(other, str) and other else None
        if other is not None and other != self.job_id and self._later(other, rec):
            print(
                f"handoff: a later segment (job {other}) already took over {STATE_FILE}:"
                f" job {self.job_id} must not train",
                file=sys.stderr,
            )
            return OVERTAKEN
        if self.pred is None:  # by hand: the predecessor is whoever runs here now
            if other is None or other == self.job_id or state != "running":
                return 0
            self.pred = other
        if other == self.job_id or (other == self.pred and state == "checkpointed"):
            return 0
        if not self.announced:
            print(f"handoff: waiting for job {self.pred}'s last checkpoint", file=sys.stderr)
            self.announced = True
        return self._predecessor(self.pred, now)

    def _later(self, other: str, rec: "dict[str, object]") -> bool:
        """Whether the job the record names came after this one."""
        theirs = _segment_of(rec)
        if self.segment is not None and theirs is not None:
            # segment numbers are a chain's own: another chain's record came before this one
            same = self.chain is not None and rec.get("chain") == self.chain
            return same and theirs > self.segment
        # by hand, once the predecessor is known: a third job writes only after it
        return self.pred is not None and other != self.pred and self.segment is None

    def _predecessor(self, pred: str, now: float) -> "int | None":
        if now - self.asked_at >= SQUEUE_EVERY_S:
            self.state, self.asked_at = job_state(pred), now
        if self.state == UNKNOWN or (self.state and self.state not in ENDED):
            self.gone_at = None
            if now >= self.signal_at:
                self._signal(pred, now)
            return None
        self.gone_at = now if self.gone_at is None else self.gone_at
        if now - self.gone_at < self.timeout:
            return None  # its "checkpointed" may not be visible here yet
        print(
            f"handoff: job {pred} left the queue ({self.state or 'no longer listed'}) without"
            " recording its last checkpoint (killed at its time limit?): going on from"
            " the last complete checkpoint it wrote",
            file=sys.stderr,
        )
        return 0

    def _signal(self, pred: str, now: float) -> None:
        print(
            f"handoff: job {pred} still runs {now - self.began:.0f}s after this segment"
            f" (job {self.job_id}) started: signalling it ({self.signal}) to checkpoint"
            " and exit",
            file=sys.stderr,
        )
        sent = signal_job(pred, self.signal)
        self.signal_at = float("inf") if sent else now + self.retry


def start(
    directory: Path,
    job_id: str,
    *,
    segment: "int | None" = None,
    pred: "str | None" = None,
    chain: "str | None" = None,
    grace: float = 0.0,
    timeout: float = 60.0,
    poll: float = 1.0,
    retry: float = 30.0,
    signal: str = "USR1",
    clock: "Callable[[], float]" = time.monotonic,
    sleep: "Callable[[float], None]" = time.sleep,
) -> int:
    """Wait for the predecessor's last checkpoint, then record this job as running."""
    began = round(time.time(), 3)
    directory.mkdir(parents=True, exist_ok=True)
    wait = _Wait(
        job_id,
        segment,
        pred if pred != job_id else None,
        chain=chain,
        grace=grace,
        timeout=timeout,
        retry=retry,
        signal=signal,
        now=clock(),
    )
    code = wait.verdict(_read(directory), clock())
    while code is None:
        sleep(poll)
        code = wait.verdict(_read(directory), clock())
    if code == UNREADABLE:
        print(f"handoff: {directory / STATE_FILE} stays unreadable", file=sys.stderr)
    if code != 0:
        return code
    _write(directory, job_id, "running", segment, chain)
    _report({"began": began, "took_over": round(time.time(), 3)})
    waited = clock() - wait.began
    if wait.pred is not None:
        print(
            f"handoff: job {job_id} takes over from job {wait.pred} after {waited:.0f}s",
            file=sys.stderr,
        )
    return 0


def done(
    directory: Path, job_id: str, segment: "int | None" = None, chain: "str | None" = None
) -> int:
    """Record this job's last checkpoint as written (unless another job took over)."""
    rec = _read(directory) or {}
    owner = rec.get("job_id")
    if owner not in (None, job_id):
        print(f"handoff: {directory} belongs to job {owner}", file=sys.stderr)
        return 0
    if segment is None:
        segment = _segment_of(rec)
    if chain is None:
        theirs = rec.get("chain")
        chain = theirs if isinstance(theirs, str) else None
    _write(directory, job_id, "checkpointed", segment, chain)
    return 0


def _env_int(name: str) -> "int | None":
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="mirage-handoff", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["start", "done", "resumed"])
    p.add_argument("directory", type=Path, nargs="?", help="the checkpoint directory (start, done)")
    p.add_argument("--job-id", default=os.environ.get("SLURM_JOB_ID", ""))
    p.add_argument(
        "--segment",
        type=int,
        default=_env_int("MIRAGE_SEGMENT"),
        help="this segment's number in its chain (default: $MIRAGE_SEGMENT)",
    )
    p.add_argument(
        "--chain",
        default=os.environ.get("MIRAGE_CHAIN_ID") or None,
        help="this segment's chain (default: $MIRAGE_CHAIN_ID)",
    )
    p.add_argument(
        "--prev-job-id",
        default=os.environ.get("MIRAGE_PREV_JOB_ID") or None,
        help="the job id of the segment before this one (default: $MIRAGE_PREV_JOB_ID)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=0.0,
        help="seconds after this job's start before it signals a predecessor that still runs",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for a predecessor Slurm no longer lists to record its checkpoint",
    )
    p.add_argument("--poll", type=float, default=1.0, help="seconds between two reads of the file")
    p.add_argument("--retry", type=float, default=30.0, help="seconds between two failed signals")
    p.add_argument("--signal", default="USR1", help="the handoff signal (scancel --signal)")
    args = p.parse_args(argv)
    if not args.job_id:
        p.error("no job id: run inside a Slurm job or pass --job-id")
    if args.action == "resumed":
        return resumed()
    if args.directory is None:
        p.error(f"{args.action} needs the checkpoint directory")
    if args.action == "done":
        return done(args.directory, args.job_id, args.segment, args.chain)
    return start(
        args.directory,
        args.job_id,
        segment=args.segment,
        pred=args.prev_job_id,
        chain=args.chain,
        grace=args.grace,
        timeout=args.timeout,
        poll=args.poll,
        retry=args.retry,
        signal=args.signal,
    )


if __name__ == "__main__":
    sys.exit(main())
