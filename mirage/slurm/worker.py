"""A SlurmClient run in a child process: every call gets a time limit, and a call that
blocks in C code blocks the child only.

Why: pyslurm 22.5 calls Slurm's C API *without releasing the GIL*. Measured on the test
cluster with slurmctld stopped, each call waits ~9 s for the controller (Slurm's own
retries), and with the call in the daemon's process its metrics endpoint and Unix socket
froze for those 9 s of every poll (tests/slurm/test_daemon_process.py's outage test timed
out scraping /metrics). A controller that accepts connections but never answers would
freeze the daemon for good: an in-process C call cannot be timed out. The CLI backend has
neither problem (its commands are child processes with a timeout); this gives the pyslurm
backend the same two guarantees.

:class:`ProcessClient` forwards each :class:`~mirage.slurm.client.SlurmClient` call over
a pipe to one long-lived child that built the real client (``factory``, called there) and
sends back the result or the typed error it raised. The caller waits on the pipe (no GIL
held). No answer within the limit: the child is killed and the call raises
:class:`~mirage.slurm.types.SlurmTimeoutError` (outcome unknown, as for a command that
timed out); the next call starts a new child. A child that dies mid-call: a plain
:class:`~mirage.slurm.types.SlurmError` (outcome unknown too). Calls are serialised (one
pipe): the daemon polls from one thread.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from mirage.slurm.client import SlurmClient
from mirage.slurm.types import (
    QueueSnapshot,
    SlurmError,
    SlurmJob,
    SlurmTimeoutError,
    StartEstimate,
    SubmitRequest,
)

log = logging.getLogger(__name__)

#: Seconds a child gets to exit on a clean close before it is killed.
CLOSE_WAIT_S = 2.0


def _serve(conn: Connection, factory: Callable[[], SlurmClient]) -> None:
    """The child: build the client, then answer calls until the pipe closes."""
    try:
        client: SlurmClient | None = factory()
        broken: BaseException | None = None
    except Exception as exc:  # e.g. pyslurm not importable here: every call says so
        client, broken = None, _as_slurm_error(exc, "worker start")
    while True:
        try:
            method, args, kwargs = conn.recv()
        except (EOFError, OSError):  # the parent closed the pipe or died
            return
        try:
            if client is None:
                raise broken or SlurmError(["worker"], None, "", "no client")
            conn.send((True, getattr(client, method)(*args, **kwargs)))
        except Exception as exc:
            conn.send((False, _as_slurm_error(exc, method)))


def _as_slurm_error(exc: BaseException, what: str) -> BaseException:
    """Errors cross the pipe as they were raised where they pickle (SlurmError does, and
    ValueError's like), else as a plain SlurmError naming them."""
    if isinstance(exc, SlurmError | ValueError | TypeError):
        return exc
    return SlurmError([what], None, repr(exc), f"{what} failed in the Slurm worker")


class ProcessClient(SlurmClient):
    """``factory()``'s client, run in a child process (module docstring). ``timeout``:
    seconds a call may take; ``accounting_timeout``: for :meth:`accounting`, and
    ``submit_timeout`` for :meth:`submit` and :meth:`test_only` (set them above the
    child's own limits, e.g. the CLI's, so that its typed errors arrive first)."""

    def __init__(
        self,
        factory: Callable[[], SlurmClient],
        *,
        timeout: float = 35.0,
        accounting_timeout: float = 125.0,
        submit_timeout: float = 65.0,
        name: str = "slurm",
    ) -> None:
        self.factory = factory
        self.timeout = timeout
        self.accounting_timeout = accounting_timeout
        self.submit_timeout = submit_timeout
        self.name = name
        self._ctx = multiprocessing.get_context("spawn")  # no fork of a threaded daemon
        self._proc: Any = None
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self.restarts = 0

    # -- plumbing
    def _start(self) -> Connection:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_serve, args=(child, self.factory), name=f"mirage-{self.name}", daemon=True
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        return parent

    def _kill(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(CLOSE_WAIT_S)
        self._proc, self._conn = None, None

    def close(self) -> None:
        """End the child (it exits when its pipe closes; killed if it does not)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._proc is not None:
                self._proc.join(CLOSE_WAIT_S)
                if self._proc.is_alive():
                    self._proc.kill()
                    self._proc.join(CLOSE_WAIT_S)
                self._proc = None

    def call(self, method: str, *args: Any, limit: float | None = None, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)`` on the child's client, within ``limit`` seconds."""
        limit = self.timeout if limit is None else limit
        argv = [f"{self.name}-worker.{method}"]
        with self._lock:
            conn = self._conn if self._conn is not None else self._start()
            try:
                conn.send((method, args, kwargs))
                answered = conn.poll(limit)
            except (BrokenPipeError, EOFError, OSError) as exc:
                self._kill()
                raise SlurmError(argv, None, str(exc), "the Slurm worker died") from exc
            if not answered:
                self._kill()
                self.restarts += 1
                log.warning("%s: no answer in %.0f s; worker restarted", argv[0], limit)
                raise SlurmTimeoutError(
                    argv, None, "", f"{argv[0]}: no answer in {limit:.0f} s (outcome unknown)"
                )
            try:
                ok, value = conn.recv()
            except (EOFError, OSError) as exc:
                self._kill()
                self.restarts += 1
                raise SlurmError(
                    argv, None, str(exc), f"{argv[0]}: the worker died mid-call (outcome unknown)"
                ) from exc
        if ok:
            return value
        raise value

    # -- the SlurmClient interface
    def version(self) -> str:
        return str(self.call("version"))

    def queue(self) -> QueueSnapshot:
        result: QueueSnapshot = self.call("queue")
        return result

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        result: list[SlurmJob] = self.call(
            "accounting", start, end, every_state, limit=self.accounting_timeout
        )
        return result

    def start_estimates(self) -> dict[str, StartEstimate]:
        result: dict[str, StartEstimate] = self.call("start_estimates")
        return result

    def submit(self, request: SubmitRequest) -> str:
        return str(self.call("submit", request, limit=self.submit_timeout))

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        result: StartEstimate = self.call("test_only", request, limit=self.submit_timeout)
        return result

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        self.call("cancel", list(job_ids), pending_only)

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        self.call("signal", job_id, signal, batch_only)

    def hold(self, job_ids: Sequence[str]) -> None:
        self.call("hold", list(job_ids))

    def release(self, job_ids: Sequence[str]) -> None:
        self.call("release", list(job_ids))

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        self.call("update_time_limit", job_id, seconds)

    def show(self, kind: str) -> list[Mapping[str, str]]:
        result: list[Mapping[str, str]] = self.call("show", kind)
        return result

    def accounting_limits(self, kind: str) -> list[Mapping[str, str]]:
        result: list[Mapping[str, str]] = self.call("accounting_limits", kind)
        return result
