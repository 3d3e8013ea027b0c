"""The daemon on a replayed real trace, in accelerated time, against reactive submission.

``mirage demo --trace FILE --chains N`` (``make demo``):

1. the trace is replayed in the simulator (``mirage.sim``) up to a busy instant: by
   default the hour whose following ``segments`` time limits see the longest queue;
2. N chains of K segments (1 node, all its GPUs) are registered there, and the real
   ``Daemon.cycle(now)`` runs every ``poll_interval_s`` of simulated time, as fast as
   the machine goes, until every chain has ended; a live ``mirage status`` table shows
   them (plain periodic lines when the output is not a terminal);
3. the same warm cluster (a ``fork()``: the simulator is deterministic) runs the same
   chains again with the ``reactive`` policy, the behaviour without Mirage;
4. a gap table compares, per transition k -> k+1, gap, interruption, overlap and
   J (``mirage.policy.cost``: idle time, and for an early start the handoff window and
   the shortened segment) of the two runs.

A successor that starts while its predecessor runs gets the daemon's handoff signal;
the simulated job then checkpoints and exits at once, as ``deploy/examples`` does. The
cut-short segment counts for the time it ran, so such a chain may need one more (short)
segment than the reactive run: its extra transition has no reactive counterpart ("-").
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import select

from mirage.daemon.config import Config, config_from_dict
from mirage.daemon.core import Daemon
from mirage.daemon.ledger import register_chain
from mirage.daemon.metrics import interval_outcome
from mirage.daemon.revoke import REVOKED
from mirage.daemon.store import (
    Chain,
    ChainState,
    Segment,
    Store,
    Submission,
    new_chain_id,
    reproducible,
)
from mirage.fmt import duration
from mirage.learn.artifacts import POLICIES as LEARNED
from mirage.policy.cost import DEFAULT_COST, CostModel, Transition
from mirage.profile.schema import ClusterProfile
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.workload import JobSpec
from mirage.trace.load import SkippedRow

SCRIPT = (
    b"#!/bin/bash\n# mirage demo segment: simulated, never executed\npython train.py --resume\n"
)
#: Spans in the demo's views and table: to the minute ("0m", "1h34m").
_span = functools.partial(duration, minutes=True)
HOUR = 3600
METRICS = ("gap", "interruption", "overlap", "cost")


class DemoError(ValueError):
    """The demo cannot run as asked (the message says why)."""


@dataclass(frozen=True)
class DemoSpec:
    """What to replay and which chains to run on it."""

    profile: ClusterProfile  # node counts filled in
    jobs: tuple[JobSpec, ...]  # the trace, ready to replay (``prepare_trace``)
    trace: str = ""
    chains: int = 4
    segments: int = 3
    time_limit_s: int = 2 * HOUR
    policy: str = "fixed-lead"
    lead_s: int = 900
    models_dir: str = ""  # a trained policy: <models_dir>/<model_cluster>/<policy>/
    model_cluster: str = ""
    start: int | None = None  # replay instant the chains are registered at; None: busiest
    max_sim_s: int = 14 * 86400  # give up after this much simulated time
    cost: CostModel = DEFAULT_COST
    skipped_rows: int = 0  # rows of the trace its reader could not use


class HandoffSimClient(SimSlurmClient):
    """The simulator, whose jobs checkpoint and exit when the daemon signals a handoff."""

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        super().signal(job_id, signal, batch_only)
        self.cancel([job_id])


# ---- the replayed cluster ----------------------------------------------------------------


def load_jobs(
    path: str, fmt: str | None, profile: ClusterProfile, skipped: list[SkippedRow] | None = None
) -> tuple[JobSpec, ...]:
    """A trace's jobs as ``mirage simulate`` replays them (dependency holds included).

    With ``skipped``, the rows the reader skipped are added to it instead of logged one
    by one (the demo counts them in its summary line)."""
    from mirage.sim.prepare import prepare_trace
    from mirage.trace.load import skips_reported
    from mirage.trace.readers import load_trace

    if skipped is None:
        table = load_trace(path, fmt).jobs
    else:
        with skips_reported():
            load = load_trace(path, fmt)
        skipped.extend(load.skipped)
        table = load.jobs
    nodes = profile.partition().nodes
    jobs = prepare_trace(table, profile, max_nodes=nodes).jobs
    if not jobs:
        raise DemoError(f"{path}: no job the simulator can replay")
    return tuple(jobs)


def replay_to(spec: DemoSpec, t: int, *, estimates: bool = True) -> Simulation:
    """A fresh replay of the trace, run up to ``t``."""
    sim = Simulation(spec.profile, start_time=spec.jobs[0].submit, track_estimates=estimates)
    sim.add_jobs(spec.jobs)
    sim.run_until(t)
    return sim


def busiest_start(spec: DemoSpec) -> int:
    """An hour with no queue whose transitions (1 .. K-1 limits later) see the longest one.

    One fast replay samples the number of pending jobs every hour; the score of an hour t
    is the sum of those counts over [t + limit, t + K x limit], where the chains' segments
    end if they start at once. Only hours with an empty queue qualify (when there is one):
    the first segments then start at once, like chains already under way when the queue
    fills, and the transitions, where pre-submission matters, meet the busy hours.
    """
    sim = replay_to(spec, spec.jobs[0].submit, estimates=False)
    first, last = spec.jobs[0].submit, spec.jobs[-1].submit
    counts: list[int] = []
    t = first
    while t <= last:
        sim.run_until(t)
        counts.append(len(sim.pending))
        t += HOUR
    lo = max(1, spec.time_limit_s // HOUR)
    hi = max(lo, spec.segments * spec.time_limit_s // HOUR)
    scores = [sum(counts[i + lo : i + hi + 1]) for i in range(len(counts))]
    idle = any(c == 0 for c in counts)
    best = max(range(len(scores)), key=lambda i: (counts[i] == 0 or not idle, scores[i], -i))
    return first + best * HOUR


def queue_load(sim: Simulation) -> dict[str, int]:
    """Pending jobs, and busy / total nodes of the default partition's size."""
    busy = sum(v.spec.nodes for v in sim.running_jobs())
    return {"pending": len(sim.pending), "busy_nodes": busy, "nodes": sim.total_nodes}


# ---- chains and one daemon run -------------------------------------------------------------


def demo_chain(spec: DemoSpec, k: int, owner: str) -> Chain:
    part = spec.profile.partition()
    return Chain(
        id=new_chain_id(),
        name=f"demo-{k}",
        cluster="",
        owner=owner,
        uid=os.getuid(),
        gid=os.getgid(),
        groups=[],
        state=ChainState.ACTIVE,
        reason="",
        script=SCRIPT,
        script_sha256=hashlib.sha256(SCRIPT).hexdigest(),
        script_path="demo.sbatch",
        chdir=str(Path.cwd()),
        export="NONE",
        environment={},
        sbatch_args=[],
        partition=part.name,
        time_limit_s=spec.time_limit_s,
        nodes=1,
        gpus_per_node=part.gpus_per_node,
        gres=f"gpu:{part.gpus_per_node}" if part.gpus_per_node else None,
        segments_target=spec.segments,
        until_file=None,
        trained_s=0,
        next_index=0,
        policy="",
        rejections=0,
    )


@dataclass
class RunResult:
    """One daemon run over the replay: what happened to each chain and transition."""

    policy: str
    transitions: dict[tuple[str, int], Transition]  # (chain name, successor index k+1)
    presubmitted: dict[tuple[str, int], bool]
    chains: dict[str, dict[str, Any]]  # name -> state, segments run, trained_s
    jobs_per_segment: dict[tuple[str, int], int]  # Slurm jobs per (chain, index), not revoked
    cycles: int = 0
    max_reads_per_cycle: int = 0
    wall_s: float = 0.0
    simulated_s: int = 0
    finished: bool = False
    revoked: int = 0  # pre-submissions revoked (cancelled while pending)
    # where pre-submitted successors started against their stated 90% interval
    intervals: dict[str, int] = dataclasses.field(default_factory=dict)
    registered_at: int = 0  # the chains' registration (the replay's instant)
    gpus_per_chain: int = 0


class View(Protocol):
    def update(self, now: int, store: Store, sim: Simulation, *, final: bool = False) -> None: ...


#: ``mirage demo --policy shipped``: what ships, whatever the configuration says: the
#: [policy] defaults, with the model cluster's own policy.toml where it has one (as the
#: daemon reads them when [policy] is left as installed).
SHIPPED_POLICY = "shipped"


#: ``[policy]`` keys that say which pre-submissions an admin allows, not how a policy
#: decides: kept from the user's configuration even for ``shipped``.
ADMIN_RULES = ("max_presubmitted_per_user", "presubmit_only_limit_bound")


def daemon_config(base: Config, spec: DemoSpec, policy: str) -> Config:
    """The user's configuration, with the demo's policy (the database is the demo's),
    built by the daemon's own loader: every other key of ``[policy]`` stays the user's
    (for ``shipped``: the shipped defaults), validated as ``mirage daemon`` validates its
    file (:class:`~mirage.daemon.config.ConfigError`)."""
    # a key left unset (None, e.g. guard_margin_s) is one TOML cannot hold: left out
    data = {name: {k: v for k, v in section.items() if v is not None}
            for name, section in dataclasses.asdict(base).items()}  # fmt: skip
    ours = {"lead_s": spec.lead_s, "fallback": "reactive", "models_dir": spec.models_dir,
            "cluster": spec.model_cluster}  # fmt: skip
    if policy == SHIPPED_POLICY:  # the shipped constants, under the admin's fairness rules
        fair = {k: data["policy"][k] for k in ADMIN_RULES}
        data["policy"] = {**ours, **fair}
    else:
        data["policy"].update(ours, default=policy)
    data["daemon"]["max_submits_per_cycle"] = max(base.daemon.max_submits_per_cycle, spec.chains)
    return config_from_dict(data, "mirage demo's daemon configuration")


@reproducible
def run_chains(
    spec: DemoSpec, warm: Simulation, policy: str, base: Config, *, view: View, workdir: Path
) -> RunResult:
    """Register the chains at ``warm.now`` and cycle the daemon until they have all ended."""
    sim = warm.fork()
    owner = getpass.getuser()
    client = HandoffSimClient(sim, user=owner)
    store = Store.open(f"sqlite:///{workdir / f'demo-{policy}.sqlite'}")
    start = sim.now
    for k in range(spec.chains):  # no intent: the daemon submits segment 1 at its first cycle
        register_chain(store, demo_chain(spec, k + 1, owner), start, first_intent=False)
    cfg = daemon_config(base, spec, policy)
    # a trained policy normalises its features by the profile it was trained on (beside
    # the models), as in `mirage evaluate`: the replay's nodes are shrunk to load it
    learned = cfg.policy.default in LEARNED
    daemon = Daemon(store, client, config=cfg, profile=None if learned else spec.profile)
    result = RunResult(policy, {}, {}, {}, {}, registered_at=start,
                       gpus_per_chain=spec.profile.partition().gpus_per_node)  # fmt: skip
    ended: set[str] = set()
    t, started = start, time.perf_counter()
    while t <= start + spec.max_sim_s and len(ended) < spec.chains:
        client.advance_to(t)
        report = daemon.cycle(t)
        ended.update(report.ended)
        result.cycles += 1
        result.max_reads_per_cycle = max(result.max_reads_per_cycle, report.slurm_reads)
        view.update(t, store, sim)
        t += cfg.daemon.poll_interval_s
    result.wall_s = time.perf_counter() - started
    result.simulated_s = t - start
    result.finished = len(ended) == spec.chains
    view.update(t, store, sim, final=True)
    collect(store, result)
    store.engine.dispose()
    return result


def collect(store: Store, result: RunResult) -> None:
    """Chains, jobs per segment, and every transition, as the daemon records it.

    Times come from the segments the daemon tracked (what squeue/sacct said), paired as
    ``Daemon._transitions`` pairs them: segment k+1 started, segment k started and ended.
    """
    with store.sessions() as s:
        chains = list(s.scalars(select(Chain)))
        names = {c.id: c.name for c in chains}
        for c in chains:
            result.chains[c.name] = {
                "state": c.state.value,
                "reason": c.reason,
                "trained_s": c.trained_s,
                "segments": c.segments_target,
                "segments_run": c.next_index,
            }
        for sub in s.scalars(select(Submission)):
            if sub.state.has_job:
                key = (names[sub.chain_id], sub.index)
                result.jobs_per_segment[key] = result.jobs_per_segment.get(key, 0) + 1
        segs = s.scalars(select(Segment).order_by(Segment.chain_id, Segment.index)).all()
    for g in segs:  # a revoked pre-submission was replaced, never run: not a second job
        if g.outcome == REVOKED:
            result.revoked += 1
            result.jobs_per_segment[(names[g.chain_id], g.index)] -= 1
    segs = [g for g in segs if g.outcome != REVOKED]
    for c in chains:
        ran = [(g.start, g.end) for g in segs if g.chain_id == c.id and g.start and g.end]
        result.chains[c.name].update(_spans(ran))
    by_key = {(names[g.chain_id], g.index): g for g in segs}
    for (name, k), succ in sorted(by_key.items()):
        pred = by_key.get((name, k - 1))
        if pred is None or pred.start is None or pred.end is None or succ.start is None:
            continue
        limit = pred.time_limit_s or 0
        result.transitions[(name, k)] = Transition(pred.start, limit, pred.end, succ.start)
        result.presubmitted[(name, k)] = succ.presubmitted
        where = interval_outcome(succ.start, succ.predicted_low, succ.predicted_high)
        if where is not None:
            result.intervals[where] = result.intervals.get(where, 0) + 1


def _spans(ran: list[tuple[int, int]]) -> dict[str, Any]:
    """A chain's segments' runs: the last end, the allocation time (each segment's run) and
    the time at least one ran (their union: the training's wall time, handoffs counted once)."""
    if not ran:
        return {"end": None, "allocated_s": 0, "ran_s": 0, "segments_started": 0}
    union, last = 0, None
    for a, b in sorted(ran):
        if last is None or a > last:
            union += b - a
            last = b
        elif b > last:
            union += b - last
            last = b
    return {
        "end": max(b for _, b in ran),
        "allocated_s": sum(b - a for a, b in ran),
        "ran_s": union,
        "segments_started": len(ran),
    }


# ---- the comparison --------------------------------------------------------------------------


def _side(t: Transition | None, presubmitted: bool, cost_model: CostModel) -> dict[str, Any] | None:
    if t is None:
        return None
    return {
        "gap": t.gap,
        "interruption": t.interruption,
        "overlap": t.overlap,
        "cost": t.cost(cost_model),
        "presubmitted": presubmitted,
    }


def _means(rows: list[dict[str, Any]], side: str) -> dict[str, float | None]:
    vals = [r[side] for r in rows if r[side] is not None]
    out: dict[str, float | None] = {m: None for m in METRICS}
    if vals:
        out = {m: sum(v[m] for v in vals) / len(vals) for m in METRICS}
    out["transitions"] = len(vals)
    out["total_cost"] = sum(v["cost"] for v in vals)
    return out


def _run_summary(r: RunResult) -> dict[str, Any]:
    return {
        "policy": r.policy,
        "finished": r.finished,
        "cycles": r.cycles,
        "simulated_s": r.simulated_s,
        "wall_s": round(r.wall_s, 3),
        "max_slurm_reads_per_cycle": r.max_reads_per_cycle,
        "chains": r.chains,
        "max_jobs_per_segment": max(r.jobs_per_segment.values(), default=0),
        "revoked": r.revoked,
        "stated_intervals": dict(r.intervals),
    }


def compare(spec: DemoSpec, policy: RunResult, reactive: RunResult) -> dict[str, Any]:
    """The gap table: one row per transition of either run, both sides, and the means."""
    rows = []
    for name, k in sorted(set(policy.transitions) | set(reactive.transitions)):
        key = (name, k)
        rows.append(
            {
                "chain": name,
                "transition": f"{k}->{k + 1}",
                "policy": _side(
                    policy.transitions.get(key), policy.presubmitted.get(key, False), spec.cost
                ),
                "reactive": _side(
                    reactive.transitions.get(key), reactive.presubmitted.get(key, False), spec.cost
                ),
            }
        )
    return {
        "cost_model": spec.cost.describe(),
        "chains": chain_rows(spec, policy, reactive),
        "transitions": rows,
        "mean": {"policy": _means(rows, "policy"), "reactive": _means(rows, "reactive")},
        "runs": {"policy": _run_summary(policy), "reactive": _run_summary(reactive)},
    }


def _chain_side(spec: DemoSpec, r: RunResult, name: str) -> dict[str, Any]:
    """One chain in one run: segments, completion (registration to its last segment's end),
    idle time, handoffs, and the GPU-hours beyond the training: each segment's restart
    (the cost's R, which the simulated job does not spend) and the time two segments ran at
    once, times the chain's GPUs."""
    c = r.chains.get(name, {})
    trans = [t for (n, _k), t in r.transitions.items() if n == name]
    end = c.get("end")
    beyond_s = c.get("allocated_s", 0) - c.get("ran_s", 0)
    beyond_s += c.get("segments_started", 0) * spec.cost.restart_s
    return {
        "state": c.get("state"),
        "segments": c.get("segments_started", 0),
        "completion_s": None if end is None else end - r.registered_at,
        "idle_s": sum(t.interruption for t in trans),
        "handoffs": sum(1 for t in trans if t.overlap > 0),
        "beyond_gpu_h": beyond_s * r.gpus_per_chain / HOUR,
    }


def chain_rows(spec: DemoSpec, policy: RunResult, reactive: RunResult) -> list[dict[str, Any]]:
    """Per chain, both runs side by side (the demo's second table)."""
    return [
        {"chain": name, "policy": _chain_side(spec, policy, name),
         "reactive": _chain_side(spec, reactive, name)}
        for name in sorted(set(policy.chains) | set(reactive.chains))
    ]  # fmt: skip


# ---- views -----------------------------------------------------------------------------------


def _stamp(t: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t)) + "Z"


def _status_rows(store: Store, now: int) -> list[dict[str, Any]]:
    from mirage.daemon.status import status

    rows: list[dict[str, Any]] = status(store, now, None)["chains"]
    return rows


def _headline(label: str, now: int, start: int, sim: Simulation) -> str:
    q = queue_load(sim)
    return (
        f"{label}: simulated {_stamp(now)} (+{_span(now - start)}); queue {q['pending']} "
        f"pending, {q['busy_nodes']}/{q['nodes']} nodes busy"
    )


def _chain_cells(r: dict[str, Any], now: int) -> list[str]:
    succ, at = r["successor_job_id"], r["successor_submitted_at"]
    successor = "-"
    if succ and at is not None:
        successor = f"{succ} {r['successor_state'] or ''} (pre-submitted {_span(now - at)} ago)"
    return [
        r["name"],
        f"{r['segment'] or '-'} of {r['segments']}",
        str(r["job_id"] or "-"),
        r["job_state"] or "-" if r["state"] == "ACTIVE" else r["state"],
        _span(r["time_left_s"]),
        successor,
        _span(r["trained_s"]),
    ]


class LiveView:
    """A rich Live table of the chains (what ``mirage status`` shows), redrawn as it goes."""

    MIN_REDRAW_S = 0.1  # redraws cost DB reads: a few per wall second is enough to watch

    def __init__(self, live: Any, label: str, start: int) -> None:
        self.live, self.label, self.start = live, label, start
        self._drawn = 0.0

    def update(self, now: int, store: Store, sim: Simulation, *, final: bool = False) -> None:
        wall = time.perf_counter()
        if not final and wall - self._drawn < self.MIN_REDRAW_S:
            return
        self._drawn = wall
        from rich.table import Table

        table = Table(title=_headline(self.label, now, self.start, sim), title_justify="left")
        for col in ("chain", "segment", "job", "state", "left", "successor", "trained"):
            table.add_column(col)
        for r in _status_rows(store, now):
            table.add_row(*_chain_cells(r, now))
        self.live.update(table, refresh=True)


class LineView:
    """Plain lines (not a terminal): one every ``every_s`` of simulated time, and the last."""

    def __init__(self, echo: Any, label: str, start: int, every_s: int = 2 * HOUR) -> None:
        self.echo, self.label, self.start, self.every_s = echo, label, start, every_s
        self._next = start

    def update(self, now: int, store: Store, sim: Simulation, *, final: bool = False) -> None:
        if not final and now < self._next:
            return
        self._next = now + self.every_s
        parts = [
            f"{c[0]} {c[1]} {c[3]}" + (" +succ" if c[5] != "-" else "")
            for c in (_chain_cells(r, now) for r in _status_rows(store, now))
        ]
        self.echo(_headline(self.label, now, self.start, sim) + " | " + "; ".join(parts))


@contextmanager
def make_view(console: Any, label: str, start: int) -> Iterator[View]:
    """LiveView on a terminal, LineView otherwise (``console``: a rich Console)."""
    if not console.is_terminal:
        yield LineView(
            lambda line: console.print(line, highlight=False, soft_wrap=True), label, start
        )
        return
    from rich.live import Live

    with Live(console=console, auto_refresh=False, transient=False) as live:
        yield LiveView(live, label, start)


# ---- the whole demo --------------------------------------------------------------------------


def run_demo(spec: DemoSpec, base: Config, console: Any) -> dict[str, Any]:
    """Warm the replay, run the policy then reactive on forks of it, compare (JSON-able)."""
    start = spec.start if spec.start is not None else busiest_start(spec)
    warm = replay_to(spec, start)
    load = queue_load(warm)
    runs: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="mirage-demo-") as tmp:
        for policy in (spec.policy, "reactive"):
            label = run_label(spec, base) if policy == spec.policy else policy
            with make_view(console, label, start) as view:
                runs.append(run_chains(spec, warm, policy, base, view=view, workdir=Path(tmp)))
    out = compare(spec, runs[0], runs[1])
    part = spec.profile.partition()
    out["setup"] = {
        "trace": spec.trace,
        "profile": spec.profile.name,
        "partition": part.name,
        "nodes": part.nodes,
        "start": start,
        "start_utc": _stamp(start),
        "queue_at_start": load,
        "chains": spec.chains,
        "segments": spec.segments,
        "time_limit_s": spec.time_limit_s,
        "policy": spec.policy,
        "label": run_label(spec, base),
        "lead_s": spec.lead_s if spec.policy == "fixed-lead" else None,
        "baseline": "reactive",
        "poll_interval_s": daemon_config(base, spec, spec.policy).daemon.poll_interval_s,
        "handoff": base.daemon.handoff,
    }
    return out


def run_label(spec: DemoSpec, base: Config) -> str:
    """The policy run, as the tables name it: "shipped: qbets, guard estimate 1/6 of the
    limit", "fixed-lead (lead 15m)", "xgb"."""
    from mirage.daemon.cli import guard_text

    cfg = daemon_config(base, spec, spec.policy)
    name = cfg.policy.default
    if name == "fixed-lead":
        name = f"fixed-lead (lead {_span(spec.lead_s)})"
    guard = guard_text(cfg.policy)
    if guard:
        name += f", guard {guard}"
    return f"shipped: {name}" if spec.policy == SHIPPED_POLICY else name


def render(out: dict[str, Any], console: Any) -> None:
    """The final gap table (rich), and one honest sentence about it."""
    from rich.table import Table

    setup, pol = out["setup"], out["setup"]["label"]
    table = Table(
        title=f"Gaps per transition: {pol} vs reactive, same chains on the same replay",
    )
    table.add_column("chain")
    table.add_column("k->k+1")
    for side in (pol, "reactive"):
        for m in ("gap", "interr.", "overlap", "J"):
            table.add_column(f"{side}\n{m}" if m == "gap" else m, justify="right")
    for r in out["transitions"]:
        table.add_row(r["chain"], r["transition"], *_cells(r["policy"]), *_cells(r["reactive"]))
    means = out["mean"]
    table.add_section()
    table.add_row("mean", "", *_cells(means["policy"]), *_cells(means["reactive"]))
    console.print(table)
    console.print(
        "gap = successor start - planned end (signed); interr. = interruption, training "
        "idle; overlap = allocation held twice or given up by a handoff; "
        f"{out['cost_model']}; * = pre-submitted",
        highlight=False,
    )
    console.print(chain_table(out), highlight=False)
    console.print(
        "segs = segments run; done in = registration to the last segment's end; idle = the "
        "chain's interruptions; GPU-h+ = GPU-hours beyond the training (each segment's "
        "restart R, and the time two segments ran at once)",
        highlight=False,
    )
    console.print(verdict(out), highlight=False)
    stated = out["runs"]["policy"].get("stated_intervals") or {}
    if stated:
        from mirage.daemon.status import interval_summary

        console.print(interval_summary(stated, "this run"), highlight=False)
    q = setup["queue_at_start"]
    console.print(
        f"replay: {setup['trace']} on {setup['profile']} ({setup['nodes']} nodes of "
        f"{setup['partition']}), chains registered at {setup['start_utc']} with "
        f"{q['pending']} jobs pending; {setup['chains']} chains x {setup['segments']} "
        f"segments of {_span(setup['time_limit_s'])}, 1 node each; daemon polls every "
        f"{setup['poll_interval_s']} s",
        highlight=False,
    )


def chain_table(out: dict[str, Any]) -> Any:
    """Per chain, both runs: segments, completion, idle time, handoffs, GPU-hours beyond
    the training."""
    from rich.table import Table

    label, pol = out["setup"]["label"], out["setup"]["policy"]
    table = Table(title=f"Per chain: {label} vs reactive")
    table.add_column("chain")
    for side in (pol, "reactive"):
        for m in ("segs", "done in", "idle", "handoffs", "GPU-h+"):
            table.add_column(f"{side}\n{m}" if m == "segs" else m, justify="right")
    for r in out["chains"]:
        table.add_row(r["chain"], *_chain_cells_of(r["policy"]), *_chain_cells_of(r["reactive"]))
    return table


def _chain_cells_of(v: dict[str, Any]) -> list[str]:
    done = v["completion_s"]
    return [
        str(v["segments"]),
        "-" if done is None else _span(done) + ("" if v["state"] == "COMPLETED" else "?"),
        _span(v["idle_s"]),
        str(v["handoffs"]),
        f"{v['beyond_gpu_h']:.1f}",
    ]


def _cells(v: dict[str, Any] | None) -> list[str]:
    if v is None:
        return ["-"] * 4
    star = "*" if v.get("presubmitted") else ""
    return [
        _span(v["gap"], signed=True) + star,
        _span(v["interruption"]),
        _span(v["overlap"]),
        _span(v["cost"]),
    ]


def verdict(out: dict[str, Any]) -> str:
    pol, base = out["mean"]["policy"], out["mean"]["reactive"]
    name = out["setup"]["label"]
    if pol["cost"] is None or base["cost"] is None:
        return "no transition to compare (did the chains finish? see the runs in --json)"
    a, b = pol["cost"], base["cost"]
    if a < b:
        how = f"{(b - a) / b:.0%} lower than reactive" if b else "lower"
    elif a > b:
        how = "higher than reactive: on this replay the policy does worse"
    else:
        how = "the same as reactive"
    revoked = out["runs"]["policy"].get("revoked", 0)
    return (
        f"mean J per transition: {name}: {_span(a)} ({pol['transitions']} transitions), "
        f"reactive {_span(b)} ({base['transitions']}): {how}"
        + (f"; {revoked} pre-submission(s) revoked while pending" if revoked else "")
    )
