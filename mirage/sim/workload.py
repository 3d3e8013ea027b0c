"""Turn the canonical trace table into the simulator's job specifications.

A ``JobSpec`` is immutable: it is what was asked for (and, for trace jobs, how long the
job really ran). Everything that changes while simulating lives in the engine, so that
specs can be shared between a simulation and its forks without copying.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mirage.profile.schema import ClusterProfile

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


@dataclass
class Workload:
    """Jobs ready to replay, sorted by submit time, and what was left out and why."""

    jobs: list[JobSpec]
    dropped: dict[str, int] = field(default_factory=dict)


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    """An Int64 column as float64 with NaN for <NA> (vectorised, no per-row pandas calls)."""
    return df[name].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)


def _opt(x: float) -> int | None:
    return None if np.isnan(x) else int(x)


def from_table(
    df: pd.DataFrame,
    profile: ClusterProfile,
    arrival_scale: float = 1.0,
    max_nodes: int | None = None,
    use_eligible: bool = True,
) -> Workload:
    """Canonical table -> job specs.

    Rows without start or end (never ran) are dropped and counted, as are jobs larger than
    ``max_nodes`` (the simulated partition could never run them). ``arrival_scale`` > 1
    compresses inter-arrival times (submit = t0 + (submit - t0) / scale), raising the load.
    A trace eligible time later than submit becomes a begin time, shifted with the submit.
    """
    if arrival_scale <= 0:
        raise ValueError(f"arrival_scale must be positive, got {arrival_scale}")
    dropped: dict[str, int] = {}
    submit, start, end = _col(df, "submit"), _col(df, "start"), _col(df, "end")
    ran = ~np.isnan(submit) & ~np.isnan(start) & ~np.isnan(end) & (end >= start)
    dropped["no start/end"] = int((~ran).sum())
    nodes = np.nan_to_num(_col(df, "nodes"), nan=1.0).clip(min=1.0)
    if max_nodes is not None:
        too_big = ran & (nodes > max_nodes)
        dropped["too many nodes"] = int(too_big.sum())
        ran &= ~too_big
    t0 = float(np.nanmin(submit[ran])) if ran.any() else 0.0
    sim_submit = np.floor(t0 + (submit - t0) / arrival_scale)
    eligible = _col(df, "eligible")
    limit, gpus, code = _col(df, "time_limit"), _col(df, "gpus"), _col(df, "exit_code")
    known = {p.name for p in profile.partitions}
    default = profile.partition().name
    parts = df["partition"].astype(str).to_numpy()
    states = df["state"].astype(str).to_numpy()
    users, names = df["user"].astype(str).to_numpy(), df["name"].astype(str).to_numpy()
    trace_ids = df["job_id"].astype(str).to_numpy()
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
                time_limit=run if np.isnan(limit[i]) else int(limit[i]),
                nodes=int(nodes[i]),
                partition=str(parts[i]) if parts[i] in known else default,
                gpus=0 if np.isnan(gpus[i]) else int(gpus[i]),
                user=str(users[i]),
                name=str(names[i]),
                fails=_failed(code[i], states[i]),
                begin=begin,
                trace_id=str(trace_ids[i]),
                real_submit=int(submit[i]),
                real_start=int(start[i]),
            )
        )
    jobs.sort(key=lambda j: j.submit)  # stable: ties keep trace order
    return Workload(jobs=jobs, dropped={k: v for k, v in dropped.items() if v})


def _failed(code: float, state: str) -> bool:
    """A job failed (for afterok) if it exited non-zero or the trace says so."""
    if not np.isnan(code) and code != 0:
        return True
    return state.upper().startswith(("FAILED", "OUT_OF_MEMORY", "NODE_FAIL"))
