"""The real ``mirage daemon`` process on the real cluster: kill -9 at its three crash
points, restart, and check in Slurm by token; then slurmctld stopped under a running daemon.

Each chain: 1-minute segments, ``--segments 2 --until-file done``, fixed-lead with a
60 s lead. So exactly one successor is pre-submitted as soon as
segment 1 runs (segment 2 is then the last of --segments 2), it
starts at once on the idle cluster, the daemon hands off (USR1: segment 1 exits 0), and
segment 2, the second job ever started, writes the marker after ``LAST_S`` and ends the
chain COMPLETED. Every count below is therefore exact: 2 jobs per chain, one per token.

The crash points are the daemon's test hook ``MIRAGE_FAULT`` (``mirage.daemon.core``):
the process SIGKILLs itself (a) after the successor's intent is committed, before sbatch;
(b) after sbatch, before the job id is committed; (c) after the handoff signal was sent,
before it is recorded. tests/unit/test_daemon_core.py covers the same points in-process
on the simulator (with a raised exception standing for the kill); here it is the real
process, the real SIGKILL, the real sbatch/squeue/sacct.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from mirage.daemon.store import (
    Chain,
    ChainState,
    Event,
    Segment,
    Submission,
    SubmissionState,
)
from mirage.slurm.cli_backend import CliSlurmClient
from tests.slurm.conftest import SLOW_PYSLURM, MirageDaemon, until

pytestmark = pytest.mark.slurm

#: seconds the last segment trains before writing the marker: after a kill it must outlive
#: the restart (lease lapse + start-up, ~6 s), so that the new daemon still sees it running
LAST_S = 20

SCRIPT = """#!/bin/bash
#SBATCH --output=slurm-%j.out
echo "$SLURM_JOB_ID" >> runs
if [ "$(wc -l < runs)" -ge 2 ]; then
  sleep {last_s}; touch done; exit 0
fi
trap 'echo "USR1: checkpoint and exit"; exit 0' USR1
sleep 300 &
wait
"""

MakeDaemon = Callable[..., MirageDaemon]


def register(d: MirageDaemon, last_s: int = LAST_S) -> tuple[str, Path]:
    """``mirage chain submit`` (the real CLI, before the daemon runs: it runs sbatch itself)."""
    work = d.root / "work"
    work.mkdir()
    script = d.root / "seg.sbatch"
    script.write_text(SCRIPT.replace("{last_s}", str(last_s)))
    out = d.cli(
        "chain", "submit", str(script), "--segments", "2", "--until-file", "done",
        "--name", f"{d.name}-{secrets.token_hex(3)}",
        "--", "-p", "gpu", "--gres=gpu:1", "--time=1", f"--chdir={work}",
    )  # fmt: skip
    assert out["first_segment"] == "submitted", out
    return str(out["chain_id"]), work


def chain_of(d: MirageDaemon, chain_id: str) -> Chain:
    with d.store.sessions() as s:
        c = s.get(Chain, chain_id)
        assert c is not None
        return c


def submissions(d: MirageDaemon) -> list[tuple[int, SubmissionState, str]]:
    with d.store.sessions() as s:
        rows = s.scalars(select(Submission).order_by(Submission.index, Submission.created_at))
        return [(x.index, x.state, x.token) for x in rows]


def segments(d: MirageDaemon) -> list[Segment]:
    with d.store.sessions() as s:
        return list(s.scalars(select(Segment).order_by(Segment.index)))


def tokens_in_slurm(d: MirageDaemon, client: CliSlurmClient, since: int) -> Counter[str]:
    """How many distinct Slurm jobs carry each of this daemon's tokens (comment and name)."""
    out: Counter[str] = Counter()
    for j in d.slurm_jobs(client, since):
        token = j.name.rpartition(".")[2]
        assert j.comment == f"mirage:{token}", (j.job_id, j.name, j.comment)
        out[token] += 1
    return out


def usr1_count(work: Path, job_id: str) -> int:
    return (work / f"slurm-{job_id}.out").read_text().count("USR1")


POINTS = ("after-intent", "after-sbatch", "during-handoff")


@pytest.mark.parametrize("backend", SLOW_PYSLURM)
def test_kill_9_at_each_crash_point_then_restart(mirage_daemons: MakeDaemon, backend: str) -> None:
    """The three points side by side (one daemon and database each): ~45 s, not 3 x 45 s."""
    since = int(time.time()) - 60
    client = CliSlurmClient(timeout=60.0)
    daemons = {p: mirage_daemons(p.replace("-", ""), backend) for p in POINTS}
    chains = {p: register(d) for p, d in daemons.items()}
    for p, d in daemons.items():
        d.start(fault=p)
    for p, d in daemons.items():
        rc = d.wait_exit(60)
        assert rc == -signal.SIGKILL, f"{p}: exit {rc}, not killed by its hook\n{d.tail()}"

    # the state each kill left behind, as recorded and as Slurm has it
    queue = {j.job_id: j for j in client.queue().jobs}
    for p, d in daemons.items():
        subs = submissions(d)
        in_slurm = tokens_in_slurm(d, client, since)
        if p == "during-handoff":
            assert [(i, st) for i, st, _ in subs] == [
                (0, SubmissionState.SUBMITTED),
                (1, SubmissionState.SUBMITTED),
            ], subs
            first = segments(d)[0]
            assert first.signalled_at is None  # the kill came before the signal's record ...
            until(  # ... but after the signal itself: the predecessor checkpoints and exits
                lambda job=first.job_id: client.queue().by_id()[job].state.is_finished,  # type: ignore[misc]
                15,
                f"{p}: the signalled predecessor to exit",
            )
            continue
        assert [(i, st) for i, st, _ in subs] == [
            (0, SubmissionState.SUBMITTED),
            (1, SubmissionState.INTENT),  # committed before sbatch ran
        ], (p, subs)
        intent = subs[1][2]
        expected = 0 if p == "after-intent" else 1
        assert in_slurm[intent] == expected, (p, in_slurm)
        assert len(segments(d)) == 1  # the successor's job id never reached the database
        if p == "after-sbatch":
            assert any(j.name.endswith(intent) for j in queue.values())

    for d in daemons.values():
        d.start()  # no fault: a plain restart on the same state
    for p, d in daemons.items():
        chain_id, _ = chains[p]
        until(
            lambda d=d, chain_id=chain_id: chain_of(d, chain_id).state is not ChainState.ACTIVE,  # type: ignore[misc]
            90,
            f"{p}: the chain to end after the restart\n{d.tail()}",
        )

    for p, d in daemons.items():
        chain_id, work = chains[p]
        c = chain_of(d, chain_id)
        assert c.state is ChainState.COMPLETED, (p, c.reason)
        assert "marker" in c.reason, (p, c.reason)
        segs = segments(d)
        assert [g.index for g in segs] == [0, 1], (p, [(g.index, g.job_id) for g in segs])
        states = [(i, st) for i, st, _ in submissions(d)]
        assert (
            states
            == {
                # never found in Slurm: LOST after unknown_timeout_s, then submitted once
                "after-intent": [
                    (0, SubmissionState.SUBMITTED),
                    (1, SubmissionState.LOST),
                    (1, SubmissionState.SUBMITTED),
                ],
                # found by its token: adopted, not submitted again
                "after-sbatch": [(0, SubmissionState.SUBMITTED), (1, SubmissionState.ADOPTED)],
                "during-handoff": [(0, SubmissionState.SUBMITTED), (1, SubmissionState.SUBMITTED)],
            }[p]
        ), p
        # in Slurm, by token: each recorded segment's token on exactly one job, and no other
        in_slurm = tokens_in_slurm(d, client, since)
        assert dict(in_slurm) == {g.token: 1 for g in segs}, (p, in_slurm)
        assert {j.job_id for j in d.slurm_jobs(client, since)} == {g.job_id for g in segs}
        assert (work / "runs").read_text().split() == [g.job_id for g in segs], p
        # the predecessor got the handoff signal exactly once (before the kill in
        # during-handoff, after the restart in the other two), and no one cancelled it
        assert usr1_count(work, segs[0].job_id) == 1, p
        assert segs[0].outcome == "CONTINUE", (p, segs[0].outcome)
        with d.store.sessions() as s:
            kinds = [e.kind for e in s.scalars(select(Event).order_by(Event.id))]
        assert "chain.end" in kinds and "cancel" not in kinds, (p, kinds)


# ---- slurmctld stopped under a running daemon ------------------------------------------


@pytest.fixture
def _not_under_xdist() -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("stops slurmctld: run alone with `pytest -m slurm_serial -p no:xdist`")


@pytest.mark.slurm_serial
@pytest.mark.usefixtures("_not_under_xdist")
@pytest.mark.parametrize("backend", SLOW_PYSLURM)
def test_slurmctld_down_for_several_polls(mirage_daemons: MakeDaemon, backend: str) -> None:
    """The controller goes away for ~20 s (10 poll intervals; a failed poll takes ~9 s) while
    segment 1 runs and the successor's decision falls due: no chain ends, the metrics say
    unreachable, and the successor is pre-submitted at the first good poll after slurmctld
    is back.
    """
    from tests.slurm.cluster_control import restart_cluster, stop_daemon
    from tests.slurm.conftest import LAB

    since = int(time.time()) - 60
    client = CliSlurmClient(timeout=60.0)
    d = mirage_daemons("outage", backend)
    d.set_lead(40)  # due 20 s into segment 1: inside the outage below
    chain_id, work = register(d, last_s=5)  # no restart to outlive here
    d.start()
    until(
        lambda: d.cli("status")["last_poll"] is not None and segments(d)[0].job_state == "RUNNING",
        30,
        f"a good poll with segment 1 running\n{d.tail()}",
    )
    assert d.metrics()["mirage_slurm_reachable"] == 1
    first = segments(d)[0]
    assert first.start is not None
    stop_daemon(LAB / "run" / "slurmctld.pid", "slurmctld")
    down_at = int(time.time())
    try:
        until(
            lambda: d.metrics()["mirage_slurm_reachable"] == 0,
            20,
            f"the daemon to see Slurm unreachable\n{d.tail()}",
        )
        # stay down until the successor's decision is due and several polls have failed
        due = first.start + 60 - 40
        until(
            lambda: (
                d.metrics().get('mirage_poll_errors_total{kind="unreachable"}', 0) >= 2
                and time.time() > due + 2
            ),
            40,
            "2 failed polls",
        )
        listed = d.cli("chain", "list")
        assert [(r["id"], r["state"]) for r in listed] == [(chain_id, "ACTIVE")], listed
        status = d.cli("status")
        assert status["last_poll"] < down_at  # no good poll since the controller went away
        assert len(segments(d)) == 1 and submissions(d)[-1][0] == 0  # no decision acted on
        m = d.metrics()
        assert m["mirage_slurm_reachable"] == 0
        # squeue gives up on a dead controller after ~9 s: the 2 s ticks overrun, counted
        assert m['mirage_cycles_skipped_total{why="overrun"}'] >= 1
    finally:
        restart_cluster()
    up_at = int(time.time())
    until(
        lambda: chain_of(d, chain_id).state is not ChainState.ACTIVE,
        90,
        f"the chain to end after slurmctld came back\n{d.tail()}",
    )
    assert d.metrics()["mirage_slurm_reachable"] == 1
    c = chain_of(d, chain_id)
    assert c.state is ChainState.COMPLETED, c.reason
    segs = segments(d)
    assert [g.index for g in segs] == [0, 1]
    with d.store.sessions() as s:
        events = list(s.scalars(select(Event).order_by(Event.id)))
    kinds = [e.kind for e in events]
    assert "poll.failed" in kinds and "poll.recovered" in kinds, kinds
    recovered = next(e for e in events if e.kind == "poll.recovered")
    intent = next(e for e in events if e.kind == "submit.intent" and e.data["index"] == 1)
    ends = [e for e in events if e.kind == "chain.end"]
    assert len(ends) == 1 and ends[0].at >= up_at - 5  # nothing ended during the outage
    assert recovered.at <= intent.at and recovered.at >= down_at  # decisions resumed after
    in_slurm = tokens_in_slurm(d, client, since)
    assert dict(in_slurm) == {g.token: 1 for g in segs}, in_slurm
    assert usr1_count(work, segs[0].job_id) == 1
