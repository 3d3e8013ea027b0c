"""With slurmctld (then slurmdbd) stopped, the client raises SlurmUnreachableError, and
works again once start.sh has brought the daemon back.

Stops daemons, so it must not run beside the other Slurm tests: it is skipped under
pytest-xdist, and sorts last in a plain ``pytest -m slurm`` run. Run it alone with
``pytest -m slurm_serial -p no:xdist``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.types import SlurmUnreachableError, SubmitRequest
from tests.slurm.conftest import LAB, START_SCRIPT

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_serial]

TRUE_JOB = SubmitRequest(script=b"#!/bin/sh\ntrue\n", time_limit=60, chdir="/tmp")


@pytest.fixture(autouse=True)
def _not_under_xdist() -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("stops Slurm daemons: run alone with `pytest -m slurm_serial -p no:xdist`")


def stop_daemon(pidfile: Path, comm: str) -> None:
    pid = int(pidfile.read_text().strip())
    assert Path(f"/proc/{pid}/comm").read_text().strip() == comm
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        time.sleep(0.1)
    raise AssertionError(f"{comm} ({pid}) did not stop")


def restart_cluster() -> None:
    subprocess.run([str(START_SCRIPT)], check=True, capture_output=True, timeout=180)


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
