"""The rest of the cluster: a trace's own chains run by the daemon, and what everyone
else's jobs see.

An admin asks whether Mirage's users gain at everyone else's expense. This replays a
trace with the chains :func:`mirage.trace.chains.find_chains` detects in it (those whose
first segment was submitted in a window) taken out of the recorded jobs and handed to the
real daemon (``Daemon.cycle``), once per policy, on forks of the same warm replay. Each
detected chain becomes a daemon chain of its owner (the recorded user, so the per-user
limits see its jobs among the user's others), of its recorded shape (nodes, GPUs, whole
nodes or not, partition, the longest limit among its segments), registered at its first
segment's recorded submit, with the training its segments did (``max(0, run - R)`` each).
Its jobs do what the trace's did and what the chain-ready job does
(:class:`ClusterJobs`): a segment trains from its start (or its predecessor's end) plus
R, and exits once the chain has trained what its recorded segments up to it did (so
reactive submission replays the recorded runs); a predecessor whose successor started
hands over h later, its cut-short training left to the next; the segment that completes
the training exits then.

Reactive submission is the comparison: the same chains, their successors submitted as
their predecessors end. Every other job is replayed as recorded in both; what they saw is
:func:`mirage.demo.wholechain.others` over the window. What a difference is made of is
given beside it (:func:`made_of`): the node-hours the chains ran, the node-hours their
pre-submitted successors sat pending before their predecessors ended (earlier queue
entry: age priority, a place in the backfill plan), and the node-hours the handoffs gave
back before the predecessors' limits (nodes freed early).
"""

from __future__ import annotations

import dataclasses
import getpass
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import select

from mirage.daemon.config import Config
from mirage.daemon.core import Daemon
from mirage.daemon.ledger import register_chain
from mirage.daemon.revoke import REVOKED
from mirage.daemon.store import Chain, ChainState, Segment, Store, reproducible
from mirage.demo.run import DemoSpec, HandoffSimClient, daemon_config, demo_chain
from mirage.demo.wholechain import MARKER, ChainJobs, CheckSpec, others, view_transitions
from mirage.learn.artifacts import POLICIES as LEARNED
from mirage.policy.cost import DEFAULT_COST, CostModel
from mirage.profile.schema import ClusterProfile
from mirage.sim import Simulation
from mirage.sim.views import JobView
from mirage.sim.workload import JobSpec
from mirage.slurm.types import SubmitRequest
from mirage.trace.chains import ChainParams, find_chains

HOUR = 3600
DAY = 86400
#: The other jobs are counted once this long past the window (most have started by then).
SETTLE_S = 3 * DAY


@dataclass(frozen=True)
class TraceChain:
    """One detected chain, as the daemon is to run it."""

    name: str
    user: str
    registered: int  # its first segment's recorded submit
    chunks: tuple[float, ...]  # the training each recorded segment did: max(0, run - R)
    shape: JobSpec  # its first segment (nodes, GPUs, CPUs, whole nodes, partition, QOS)
    time_limit_s: int  # the longest limit among its segments
    segments: int  # recorded segments
    bound: bool = False  # every recorded segment but the last ran to its limit

    @property
    def work_s(self) -> float:
        """The chain's whole training."""
        return sum(self.chunks)


@dataclass(frozen=True)
class Workload:
    """The replay: the other jobs as recorded, and the chains the daemon runs."""

    jobs: tuple[JobSpec, ...]  # every job but the chains' own (dependencies renumbered)
    chains: tuple[TraceChain, ...]
    window: tuple[int, int]  # chains first submitted in [t0, t1); the others counted there
    dropped_dependencies: int  # other jobs whose dependency was on a chain's job
    unmodelled: int = 0  # chains left as recorded: a limit no longer than the restart R


#: A segment that ran to its limit trains until this long before it (the chain-ready job
#: checkpoints and exits on its warning signal), so that its exit is its own, never the
#: limit's kill in the same second, which would leave a second to train in one more.
EXIT_BEFORE_S = 60
#: A segment "ran to its limit" when it ran at least this share of it (ls6 records a
#: timed-out job's run a few seconds past or short of its limit).
BOUND_SHARE = 0.95


def split_chains(table: pd.DataFrame, jobs: Sequence[JobSpec], window: tuple[int, int], *,
                 cost: CostModel = DEFAULT_COST, params: ChainParams | None = None,
                 bound_only: bool = False) -> Workload:  # fmt: skip
    """The chains of ``table`` first submitted in ``window`` (all their segments replayed
    among ``jobs``, which :func:`mirage.sim.prepare.prepare_trace` made of ``table``), and
    ``jobs`` without them. ``bound_only``: only the chains whose segments but the last ran
    to their limits (checkpoint-restart chains, what Mirage is for); the others stay as
    recorded."""
    found = find_chains(table, params)
    ids = table["job_id"].astype(str).to_numpy()
    by_id = {j.trace_id: k for k, j in enumerate(jobs)}
    t0, t1 = window
    chains: list[TraceChain] = []
    mine: set[int] = set()
    unmodelled = 0
    for rows in found.chains:
        members = [by_id.get(str(ids[r])) for r in rows]
        if any(m is None for m in members):
            continue  # a segment the simulator cannot replay: the chain stays as recorded
        specs = [jobs[m] for m in members if m is not None]
        if not t0 <= specs[0].submit < t1 or not specs[0].user:
            continue
        limits = [s.time_limit for s in specs if s.time_limit is not None]
        if not limits or max(limits) <= cost.restart_s:
            unmodelled += 1  # no segment of it could train: it stays as recorded
            continue
        bound = all(s.time_limit is not None and s.run >= BOUND_SHARE * s.time_limit
                    for s in specs[:-1])  # fmt: skip
        if bound_only and not bound:
            continue
        chains.append(TraceChain(
            name=f"trace-{specs[0].trace_id}", user=specs[0].user, registered=specs[0].submit,
            chunks=tuple(float(max(0, min(s.run, (s.time_limit or s.run) - EXIT_BEFORE_S)
                                   - cost.restart_s)) for s in specs),
            shape=specs[0], time_limit_s=max(limits), segments=len(specs), bound=bound,
        ))  # fmt: skip
        mine.update(m for m in members if m is not None)
    kept, dropped = renumber(jobs, mine)
    chains.sort(key=lambda c: (c.registered, c.name))
    return Workload(tuple(kept), tuple(chains), window, dropped, unmodelled)


def renumber(jobs: Sequence[JobSpec], drop: set[int]) -> tuple[list[JobSpec], int]:
    """``jobs`` without the positions in ``drop``, their simulator ids (position + 1)
    renumbered in the others' dependencies; a dependency on a dropped job is removed
    (counted: the chains' own successors are dropped with them, so few others have one)."""
    new_id: dict[int, int] = {}
    for k in range(len(jobs)):
        if k not in drop:
            new_id[k + 1] = len(new_id) + 1
    kept, lost = [], 0
    for k, job in enumerate(jobs):
        if k in drop:
            continue
        if job.dependency:
            dep, gone = _renumbered(job.dependency, new_id)
            lost += gone
            job = dataclasses.replace(job, dependency=dep)  # noqa: PLW2901
        kept.append(job)
    return kept, lost


def _renumbered(dependency: str, new_id: dict[int, int]) -> tuple[str, int]:
    """A dependency string ("type:ID[:ID...][,type:...]") with its ids renumbered, and
    whether an id was on a dropped job."""
    parts, gone = [], 0
    for clause in dependency.split(","):
        kind, _, rest = clause.partition(":")
        ids = [new_id.get(int(x)) for x in rest.split(":") if x]
        if any(i is None for i in ids):
            gone = 1
        kept = [str(i) for i in ids if i is not None]
        if kept:
            parts.append(f"{kind}:{':'.join(kept)}")
    return ",".join(parts), gone


class OwnerClient(HandoffSimClient):
    """One chain's sbatch, scancel and signals: its jobs are its owner's, of its recorded
    shape (the daemon's request gives the limit; the shape is the trace's)."""

    def __init__(self, sim: Simulation, chain: TraceChain) -> None:
        super().__init__(sim, user=chain.user)
        self.chain = chain

    def _spec(self, request: SubmitRequest) -> JobSpec:
        s = self.chain.shape
        limit = request.time_limit if request.time_limit is not None else self.chain.time_limit_s
        return JobSpec(submit=self.sim.now, run=limit, time_limit=limit, nodes=s.nodes,
                       partition=s.partition, gpus=s.gpus, cpus=s.cpus, exclusive=s.exclusive,
                       user=s.user, name=request.job_name or "", qos=s.qos,
                       dependency=request.dependency or "", hold=request.hold,
                       comment=request.comment or "")  # fmt: skip


class ClusterJobs(ChainJobs):
    """:class:`ChainJobs` whose segments do what the trace's did: segment n exits of
    itself once the chain has trained its recorded segments 0..n (a job that runs a
    chunk of work and exits, as most of a trace's chains do, not only at the limit), so
    that reactive submission replays the recorded jobs; what a handoff cuts short is
    trained by the next. Only the chains still running are looked at (a replay holds a
    thousand chains, most of them over at any instant)."""

    def __init__(self, sim: Simulation, *, user: str, spec: CheckSpec, store: Store) -> None:
        super().__init__(sim, user=user, spec=spec, store=store)
        self.goals: dict[str, list[float]] = {}  # chain id -> training done after each

    def target(self, chain_id: str, segment: int) -> tuple[float, bool]:
        goals = self.goals[chain_id]
        goal = goals[min(segment, len(goals) - 1)]
        return goal, goal >= goals[-1]

    def job_ids(self) -> dict[str, list[str]]:
        return self._job_ids(active_only=True)

    def all_job_ids(self) -> dict[str, list[str]]:
        return self._job_ids(active_only=False)

    def _job_ids(self, *, active_only: bool) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        q = select(Segment).order_by(Segment.chain_id, Segment.index)
        if active_only:
            q = q.join(Chain, Chain.id == Segment.chain_id).where(Chain.state == ChainState.ACTIVE)
        with self.store.sessions() as s:
            for g in s.scalars(q):
                if g.outcome != REVOKED and g.chain_id not in (self.done if active_only else ()):
                    out.setdefault(g.chain_id, []).append(g.job_id)
        return out


@dataclass(frozen=True)
class ClusterSpec:
    """The replay of ``workload`` on ``profile``, the daemon polling every
    ``poll_interval_s``."""

    profile: ClusterProfile
    workload: Workload
    poll_interval_s: int = 300
    cost: CostModel = DEFAULT_COST
    max_sim_s: int = 30 * DAY  # after the window, for the last chains to end
    models_dir: str = ""
    model_cluster: str = ""


@dataclass
class PolicyRun:
    """What one policy's replay left: each chain's started jobs, in order, and its end."""

    chains: list[tuple[TraceChain, list[JobView], int | None]]
    submitted: dict[str, tuple[int, bool]]  # job id -> (submitted at, pre-submitted)
    others: dict[str, float]
    cycles: int


@reproducible
def run_policy(spec: ClusterSpec, warm: Simulation, policy: str, *, workdir: Path,
               base: Config | None = None,
               progress: Callable[[str], None] = lambda _: None) -> PolicyRun:  # fmt: skip
    """The workload's chains run by the daemon with ``policy`` on a fork of ``warm``."""
    wl = spec.workload
    sim = warm.fork()
    store = Store.open(f"sqlite:///{workdir / f'cluster-{policy}.sqlite'}")
    check = CheckSpec(profile=spec.profile, jobs=(), starts=(wl.window[0],), cost=spec.cost)
    client = ClusterJobs(sim, user=getpass.getuser(), spec=check, store=store)
    demo = DemoSpec(profile=spec.profile, jobs=wl.jobs, chains=len(wl.chains),
                    policy=policy, models_dir=spec.models_dir,
                    model_cluster=spec.model_cluster)  # fmt: skip
    base = base or Config()
    section = dataclasses.replace(base.daemon, poll_interval_s=spec.poll_interval_s,
                                  lease_ttl_s=3 * spec.poll_interval_s,
                                  backoff_max_s=3 * spec.poll_interval_s)  # fmt: skip
    cfg = daemon_config(dataclasses.replace(base, daemon=section), demo, policy)
    owners: dict[str, OwnerClient] = {}
    daemon = Daemon(store, client, config=cfg,
                    profile=None if cfg.policy.default in LEARNED else spec.profile,
                    marker_check=client.marker,
                    action_clients=lambda chain: owners[chain.id])  # fmt: skip
    of: dict[str, TraceChain] = {}
    t, k, cycles = wl.window[0], 0, 0
    last = wl.window[1] + spec.max_sim_s
    while t <= last and (k < len(wl.chains) or len(client.done) < len(wl.chains)):
        while k < len(wl.chains) and wl.chains[k].registered <= t:
            tc = wl.chains[k]
            chain = _daemon_chain(demo, tc, k)
            register_chain(store, chain, t, first_intent=False)
            client.work[chain.id], of[chain.id] = tc.work_s, tc
            client.goals[chain.id] = list(itertools.accumulate(tc.chunks))
            owners[chain.id] = OwnerClient(sim, tc)
            k += 1
        client.advance_to(t)
        report = daemon.cycle(t)
        cycles += 1
        if report.ended or cycles % 288 == 0:
            progress(f"{policy}: day {(t - wl.window[0]) / DAY:.1f}, {k} chains registered, "
                     f"{len(client.done)} done")  # fmt: skip
        if k == len(wl.chains) and not _active(store):
            break
        t += spec.poll_interval_s
    by_chain, submitted = client.all_job_ids(), client.submissions()
    store.engine.dispose()
    runs = [(of[cid], client.views(ids), client.done.get(cid)) for cid, ids in by_chain.items()]
    runs.sort(key=lambda r: (r[0].registered, r[0].name))
    mine = {j for ids in by_chain.values() for j in ids}
    sim.run_until(max(t, wl.window[1]) + SETTLE_S)
    return PolicyRun(runs, submitted, others(sim, mine, *wl.window), cycles)


def _active(store: Store) -> int:
    """The chains the daemon still runs."""
    with store.sessions() as s:
        return len(s.scalars(select(Chain.id).where(Chain.state == ChainState.ACTIVE)).all())


def _daemon_chain(demo: DemoSpec, tc: TraceChain, k: int) -> Chain:
    chain = demo_chain(demo, k + 1, tc.user)
    part = demo.profile.partition(tc.shape.partition)
    per_node = tc.shape.gpus // max(1, tc.shape.nodes)
    chain.name, chain.segments_target, chain.until_file = tc.name, None, MARKER
    chain.partition, chain.time_limit_s, chain.nodes = part.name, tc.time_limit_s, tc.shape.nodes
    chain.gpus_per_node, chain.gres = per_node, (f"gpu:{per_node}" if per_node else None)
    return chain


def made_of(run: PolicyRun, window: tuple[int, int]) -> dict[str, float]:
    """What the chains did to the others over ``window``, in node-hours: what they ran,
    what their successors sat pending before their predecessors ended (pre-submitted
    early), and what the handoffs gave back before the predecessors' limits."""
    t0, t1 = window

    def inside(a: float, b: float) -> float:
        return max(0.0, min(b, t1) - max(a, t0))

    ran = ahead = freed = 0.0
    segments = handoffs = 0
    for _, views, _ in run.chains:
        segments += len(views)
        for v in views:
            ran += inside(v.start or 0, v.end if v.end is not None else t1) * v.spec.nodes
        for a, b in itertools.pairwise(views):
            if a.end is None or b.start is None or a.start is None:
                continue
            sub = run.submitted.get(b.job_id, (b.spec.submit, False))[0]
            ahead += inside(sub, min(b.start, a.end)) * b.spec.nodes
            if b.start < a.end and a.time_limit is not None:
                handoffs += 1
                freed += inside(a.end, a.start + a.time_limit) * a.spec.nodes
    return {
        "segments": segments,
        "handoffs": handoffs,
        "ran_node_h": ran / HOUR,
        "pending_ahead_node_h": ahead / HOUR,
        "freed_node_h": freed / HOUR,
    }


def chains_bore(run: PolicyRun, *, bound: bool | None = None) -> dict[str, float]:
    """What the chains bore (``bound``: those of one class only): idle time, restarts
    and completion delay a chain, idle time a transition, the zero-idle share.

    The per-transition cost (J) is not given: it reads a start before the predecessor's
    limit as early, and most of a trace's segments end before their limits."""
    chains = [r for r in run.chains if bound is None or r[0].bound == bound]
    trans = [t for _, views, _ in chains for t in view_transitions(views)]
    done = [(tc, v, end) for tc, v, end in chains if end is not None and v]
    delay = [end - tc.registered - tc.work_s for tc, _, end in done if end is not None]

    def mean(xs: Sequence[float]) -> float:
        return statistics.fmean(xs) if xs else 0.0

    return {
        "chains": len(chains),
        "finished": len(done),
        "segments": sum(len(v) for _, v, _ in chains),
        "recorded_segments": sum(tc.segments for tc, _, _ in chains),
        "transitions": len(trans),
        "idle_s": float(sum(t.interruption for t in trans)),
        "mean_idle_s": mean([t.interruption for t in trans]),
        "zero_idle_share": mean([1.0 if t.interruption <= 0 else 0.0 for t in trans]),
        "mean_delay_s": mean(delay),
    }


def per_chain(run: PolicyRun) -> list[dict[str, Any]]:
    """Each chain's figures, for pairing policies chain by chain."""
    out = []
    for tc, views, end in run.chains:
        trans = view_transitions(views)
        out.append({
            "chain": tc.name, "bound": tc.bound, "limit_s": tc.time_limit_s,
            "recorded_segments": tc.segments, "segments": len(views),
            "idle_s": sum(t.interruption for t in trans),
            "delay_s": None if end is None else end - tc.registered - tc.work_s,
        })  # fmt: skip
    return out


def run_cluster(spec: ClusterSpec, policies: Sequence[str] = ("shipped", "reactive"), *,
                base: Config | None = None,
                progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:  # fmt: skip
    """Every policy on the same warm replay; per policy what the chains bore, what the
    other jobs saw, and what the difference is made of."""
    wl = spec.workload
    warm = Simulation(spec.profile, start_time=min(j.submit for j in wl.jobs))
    warm.add_jobs(wl.jobs)
    warm.run_until(wl.window[0])
    out: dict[str, Any] = {"chains": len(wl.chains), "window": list(wl.window),
                           "other_jobs": len(wl.jobs),
                           "dropped_dependencies": wl.dropped_dependencies,
                           "unmodelled_chains": wl.unmodelled,
                           "cost": spec.cost.describe(), "policies": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mirage-cluster-") as tmp:
        for name in policies:
            began = time.perf_counter()
            run = run_policy(spec, warm, name, workdir=Path(tmp), base=base, progress=progress)
            out["policies"][name] = {
                "chains": chains_bore(run),
                "bound_chains": chains_bore(run, bound=True),
                "other_chains": chains_bore(run, bound=False),
                "per_chain": per_chain(run),
                "others": run.others,
                "made_of": made_of(run, wl.window),
                "cycles": run.cycles,
                "wall_s": round(time.perf_counter() - began, 1),
            }
    return out
