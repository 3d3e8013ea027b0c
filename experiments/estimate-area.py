"""Would the estimate guard be safe on the running jobs' part of Slurm's date?

Slurm 22.05's ``sbatch --test-only`` date is r + a (mirage.sim.testonly): r, where the
running jobs, run to their limits, leave room for the job; a, the "area" of the pending
jobs ahead. On quiet queues a can lie a day past a start that comes at once, and the
guard (veto while r + a < end + margin) no longer keeps the quiet level unharmed. The
daemon could take a back out itself (squeue lists the jobs ahead, their sizes, limits and
priorities). This records r at every decision step of each sample (cached beside the
probes as ``<t>.willrun.npz``), then walks the shipped policy's family (QBETS q behind a
guard on r + lam * a, lam in 0..1, margin m) on the tuning split, applies the selection
rule of mirage.evaluate.shipping (the safe candidate of least summed J), and reports the
choice on the test split.

    .venv/bin/python experiments/estimate-area.py ls6 models/ls6/profile.toml \
        1,1.05 4 [--jobs 2]
    .venv/bin/python experiments/estimate-area.py theta - 1 12

(cluster, profile or -, loads, sample spacing in hours; decision step 10 min.) The probes
must be recorded already (``mirage evaluate`` with the same protocol).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import numpy as np

from mirage.evaluate.harness import HOUR, Outcomes, Walker, factory, outcomes_at
from mirage.evaluate.inputs import default_profile, default_trace
from mirage.evaluate.probes import (
    PROBES,
    BaseWorld,
    Recorder,
    StepRecord,
    base_world,
    is_cached,
    record_all,
)
from mirage.evaluate.protocol import Protocol, Setting, default_splits, sample_times, scaled_nodes
from mirage.evaluate.shipping import inner_submits
from mirage.evaluate.stats import gains
from mirage.policy.base import revocable_step
from mirage.policy.cost import HELD_TWICE
from mirage.profile.schema import load_profile
from mirage.sim.engine import Simulation
from mirage.sim.testonly import will_run_start
from mirage.trace.readers import load_trace

CACHE = "out/probe-cache"


@dataclass
class WillRunCurve(StepRecord):
    """The running jobs' part of Slurm's date at each decision step (-1: none)."""

    FIELD = "willrun"
    willrun: np.ndarray


def _willrun(world: BaseWorld, tau: int) -> int:
    probe = world.sim.fork()
    i = probe._index(probe.add_job(dataclasses.replace(world.spec, submit=tau, name="succ")))
    probe._on_submit(i)
    start = will_run_start(probe, i)
    return -1 if start is None else start


def _record(sim: Simulation, protocol: Protocol) -> WillRunCurve:
    world = base_world(sim, protocol)
    if world is None:
        return WillRunCurve(sim.now, -1, np.zeros(0, np.int64))
    out = np.empty(len(world.steps), np.int64)
    for k, tau in enumerate(world.steps):
        world.sim.run_until(tau)
        out[k] = _willrun(world, tau)
    return WillRunCurve(sim.now, world.pred_start, out)


WILLRUN: Recorder[WillRunCurve] = Recorder(".willrun.npz", _record, WillRunCurve.load)


def walker(
    cluster: str, profile: str, load: float, split: str, *, every_h: float, jobs: int
) -> tuple[Walker, list[np.ndarray]]:
    trace = default_trace(cluster)
    assert trace is not None
    prof = load_profile(profile)
    df = load_trace(trace).jobs
    first, last = int(df["submit"].min()), int(df["submit"].max())
    sp = default_splits(cluster, prof.timezone, first, last)[split]
    proto = dataclasses.replace(Protocol(), step_s=600, every_s=round(every_h * HOUR))
    part = prof.partition(None)
    assert part.nodes is not None
    st = Setting(trace, profile, scaled_nodes(part.nodes, load), load, sp, proto)
    times = [t for t in sample_times(sp, proto, first) if is_cached(CACHE, st, t, PROBES)]
    probes = record_all(st, times, PROBES, cache=CACHE)
    curves = record_all(st, times, WILLRUN, cache=CACHE, n_jobs=jobs)
    ok = [c.willrun for p, c in zip(probes, curves, strict=True) if p.ok]
    return Walker(probes, proto, prof, part.name), ok


def guarded(
    w: Walker, submits: list[np.ndarray], r: list[np.ndarray], lam: float, m: float
) -> Outcomes:
    """QBETS's answers behind a guard on r + lam * (Slurm's date - r)."""
    steps, revoked = [], []
    for s, sub, curve in zip(w.samples, submits, r, strict=True):
        est, run = s.estimate[:-1], curve[:-1]
        area = np.where((est >= 0) & (run >= 0), est - run, 0)
        date = np.where(run >= 0, run + lam * area, est)
        early = (date >= 0) & (date < s.planned_end + m * HOUR)
        k, n = revocable_step(sub & ~early, early, s.succ_start, s.steps)
        steps.append(k)
        revoked.append(n)
    return outcomes_at(w.samples, steps, revoked)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cluster")
    ap.add_argument("profile")
    ap.add_argument("loads")
    ap.add_argument("every_h", type=float)
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args()
    profile = default_profile(a.cluster) if a.profile == "-" else a.profile
    loads = [float(x) for x in a.loads.split(",")]
    data = {(ld, sp): walker(a.cluster, profile, ld, sp, every_h=a.every_h, jobs=a.jobs)
            for ld in loads for sp in ("tune", "test")}  # fmt: skip
    grid = [(q, lam, m) for q in (0.75, 0.9, 0.95) for lam in (0.0, 0.25, 0.5, 0.75, 1.0)
            for m in (-4, 0, 2, 4, 8, 12, 24)]  # fmt: skip
    scores: dict[tuple[str, float, float, float], list[tuple[float, float, dict]]] = {}  # type: ignore[type-arg]
    for sp in ("tune", "test"):
        for ld in loads:
            w, r = data[(ld, sp)]
            base = {"reactive": w.run(factory("reactive", None)), "oracle": w.oracle(HELD_TWICE)}
            for q in (0.75, 0.9, 0.95):
                subs = inner_submits(w, "qbets", q)
                for lam in (0.0, 0.25, 0.5, 0.75, 1.0):
                    for m in (-4, 0, 2, 4, 8, 12, 24):
                        res = {**base, "x": guarded(w, subs, r, lam, m)}
                        per = gains(res, HELD_TWICE, boot=1000)
                        g = {lv: x.methods["x"] for lv, x in per.items()}
                        j = float(res["x"].cost(HELD_TWICE).mean()) / HOUR
                        scores.setdefault((sp, q, lam, m), []).append((ld, j, g))
    safe = [c for c in grid if all(x.no_harm for _, _, g in scores[("tune", *c)]
                                   for lv, x in g.items() if lv != "all")]  # fmt: skip
    print(f"{len(safe)} of {len(grid)} candidates safe on the tuning split")
    best = min(safe, key=lambda c: sum(j for _, j, _ in scores[("tune", *c)]), default=None)
    for c in sorted(safe, key=lambda c: sum(j for _, j, _ in scores[("tune", *c)]))[:6]:
        print("  tune", c, " ".join(f"{ld:g}: J {j:.2f}" for ld, j, _ in scores[("tune", *c)]))
    if best is None:
        print("none safe")
        return
    print("choice: qbets {:g}, lam {:g}, margin {:g} h; on the test split:".format(*best))
    for ld, _, g in scores[("test", *best)]:
        for lv, x in g.items():
            verdict = "no harm" if x.no_harm else "HARM"
            print(f"  load {ld:g} {lv:6s} share {x.share:5.0%}  vs reactive {x.harm.value:+.2f} "
                  f"[{x.harm.lo:+.2f}, {x.harm.hi:+.2f}] {verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
