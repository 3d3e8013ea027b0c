"""1,000 chains: still one squeue and one sacct per cycle, and the cycle's own cost."""

from __future__ import annotations

import time
from pathlib import Path

from mirage.daemon.core import Daemon
from tests.unit.test_daemon_support import make_chain, make_config, make_sim, make_store

N = 1000


def test_thousand_chains_two_reads_per_cycle(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim(nodes=N)
    for i in range(N):
        make_chain(store, segments=2, limit=3600, name=f"c{i}")
    cfg = make_config("fixed-lead", lead_s=600, max_submits_per_cycle=N)
    d = Daemon(store, sim, config=cfg)
    timings: dict[int, float] = {}
    own: dict[int, float] = {}  # the daemon's own time: the cycle minus time in the simulator
    t = 0
    while t <= 3600 + 120:
        sim.advance_to(t)
        before = dict(sim.reads)
        busy = sim.busy_s
        started = time.perf_counter()
        report = d.cycle(t)
        timings[t] = time.perf_counter() - started
        own[t] = timings[t] - (sim.busy_s - busy)
        assert report.slurm_reads == 2
        assert sim.reads["squeue"] - before.get("squeue", 0) == 1
        assert sim.reads["sacct"] - before.get("sacct", 0) == 1
        t += 60
    assert len(sim.tokens()) == 2 * N  # every chain pre-submitted its successor once
    steady = sorted(v for k, v in own.items() if k not in (0, 3000, 3060))
    median = steady[len(steady) // 2]
    print(
        f"\n{N} chains, daemon's own time per cycle (whole cycle incl. simulator): "
        f"first cycle, {N} sbatch: {own[0]:.2f}s ({timings[0]:.2f}s); "
        f"{N} pre-submissions: {own[3000]:.2f}s ({timings[3000]:.2f}s); "
        f"the cycle after: {own[3060]:.2f}s ({timings[3060]:.2f}s); "
        f"steady: median {median:.3f}s, max {steady[-1]:.3f}s"
    )
    assert median < 1.0
