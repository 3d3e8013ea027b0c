"""Test doubles shared by the unit tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mirage.slurm.client import SlurmClient
from mirage.slurm.types import QueueSnapshot, SlurmJob, StartEstimate, SubmitRequest


class NullSlurmClient(SlurmClient):
    """Every call fails loudly; a test overrides just the calls it expects."""

    def queue(self) -> QueueSnapshot:
        raise NotImplementedError

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        raise NotImplementedError

    def submit(self, request: SubmitRequest) -> str:
        raise NotImplementedError

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        raise NotImplementedError

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        raise NotImplementedError

    def hold(self, job_ids: Sequence[str]) -> None:
        raise NotImplementedError

    def release(self, job_ids: Sequence[str]) -> None:
        raise NotImplementedError

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        raise NotImplementedError

    def start_estimates(self) -> dict[str, StartEstimate]:
        raise NotImplementedError

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        raise NotImplementedError

    def show(self, kind: str) -> list[Mapping[str, str]]:
        raise NotImplementedError


def cli_setup(tmp_path: Path, script: str) -> tuple[Path, Path]:
    """A configuration with its state in ``tmp_path`` and no daemon (its socket absent, no
    metrics port), and a batch script: what the CLI tests run ``mirage chain …`` on."""
    cfg = tmp_path / "mirage.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[socket]\npath = "{tmp_path / "no-daemon.sock"}"\n[metrics]\nport = 0\n'
    )
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    return cfg, path
