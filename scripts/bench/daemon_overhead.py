"""The daemon's overhead: 1,000 tracked chains, time and Slurm commands per cycle, memory.

    .venv/bin/python scripts/bench/daemon_overhead.py [--chains 1000] [--cycles 30]
        [--other-jobs 2000] [--db sqlite|memory]

A simulated cluster (``SimSlurmClient``) with room for every chain's predecessor and
successor at once, plus ``--other-jobs`` jobs of other users (half running, half held
pending) so that squeue is not only ours. Chains of 3 segments with time limits spread
over 30 minutes (1 h .. 1 h 29 min), fixed-lead policy (lead 10 min): in the timed
window every cycle pre-submits, hands off and ends segments of about 1/30 of the chains.

Untimed warm-up: the first cycle (one sbatch per chain, reported on its own) and the
cycles up to the window. Timed: ``--cycles`` consecutive ``Daemon.cycle(now)`` calls in
the window. Every Slurm call goes through a counting wrapper: reads (squeue, sacct,
estimates, test-only, scontrol show) apart from writes (sbatch, scancel, signals).

Per cycle: whole cycle (includes the simulator answering squeue/sacct in-process) and
the daemon's own time (the cycle minus time inside the client: on a real cluster that
time is slurmctld's and slurmdbd's, plus the commands' own start-up). Targets (issue 5):
at most 2 poll reads (squeue, sacct) per cycle and at most 1 s per cycle, whole cycle;
the ``sbatch --test-only`` estimates (the estimate guard's, and ``mirage status``'s for
successors not yet submitted) are bounded apart by ``test_only_per_cycle``. Memory: the
process's peak RSS (getrusage) and the Python heap traced during the timed cycles.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.daemon.config import Config, DaemonSection, PolicySection
from mirage.daemon.core import Daemon
from mirage.daemon.ledger import register_chain
from mirage.daemon.store import Chain, ChainState, Store, new_chain_id
from mirage.sim import JobSpec, Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.scenario import toy_profile
from mirage.slurm.client import SlurmClient
from mirage.slurm.types import QueueSnapshot, SlurmJob, StartEstimate, SubmitRequest

T = TypeVar("T")
POLL_S = 60
LEAD_S = 600
BASE_LIMIT_S = 3600
SPREAD = 30  # time limits 1 h + 0 .. 29 min: planned ends spread over 30 polls
MAX_READS, MAX_CYCLE_S = 2, 1.0
SCRIPT = b"#!/bin/bash\npython train.py --resume\n"


class CountingClient(SlurmClient):
    """Delegates to a client; counts calls by command and the time spent inside them."""

    READS = ("queue", "accounting", "start_estimates", "test_only", "show")

    def __init__(self, inner: SlurmClient) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.inside_s = 0.0

    def _call(self, name: str, fn: Callable[[], T]) -> T:
        self.calls[name] += 1
        started = time.perf_counter()
        try:
            return fn()
        finally:
            self.inside_s += time.perf_counter() - started

    def reads(self) -> int:
        return sum(self.calls[n] for n in self.READS)

    def polls(self) -> int:
        """The poll's reads (squeue, sacct): one each per cycle, whatever the chains."""
        return self.calls["queue"] + self.calls["accounting"]

    def writes(self) -> int:
        return sum(self.calls.values()) - self.reads()

    def queue(self) -> QueueSnapshot:
        return self._call("queue", self.inner.queue)

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        return self._call("accounting", lambda: self.inner.accounting(start, end, every_state))

    def start_estimates(self) -> dict[str, StartEstimate]:
        return self._call("start_estimates", self.inner.start_estimates)

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        return self._call("test_only", lambda: self.inner.test_only(request))

    def show(self, kind: str) -> list[Mapping[str, str]]:
        return self._call("show", lambda: self.inner.show(kind))

    def submit(self, request: SubmitRequest) -> str:
        return self._call("submit", lambda: self.inner.submit(request))

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        self._call("cancel", lambda: self.inner.cancel(job_ids, pending_only))

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        self._call("signal", lambda: self.inner.signal(job_id, signal, batch_only))

    def hold(self, job_ids: Sequence[str]) -> None:
        self._call("hold", lambda: self.inner.hold(job_ids))

    def release(self, job_ids: Sequence[str]) -> None:
        self._call("release", lambda: self.inner.release(job_ids))

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        self._call("update_time_limit", lambda: self.inner.update_time_limit(job_id, seconds))


def chain(i: int) -> Chain:
    return Chain(
        id=new_chain_id(),
        name=f"bench-{i}",
        cluster="",
        owner="alice",
        uid=1000,
        gid=1000,
        groups=[],
        state=ChainState.ACTIVE,
        reason="",
        script=SCRIPT,
        script_sha256=hashlib.sha256(SCRIPT).hexdigest(),
        script_path="job.sbatch",
        chdir="/home/alice",
        export="NONE",
        environment={},
        sbatch_args=[],
        partition="gpu",
        time_limit_s=BASE_LIMIT_S + 60 * (i % SPREAD),
        nodes=1,
        gpus_per_node=4,
        gres="gpu:4",
        segments_target=3,
        until_file=None,
        trained_s=0,
        next_index=0,
        policy="",
        rejections=0,
    )


def cluster(chains: int, others: int) -> SimSlurmClient:
    """Room for 2 jobs per chain, and other users' jobs: half running, half held."""
    running = others // 2
    sim = Simulation(toy_profile(nodes=2 * chains + running))
    sim.add_jobs(
        JobSpec(
            submit=0,
            run=10**7,
            time_limit=10**7,
            nodes=1,
            partition="gpu",
            gpus=4,
            user=f"u{k % 97}",
            name=f"other-{k}",
            hold=k >= running,
        )
        for k in range(others)
    )
    return SimSlurmClient(sim, user="alice")


def config(chains: int, db: str, guard: str = "none") -> Config:
    return Config(
        daemon=DaemonSection(
            state_dir=db,
            poll_interval_s=POLL_S,
            lease_ttl_s=3 * POLL_S,
            max_submits_per_cycle=chains,
        ),
        policy=PolicySection(default="fixed-lead", lead_s=LEAD_S, guard=guard),
    )


def p95(xs: list[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chains", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--other-jobs", type=int, default=2000)
    ap.add_argument("--db", choices=["sqlite", "memory"], default="sqlite")
    # "none": the polling overhead the targets are about (on the idle simulated cluster the
    # shipped estimate guard would hold every pre-submission back); "estimate": the shipped
    # guard, whose sbatch --test-only calls (at most test_only_per_cycle) count as reads
    ap.add_argument("--guard", choices=["none", "estimate"], default="none")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mirage-bench-") as tmp:
        url = f"sqlite:///{tmp}/mirage.sqlite" if args.db == "sqlite" else "sqlite://"
        run(args, Store.open(url), tmp)


def run(args: argparse.Namespace, store: Store, tmp: str) -> None:
    n = args.chains
    sim = cluster(n, args.other_jobs)
    client = CountingClient(sim)
    for i in range(n):
        register_chain(store, chain(i), 0, first_intent=False)
    daemon = Daemon(store, client, config=config(n, tmp, args.guard))
    started = time.perf_counter()
    first = daemon.cycle(0)
    first_s = time.perf_counter() - started
    window = BASE_LIMIT_S - LEAD_S  # the first pre-submissions are due here
    t = POLL_S
    while t < window:  # untimed: segments 1 running, nothing due yet
        sim.advance_to(t)
        daemon.cycle(t)
        t += POLL_S
    rows = timed_cycles(daemon, sim, client, t, args.cycles)
    heap_mb = traced_heap_mb(daemon, sim, t + args.cycles * POLL_S)
    report(args, first_s, len(first.submitted), rows, store=store, heap_mb=heap_mb)


def timed_cycles(
    daemon: Daemon, sim: SimSlurmClient, client: CountingClient, t: int, cycles: int
) -> list[dict[str, float]]:
    rows = []
    for _ in range(cycles):
        sim.advance_to(t)
        reads, writes, inside = client.reads(), client.writes(), client.inside_s
        polls, tests = client.polls(), client.calls["test_only"]
        started = time.perf_counter()
        rep = daemon.cycle(t)
        whole = time.perf_counter() - started
        rows.append(
            {
                "whole_s": whole,
                "own_s": whole - (client.inside_s - inside),
                "reads": client.reads() - reads,
                "polls": client.polls() - polls,
                "test_only": client.calls["test_only"] - tests,
                "writes": client.writes() - writes,
                "submitted": len(rep.submitted),
                "signalled": len(rep.signalled),
                "acted": float(rep.acted),
            }
        )
        t += POLL_S
    return rows


def traced_heap_mb(daemon: Daemon, sim: SimSlurmClient, t: int, cycles: int = 3) -> float:
    """Peak Python heap over a few more cycles (traced apart: tracing slows Python down)."""
    tracemalloc.start()
    for k in range(cycles):
        sim.advance_to(t + k * POLL_S)
        daemon.cycle(t + k * POLL_S)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def report(
    args: argparse.Namespace,
    first_s: float,
    first_submits: int,
    rows: list[dict[str, float]],
    *,
    store: Store,
    heap_mb: float,
) -> None:
    whole = [r["whole_s"] for r in rows]
    own = [r["own_s"] for r in rows]
    reads = [r["reads"] for r in rows]
    polls = [r["polls"] for r in rows]
    tests = [r["test_only"] for r in rows]
    budget = DaemonSection().test_only_per_cycle  # config() keeps the default
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    with store.sessions() as s:
        from sqlalchemy import func, select

        active = s.scalar(select(func.count()).where(Chain.state == ChainState.ACTIVE))
    print(
        f"{args.chains} chains ({active} still active after the window), "
        f"{args.other_jobs} other jobs, {args.db} database, {len(rows)} timed cycles"
    )
    print(f"first cycle ({first_submits} sbatch, untimed window): {first_s:.2f} s")
    print(
        f"whole cycle:  mean {statistics.mean(whole):.3f} s, p95 {p95(whole):.3f} s, "
        f"max {max(whole):.3f} s"
    )
    print(
        f"daemon's own: mean {statistics.mean(own):.3f} s, p95 {p95(own):.3f} s "
        "(the cycle minus time inside the simulated Slurm)"
    )
    print(
        f"Slurm reads per cycle: max {max(reads):.0f}, mean {statistics.mean(reads):.2f} "
        f"(squeue + sacct: max {max(polls):.0f}; sbatch --test-only: max {max(tests):.0f}, "
        f"budget {budget}); "
        f"writes per cycle: mean {statistics.mean(r['writes'] for r in rows):.1f} "
        f"(sbatch {sum(r['submitted'] for r in rows):.0f}, "
        f"handoff signals {sum(r['signalled'] for r in rows):.0f} in the window)"
    )
    print(
        f"memory: peak RSS {rss_mb:.0f} MiB (process, simulator included); "
        f"Python heap peak over 3 more (traced) cycles {heap_mb:.1f} MiB"
    )
    checks = {
        f"poll reads (squeue, sacct) per cycle <= {MAX_READS}": max(polls) <= MAX_READS,
        f"sbatch --test-only per cycle <= test_only_per_cycle ({budget})": max(tests) <= budget,
        f"p95 cycle <= {MAX_CYCLE_S:g} s": p95(whole) <= MAX_CYCLE_S,
        "every cycle acted": all(r["acted"] for r in rows),
    }
    for what, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {what}")
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
