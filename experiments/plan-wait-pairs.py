"""The planner's predicted waits beside each grid shape's true completion, per sample.

For each plan-evaluation sample of a split (the points `mirage evaluate --plans` records,
same protocol, same cache folder), this records what the planner predicts at the
decision point for every grid shape (first wait, later wait, segments, run) and a few
figures of the queue, as ``<cache>/<setting>/<t>.planpred-<tag>.npz``. With the plans
records beside them (the truth per shape), they give (predicted, true) pairs per shape
width: the data a wait correction is fitted on. Usage::

    python experiments/plan-wait-pairs.py --cluster cerit --every-h 6 \
        --test-split 2013-01-29T23:23:04:2013-02-28T23:23:04 --out pairs-feb6.csv

Beside the planner's own prediction (run times from the users' histories) it records
each shape's first wait with every job at its limit (``first_limits``) and with every
job's true run (``first_true``: what no live planner knows), for
``plan-wait-ceiling.py``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from mirage.evaluate.chainwork import ChainPoint
from mirage.evaluate.inputs import default_profile, default_trace, parse_split, read_inputs
from mirage.evaluate.lookahead import FinishedRuns
from mirage.evaluate.planrun import _points, _unit
from mirage.evaluate.plans import (
    PLANNER_VERSION,
    USER,
    PlanProtocol,
    PlanRecord,
    grid,
    plan_recorder,
    work_of,
)
from mirage.evaluate.probes import Recorder, record_all
from mirage.evaluate.protocol import Protocol, Setting, default_splits, scaled_nodes
from mirage.plan import Options, Snapshot, plan_chain
from mirage.plan.calibrate import Limits
from mirage.policy.lookahead import RunTimes
from mirage.sim.backend import SimSlurmClient
from mirage.sim.engine import Simulation
from mirage.slurm.types import SlurmJob


@dataclass
class Pred:
    t: int
    cols: np.ndarray  # (n, 5): first wait, later wait, segments, run, completion
    queue: np.ndarray  # pending jobs, pending CPUs, running CPUs, total CPUs

    def save(self, path: Path) -> None:
        np.savez_compressed(path, t=self.t, cols=self.cols, queue=self.queue)

    @classmethod
    def load(cls, path: Path) -> Pred:
        with np.load(path) as z:
            return cls(int(z["t"]), z["cols"], z["queue"])


@dataclass(frozen=True)
class _TrueRuns:
    sim: Simulation

    def predict_job(self, job: SlurmJob, now: int) -> int:
        i = self.sim._index(job.job_id)
        return max(1, min(self.sim.specs[i].run, self.sim.limit[i] or self.sim.specs[i].run))


def _record(
    sim: Simulation, protocol: Protocol, points: dict[int, ChainPoint], pp: PlanProtocol
) -> Pred:
    point = points[sim.now]
    shapes, _ = grid(sim.profile, protocol.partition, point, pp)
    work = work_of(point, pp.unit)
    fork = sim.fork()
    runtimes = RunTimes()
    FinishedRuns(fork, runtimes)
    client = SimSlurmClient(fork, user=USER)
    snap = client.queue()
    opts = Options(overhead_s=pp.overhead_s, horizon_s=pp.horizon_s)
    q = Snapshot(snap, fork.profile, fork.now, runtimes, user=USER)
    by = {c.shape: c for c in plan_chain(q, work, shapes, options=opts).candidates}
    # the same pass with every job planned to its limit (Slurm's own way)
    q_lim = Snapshot(snap, fork.profile, fork.now, Limits(), user=USER)
    lim = {c.shape: c for c in plan_chain(q_lim, work, shapes, options=opts).candidates}
    # and with every job's true run (what no live planner knows: the snapshot's limit)
    q_true = Snapshot(snap, fork.profile, fork.now, _TrueRuns(fork), user=USER)
    true = {c.shape: c for c in plan_chain(q_true, work, shapes, options=opts).candidates}
    cols = np.array(
        [[by[s].first_wait_s, by[s].later_wait_s, by[s].segments, by[s].run_s,
          by[s].completion, lim[s].first_wait_s, true[s].first_wait_s] for s in shapes],
        np.int64,
    )  # fmt: skip
    pend = [j for j in snap.jobs if j.state.name == "PENDING"]
    run = [j for j in snap.jobs if j.state.name == "RUNNING"]
    total = int(sum(sim.node_cpus))
    queue = np.array([len(pend), sum(j.cpus or 0 for j in pend),
                      sum(j.cpus or 0 for j in run), total], np.int64)  # fmt: skip
    return Pred(sim.now, cols, queue)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", default="cerit")
    ap.add_argument("--every-h", type=float, default=6.0)
    ap.add_argument("--test-split", default=None)
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--cache", default="out/probe-cache")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    trace, profile_name = default_trace(a.cluster), default_profile(a.cluster)
    assert trace is not None
    prof, df = read_inputs(trace, profile_name)
    part = prof.partition(None)
    assert part.nodes is not None
    pp = _unit(PlanProtocol(), df, part.gpus_per_node)
    first, last = int(df["submit"].min()), int(df["submit"].max())
    test = default_splits(a.cluster, prof.timezone, first, last)["test"]
    test = parse_split(a.test_split, "test", prof.timezone, test)
    points = _points(df, prof, test.start, test.end, first, pp, a.every_h, 0)
    setting = Setting(trace, profile_name, scaled_nodes(part.nodes, a.load), a.load, test,
                      Protocol())  # fmt: skip
    suffix = f".planpredz-{pp.tag()}-p{PLANNER_VERSION}.npz"
    rec = Recorder(suffix, partial(_record, points={p.t: p for p in points}, pp=pp), Pred.load)
    preds = record_all(setting, [p.t for p in points], rec, cache=a.cache, n_jobs=a.jobs)
    truths = record_all(setting, [p.t for p in points], plan_recorder(points, pp),
                        cache=a.cache, n_jobs=a.jobs)  # fmt: skip
    rows = []
    for p, pr, tr in zip(points, preds, truths, strict=True):
        rows.extend(_rows(p, pr, tr))
    pd.DataFrame(rows).to_csv(a.out, index=False)
    print(f"{len(rows)} rows from {len(points)} samples -> {a.out}")


def _rows(p: ChainPoint, pr: Pred, tr: PlanRecord) -> list[dict[str, int | float]]:
    out = []
    for k, (shape, c) in enumerate(zip(tr.shapes, pr.cols, strict=True)):
        out.append({
            "t": tr.t, "k": k, "nodes": shape[0], "cpn": shape[3], "limit": shape[2],
            "size": tr.size, "work": tr.work_s, "habitual": int(k == tr.habitual),
            "first": c[0], "later": c[1], "segments": c[2], "run": c[3],
            "pred_done": c[4], "first_limits": c[5], "first_true": c[6], "done": tr.done[k],
            "censored": int(tr.censored[k]),
            "planned_first": int(k == tr.planned_shapes[0]), "planned_done": tr.planned_done,
            "pending": pr.queue[0], "pending_cpus": pr.queue[1], "running_cpus": pr.queue[2],
            "total_cpus": pr.queue[3],
        })  # fmt: skip
    return out


if __name__ == "__main__":
    main()
