"""Shared-node backfill planning (``NodePlan``), as shipped and in two former variants.

    .venv/bin/python scripts/bench/sim_nodeplan.py [--trace PATH] [--profile PATH]
        [--nodes 18] [--at 2013-03-20T00:00:00] [--hours 24] [--steps 4]

CERIT-SC's 2013 log on its calibrated profile (jobs share 80-CPU nodes, queues days deep
in March): the replay runs to ``--at``, then each variant, from a fork of that same state,
(a) replays ``--hours`` further and (b) probes one sample as ``mirage evaluate`` does
(``probe_sample``: a 48-h predecessor, then a successor submitted at ``--steps`` + 1
decision points over its run, each in a fork run until it starts).
Variants: ``shipped`` (``NodePlan``: rows in buffers with spare capacity; a partition of
every node read by slices, and on a cluster without GPUs only CPUs compared), ``indexed``
(every search copying the partition's columns by fancy indexing and comparing GPUs too,
as before 2026-11-30) and ``insert`` (that, and reallocating the arrays with
``numpy.insert`` at every new breakpoint, as before the buffers). All must give every job
the same start and estimate.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.evaluate.probes import SampleResult, load_setting_jobs, probe_sample
from mirage.evaluate.protocol import Protocol, Setting, Split
from mirage.sim import Simulation, backfill
from mirage.sim.plan import NodePlan
from mirage.slurm.types import JobState

REPO = Path(__file__).resolve().parents[2]
CERIT = REPO.parent / "shared" / "traces" / "cerit_wagap_2013" / "wagap-2013.swf.gz"


class IndexedNodePlan(NodePlan):
    """The previous search: the partition's columns copied, GPUs compared, always."""

    __slots__ = ()

    def _ok(  # noqa: PLR0917 - the method it overrides
        self, i0: int, m: int, nodes: np.ndarray, gpus: int, cpus: int, exclusive: bool
    ) -> np.ndarray:
        g, c = self._g[i0:m][:, nodes], self._c[i0:m][:, nodes]
        if exclusive:
            ok: np.ndarray = (g == self.gcap[nodes]) & (c == self.ccap[nodes])
            return ok
        fits: np.ndarray = (g >= gpus) & (c >= cpus)
        return fits


class InsertNodePlan(IndexedNodePlan):
    """The row strategy before the buffers: reallocate every array at each new breakpoint."""

    __slots__ = ()

    def _insert_row(self, k: int, t: int) -> None:
        m = len(self.times)
        self.times.insert(k, t)
        self._g = np.insert(self._g[:m], k, self._g[k - 1], axis=0)
        self._c = np.insert(self._c[:m], k, self._c[k - 1], axis=0)
        self._t = np.insert(self._t[:m], k, t)


VARIANTS: dict[str, type[NodePlan]] = {
    "shipped": NodePlan,
    "indexed": IndexedNodePlan,
    "insert": InsertNodePlan,
}


def outcome(sim: Simulation) -> list[tuple[int | None, int | None]]:
    return [(v.start, v.estimate) for v in sim.all_jobs()]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(CERIT))
    ap.add_argument("--profile", default=str(REPO / "models" / "cerit" / "profile.toml"))
    ap.add_argument("--nodes", type=int, default=18)
    ap.add_argument("--at", default="2013-03-20T00:00:00", help="UTC")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--steps", type=int, default=4, help="decision steps over the 48-h run")
    args = ap.parse_args()
    if not Path(args.trace).exists():
        sys.exit(f"needs the CERIT trace ({args.trace}): ../shared/traces, or --trace")
    at = int(datetime.fromisoformat(args.at).replace(tzinfo=UTC).timestamp())
    setting = Setting(
        trace=args.trace,
        profile=args.profile,
        nodes=args.nodes,
        load=1.0,
        split=Split("bench", 0, at + int(args.hours * 3600) + 7 * 86400),
        protocol=Protocol(),
    )
    profile, jobs = load_setting_jobs(setting)
    limit = Protocol().time_limit_s
    protocol = Protocol(step_s=-(-limit // args.steps))
    base = Simulation(profile, start_time=min(j.submit for j in jobs), track_estimates=True)
    base.add_jobs_skipping_invalid(jobs)
    warm, _ = timed(lambda: base.run_until(at))
    pending = sum(1 for v in base.all_jobs() if v.state is JobState.PENDING)
    print(f"{len(jobs)} jobs, replay to {args.at}: {warm:.1f} s; {pending} pending then")
    results: dict[str, tuple[float, float, object]] = {}
    for name, cls in VARIANTS.items():
        setattr(backfill, "NodePlan", cls)  # noqa: B010 - backfill builds its plans by this name
        try:
            fork = base.fork()
            t_replay, _ = timed(partial(fork.run_until, at + int(args.hours * 3600)))
            t_probe, probe = timed(partial(probe_sample, base, protocol))
            assert isinstance(probe, SampleResult)
            starts = (probe.succ_start.tolist(), probe.estimate.tolist())
            results[name] = (t_replay, t_probe, (outcome(fork), starts))
        finally:
            setattr(backfill, "NodePlan", NodePlan)  # noqa: B010
    print(f"{'variant':<10} {'replay ' + str(args.hours) + ' h (s)':>18} {'probe (s)':>10}")
    for name, (t_replay, t_probe, _) in results.items():
        print(f"{name:<10} {t_replay:>18.2f} {t_probe:>10.2f}")
    ship = results["shipped"]
    for name, (t_replay, t_probe, _) in results.items():
        if name != "shipped":
            ratios = f"replay x{t_replay / ship[0]:.2f}, probe x{t_probe / ship[1]:.2f}"
            print(f"{name} / shipped: {ratios}")
    same = all(r[2] == ship[2] for r in results.values())
    print(f"same starts and estimates: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
