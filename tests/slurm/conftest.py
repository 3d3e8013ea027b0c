"""Shared setup for the tests that run against the real Slurm test cluster.

Start it with ``scripts/slurm-testbed/start.sh``. When ``scontrol ping`` fails, every test
in this directory is skipped with the reason, unless ``MIRAGE_REQUIRE_SLURM=1``, in which
case they fail loudly.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.run import SubprocessRunner
from mirage.slurm.types import SlurmError, SlurmJob

REPO = Path(__file__).resolve().parents[2]
START_SCRIPT = REPO / "scripts" / "slurm-testbed" / "start.sh"
LAB = Path(os.environ.get("MIRAGE_SLURM_LAB", "/tmp/mirage-slurm"))


@cache
def _slurm_down_reason() -> str | None:
    try:
        result = SubprocessRunner(timeout=15)(["scontrol", "ping"])
    except SlurmError as exc:
        return f"Slurm test cluster not reachable ({exc}); start scripts/slurm-testbed/start.sh"
    if result.returncode != 0 or "UP" not in result.stdout:
        text = (result.stdout + result.stderr).strip().splitlines()
        return (
            f"Slurm test cluster not up (scontrol ping: {text[0] if text else result.returncode});"
            " start it with scripts/slurm-testbed/start.sh"
        )
    return None


@pytest.fixture(scope="session", autouse=True)
def _require_slurm() -> None:
    reason = _slurm_down_reason()
    if reason is None:
        return
    if os.environ.get("MIRAGE_REQUIRE_SLURM") == "1":
        pytest.fail(f"MIRAGE_REQUIRE_SLURM=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def jobdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Working directory for test jobs, so that slurm-<id>.out never lands in the repo."""
    return tmp_path_factory.mktemp("slurm-jobs")


@pytest.fixture
def slurm() -> Iterator[CliSlurmClient]:
    """A client; jobs recorded in ``client.mine`` are cancelled after the test."""
    client = CliSlurmClient(timeout=60.0)
    mine: list[str] = []
    client.mine = mine  # type: ignore[attr-defined]
    yield client
    if mine:
        with contextlib.suppress(SlurmError):
            client.cancel(mine)


def wait_for(
    client: CliSlurmClient,
    job_id: str,
    predicate: Callable[[SlurmJob], bool],
    timeout: float = 60.0,
    what: str = "",
) -> SlurmJob:
    """Poll squeue (about once a second) until ``predicate`` holds for the job."""
    deadline = time.monotonic() + timeout
    last: SlurmJob | None = None
    while time.monotonic() < deadline:
        last = client.queue().by_id().get(job_id)
        if last is not None and predicate(last):
            return last
        time.sleep(1.0)
    raise AssertionError(f"job {job_id}: {what or 'condition'} not met in {timeout}s; last={last}")


@pytest.fixture(autouse=True)
def _run_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # sbatch writes slurm-<id>.out into the submitting directory: keep it out of the checkout
    monkeypatch.chdir(tmp_path)
