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
from pathlib import Path

import pytest

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
