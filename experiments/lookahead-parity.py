"""How closely the look-ahead's snapshot simulation, given the true run times, reproduces
a fork of the ls6 replay with later arrivals dropped (the runtime oracle's world).

    .venv/bin/python experiments/lookahead-parity.py [LOAD] [SAMPLES] [EVERY_K_STEPS]
    (default 1.13 6 8: every eighth decision step of 6 test samples, about a minute)

Both start from the same instant; the look-ahead sees only the simulator's ``squeue``
snapshot (:class:`~mirage.sim.backend.SimSlurmClient`), as the daemon sees the real one.
Prints the share of steps whose successor starts within 6 minutes and quantiles of the
difference (look-ahead minus fork, hours).
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from mirage.evaluate.inputs import default_profile, default_trace
from mirage.evaluate.lookahead import TrueRunTimes
from mirage.evaluate.probes import base_world, load_setting_jobs
from mirage.evaluate.protocol import Protocol, Setting, default_splits, sample_times, scaled_nodes
from mirage.policy.lookahead import Request, lookahead_starts
from mirage.profile.schema import load_profile
from mirage.sim.backend import SimSlurmClient
from mirage.sim.engine import Simulation
from mirage.trace.readers import load_trace


def main() -> None:
    load = float(sys.argv[1]) if len(sys.argv) > 1 else 1.13
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    every = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    name = default_profile("ls6")
    trace = default_trace("ls6")
    if trace is None:
        raise SystemExit("no ls6 trace found")
    df = load_trace(trace).jobs
    first, last = int(df["submit"].min()), int(df["submit"].max())
    profile0 = load_profile(name)
    split = default_splits("ls6", profile0.timezone, first, last)["test"]
    nodes = scaled_nodes(profile0.partition(None).nodes or 0, load)
    setting = Setting(trace, name, nodes, load, split, Protocol())
    times = sample_times(split, setting.protocol, first)
    profile, jobs = load_setting_jobs(setting)
    sim = Simulation(profile, start_time=min(j.submit for j in jobs), track_estimates=False)
    sim.add_jobs_skipping_invalid(jobs)
    diffs = []
    for t in times[:: max(1, len(times) // n)][:n]:
        sim.run_until(t)
        world = base_world(sim, setting.protocol)
        if world is None:
            continue
        base, spec = world.sim, world.spec
        client = SimSlurmClient(base)
        req = Request(spec.partition, spec.nodes, spec.gpus, int(spec.time_limit or 0))
        for tau in world.steps[::every]:
            base.run_until(tau)
            fork = base.fork()
            fork.drop_future_submits()
            job = fork.add_job(dataclasses.replace(spec, submit=tau, name="succ"))
            truth = fork.run_until_started(job, until=tau + 14 * 86400)
            if truth is None:
                continue
            (start,) = lookahead_starts(client.queue(), profile, tau, TrueRunTimes(base), [req],
                                        to_limit={world.pred_id})  # fmt: skip
            diffs.append((start - truth) / 3600)
    d = np.array(diffs)
    print(f"load {load:g}: {d.size} steps; within 0.1 h: {np.mean(np.abs(d) <= 0.1):.0%}")
    print(
        "difference quantiles (0, 5, 50, 95, 100%), h:",
        np.quantile(d, [0, 0.05, 0.5, 0.95, 1]).round(2),
    )


if __name__ == "__main__":
    main()
