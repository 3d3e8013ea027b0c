"""Per-job results and a run summary (simulated vs real waits, utilisation, speed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mirage.sim.engine import Simulation

QUANTILES = {"p50": 0.5, "p75": 0.75, "p90": 0.9, "p99": 0.99}


def results(sim: Simulation) -> pd.DataFrame:
    """One row per job: simulated submit/start/end/wait, and the trace's own, where known."""
    rows = []
    for v in sim.all_jobs():
        s = v.spec
        real_wait = None
        if s.real_start is not None and s.real_submit is not None:
            real_wait = s.real_start - s.real_submit
        rows.append(
            {
                "job_id": v.job_id,
                "trace_id": s.trace_id,
                "name": s.name,
                "user": s.user,
                "partition": s.partition,
                "state": v.state.value if v.state is not None else "",
                "nodes": s.nodes,
                "submit": s.submit,
                "start": v.start,
                "end": v.end if v.start is not None else None,
                "wait": None if v.start is None else v.start - s.submit,
                "real_wait": real_wait,
            }
        )
    cols = ["submit", "start", "end", "wait", "real_wait", "nodes"]
    df = pd.DataFrame(rows)
    for c in cols:
        if c in df:
            df[c] = df[c].astype("Int64")
    return df


def node_share(sim: Simulation) -> np.ndarray:
    """Per job (in job order): how many nodes' worth it holds. A whole-node job holds its
    nodes; one sharing nodes holds, on each of its nodes, the larger of its shares of the
    node's GPUs and CPUs (a trace with per-job CPUs on 128-CPU nodes would otherwise
    count a node per job, and utilisation above 1)."""
    out = np.empty(len(sim.dem))
    for i, (nodes, gpus, cpus, whole) in enumerate(sim.dem):
        if whole:
            out[i] = nodes
            continue
        first = sim.part_nodes[sim.specs[i].partition][0]
        node_g, node_c = sim.node_gpus[first], sim.node_cpus[first]
        share = max(gpus / node_g if node_g else 0.0, cpus / node_c if node_c else 0.0)
        out[i] = nodes * min(1.0, share)
    return out


def wait_stats(waits: np.ndarray) -> dict[str, float]:
    if waits.size == 0:
        return {}
    out = {"mean": float(waits.mean())}
    out.update({k: float(np.quantile(waits, q)) for k, q in QUANTILES.items()})
    out["max"] = float(waits.max())
    return out


@dataclass
class Summary:
    jobs: int
    started: int
    span_s: int
    # node-seconds held / (nodes x span); a job sharing its nodes holds the share of each
    # node its GPUs or CPUs take (the larger), so shared nodes never count twice
    utilisation: float
    wall_s: float
    jobs_per_s: float
    sim_wait: dict[str, float]
    real_wait: dict[str, float]
    dropped: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [
            f"jobs {self.jobs} (started {self.started}), dropped {self.dropped or 0}",
            f"simulated span {self.span_s / 86400:.1f} d, utilisation {self.utilisation:.3f}",
            f"wall {self.wall_s:.2f} s, {self.jobs_per_s:.0f} jobs/s",
        ]
        for label, w in (("simulated", self.sim_wait), ("real", self.real_wait)):
            parts = ", ".join(f"{k} {v:.0f}" for k, v in w.items())
            out.append(f"wait (s) {label:9}: {parts}")
        return out


def summarize(sim: Simulation, wall_s: float, dropped: dict[str, int] | None = None) -> Summary:
    df = results(sim)
    ran = df[df["start"].notna()]
    sim_waits = ran["wait"].to_numpy(dtype=np.float64)
    real = df["real_wait"].dropna().to_numpy(dtype=np.float64)
    span = 0
    util = 0.0
    if len(ran):
        first = int(df["submit"].min())
        last = int(ran["end"].max())
        span = max(1, last - first)
        held = (ran["end"] - ran["start"]).to_numpy(dtype=np.float64) * node_share(sim)[
            ran.index.to_numpy()
        ]
        util = float(held.sum()) / (sim.total_nodes * span)
    return Summary(
        jobs=len(df),
        started=len(ran),
        span_s=span,
        utilisation=util,
        wall_s=wall_s,
        jobs_per_s=len(df) / wall_s if wall_s > 0 else float("inf"),
        sim_wait=wait_stats(sim_waits),
        real_wait=wait_stats(real),
        dropped=dict(dropped or {}),
    )
