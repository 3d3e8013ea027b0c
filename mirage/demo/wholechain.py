"""The whole-chain check: does the per-transition cost predict what whole chains bear?

``mirage.policy.cost`` charges each transition its idle time and, for an early start, the
handoff window plus that start's share of one more segment (restart R and one more
transition's idle I). That is a forecast of a chain's completion. This module measures
the completion itself: chains of a fixed amount of training are registered at staggered
instants of a replay, the real daemon (``Daemon.cycle``) runs them with a policy in the
loop, and the simulated jobs do what a chain-ready job does:

- a segment trains from ``max(its start, its predecessor's end) + R`` (it resumes from
  the checkpoint its predecessor wrote when it exited) until it ends;
- when a successor starts while its predecessor runs, the predecessor checkpoints and
  exits ``h`` later (COMPLETED, without the completion marker: the chain goes on);
- the segment in which the training reaches its total exits at that instant, and the
  chain's completion marker is there (the daemon's marker check says so): the chain ends.

So a chain whose successors start early needs more segments, and the check sees what
they cost. Chain k's training W is n0 - 1 segments and a share (k + 0.5) / N of one more
(:meth:`CheckSpec.work_s`): chains of every length, as users have. Per chain: the
completion delay ``D = end - registration - W``, made of the first wait, the restarts and
the idle transitions. The per-transition figure's forecast of the same: ``first wait +
n0 x R + the J of its first n0 - 1 transitions``, those its training has without early
starts, J charged at their mean idle time for I (what the cost's derivation means by I).
The comparison: the mean of ``D - first wait`` against the forecast's, and the
difference between two policies (shipped - reactive) against the difference of their
forecasts. The other jobs' waits and the utilisation over one window are given beside
them (:func:`others`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import itertools
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from mirage.daemon.config import Config
from mirage.daemon.core import Daemon
from mirage.daemon.ledger import register_chain
from mirage.daemon.revoke import REVOKED
from mirage.daemon.store import Chain, Segment, Store, reproducible
from mirage.demo.run import DemoSpec, HandoffSimClient, daemon_config, demo_chain
from mirage.learn.artifacts import POLICIES as LEARNED
from mirage.policy.cost import DEFAULT_COST, CostModel, Transition
from mirage.profile.schema import ClusterProfile
from mirage.sim import Simulation
from mirage.sim.errors import SimError
from mirage.sim.views import JobView, job_view
from mirage.sim.workload import JobSpec
from mirage.slurm.types import JobState

HOUR = 3600
#: The others' jobs of the window are counted once this long past it (most have started).
OTHERS_SETTLE_S = 3 * 86400
MARKER = "training.done"  # the chains' completion marker (never a file: the check's own)


@dataclass(frozen=True)
class CheckSpec:
    """Chains of ``segments`` segments' worth of training, one registered at each of
    ``starts``, on the replay of ``jobs`` on ``profile``."""

    profile: ClusterProfile
    jobs: tuple[JobSpec, ...]
    starts: tuple[int, ...]
    segments: int = 3  # n0: the segments the training fills with no early start
    time_limit_s: int = 48 * HOUR
    poll_interval_s: int = 300
    cost: CostModel = DEFAULT_COST
    max_sim_s: int = 40 * 86400  # after the last registration
    models_dir: str = ""
    model_cluster: str = ""

    def work_s(self, k: int) -> float:
        """W of the k-th chain (from 0): n0 - 1 whole segments' training (each its limit
        less the restart) and a share of one more, spread evenly over the chains. A chain
        whose training ended on a segment boundary would pay a whole extra segment for
        any early start; over chains of every length it pays g / (L - R) segments on
        average, the cost's premise."""
        share = (k + 0.5) / len(self.starts)
        return (self.segments - 1 + share) * (self.time_limit_s - self.cost.restart_s)


@dataclass
class ChainRun:
    """One chain's run: its jobs' views (started ones, in order) and when it ended."""

    name: str
    registered: int
    work_s: float
    views: list[JobView]
    revoked: int  # pre-submissions revoked (cancelled while pending, submitted again)
    # job id -> (submitted at, pre-submitted), as the daemon recorded them
    submitted: dict[str, tuple[int, bool]]
    end: int | None  # the training's end (None: it did not finish within the run)


def _trained(views: Sequence[JobView], now: int, restart_s: float) -> tuple[float, float | None]:
    """The training done by ``now`` in these segments (started, in order of start, none
    beside another), and where the last one still runs, the instant it began training."""
    total, prev_end, begin = 0.0, None, None
    for v in views:
        assert v.start is not None
        begin = max(v.start, prev_end if prev_end is not None else v.start) + restart_s
        running = v.state is JobState.RUNNING
        total += max(0.0, (now if running else (v.end or now)) - begin)
        prev_end = v.end
    last_runs = bool(views) and views[-1].state is JobState.RUNNING
    return total, begin if last_runs else None


class ChainJobs(HandoffSimClient):
    """The simulator as the check's chains see it: the chain-ready job's handoff ``h``
    after its successor starts, and the segment that completes the training exits then."""

    def __init__(self, sim: Simulation, *, user: str, spec: CheckSpec, store: Store) -> None:
        super().__init__(sim, user=user)
        self.spec = spec
        self.store = store
        self.done: dict[str, int] = {}  # chain id -> the training's end
        self.work: dict[str, float] = {}  # chain id -> its training time W

    def job_ids(self) -> dict[str, list[str]]:
        """Each chain's jobs, in segment order (revoked pre-submissions left out)."""
        out: dict[str, list[str]] = {}
        with self.store.sessions() as s:
            for g in s.scalars(select(Segment).order_by(Segment.chain_id, Segment.index)):
                if g.outcome != REVOKED:
                    out.setdefault(g.chain_id, []).append(g.job_id)
        return out

    def submissions(self) -> dict[str, tuple[int, bool]]:
        """Every segment's submission time and whether it was pre-submitted."""
        with self.store.sessions() as s:
            return {g.job_id: (g.submitted_at, g.presubmitted) for g in s.scalars(select(Segment))}

    def revoked(self) -> dict[str, int]:
        """Each chain's revoked pre-submissions."""
        out: dict[str, int] = {}
        with self.store.sessions() as s:
            for g in s.scalars(select(Segment).where(Segment.outcome == REVOKED)):
                out[g.chain_id] = out.get(g.chain_id, 0) + 1
        return out

    def view(self, job_id: str) -> JobView:
        """The job's times and state. Its pending reason is not read here, so the
        partitions' top jobs are not ranked for it (``Simulation.view`` ranks every
        pending job each call: most of a replay with many chains)."""
        return job_view(self.sim, int(job_id) - self.sim.first_id, set())

    def views(self, ids: Sequence[str]) -> list[JobView]:
        vs = [self.view(j) for j in ids]
        return sorted((v for v in vs if v.start is not None), key=lambda v: v.start or 0)

    def target(self, chain_id: str, segment: int) -> tuple[float, bool]:
        """The training done when the chain's ``segment``-th started segment (from 0)
        exits of itself, and whether the chain's training is then complete: here every
        segment trains until its limit or the chain's whole training."""
        return self.work[chain_id], True

    def _next_event(self, chains: dict[str, list[str]]) -> tuple[int, str, str, bool] | None:
        """The earliest segment exit of its own among the chains' running segments:
        (instant, chain id, job id, the training done); a chain in its handoff window
        waits for it to close."""
        best = None
        for cid, ids in chains.items():
            vs = self.views(ids)
            if cid in self.done or not vs or vs[-1].state is not JobState.RUNNING:
                continue
            if len(vs) >= 2 and vs[-2].state is JobState.RUNNING:
                continue
            trained, begin = _trained(vs, self.sim.now, self.spec.cost.restart_s)
            if begin is None:
                continue
            goal, final = self.target(cid, len(vs) - 1)
            at = math.ceil(max(begin, self.sim.now) + max(0.0, goal - trained))
            if best is None or at < best[0]:
                best = (at, cid, vs[-1].job_id, final)
        return best

    def _pairs(self, chains: dict[str, list[str]]) -> dict[str, int]:
        """Predecessors running beside their started successor, and when each exits (the
        successor's start plus the handoff window)."""
        out = {}
        for ids in chains.values():
            vs = [v for v in self.views(ids) if v.state is JobState.RUNNING]
            for pred in vs[:-1]:
                out[pred.job_id] = (vs[-1].start or 0) + int(self.spec.cost.handoff_s)
        return out

    def advance_to(self, t: int) -> None:
        """Run to ``t``, stopping where a handoff window closes or a training ends."""
        chains = self.job_ids()
        alive = (None, JobState.PENDING, JobState.RUNNING)
        live = {j for ids in chains.values() for j in ids if self.view(j).state in alive}
        live_chains = {cid: [j for j in ids if j in live] for cid, ids in chains.items()}

        def paired(_sim: Simulation) -> bool:
            return any(
                sum(1 for j in ids if self.view(j).state is JobState.RUNNING) >= 2
                for ids in live_chains.values()
            )

        while True:
            nxt = self._next_event(chains)
            until = t if nxt is None else min(t, nxt[0])
            pairs = self._pairs(chains)
            if pairs:
                exit_at = min(pairs.values())
                if exit_at <= until:
                    self.sim.run_until(max(self.sim.now, exit_at))
                    for job, at in pairs.items():
                        if at <= self.sim.now:
                            self._exit(job)
                    continue
                self.sim.run_until(until)
            elif self.sim.run_until_event(paired, until):
                continue
            if nxt is not None and nxt[0] <= self.sim.now:
                self.sim.run_until(nxt[0])
                if nxt[3]:
                    self.done[nxt[1]] = nxt[0]
                self._exit(nxt[2])
                continue
            if self.sim.now >= t:
                return
            self.sim.run_until(t)

    def _exit(self, job_id: str) -> None:
        """The job checkpoints and exits 0 now."""
        with contextlib.suppress(SimError):  # already over
            self.sim.complete(job_id)

    def marker(self, chain: Chain) -> bool | None:
        """The daemon's completion-marker check: the training has reached its total."""
        return chain.id in self.done


@reproducible
def run_policy(spec: CheckSpec, warm: Simulation, policy: str, *, workdir: Path,
               base: Config | None = None,
               progress: Callable[[str], None] = lambda _: None,
               ) -> tuple[list[ChainRun], dict[str, float]]:  # fmt: skip
    """The chains of ``spec`` run by the daemon with ``policy`` on a fork of ``warm``, and
    what the rest of the cluster saw meanwhile (:func:`others`); ``base``: the daemon's
    configuration otherwise (its poll interval is the spec's)."""
    sim = warm.fork()
    owner = getpass.getuser()
    store = Store.open(f"sqlite:///{workdir / f'chains-{policy}.sqlite'}")
    client = ChainJobs(sim, user=owner, spec=spec, store=store)
    demo = DemoSpec(profile=spec.profile, jobs=spec.jobs, chains=len(spec.starts),
                    time_limit_s=spec.time_limit_s, policy=policy, models_dir=spec.models_dir,
                    model_cluster=spec.model_cluster)  # fmt: skip
    base = base or Config()
    daemon_section = dataclasses.replace(
        base.daemon, poll_interval_s=spec.poll_interval_s,
        lease_ttl_s=3 * spec.poll_interval_s, backoff_max_s=3 * spec.poll_interval_s,
    )  # fmt: skip
    cfg = daemon_config(dataclasses.replace(base, daemon=daemon_section), demo, policy)
    learned = cfg.policy.default in LEARNED
    daemon = Daemon(store, client, config=cfg, profile=None if learned else spec.profile,
                    marker_check=client.marker)  # fmt: skip
    names, registered = {}, {}
    t, k, ended = spec.starts[0], 0, 0
    last = spec.starts[-1] + spec.max_sim_s
    while t <= last and ended < len(spec.starts):
        while k < len(spec.starts) and spec.starts[k] <= t:
            chain = demo_chain(demo, k + 1, owner)
            chain.name, chain.segments_target, chain.until_file = f"chain-{k + 1}", None, MARKER
            register_chain(store, chain, t, first_intent=False)
            client.work[chain.id] = spec.work_s(k)
            names[chain.id], registered[chain.id] = chain.name, t
            k += 1
        client.advance_to(t)
        report = daemon.cycle(t)
        ended += len(report.ended)
        if report.ended:
            progress(f"{policy}: {ended} of {len(spec.starts)} chains done")
        t += spec.poll_interval_s
    by_chain, revoked, submitted = client.job_ids(), client.revoked(), client.submissions()
    store.engine.dispose()
    runs = [
        ChainRun(names[cid], registered[cid], client.work[cid], client.views(ids),
                 revoked.get(cid, 0), {j: submitted[j] for j in ids if j in submitted},
                 client.done.get(cid))
        for cid, ids in by_chain.items()
    ]  # fmt: skip
    mine = {j for ids in by_chain.values() for j in ids}
    # the others over one window for every policy: the registrations and n0 limits after
    window_end = spec.starts[-1] + spec.segments * spec.time_limit_s
    sim.run_until(max(t, window_end) + OTHERS_SETTLE_S)
    return sorted(runs, key=lambda r: r.registered), others(sim, mine, spec.starts[0], window_end)


#: ``pending-N``: no daemon; each chain keeps N successors pending (the one-successor rule
#: of the daemon is N = 1 with every successor submitted at its predecessor's start).
PENDING = "pending-"


class PendingJobs(ChainJobs):
    """The check's chains with their jobs kept by the harness, not the daemon's store."""

    def __init__(self, sim: Simulation, *, user: str, spec: CheckSpec) -> None:
        super().__init__(sim, user=user, spec=spec, store=None)  # type: ignore[arg-type]
        self.ids: dict[str, list[str]] = {}
        self.submitted: dict[str, tuple[int, bool]] = {}

    def job_ids(self) -> dict[str, list[str]]:
        return self.ids

    def add(self, chain_id: str, name: str) -> None:
        """Submit one segment of the chain now (one node, whole, the chain's limit)."""
        part = self.spec.profile.partition()
        job = JobSpec(submit=self.sim.now, run=self.spec.time_limit_s,
                      time_limit=self.spec.time_limit_s, nodes=1, partition=part.name,
                      gpus=part.gpus_per_node, user=self.user, name=name)  # fmt: skip
        job_id = self.sim.add_job(job)
        self.sim.run_until(self.sim.now)  # the submit handled now, as slurmctld does
        self.submitted[job_id] = (self.sim.now, bool(self.ids.get(chain_id)))
        self.ids.setdefault(chain_id, []).append(job_id)

    def top_up(self, chain_id: str, name: str, depth: int) -> None:
        """Once the chain's job runs, keep ``depth`` of its jobs pending; once its
        training is done, cancel those still pending."""
        states = [self.view(j).state for j in self.ids.get(chain_id, [])]
        pending = sum(1 for x in states if x is JobState.PENDING)
        if chain_id in self.done:
            for j in self.ids[chain_id]:
                if self.view(j).state is JobState.PENDING:
                    self.sim.cancel(j)
            return
        if JobState.RUNNING in states:
            for _ in range(depth - pending):
                self.add(chain_id, name)


def run_pending(spec: CheckSpec, warm: Simulation, depth: int
                ) -> tuple[list[ChainRun], dict[str, float]]:  # fmt: skip
    """The chains of ``spec`` with ``depth`` successors kept pending from their first
    segment's start, polled as the daemon polls; a successor that starts while a segment
    of its chain runs makes it hand over ``h`` later (its own start then tops up the
    pending ones again). No daemon and no policy: what the queue position of ``depth``
    pending successors gives, and what the early starts among them cost."""
    sim = warm.fork()
    client = PendingJobs(sim, user=getpass.getuser(), spec=spec)
    names: dict[str, str] = {}
    registered: dict[str, int] = {}
    t, k = spec.starts[0], 0
    last = spec.starts[-1] + spec.max_sim_s
    while t <= last and (k < len(spec.starts) or len(client.done) < len(spec.starts)):
        client.advance_to(t)
        while k < len(spec.starts) and spec.starts[k] <= t:
            cid = f"chain-{k + 1}"
            names[cid], registered[cid] = cid, t
            client.work[cid] = spec.work_s(k)
            client.add(cid, cid)
            k += 1
        for cid in client.ids:
            client.top_up(cid, names[cid], depth)
        t += spec.poll_interval_s
    for cid in client.ids:
        client.top_up(cid, names[cid], depth)  # cancel what the last chains left pending
    runs = [
        ChainRun(names[cid], registered[cid], client.work[cid], client.views(ids), 0,
                 {j: client.submitted[j] for j in ids}, client.done.get(cid))
        for cid, ids in client.ids.items()
    ]  # fmt: skip
    mine = {j for ids in client.ids.values() for j in ids}
    window_end = spec.starts[-1] + spec.segments * spec.time_limit_s
    sim.run_until(max(t, window_end) + OTHERS_SETTLE_S)
    return sorted(runs, key=lambda r: r.registered), others(sim, mine, spec.starts[0], window_end)


def others(sim: Simulation, mine: set[str], t0: int, t1: int) -> dict[str, float]:
    """The other jobs submitted in ``[t0, t1)`` that have started: their mean and
    90th-percentile wait (submit to start); and the busy share of the nodes over
    ``[t0, t1)``, all jobs."""
    waits, busy = [], 0
    for v in sim.all_jobs():
        if v.start is None:
            continue
        if v.job_id not in mine and t0 <= v.spec.submit < t1:
            waits.append(v.start - v.spec.submit)
        end = v.end if v.end is not None else t1
        busy += max(0, min(end, t1) - max(v.start, t0)) * v.spec.nodes
    waits.sort()
    p90 = waits[min(len(waits) - 1, int(0.9 * len(waits)))] if waits else 0
    return {
        "jobs": len(waits),
        "mean_wait_s": statistics.fmean(waits) if waits else 0.0,
        "p90_wait_s": float(p90),
        "utilisation": busy / max(1, (t1 - t0) * sim.total_nodes),
    }


def transitions(run: ChainRun) -> list[Transition]:
    """The chain's transitions k -> k+1, as the cost reads them."""
    return view_transitions(run.views)


def view_transitions(views: Sequence[JobView]) -> list[Transition]:
    """The transitions between these started segments (in order of start)."""
    out = []
    for a, b in itertools.pairwise(views):
        if a.start is None or a.end is None or b.start is None or a.time_limit is None:
            continue
        out.append(Transition(a.start, a.time_limit, a.end, b.start))
    return out


def summarise(spec: CheckSpec, runs: Sequence[ChainRun]) -> dict[str, Any]:
    """A policy's chains: what they bore, and what the per-transition cost forecast.

    The forecast reads a chain's first n0 - 1 transitions only, those its training has
    without early starts; what early starts add (more segments, their transitions and
    restarts) is what the cost's early term is there to forecast. Its I is the mean idle
    time of those transitions, the run's own."""
    done = [r for r in runs if r.end is not None and r.views]
    n0 = spec.segments
    nominal = [transitions(r)[: n0 - 1] for r in done]
    trans = [t for r in done for t in transitions(r)]
    flat = [t for ts in nominal for t in ts]
    idle = statistics.fmean(t.interruption for t in flat) if flat else 0.0
    own = dataclasses.replace(spec.cost, extra_idle_s=idle)
    first = [(r.views[0].start or 0) - r.registered for r in done]
    delay = [(r.end or 0) - r.registered - r.work_s for r in done]
    beyond = [sum((v.end or 0) - (v.start or 0) for v in r.views) - r.work_s for r in done]
    forecasts = [n0 * spec.cost.restart_s + sum(t.cost(own) for t in ts) for ts in nominal]

    def mean(xs: Sequence[float]) -> float:
        return statistics.fmean(xs) if xs else 0.0

    actual = mean([d - f for d, f in zip(delay, first, strict=True)])
    forecast = mean(forecasts)
    per_chain = [
        {"chain": r.name, "registered": r.registered, "end": r.end, "work_s": r.work_s,
         "revoked": r.revoked,
         "segments": [[v.job_id, v.start, v.end, v.time_limit, *r.submitted.get(v.job_id, ())]
                      for v in r.views],
         "transitions": [[t.interruption, t.overlap] for t in transitions(r)]}
        for r in runs
    ]  # fmt: skip
    return {
        "chains": len(runs),
        "finished": len(done),
        "segments": mean([len(r.views) for r in done]),
        "transitions": len(trans),
        "handoffs": sum(1 for t in trans if t.overlap > 0),
        "revoked": sum(r.revoked for r in done),
        "mean_idle_s": mean([t.interruption for t in trans]),
        "nominal_idle_s": idle,  # the forecast's I
        "mean_J_s": mean([t.cost(own) for t in flat]),
        "mean_J_default_I_s": mean([t.cost(spec.cost) for t in flat]),
        "mean_first_wait_s": mean(first),
        "mean_delay_s": mean(delay),
        "actual_s": actual,  # mean completion delay less the first wait
        "forecast_s": forecast,  # n0 R + the J of the first n0 - 1 transitions
        "error": (forecast - actual) / actual if actual else 0.0,
        "mean_beyond_s": mean(beyond),
        "per_chain": per_chain,
    }


def compare(policy: dict[str, Any], reactive: dict[str, Any]) -> dict[str, float]:
    """The policy's gain over reactive submission: measured on the chains, and forecast by
    the per-transition cost."""
    actual = reactive["actual_s"] - policy["actual_s"]
    forecast = reactive["forecast_s"] - policy["forecast_s"]
    return {
        "gain_s": actual,
        "forecast_gain_s": forecast,
        "error": (forecast - actual) / actual if actual else 0.0,
    }


def run_check(spec: CheckSpec, policies: Sequence[str] = ("shipped", "reactive"), *,
              base: Config | None = None,
              progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:  # fmt: skip
    """Every policy on the same registrations of the same warm replay (``base``: the
    daemon's configuration but for the policy and the poll interval)."""
    warm = Simulation(spec.profile, start_time=min(j.submit for j in spec.jobs))
    warm.add_jobs(spec.jobs)
    warm.run_until(spec.starts[0])
    out: dict[str, Any] = {"policies": {}, "segments": spec.segments,
                           "time_limit_s": spec.time_limit_s,
                           "cost": spec.cost.describe()}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mirage-chains-") as tmp:
        for name in policies:
            began = time.perf_counter()
            if name.startswith(PENDING):
                runs, rest = run_pending(spec, warm, int(name.removeprefix(PENDING)))
            else:
                runs, rest = run_policy(spec, warm, name, workdir=Path(tmp), base=base,
                                        progress=progress)  # fmt: skip
            summary = summarise(spec, runs)
            summary["others"] = rest
            summary["wall_s"] = round(time.perf_counter() - began, 1)
            out["policies"][name] = summary
    if "reactive" in out["policies"]:
        for name, s in out["policies"].items():
            if name != "reactive":
                s["against_reactive"] = compare(s, out["policies"]["reactive"])
    return out
