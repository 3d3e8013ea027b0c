"""What one user's chain may do to the daemon and to other users (found by a security
review): test-only estimates run as the owner, root's chains are refused, one chain's
broken sbatch stops no one else, ended chains forget their environment, woken cycles are
spaced, and the database is the daemon's alone."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import select, update

from mirage.daemon.config import Config, DaemonSection
from mirage.daemon.core import Daemon
from mirage.daemon.routing import TEST_ONLY_SCRIPT
from mirage.daemon.service import Wakeups, open_store
from mirage.daemon.store import Chain, ChainState, Submission, SubmissionState
from mirage.sim import Simulation
from mirage.sim.scenario import toy_profile
from mirage.slurm.types import (
    SlurmParseError,
    SlurmTimeoutError,
    StartEstimate,
    SubmitRequest,
)
from tests.unit.daemon_support import (
    FaultySim,
    chain_state,
    make_chain,
    make_config,
    make_store,
    run_cycles,
)


class Recorder(FaultySim):
    """Records test-only requests; ``fail`` maps a job-name prefix to what sbatch raises
    for it (after doing nothing)."""

    def __init__(self, sim: Simulation, who: str) -> None:
        super().__init__(sim)
        self.who = who
        self.asked: list[tuple[str, SubmitRequest]] = []
        self.fail: dict[str, Exception] = {}

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        self.asked.append((self.who, request))
        return StartEstimate(None, None)

    def submit(self, request: SubmitRequest) -> str:
        for prefix, exc in self.fail.items():
            if (request.job_name or "").startswith(prefix):
                raise exc
        return super().submit(request)


def test_a_chains_test_only_estimate_runs_as_its_owner(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    sim = Simulation(toy_profile(4))
    daemon_client, owner_client = Recorder(sim, "daemon"), Recorder(sim, "owner")
    chain = make_chain(store, segments=2)
    d = Daemon(
        store,
        daemon_client,
        config=make_config("reactive", test_only_per_cycle=5),
        action_clients=lambda _c: owner_client,
    )
    own = SubmitRequest(job_name="train.x", time_limit=3600, script=b"#!/bin/sh\n")
    d.router.test_only_left = 2
    d.estimate(own, chain)
    d.estimate(SubmitRequest(job_name="policy", time_limit=3600))  # a policy's: no script
    assert [w for w, _ in owner_client.asked] == ["owner"]
    assert [(w, r.script) for w, r in daemon_client.asked] == [("daemon", TEST_ONLY_SCRIPT)]


def test_a_chain_of_uid_0_is_refused_when_asked(tmp_path: Path) -> None:
    """`mirage daemon` asks it when it submits as owners and allow_root_chains is false."""
    for allowed in (False, True):
        store = make_store(tmp_path, f"root-{allowed}.sqlite")
        sim = FaultySim(Simulation(toy_profile(4)))
        chain = make_chain(store, segments=1)
        with store.sessions() as s:
            s.execute(update(Chain).where(Chain.id == chain.id).values(uid=0, gid=0))
            s.commit()
        d = Daemon(store, sim, config=make_config("reactive"), refuse_root_chains=not allowed)
        run_cycles([d], sim, 0, 120)
        got = chain_state(store, chain.id)
        if allowed:
            assert got.state is ChainState.ACTIVE and sum(sim.tokens().values()) == 1
        else:
            assert got.state is ChainState.FAILED and "allow_root_chains" in got.reason
            assert sum(sim.tokens().values()) == 0


@pytest.mark.parametrize(
    ("exc", "others_submitted"),
    [
        (SlurmParseError(["sbatch"], 0, "", "unreadable answer"), True),
        (ValueError("embedded null byte"), True),
        (SlurmTimeoutError(["sbatch"], None, "", "sbatch timed out"), False),
    ],
)
def test_one_chains_broken_sbatch_stops_no_one_else(
    tmp_path: Path, exc: Exception, others_submitted: bool
) -> None:
    """Only a controller that timed out or cannot be reached stops the cycle's other
    submissions; a chain whose own request is bad, or whose answer is garbled, does not."""
    store = make_store(tmp_path)
    sim = Recorder(Simulation(toy_profile(8)), "daemon")
    bad = make_chain(store, segments=1, name="bad")
    good = [make_chain(store, segments=1, name=f"good{i}") for i in range(3)]
    sim.fail["bad."] = exc
    d = Daemon(store, sim, config=make_config("reactive"))
    sim.advance_to(0)
    report = d.cycle(0)
    assert len(report.submitted) == (3 if others_submitted else 0)
    with store.sessions() as s:
        state = s.scalars(select(Submission.state).where(Submission.chain_id == bad.id)).one()
    refused = isinstance(exc, ValueError)
    assert state is (SubmissionState.REJECTED if refused else SubmissionState.UNKNOWN)
    assert all(chain_state(store, c.id).state is ChainState.ACTIVE for c in good)


def test_an_ended_chain_forgets_its_environment(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    sim = FaultySim(Simulation(toy_profile(4)))
    chain = make_chain(store, segments=1, limit=600)
    with store.sessions() as s:
        s.execute(update(Chain).where(Chain.id == chain.id).values(environment={"TOKEN": "x"}))
        s.commit()
    d = Daemon(store, sim, config=make_config("reactive"))
    run_cycles([d], sim, 0, 1800)
    with store.sessions() as s:
        got = s.get(Chain, chain.id)
        assert got is not None and got.state is ChainState.COMPLETED
        assert got.environment == {}


def test_woken_cycles_are_spaced() -> None:
    t = [100.0]
    w = Wakeups(lambda: t[0], gap_s=15)
    delays: Sequence[float] = [w.delay(), w.delay(), w.delay()]
    assert list(delays) == [0.0, 15.0, 30.0]  # a burst shares one cycle per gap
    t[0] = 200.0
    assert w.delay() == 0.0


def test_the_database_is_the_daemons_alone(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = open_store(Config(daemon=DaemonSection(state_dir=str(tmp_path / "state"))))
        store.set_value("k", "v")
    finally:
        os.umask(old)
    folder = tmp_path / "state"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = list(folder.iterdir())
    assert files and all(stat.S_IMODE(f.stat().st_mode) & 0o077 == 0 for f in files), [
        (f.name, oct(f.stat().st_mode)) for f in files
    ]


def test_a_chains_commands_keep_a_bounded_output(tmp_path: Path) -> None:
    """sbatch runs in the user's environment (their LD_PRELOAD may make it print without
    end): what the daemon keeps of its output is bounded, as owner or not."""
    from mirage.daemon.identity import MAX_ACTION_OUTPUT, action_clients
    from mirage.slurm.cli_backend import CliSlurmClient

    chain = make_chain(make_store(tmp_path), segments=1)
    for mode in ("always", "never"):
        config = Config(daemon=DaemonSection(run_as_owner=mode))
        client = action_clients(config)(chain)
        assert isinstance(client, CliSlurmClient)
        assert getattr(client.runner, "max_output", None) == MAX_ACTION_OUTPUT
