"""slurmdbd down while slurmctld answers: the trial's outage stalled every chain for three
minutes (the whole poll skipped, reported as the controller). The cycle now goes on from
squeue, which lists ended jobs with their state until MinJobAge; only what needs
accounting waits, and status and the metrics name accounting, not the controller."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mirage.daemon import health
from mirage.daemon.cli import _slurm_line
from mirage.daemon.core import Daemon
from mirage.daemon.ledger import record_intent
from mirage.daemon.status import status
from mirage.daemon.store import ChainState, Submission, SubmissionState
from mirage.sim.engine import Simulation
from mirage.slurm.types import QueueSnapshot, SlurmJob, SlurmUnreachableError
from tests.unit.daemon_support import (
    FaultySim,
    chain_state,
    make_chain,
    make_config,
    make_sim,
    make_store,
    run_cycles,
    segments_of,
)

#: slurmctld's MinJobAge default: squeue lists an ended job this long
MIN_JOB_AGE_S = 300
DBD_DOWN = "sacct: error: Problem talking to the database: Connection refused"


class DbdDown(FaultySim):
    """squeue as the controller answers it (ended jobs listed for MinJobAge); sacct fails
    while ``dbd_down``."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.dbd_down = False

    def queue(self) -> QueueSnapshot:
        snap = super().queue()
        now = self.sim.now
        listed = {j.job_id for j in snap.jobs}
        ended = [
            j
            for j in super(FaultySim, self).accounting(now - MIN_JOB_AGE_S)
            if j.state.is_finished and j.job_id not in listed
        ]
        return dataclasses.replace(snap, jobs=snap.jobs + tuple(ended))

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        if self.dbd_down:
            self.reads["sacct"] += 1
            raise SlurmUnreachableError(
                ["sacct"], 1, DBD_DOWN, "Slurm accounting (slurmdbd) unreachable"
            )
        return super().accounting(start, end, every_state)


def test_a_segment_that_ends_while_slurmdbd_is_down_gets_its_successor_at_once(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path)
    sim = DbdDown(make_sim().sim)
    chain = make_chain(store, segments=2, limit=1800)
    d = Daemon(store, sim, config=make_config("reactive"))
    run_cycles([d], sim, 0, 1200)
    sim.dbd_down = True
    run_cycles([d], sim, 1260, 1800 + 120)
    segs = segments_of(store, chain.id)
    assert len(segs) == 2, [g.job_state for g in segs]  # segment 2 went in during the outage
    assert segs[1].submitted_at <= segs[0].end + 60  # type: ignore[operator]
    report = d.last_report
    assert report is not None and report.skipped is None and report.acted
    assert "slurmdbd" in report.accounting_error
    assert d.metrics.value("mirage_slurm_accounting_reachable") == 0
    assert d.metrics.value("mirage_slurm_reachable") == 1
    assert d.metrics.value("mirage_poll_errors_total", {"kind": "accounting"}) >= 10
    facts = status(store, 1800 + 120, None)["slurm"]
    assert facts["reachable"] is True
    assert facts["accounting"]["reachable"] is False and "database" in facts["accounting"]["error"]
    line = _slurm_line(facts, 1800 + 120)
    assert line.startswith(
        "Slurm: reachable since"
    ) and "accounting (slurmdbd, sacct) UNREACHABLE" in (line)
    sim.dbd_down = False
    run_cycles([d], sim, 1800 + 180, 2 * 1800 + 600)
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    assert (health.read(store, health.ACCOUNTING_KEY) or {})["reachable"] is True


def test_a_submission_of_unknown_outcome_is_not_declared_lost_without_accounting(
    tmp_path: Path,
) -> None:
    """A job that left squeue can be seen only in sacct: while sacct cannot answer, an
    unresolved submission stays unresolved (declared lost, it would be submitted again)."""
    store = make_store(tmp_path)
    sim = DbdDown(make_sim().sim)
    chain = make_chain(store, segments=2, limit=1800)
    with store.session() as s:
        c = s.merge(chain)
        sub = record_intent(s, c, index=0, time_limit=1800, now=0, presubmit=False, reason="t")
        sub.state = SubmissionState.UNKNOWN
        token = sub.token
    d = Daemon(store, sim, config=make_config("reactive", unknown_timeout_s=600))
    sim.dbd_down = True
    run_cycles([d], sim, 0, 1800)
    with store.sessions() as s:
        got = s.get(Submission, token)
        assert got is not None and got.state is SubmissionState.UNKNOWN
    assert segments_of(store, chain.id) == []  # nothing submitted beside it
    sim.dbd_down = False
    run_cycles([d], sim, 1860, 1920)
    with store.sessions() as s:
        got = s.get(Submission, token)
        assert got is not None and got.state is SubmissionState.LOST
