"""With slurmctld (then slurmdbd) stopped, the client raises SlurmUnreachableError, and
works again once start.sh has brought the daemon back.

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

from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.types import SlurmUnreachableError, SubmitRequest
from tests.slurm.cluster_control import restart_cluster, stop_daemon
from tests.slurm.conftest import LAB

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_serial, pytest.mark.slurm_last]

TRUE_JOB = SubmitRequest(script=b"#!/bin/sh\ntrue\n", time_limit=60, chdir="/tmp")


@pytest.fixture(autouse=True)
def _not_under_xdist() -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("stops Slurm daemons: run alone with `pytest -m slurm_serial -p no:xdist`")


def test_slurmctld_down_then_back(tmp_path: Path) -> None:
    client = CliSlurmClient(timeout=60.0)
    client.queue()
    stop_daemon(LAB / "run" / "slurmctld.pid", "slurmctld")
    try:
        with pytest.raises(SlurmUnreachableError):
            client.queue()  # 22.05: exit 0 + "errors" in the JSON
        with pytest.raises(SlurmUnreachableError):
            client.submit(TRUE_JOB)
        with pytest.raises(SlurmUnreachableError):
            client.start_estimates()
    finally:
        restart_cluster()
    assert client.queue().slurm_version
    job_id = client.submit(dataclasses.replace(TRUE_JOB, chdir=str(tmp_path)))
    client.cancel([job_id])


def test_slurmdbd_down_then_back() -> None:
    client = CliSlurmClient(timeout=60.0)
    since = int(time.time()) - 3600
    client.accounting(since)
    stop_daemon(LAB / "run" / "slurmdbd.pid", "slurmdbd")
    try:
        with pytest.raises(SlurmUnreachableError):
            client.accounting(since)
    finally:
        restart_cluster()
    client.accounting(since)
