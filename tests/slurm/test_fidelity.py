"""Simulator fidelity against the real test cluster (about 12 minutes).

Runs the scripted workload of ``mirage.sim.fidelity`` twice on the cluster and once in the
simulator configured from the captured profile (with the controller's limit-check and
priority-recalculation clocks as at each run's start: one simulated twin per real run),
and asserts the pass mark fixed before looking: the share of simulated starts within 35 s
of the real ones (mean over the two real runs) is at least the real-against-real share
minus 10 points.

The real-cluster comparison is opt-in (``MIRAGE_FIDELITY=1``, ``make fidelity``) until it
is reliably green; the check of the captured model always runs. It needs the whole
cluster to itself: marked ``slurm_serial`` (skipped under xdist), it
cancels leftover ``mirage-t-`` jobs and waits for the queue to drain first. The module
name sorts before ``test_zz_unreachable.py``, which stops the daemons.
"""

from __future__ import annotations

import os
import statistics

import pytest

from mirage.sim import fidelity as fid
from mirage.slurm.cli_backend import CliSlurmClient

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_serial]


@pytest.fixture(autouse=True)
def _not_under_xdist() -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("needs the whole cluster: run with `pytest -m slurm_serial -p no:xdist`")


def test_captured_model_matches_the_testbed_config() -> None:
    model = fid.testbed_model(CliSlurmClient(timeout=60.0))
    expected = fid.default_model()
    assert model.profile.scheduler == expected.profile.scheduler
    assert model.profile.partitions == expected.profile.partitions
    assert (model.cluster_nodes, model.cluster_cpus, model.calc_period_s) == (4, 64, 300)


def test_scripted_workload_has_no_knife_edge() -> None:
    """No start of the scripted workload hinges on a 1 s tie (no cluster needed, ~5 s).

    A tie decided by sub-second jitter splits real runs at random: the comparison below
    would then score luck (issue 3's failed run), and this check names the job instead.
    """
    edges = fid.knife_edges(fid.scripted_workload(), fid.default_model())
    assert not edges, "\n".join(
        f"{e.key} {e.what} {e.shift:+d} s moves {', '.join(e.moved)}" for e in edges
    )


@pytest.mark.skipif(
    os.environ.get("MIRAGE_FIDELITY") != "1",
    reason="needs MIRAGE_FIDELITY=1 (`make fidelity`, `make test`): about 11 minutes",
)
def test_simulated_starts_match_real_slurm() -> None:
    client = CliSlurmClient(timeout=60.0)
    jobs = fid.scripted_workload()
    model = fid.testbed_model(client)
    sim = fid.run_sim(jobs, model)
    assert fid.count_differences(sim.starts, fid.run_sim(jobs, model, backfill="easy").starts) >= 5
    assert fid.count_differences(sim.starts, fid.run_sim(jobs, model, fifo=True).starts) >= 5

    reals = []
    for _ in range(2):
        fid.drain_queue(client, prefixes=("mirage-t-",), timeout_s=600, log=print)
        reals.append(fid.run_real(client, jobs, prefix=fid.TEST_PREFIX, log=print))
    for run in reals:
        missing = [k for k, s in run.starts.items() if s is None]
        assert not missing, f"{run.label}: jobs that never started: {missing}"

    floor = fid.compare_starts(reals[0].starts, reals[1].starts)
    twins = [fid.sim_like(jobs, model, r) for r in reals]
    vs = [fid.compare_starts(t.starts, r.starts) for t, r in zip(twins, reals, strict=True)]
    share = statistics.mean(c.share for c in vs)
    print(
        f"\nreal vs real: {floor.share:.1%} within {fid.TOLERANCE_S} s "
        f"(median |diff| {floor.median_abs:.1f} s)"
    )
    for r, c in zip(reals, vs, strict=True):
        blind = fid.compare_starts(sim.starts, r.starts)
        print(
            f"sim vs {r.label}: {c.share:.1%} (median |diff| {c.median_abs:.1f} s); "
            f"without the controller's clocks: {blind.share:.1%}"
        )
    print(fid.job_table(jobs, [*reals, *twins], top=10))
    assert fid.passes(share, floor.share), (
        f"sim share {share:.1%} < real-vs-real {floor.share:.1%} - {fid.ALLOWED_GAP:.0%}"
    )
