"""Helpers shared by the daemon tests: a simulated cluster, a store, chains, faulty clients."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from sqlalchemy import select

from mirage.daemon.config import Config, DaemonSection, PolicySection
from mirage.daemon.core import Daemon
from mirage.daemon.ledger import TOKEN_RE, register_chain
from mirage.daemon.store import Chain, ChainState, Segment, Store, new_chain_id
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.scenario import toy_profile
from mirage.slurm.types import (
    JobState,
    QueueSnapshot,
    SlurmJob,
    SlurmUnreachableError,
    StartEstimate,
    SubmitRequest,
)

T = TypeVar("T")

SCRIPT = b"#!/bin/bash\n#SBATCH --signal=B:USR1@120\npython train.py --resume\n"


class Crash(BaseException):
    """Stands for kill -9 at a point of the daemon's cycle."""


class FaultySim(SimSlurmClient):
    """The simulator, with crashes, timeouts and outages switched on by tests.

    ``crash`` = "before_submit" | "after_submit" | "signal" | "" (once); ``down``: reads and writes
    raise SlurmUnreachableError; ``handoff_exits``: a signalled job checkpoints and exits
    at once (what the example batch script does).
    """

    def __init__(self, sim: Simulation, **kw: object) -> None:
        super().__init__(sim, user="alice", **kw)  # type: ignore[arg-type]
        self.crash = ""
        self.down = False
        self.handoff_exits = False
        self.reads: Counter[str] = Counter()
        self.requeued: set[str] = set()  # shown as PENDING again (BeginTime), as after a requeue
        self.busy_s = 0.0  # time spent inside the simulator (to separate the daemon's own)

    def _timed(self, fn: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return fn()
        finally:
            self.busy_s += time.perf_counter() - started

    def _check_up(self, what: str) -> None:
        if self.down:
            raise SlurmUnreachableError([what], 1, "Unable to contact slurm controller")

    def queue(self) -> QueueSnapshot:
        self.reads["squeue"] += 1
        self._check_up("squeue")
        snap = self._timed(super().queue)
        return dataclasses.replace(snap, jobs=tuple(self._requeue(j) for j in snap.jobs))

    def _requeue(self, job: SlurmJob) -> SlurmJob:
        if job.job_id not in self.requeued or job.state.is_finished:
            return job
        return dataclasses.replace(job, state=JobState.PENDING, reason="BeginTime", end=None)

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        self.reads["sacct"] += 1
        self._check_up("sacct")
        jobs = self._timed(lambda: super(FaultySim, self).accounting(start, end, every_state))
        return [self._requeue(j) for j in jobs]

    def submit(self, request: SubmitRequest) -> str:
        self._check_up("sbatch")
        if self.crash == "before_submit":
            self.crash = ""
            raise Crash("killed before sbatch")
        job_id = self._timed(lambda: super(FaultySim, self).submit(request))
        if self.crash == "after_submit":
            self.crash = ""
            raise Crash("killed after sbatch, before the job id was recorded")
        return job_id

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        self.reads["test_only"] += 1
        self._check_up("sbatch")
        return super().test_only(request)

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        if self.crash == "signal":
            self.crash = ""
            raise Crash("killed while signalling the predecessor")
        super().signal(job_id, signal, batch_only)
        if self.handoff_exits:
            self.cancel([job_id])

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        self._check_up("scancel")
        super().cancel(job_ids, pending_only)

    def tokens(self) -> Counter[str]:
        """How many jobs carry each Mirage token (exactly once: all 1)."""
        out: Counter[str] = Counter()
        for v in self.sim.all_jobs():
            m = TOKEN_RE.search(v.spec.comment)
            if m:
                out[m.group(1)] += 1
        return out


def make_sim(nodes: int = 4) -> FaultySim:
    return FaultySim(Simulation(toy_profile(nodes)))


def make_store(tmp_path: Path, name: str = "mirage.sqlite") -> Store:
    return Store.open(f"sqlite:///{tmp_path / name}")


def make_config(policy: str = "reactive", lead_s: int = 600, **daemon: object) -> Config:
    """A daemon configuration for the mechanics' tests: without the estimate guard, so that
    a fixed lead pre-submits on the simulator's empty cluster (the shipped guard, tested on
    its own, would rightly wait there)."""
    base: dict[str, object] = {"poll_interval_s": 60, "lease_ttl_s": 180}
    base.update(daemon)
    return Config(
        daemon=DaemonSection(**base),  # type: ignore[arg-type]
        policy=PolicySection(default=policy, lead_s=lead_s, guard="none"),
    )


def make_chain(
    store: Store,
    now: int = 0,
    *,
    segments: int | None = 3,
    limit: int = 3600,
    until_file: str | None = None,
    name: str = "train",
    first_intent: bool = False,
) -> Chain:
    chain = Chain(
        id=new_chain_id(),
        name=name,
        cluster="",
        owner="alice",
        uid=1000,
        gid=1000,
        groups=[],
        state=ChainState.ACTIVE,
        reason="",
        script=SCRIPT,
        script_sha256=hashlib.sha256(SCRIPT).hexdigest(),
        script_path="/home/alice/job.sbatch",
        chdir="/home/alice",
        export="NONE",
        environment={},
        sbatch_args=[],
        partition="gpu",
        time_limit_s=limit,
        nodes=1,
        gpus_per_node=4,
        gres="gpu:4",
        segments_target=segments,
        until_file=until_file,
        trained_s=0,
        next_index=0,
        policy="",
        rejections=0,
    )
    register_chain(store, chain, now, first_intent=first_intent)
    return chain


def run_cycles(
    daemons: Sequence[Daemon], client: FaultySim, start: int, stop: int, step: int = 60
) -> int:
    """Advance simulated time in ``step``s and run every daemon's cycle at each tick."""
    t = start
    while t <= stop:
        client.advance_to(t)
        for d in daemons:
            d.cycle(t)
        t += step
    return t


def chain_state(store: Store, chain_id: str) -> Chain:
    with store.sessions() as s:
        chain = s.get(Chain, chain_id)
        assert chain is not None
        return chain


def segments_of(store: Store, chain_id: str) -> list[Segment]:
    """The chain's segments, by index."""
    with store.sessions() as s:
        q = select(Segment).where(Segment.chain_id == chain_id).order_by(Segment.index)
        return list(s.scalars(q))


class EndsFailed(FaultySim):
    """Jobs in ``failed`` are reported FAILED (exit 1) once they end, by squeue and sacct."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.failed: set[str] = set()

    def _failed(self, job: SlurmJob) -> SlurmJob:
        if job.job_id in self.failed and job.state.is_finished:
            return dataclasses.replace(job, state=JobState.FAILED, exit_code=1)
        return job

    def queue(self) -> QueueSnapshot:
        snap = super().queue()
        return dataclasses.replace(snap, jobs=tuple(self._failed(j) for j in snap.jobs))

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        return [self._failed(j) for j in super().accounting(start, end, every_state)]
