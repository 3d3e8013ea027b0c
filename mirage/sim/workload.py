"""Turn the canonical trace table into the simulator's job specifications.

A ``JobSpec`` is immutable: it is what was asked for (and, for trace jobs, how long the
job really ran). Everything that changes while simulating lives in the engine, so that
specs can be shared between a simulation and its forks without copying.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from mirage.profile.schema import ClusterProfile, Partition

#: A stand-in for an unlimited time limit: far beyond any simulated horizon.
INFINITE = 1 << 40


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job as submitted. Times in epoch seconds, durations in seconds."""

    submit: int
    run: int  # how long the job would run if never killed
    time_limit: int | None  # None = unlimited
    nodes: int
    partition: str
    gpus: int = 0
    user: str = ""
    name: str = ""
    fails: bool = False  # ends non-zero even when it finishes within its limit
    begin: int | None = None  # not eligible before this time (sbatch --begin)
    dependency: str = ""  # "afterok:ID[:ID...][,afterany:ID...]" in simulator job ids
    hold: bool = False
    comment: str = ""
    trace_id: str = ""
    real_submit: int | None = None  # the trace's own times, for comparison only
    real_start: int | None = None
    cpus: int = 0  # CPUs over all nodes (0: not given)
    # Whole nodes, shared with no other job. None: exclusive exactly when neither GPUs nor
    # CPUs are given (traces with node counts only, such as ls6).
    exclusive: bool | None = None
    qos: str = ""  # the job QOS ("": its association's default, else "normal" if defined)

    @property
    def whole_nodes(self) -> bool:
        """Does the job take whole nodes (its ``exclusive`` flag, resolved)?"""
        if self.exclusive is not None:
            return self.exclusive
        return self.gpus <= 0 and self.cpus <= 0

    def per_node(self) -> tuple[int, int]:
        """(GPUs, CPUs) the job needs on each of its nodes when it shares them.

        Totals are spread evenly (rounded up); a sharing job takes at least one CPU per
        node, as Slurm allocates at least one CPU per task.
        """
        n = max(1, self.nodes)
        return -(-max(0, self.gpus) // n), max(1, -(-max(0, self.cpus) // n))


#: How a job whose trace has no time limit is replayed (``from_table``'s ``unknown_limit``):
#: with its own run time as its limit (it then never runs late, and backfill plans it
#: exactly), with its partition's MaxTime, or not at all.
UNKNOWN_LIMITS = ("runtime", "partition-max", "drop")
#: Above this share of a trace's jobs left out, every command says so in a warning.
UNUSED_WARN = 0.05


class TraceUseError(ValueError):
    """``--strict``: too much of the trace was left out."""


@dataclass(frozen=True)
class TraceUse:
    """How much of a trace a command used: the jobs read, those replayed, the others by
    reason, and among those replayed the fields the trace did not give (how they were
    taken)."""

    rows: int
    used: int
    dropped: dict[str, int]
    unknown: dict[str, int]

    @property
    def unused_share(self) -> float:
        return 1.0 - self.used / self.rows if self.rows else 0.0

    def line(self) -> str:
        out = f"used {self.used} of {self.rows} jobs ({1 - self.unused_share:.1%})"
        if self.dropped:
            out += "; left out: " + ", ".join(f"{k} {v}" for k, v in self.dropped.items())
        if self.unknown:
            out += "; not in the trace: " + ", ".join(f"{k} {v}" for k, v in self.unknown.items())
        return out

    def as_dict(self) -> dict[str, object]:
        return {"rows": self.rows, "used": self.used, "unused_share": self.unused_share,
                "dropped": dict(self.dropped), "unknown": dict(self.unknown)}  # fmt: skip

    def check(self, strict: bool = False) -> str | None:
        """The warning to give when more than UNUSED_WARN of the trace was left out (None
        if not); with ``strict``, a TraceUseError instead."""
        if self.unused_share <= UNUSED_WARN:
            return None
        why = ", ".join(f"{k} {v}" for k, v in sorted(self.dropped.items(), key=lambda kv: -kv[1]))
        text = (
            f"only {self.used} of the trace's {self.rows} jobs ({1 - self.unused_share:.1%}) "
            f"were replayed ({why}): every figure describes that part of the trace only"
        )
        if strict:
            raise TraceUseError(text + " (--strict)")
        return text


@dataclass
class Workload:
    """Jobs ready to replay, sorted by submit time, and what was left out and why."""

    jobs: list[JobSpec]
    dropped: dict[str, int] = field(default_factory=dict)
    rows: int = 0  # rows read
    unknown: dict[str, int] = field(default_factory=dict)  # among jobs: fields not given

    def use(self, unreadable: int = 0) -> TraceUse:
        """How much of the trace this is; ``unreadable``: rows its reader skipped."""
        dropped = {"unreadable row": unreadable} if unreadable else {}
        dropped.update(self.dropped)
        return TraceUse(self.rows + unreadable, len(self.jobs), dropped, dict(self.unknown))


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    """An Int64 column as float64 with NaN for <NA> (vectorised, no per-row pandas calls)."""
    return df[name].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)


def _opt(x: float) -> int | None:
    return None if np.isnan(x) else int(x)


def from_table(
    df: pd.DataFrame,
    profile: ClusterProfile,
    *,
    arrival_scale: float = 1.0,
    max_nodes: int | None = None,
    use_eligible: bool = True,
    unknown_limit: str = "runtime",
    procs_per_node: int | Literal["profile"] | None = None,
) -> Workload:
    """Canonical table -> job specs.

    Rows the simulator could not replay are dropped and counted by reason in
    ``Workload.dropped``: no submit/start/end ("no start/end"), an end before the start
    ("end before start"), a time limit <= 0 ("time limit <= 0"), a repeated trace job id
    after its first row ("duplicate job id"), more nodes than ``max_nodes`` (or, when it
    is None, than the job's partition has, where the profile knows) ("too many nodes"),
    more GPUs or CPUs per node than the partition's nodes have ("too many GPUs per node",
    "too many CPUs per node"). Unknown node counts count as 1, unknown limits as
    ``unknown_limit`` says (UNKNOWN_LIMITS: the run time, the partition's MaxTime, or
    dropped: "unknown time limit"), unknown partitions as the default one. Jobs with
    neither GPUs nor CPUs known take whole nodes (``JobSpec.exclusive``); the others share
    nodes. ``procs_per_node`` (a count, or "profile": the partition's CPUs per node) reads
    a job without a node count but with CPUs (an SWF log's processors) as
    ceil(CPUs / procs_per_node) nodes; without it such a job is one node.
    ``Workload.unknown`` counts, among the jobs kept, each field the trace did not give
    and how it was taken.

    ``arrival_scale`` > 1 compresses inter-arrival times (submit = t0 + (submit - t0) /
    scale), raising the load. A trace eligible time later than submit becomes a begin
    time, shifted with the submit.
    """
    _check_options(arrival_scale, unknown_limit)
    dropped: dict[str, int] = {}
    submit, start, end = _col(df, "submit"), _col(df, "start"), _col(df, "end")
    ran = ~np.isnan(submit) & ~np.isnan(start) & ~np.isnan(end)
    dropped["no start/end"] = int((~ran).sum())
    limit, gpus, cpus = _col(df, "time_limit"), _col(df, "gpus"), _col(df, "cpus")
    code = _col(df, "exit_code")

    def drop(mask: np.ndarray, reason: str) -> None:
        nonlocal ran
        hit = ran & mask
        dropped[reason] = int(hit.sum())
        ran &= ~hit

    drop(end < start, "end before start")
    drop(limit <= 0, "time limit <= 0")  # NaN compares False: unknown limits stay
    trace_ids = df["job_id"].astype(str).to_numpy()
    seen = pd.Series(trace_ids).where(ran).duplicated().to_numpy() & (trace_ids != "")
    drop(seen, "duplicate job id")
    known = {p.name: p for p in profile.partitions}
    default = profile.partition().name
    parts = df["partition"].astype(str).to_numpy()
    sim_part = np.where(np.isin(parts, list(known)), parts, default)
    nodes = _node_counts(_col(df, "nodes"), cpus, procs_per_node, known, sim_part)
    cap_nodes = np.array([_nodes_of(known[p], max_nodes) for p in sim_part], dtype=np.float64)
    drop(nodes > cap_nodes, "too many nodes")
    gpn = np.ceil(np.nan_to_num(gpus, nan=0.0) / nodes)
    cpn = np.ceil(np.nan_to_num(cpus, nan=0.0) / nodes)
    drop(gpn > np.array([known[p].gpus_per_node for p in sim_part]), "too many GPUs per node")
    drop(cpn > np.array([known[p].cpus_per_node for p in sim_part]), "too many CPUs per node")
    no_limit = np.isnan(limit)
    if unknown_limit == "drop":
        drop(no_limit, "unknown time limit")
    elif unknown_limit == "partition-max":
        part_max = [np.nan if known[p].max_time_s is None else known[p].max_time_s
                    for p in sim_part]  # fmt: skip
        limit = np.where(
            no_limit, np.array(part_max, dtype=np.float64), limit
        )  # no MaxTime either: the run time
    unknown = _unknowns(
        df, ran, no_limit, unknown_limit, ~np.isin(parts, list(known)), default,
        _nodes_note(procs_per_node),
    )  # fmt: skip
    t0 = float(np.nanmin(submit[ran])) if ran.any() else 0.0
    sim_submit = np.floor(t0 + (submit - t0) / arrival_scale)
    eligible = _col(df, "eligible")
    states = df["state"].astype(str).to_numpy()
    users, names = df["user"].astype(str).to_numpy(), df["name"].astype(str).to_numpy()
    jobs: list[JobSpec] = []
    for i in np.flatnonzero(ran):
        run = int(end[i] - start[i])
        begin = None
        if use_eligible and not np.isnan(eligible[i]) and eligible[i] > submit[i]:
            begin = int(sim_submit[i] + (eligible[i] - submit[i]))
        jobs.append(
            JobSpec(
                submit=int(sim_submit[i]),
                run=run,
                time_limit=max(1, run) if np.isnan(limit[i]) else int(limit[i]),
                nodes=int(nodes[i]),
                partition=str(sim_part[i]),
                gpus=0 if np.isnan(gpus[i]) else int(gpus[i]),
                user=str(users[i]),
                name=str(names[i]),
                fails=_failed(code[i], states[i]),
                begin=begin,
                trace_id=str(trace_ids[i]),
                real_submit=int(submit[i]),
                real_start=int(start[i]),
                cpus=0 if np.isnan(cpus[i]) else int(cpus[i]),
                exclusive=bool(np.isnan(gpus[i]) and np.isnan(cpus[i])),
            )
        )
    jobs.sort(key=lambda j: j.submit)  # stable: ties keep trace order
    return Workload(
        jobs=jobs,
        dropped={k: v for k, v in dropped.items() if v},
        rows=len(df),
        unknown=unknown,
    )


def _node_counts(
    given: np.ndarray,
    cpus: np.ndarray,
    procs_per_node: int | Literal["profile"] | None,
    known: dict[str, Partition],
    sim_part: np.ndarray,
) -> np.ndarray:
    """Each job's node count: the trace's; where it gives none, from its CPUs with
    ``procs_per_node``, else 1."""
    out = given.copy()
    if procs_per_node is not None:
        if procs_per_node == "profile":
            per = np.array([known[p].cpus_per_node for p in sim_part], dtype=np.float64)
        elif procs_per_node >= 1:
            per = np.full(len(given), float(procs_per_node))
        else:
            raise ValueError(f"procs_per_node must be at least 1, got {procs_per_node}")
        derive = np.isnan(given) & ~np.isnan(cpus) & (per > 0)
        out[derive] = np.ceil(cpus[derive] / per[derive])
    result: np.ndarray = np.nan_to_num(out, nan=1.0).clip(min=1.0)
    return result


def _nodes_note(procs_per_node: int | Literal["profile"] | None) -> str:
    if procs_per_node is None:
        return "nodes (taken as 1)"
    per = "a node's CPUs" if procs_per_node == "profile" else str(procs_per_node)
    return f"nodes (from CPUs / {per}; 1 without CPUs)"


def _check_options(arrival_scale: float, unknown_limit: str) -> None:
    if arrival_scale <= 0:
        raise ValueError(f"arrival_scale must be positive, got {arrival_scale}")
    if unknown_limit not in UNKNOWN_LIMITS:
        raise ValueError(
            f"unknown_limit: one of {', '.join(UNKNOWN_LIMITS)}, got {unknown_limit!r}"
        )


def _unknowns(  # noqa: PLR0917 - private, one call site
    df: pd.DataFrame,
    kept: np.ndarray,
    no_limit: np.ndarray,
    unknown_limit: str,
    other_part: np.ndarray,
    default: str,
    nodes_note: str = "nodes (taken as 1)",
) -> dict[str, int]:
    """Among the jobs kept, how many lacked each field, and how it was taken."""
    gpus, cpus = _col(df, "gpus"), _col(df, "cpus")
    counts = {
        nodes_note: kept & np.isnan(_col(df, "nodes")),
        f"time limit (taken as {_LIMIT_WORDS[unknown_limit]})": kept & no_limit,
        f"partition (taken as {default})": kept & other_part,
        "GPUs and CPUs (whole nodes)": kept & np.isnan(gpus) & np.isnan(cpus),
    }
    return {k: int(v.sum()) for k, v in counts.items() if v.any()}


_LIMIT_WORDS = {
    "runtime": "the run time",
    "partition-max": "the partition's MaxTime, else the run time",
    "drop": "-",
}


def _nodes_of(part: Partition, max_nodes: int | None) -> float:
    if max_nodes is not None:
        return float(max_nodes)
    return float("inf") if part.nodes is None else float(part.nodes)


def _failed(code: float, state: str) -> bool:
    """A job failed (for afterok) if it exited non-zero or the trace says so."""
    if not np.isnan(code) and code != 0:
        return True
    return state.upper().startswith(("FAILED", "OUT_OF_MEMORY", "NODE_FAIL"))
