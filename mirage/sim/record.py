"""Record a fidelity-suite workload on the real test cluster (the real driver).

:func:`record_run` submits a :class:`~mirage.sim.suite.Workload` through a
:class:`~mirage.slurm.cli_backend.CliSlurmClient` at its offsets, as each job's user, waits
until every job has ended, and writes the run in the suite's recorded-run format
(``run.json`` and ``sacct.txt``, see :mod:`mirage.sim.suite`), and beside them
``sshare.txt``: ``sshare -a -P --noheader`` with :data:`SSHARE_FIELDS` as it stood just
before the first submit (the users' fair-share factors, a term of every job's priority).

How each job is submitted (one ``sbatch`` each, through the client; no Slurm command runs
here directly):

- t0 is half a second into a second (as :func:`mirage.sim.fidelity.run_real`): a submit
  and a job end in the same second reach slurmctld in the order the simulator handles
  them (end first). The burst (the jobs at offset 0) is submitted before t0 with
  ``--begin`` at t0's whole second, so that slurmctld releases it at once.
- ``user``: root submits for the user with ``--uid``/``--gid`` (Slurm 22.05 lets root do
  so); the job's script and working directory are in a fresh directory under /tmp that
  every user may read (mode 755). The script sleeps ``run_s``.
- ``array``: ``--array=0-<n-1>``; ``dependency``: ``afterok``/``afterany`` on the real job
  id of the named key (an array's id covers all its tasks); ``hold_until``: submitted
  with ``--hold`` and released (``scontrol release``) at that offset.
- One task per node with ``cpus_per_node`` CPUs, ``--gres=gpu:<n>`` when it has GPUs,
  ``--exclusive`` when asked, the job's partition and its limit in whole minutes.

A job whose dependency can never be satisfied (``afterok`` on a job that failed or timed
out: the test cluster does not set ``kill_invalid_depend``) would pend for ever; once
nothing else of the run is active, such jobs are cancelled (they appear in sacct.txt as
CANCELLED, never started).

CLI: ``python -m mirage.sim.record <workload.json> --out <dir> [--runs 2]`` writes
``<dir>/run-1`` ... (``--first`` numbers them from elsewhere), draining the queue of test
jobs before each run.
"""

from __future__ import annotations

import argparse
import contextlib
import grp
import json
import math
import pwd
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mirage.sim.fidelity import (
    BENCH_PREFIX,
    BURST_LEAD_S,
    ClusterClock,
    drain_queue,
    read_cluster_clock,
)
from mirage.sim.suite import SACCT_FIELDS, SuiteJob, Workload, parse_sacct
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.types import SlurmError, SubmitRequest

Log = Callable[[str], None]

#: Seconds per burst job added to the lead before t0 (sbatch takes ~0.1-0.3 s here).
BURST_S_PER_JOB = 0.4
#: sacct states that are not final yet.
_NOT_FINAL = ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING")
_NEVER = "DependencyNeverSatisfied"
#: sshare fields of sshare.txt, read just before the first submit: the fair-share factors
#: that weigh each user's jobs (the test cluster enforces associations, so sprio has a
#: fair-share term, and it depends on the usage left by earlier jobs).
SSHARE_FIELDS = (
    "Account",
    "User",
    "RawShares",
    "NormShares",
    "RawUsage",
    "EffectvUsage",
    "FairShare",
)


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class RunRecord:
    """What :func:`record_run` wrote (times in epoch seconds)."""

    path: Path
    t0: float
    label: str
    submitted: dict[str, tuple[str, float]]  # key -> (job id, submit time)
    released: dict[str, float]
    wall_s: float  # from the first submit to the last job's end
    cancelled_never: tuple[str, ...]  # keys cancelled as DependencyNeverSatisfied


def job_script(job: SuiteJob) -> str:
    return f"#!/bin/sh\nsleep {job.run_s}\n"


def user_args(user: str) -> list[str]:
    """sbatch options that make root's submit the user's job (none for root)."""
    if user in ("", "root"):
        return []
    pw = pwd.getpwnam(user)
    return [f"--uid={pw.pw_name}", f"--gid={grp.getgrgid(pw.pw_gid).gr_name}"]


def submit_request(
    job: SuiteJob,
    name: str,
    workdir: str,
    script_path: str,
    *,
    begin: float | None = None,
    dependency: str | None = None,
) -> SubmitRequest:
    """The sbatch request for ``job``; ``begin`` (epoch s): not eligible before then."""
    extra = [
        "--output=/dev/null",
        "--ntasks-per-node=1",
        f"--cpus-per-task={job.cpus_per_node}",
        *user_args(job.user),
    ]
    if job.exclusive:
        extra.append("--exclusive")
    if job.array > 0:
        extra.append(f"--array=0-{job.array - 1}")
    if begin is not None:
        # sbatch reads an absolute --begin in local time, on this machine as on the cluster's
        extra.append("--begin=" + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(begin)))
    return SubmitRequest(
        script_path=script_path,
        job_name=name,
        time_limit=job.limit_s,
        nodes=job.nodes,
        gres=f"gpu:{job.gpus_per_node}" if job.gpus_per_node > 0 else None,
        partition=job.partition,
        chdir=workdir,
        dependency=dependency,
        hold=job.hold_until is not None,
        extra_args=tuple(extra),
    )


def burst_lead_s(workload: Workload) -> int:
    """Seconds before t0 to start submitting the burst (enough for all of it)."""
    burst = sum(1 for j in workload.jobs if j.offset == 0)
    return max(BURST_LEAD_S, math.ceil(3 + BURST_S_PER_JOB * burst))


def record_run(
    client: CliSlurmClient,
    workload: Workload,
    out: str | Path,
    *,
    prefix: str = BENCH_PREFIX,
    timeout_s: float = 1800.0,
    poll_s: float = 2.0,
    log: Log = _quiet,
) -> RunRecord:
    """Run ``workload`` on the cluster now; write ``out/run.json`` and ``out/sacct.txt``."""
    out = Path(out)
    tag = uuid.uuid4().hex[:6]
    label = f"real {tag}"
    run = _Run(client, workload, f"{prefix}{tag}-", log)
    clock = read_cluster_clock(client)
    shares = client.share_text(SSHARE_FIELDS)
    workdir = Path(tempfile.mkdtemp(prefix="mirage-rec-", dir="/tmp"))
    try:
        workdir.chmod(0o755)
        lead = burst_lead_s(workload)
        t0 = int(time.time()) + lead + 0.5
        try:
            run.submit_all(workdir, t0, lead)
            log(f"run {tag}: {len(run.ids)} submits done {time.time() - t0:.0f} s after t0")
            never = run.wait_all_done(t0, t0 + timeout_s, poll_s)
            text = _final_sacct(client, workload, list(run.ids.values()), int(t0) - lead - 60)
        finally:
            with contextlib.suppress(SlurmError):
                client.cancel(list(run.ids.values()))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    ids, at = run.ids, run.at
    meta = {
        "t0": t0,
        "label": label,
        "clock": _clock_dict(clock),
        "submitted": {k: {"job_id": ids[k], "at": round(at[k], 3)} for k in ids},
        "released": {k: round(v, 3) for k, v in run.released.items()},
    }
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out / "sacct.txt").write_text(text)
    (out / "sshare.txt").write_text(shares)
    ends = [r.end for r in parse_sacct(text) if r.end is not None]
    wall = (max(ends) - min(at.values())) if ends else 0.0
    submitted = {k: (ids[k], at[k]) for k in ids}
    return RunRecord(out, t0, label, submitted, dict(run.released), wall, tuple(never))


class _Run:
    """One run's submits, releases and wait (job ids by key)."""

    def __init__(
        self, client: CliSlurmClient, workload: Workload, name_prefix: str, log: Log
    ) -> None:
        self.client = client
        self.workload = workload
        self.name_prefix = name_prefix
        self.log = log
        self.ids: dict[str, str] = {}
        self.at: dict[str, float] = {}
        self.released: dict[str, float] = {}

    def submit_all(self, workdir: Path, t0: float, lead: int) -> None:
        """Submit (and release) every job at its offset after ``t0``."""
        scripts: dict[str, str] = {}
        for job in self.workload.jobs:
            path = workdir / f"{job.key}.sh"
            path.write_text(job_script(job))
            path.chmod(0o755)
            scripts[job.key] = str(path)
        # (offset, order, kind, job), in workload order within one instant; releases first
        events: list[tuple[int, int, int, str, SuiteJob]] = []
        for i, job in enumerate(self.workload.jobs):
            events.append((job.offset, 1, i, "submit", job))
            if job.hold_until is not None:
                events.append((job.hold_until, 0, i, "release", job))
        events.sort(key=lambda e: e[:3])
        for offset, _, _, kind, job in events:
            if offset > 0:
                _sleep_until(t0 + offset)
            if kind == "release":
                self.released[job.key] = time.time()
                self.client.release([self.ids[job.key]])
                continue
            dep = None
            if job.depends_on is not None:
                dkind, dkey = job.depends_on
                if dkey not in self.ids:
                    raise ValueError(f"{job.key} depends on {dkey}, not submitted before it")
                dep = f"{dkind}:{self.ids[dkey]}"
            req = submit_request(
                job,
                self.name_prefix + job.key,
                str(workdir),
                scripts[job.key],
                begin=int(t0) if offset == 0 else None,
                dependency=dep,
            )
            self.at[job.key] = time.time()
            self.ids[job.key] = self.client.submit(req)
            if offset == 0 and time.time() >= int(t0):
                raise RuntimeError(
                    f"the burst took over {lead} s to submit: it would not be "
                    "released at once (raise BURST_S_PER_JOB)"
                )

    def wait_all_done(self, t0: float, deadline: float, poll_s: float) -> list[str]:
        """Wait until none of the run's jobs (by name) is active; return the keys cancelled
        because their dependency can never be satisfied."""
        last = -1
        never: list[str] = []
        key_of = {v: k for k, v in self.ids.items()}
        while True:
            active = [
                j
                for j in self.client.queue().jobs
                if j.name.startswith(self.name_prefix) and j.state.is_active
            ]
            if not active:
                return never
            stuck = [j for j in active if j.reason == _NEVER]
            if stuck and len(stuck) == len(active):
                for j in stuck:
                    key = key_of.get(j.array_job_id or j.job_id)
                    never.append(key or j.name[len(self.name_prefix) :])
                self.log(f"  cancelling {len(stuck)} job(s) whose dependency can never be met")
                self.client.cancel([j.job_id for j in stuck])
                time.sleep(poll_s)
                continue
            if len(active) != last:
                last = len(active)
                self.log(f"  {len(active)} job(s) still active at t0 + {time.time() - t0:.0f} s")
            if time.time() > deadline:
                raise TimeoutError(f"{len(active)} job(s) still active at the deadline")
            time.sleep(poll_s)


def _clock_dict(clock: ClusterClock | None) -> dict[str, int] | None:
    if clock is None:
        return None
    return {"ctld_start": clock.ctld_start, "limit_check": clock.limit_check}


def _sleep_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def _final_sacct(
    client: CliSlurmClient, workload: Workload, job_ids: Sequence[str], since: int
) -> str:
    """sacct's text once every job (each array task) shows a final state (slurmdbd lags)."""
    want = len(workload.task_keys)
    text = ""
    for _ in range(60):
        text = client.accounting_text(job_ids, SACCT_FIELDS, since)
        recs = parse_sacct(text)
        tasks = [r for r in recs if "[" not in r.job_id]
        pending_arrays = [r for r in recs if "[" in r.job_id]
        if (
            len(tasks) >= want
            and not pending_arrays
            and all(r.state not in _NOT_FINAL for r in tasks)
        ):
            return text
        time.sleep(1.0)
    raise TimeoutError(f"sacct does not show all {want} job(s) of {workload.name} final")


# ---- the command line ----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m mirage.sim.record",
        description="Record a fidelity-suite workload on the real test cluster.",
    )
    ap.add_argument("workload", help="workload.json")
    ap.add_argument("--out", required=True, help="directory for run-<n>/ (run.json, sacct.txt)")
    ap.add_argument("--runs", type=int, default=2, help="runs to record (default 2)")
    ap.add_argument("--first", type=int, default=1, help="number of the first run (default 1)")
    ap.add_argument("--prefix", default=BENCH_PREFIX, help="job name prefix")
    ap.add_argument("--drain-timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    workload = Workload.from_json(args.workload)
    client = CliSlurmClient(timeout=60.0)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    for n in range(args.first, args.first + args.runs):
        drain_queue(
            client, prefixes=("mirage-t-", BENCH_PREFIX), timeout_s=args.drain_timeout, log=log
        )
        out = Path(args.out) / f"run-{n}"
        log(f"{workload.name}: recording {out} ({len(workload.task_keys)} jobs)")
        rec = record_run(client, workload, out, prefix=args.prefix, log=log)
        never = list(rec.cancelled_never)
        log(
            f"{workload.name}: {out} written, {rec.wall_s:.0f} s from first submit to last end"
            + (f", cancelled as never satisfiable: {never}" if never else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
