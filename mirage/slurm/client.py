"""The narrow interface every Slurm backend implements (CLI, pyslurm, simulator).

Daemon, policies, trace import and profile capture only ever talk to this class, so
they run unchanged against a real cluster and against the simulator.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

from mirage.slurm.types import QueueSnapshot, SlurmJob, StartEstimate, SubmitRequest


class SlurmClient(abc.ABC):
    """Queue reads, accounting reads, and the few actions a provisioner needs."""

    @abc.abstractmethod
    def queue(self) -> QueueSnapshot:
        """Every job the controller holds, from one batched call."""

    @abc.abstractmethod
    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        """Jobs in accounting active between ``start`` and ``end`` (epoch s; ``None`` = now).

        sacct selects the jobs that were *eligible* in the window; a job that never was
        (held, then cancelled while pending) is then missing. ``every_state``: select by
        every accounted state instead (``sacct -s PD,R,…``), which finds it too: the
        daemon's poll, for which a cancelled successor must never stay unaccounted for.
        """

    @abc.abstractmethod
    def submit(self, request: SubmitRequest) -> str:
        """Submit a batch job and return its id."""

    @abc.abstractmethod
    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        """Cancel jobs (unknown or finished ids are not an error). ``pending_only``: only
        those still pending (``scancel --state=PENDING``; filtered by scancel itself, so
        hold the jobs first where a start in between must not be cancelled)."""

    @abc.abstractmethod
    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        """Send a signal (e.g. "USR1") to a running job, by default to its batch shell only."""

    @abc.abstractmethod
    def hold(self, job_ids: Sequence[str]) -> None:
        """Hold pending jobs."""

    @abc.abstractmethod
    def release(self, job_ids: Sequence[str]) -> None:
        """Release held jobs."""

    @abc.abstractmethod
    def update_time_limit(self, job_id: str, seconds: int) -> None:
        """Change a pending job's time limit."""

    @abc.abstractmethod
    def start_estimates(self) -> dict[str, StartEstimate]:
        """Slurm's start estimate for every pending job (``squeue --start``)."""

    @abc.abstractmethod
    def test_only(self, request: SubmitRequest) -> StartEstimate:
        """When would this job start if submitted now (``sbatch --test-only``; costs a job id)."""

    @abc.abstractmethod
    def show(self, kind: str) -> list[Mapping[str, str]]:
        """``scontrol show <kind>`` (partition, node, config): one key/value mapping per entity."""

    def accounting_limits(self, kind: str) -> list[Mapping[str, str]]:
        """``sacctmgr -P show <kind>`` (qos, assoc): one mapping per row, by column name.

        A client without accounting (the default) knows no limits: [].
        """
        return []
