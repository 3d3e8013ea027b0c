"""1,000 chains: still one squeue and one sacct per cycle (the cycle's cost is a benchmark:
scripts/bench/daemon_overhead.py)."""

from __future__ import annotations

from pathlib import Path

from mirage.daemon.core import Daemon
from tests.unit.daemon_support import make_chain, make_config, make_sim, make_store

N = 1000


def test_thousand_chains_two_reads_per_cycle(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim(nodes=N)
    for i in range(N):
        make_chain(store, segments=2, limit=3600, name=f"c{i}")
    cfg = make_config("fixed-lead", lead_s=600, max_submits_per_cycle=N)
    d = Daemon(store, sim, config=cfg)
    t = 0
    while t <= 3600 + 120:
        sim.advance_to(t)
        before = dict(sim.reads)
        report = d.cycle(t)
        assert report.slurm_reads == 2
        assert sim.reads["squeue"] - before.get("squeue", 0) == 1
        assert sim.reads["sacct"] - before.get("sacct", 0) == 1
        t += 60
    assert len(sim.tokens()) == 2 * N  # every chain pre-submitted its successor once
