"""End to end under load: the real ``mirage daemon`` process keeps 2 chains going on a busy
real cluster, time scaled down, and every transition's gap is read back from sacct.

- Background: ordinary sbatch jobs (1-3 minute limits, 1-4 GPUs, most end early), topped
  up every 2 s so that 2 always wait (``BackgroundLoad`` in conftest.py): all 16
  GPUs busy, a job submitted at any moment queues.
- Chains: 2 chains of ``--segments 3`` 1-minute segments on whole nodes' GPUs (4); each
  segment trains until 3 s before its limit, or checkpoints and exits on USR1.
- Policy: fixed-lead with a 45 s lead (the decision falls 15 s into each segment),
  every segment gets the full minute (``--segments`` counts jobs).

Asserted: the chains complete; every segment's token is on exactly one Slurm job, which
ran; every transition k -> k+1 has a gap read back from sacct (start of k+1 minus planned
end of k, interruption and overlap as in ``mirage.policy.cost``) equal to the one the daemon
recorded; successors were pre-submitted; the background kept the queue non-empty. The
same scenario, reactive against fixed-lead: ``scripts/bench/daemon_cluster.py``. ~4 min.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

import pytest
from sqlalchemy import select

from mirage.daemon.store import Chain, ChainState, Segment
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.types import JobState
from tests.slurm.conftest import (
    SLOW_PYSLURM,
    MirageDaemon,
    jobs_by_token,
    run_under_load,
    transition_table,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_serial]


@pytest.fixture(autouse=True)
def _not_under_xdist() -> None:
    # its background workload fills every GPU: other tests' jobs would queue behind it
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("fills the cluster: run alone with `pytest -m slurm_serial -p no:xdist`")


CHAINS, SEGMENTS, LIMIT_MIN, LEAD_S, PENDING = 2, 3, 1, 45, 2


@pytest.mark.parametrize("backend", SLOW_PYSLURM)
def test_chains_under_background_load_every_gap_from_sacct(
    mirage_daemons: Callable[..., MirageDaemon], backend: str
) -> None:
    client = CliSlurmClient(timeout=60.0)
    d = mirage_daemons("e2e", backend)
    d.set_lead(LEAD_S)
    run = run_under_load(
        d,
        client,
        chains=CHAINS,
        segments=SEGMENTS,
        limit_min=LIMIT_MIN,
        seed=7,
        pending=PENDING,
        timeout=420,
    )
    print(f"\nwall {run.ended - run.started} s; background jobs {len(run.load.submitted)}")
    print(transition_table({"fixed-lead": run.transitions}))

    with d.store.sessions() as s:
        chains = {c.id: c for c in s.scalars(select(Chain))}
        segs = list(s.scalars(select(Segment).order_by(Segment.chain_id, Segment.index)))
    assert set(chains) == set(run.chain_ids)
    for c in chains.values():
        assert c.state is ChainState.COMPLETED, (c.name, c.state, c.reason)
        assert c.trained_s >= SEGMENTS * LIMIT_MIN * 60 - 59, (c.name, c.trained_s)

    # every segment ran exactly once: its token on one Slurm job, which started and ended
    jobs = jobs_by_token(d, client, run.since)
    assert Counter(len(v) for v in jobs.values()) == Counter({1: len(segs)}), jobs
    assert set(jobs) == {g.token for g in segs}
    for g in segs:
        (job,) = jobs[g.token]
        assert job.job_id == g.job_id and job.start is not None and job.end is not None, job
        assert job.comment == f"mirage:{g.token}", (job.job_id, job.comment)
        assert job.state is JobState.COMPLETED, (g.index, job.state)  # exit 0, on USR1 too
    per_chain = Counter(g.chain_id for g in segs)
    assert all(n >= SEGMENTS for n in per_chain.values()), per_chain

    # every transition has its gap from sacct, and the daemon recorded the same one
    by_chain = Counter(t.chain for t in run.transitions)
    assert by_chain == Counter({chains[c].name: n - 1 for c, n in per_chain.items()}), by_chain
    for t in run.transitions:
        assert t.recorded_gap == t.gap, (t.chain, t.index, t.recorded_gap, t.gap)
        assert t.presubmitted, (t.chain, t.index)  # the policy acted before each end

    # the workload did keep the cluster busy while the transitions happened
    first = min(t.times.pred_start for t in run.transitions)
    last = max(t.times.succ_start for t in run.transitions)
    share = run.load.busy_share(first, last)
    print(f"queue non-empty and >= 12 GPUs busy in {share:.0%} of the samples")
    assert share >= 0.6, run.load.samples
