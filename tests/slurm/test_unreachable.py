"""With slurmctld (then slurmdbd) stopped, each backend's client (``cli``, ``pyslurm``)
raises SlurmUnreachableError, never a refusal or an empty answer, and works again once
start.sh has brought the daemon back.

Stops daemons, so it must not run beside the other Slurm tests: it is skipped under
pytest-xdist, and marked ``slurm_last`` so that a plain ``pytest -m slurm`` run takes it
after every other test (tests/conftest.py). Run it alone with
``pytest -m slurm_serial -p no:xdist``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from mirage.slurm.types import SlurmUnreachableError, SubmitRequest
from tests.slurm.cluster_control import restart_cluster, stop_daemon
from tests.slurm.conftest import BACKENDS, LAB, make_client

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_serial, pytest.mark.slurm_last]

TRUE_JOB = SubmitRequest(script=b"#!/bin/sh\ntrue\n", time_limit=60, chdir="/tmp")


@pytest.fixture(autouse=True)
def _not_under_xdist() -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("stops Slurm daemons: run alone with `pytest -m slurm_serial -p no:xdist`")


@pytest.mark.parametrize("backend", BACKENDS)
def test_slurmctld_down_then_back(backend: str, tmp_path: Path) -> None:
    client = make_client(backend)
    client.queue()
    stop_daemon(LAB / "run" / "slurmctld.pid", "slurmctld")
    try:
        with pytest.raises(SlurmUnreachableError):
            client.queue()  # 22.05: exit 0 + "errors" in the JSON
        with pytest.raises(SlurmUnreachableError):
            client.submit(TRUE_JOB)
        with pytest.raises(SlurmUnreachableError):
            client.start_estimates()
        with pytest.raises(SlurmUnreachableError):
            client.cancel(["1"])  # an action, not only the reads
        with pytest.raises(SlurmUnreachableError):
            client.hold(["1"])
    finally:
        restart_cluster()
    assert client.queue().slurm_version
    job_id = client.submit(dataclasses.replace(TRUE_JOB, chdir=str(tmp_path)))
    client.cancel([job_id])


@pytest.mark.parametrize("backend", BACKENDS)
def test_slurmdbd_down_then_back(backend: str) -> None:
    client = make_client(backend)
    since = int(time.time()) - 3600
    client.accounting(since)
    stop_daemon(LAB / "run" / "slurmdbd.pid", "slurmdbd")
    try:
        with pytest.raises(SlurmUnreachableError):
            client.accounting(since)
        with pytest.raises(SlurmUnreachableError):
            client.accounting(since, every_state=True)
        client.queue()  # the controller still answers
    finally:
        restart_cluster()
    client.accounting(since)


CHAIN_SCRIPT = b"""#!/bin/bash
trap 'exit 0' USR1
sleep 600 &
wait
"""


def test_a_chain_goes_on_while_slurmdbd_is_down(tmp_path: Path) -> None:
    """The trial's slurmdbd outage: status said the controller was unreachable, the whole
    poll was skipped, and segments that ended got successors only minutes after slurmdbd
    came back. Now, with slurmdbd stopped while segment 1 runs, segment 1's end (listed by
    squeue for MinJobAge) gets segment 2 submitted within a poll or two; status names
    accounting, not the controller; when slurmdbd is back status says so, the chain
    still active."""
    from mirage.daemon.chains import build_chain
    from mirage.daemon.config import Config, DaemonSection, PolicySection, SlurmSection
    from mirage.daemon.core import Daemon
    from mirage.daemon.identity import action_clients
    from mirage.daemon.ledger import register_chain
    from mirage.daemon.status import status
    from mirage.daemon.store import Chain, ChainState, Segment, Store
    from mirage.slurm.cli_backend import CliSlurmClient

    store = Store.open(f"sqlite:///{tmp_path / 'mirage.sqlite'}")
    chain = build_chain("job.sbatch", CHAIN_SCRIPT, ["--time=1", "--gres=gpu:1"], segments=2,
                        until_file=None, name="dbd", cwd=str(tmp_path), environ={})  # fmt: skip
    register_chain(store, chain, int(time.time()), first_intent=False)
    cfg = Config(
        daemon=DaemonSection(poll_interval_s=5, lease_ttl_s=60, run_as_owner="never"),
        slurm=SlurmSection(timeout_s=60),
        policy=PolicySection(default="reactive", guard="none"),
    )
    client = CliSlurmClient(timeout=60.0)
    d = Daemon(store, client, config=cfg, action_clients=action_clients(cfg))

    def segments() -> list[Segment]:
        with store.sessions() as s:
            return list(s.scalars(select(Segment).order_by(Segment.index)))

    def cycle_until(what: str, timeout: float, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
            d.cycle(int(time.time()))
            time.sleep(5)

    dbd_down = False
    try:
        cycle_until("segment 1 runs", 120, lambda: any(g.start for g in segments()))
        stop_daemon(LAB / "run" / "slurmdbd.pid", "slurmdbd")
        dbd_down = True
        cycle_until("segment 2 submitted", 150, lambda: len(segments()) == 2)
        first, second = segments()
        assert first.end is not None and second.submitted_at - first.end <= 15, (
            first.end, second.submitted_at,
        )  # fmt: skip
        report = d.last_report
        assert report is not None and report.acted and "slurmdbd" in report.accounting_error
        facts = status(store, int(time.time()), None)["slurm"]
        assert facts["reachable"] is True and facts["accounting"]["reachable"] is False
        restart_cluster()
        dbd_down = False

        def accounting_back() -> bool:
            return status(store, int(time.time()), None)["slurm"]["accounting"]["reachable"] is True

        cycle_until("accounting answers again", 60, accounting_back)
        with store.sessions() as s:
            c = s.get(Chain, chain.id)
            assert c is not None and c.state is ChainState.ACTIVE, c and c.reason
    finally:
        if dbd_down:
            restart_cluster()
        live = [g.job_id for g in segments() if not g.finished]
        if live:
            client.cancel(live)
