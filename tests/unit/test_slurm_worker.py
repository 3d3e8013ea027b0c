"""ProcessClient (mirage/slurm/worker.py): a SlurmClient run in a child process, with a
time limit per call, typed errors carried back as raised, and a child that dies or hangs
replaced by the next call. The fakes live at module level: the spawned child imports
them by name."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from mirage.slurm.client import SlurmClient
from mirage.slurm.types import (
    QueueSnapshot,
    SlurmError,
    SlurmJob,
    SlurmTimeoutError,
    SlurmUnreachableError,
    StartEstimate,
    SubmitError,
    SubmitRequest,
)
from mirage.slurm.worker import ProcessClient


class FakeClient(SlurmClient):
    """Answers by method; ``cancel`` ids steer faults: "hang", "die", "down", "gil"."""

    def queue(self) -> QueueSnapshot:
        return QueueSnapshot(taken_at=7, jobs=(), slurm_version="22.05.8")

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        return []

    def submit(self, request: SubmitRequest) -> str:
        raise SubmitError(["sbatch"], 1, "sbatch: error: Invalid partition", "sbatch refused")

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        what = job_ids[0]
        if what == "hang":
            time.sleep(60)
        if what == "die":
            os._exit(3)
        if what == "down":
            raise SlurmUnreachableError(["pyslurm.kill"], 1800, "connect failure", "unreachable")
        if what == "gil":  # catastrophic backtracking: C code holding the GIL for seconds
            re.match(r"(a+)+$", "a" * 23 + "b")
        if what == "bug":
            raise KeyError("a bug in the backend")

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        pass

    def hold(self, job_ids: Sequence[str]) -> None:
        pass

    def release(self, job_ids: Sequence[str]) -> None:
        pass

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        pass

    def start_estimates(self) -> dict[str, StartEstimate]:
        return {"1": StartEstimate(job_id="1", start=None, nodes="", partition="gpu")}

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        return StartEstimate(job_id="2", start=9, nodes="gpu1", partition="gpu")

    def show(self, kind: str) -> list[Mapping[str, str]]:
        return [{"kind": kind, "pid": str(os.getpid())}]


def broken_factory() -> SlurmClient:
    raise ImportError("No module named 'pyslurm'")


@pytest.fixture
def client() -> Any:
    c = ProcessClient(FakeClient, timeout=20.0, name="fake")
    yield c
    c.close()


def test_calls_run_in_one_child_and_answer(client: ProcessClient) -> None:
    first = client.show("node")[0]["pid"]
    assert first != str(os.getpid())  # in a child
    assert client.show("config")[0]["pid"] == first  # the same child, kept
    assert client.queue().slurm_version == "22.05.8"
    assert client.start_estimates()["1"].partition == "gpu"
    assert client.test_only(SubmitRequest(script=b"x")).nodes == "gpu1"


def test_typed_errors_arrive_as_raised(client: ProcessClient) -> None:
    with pytest.raises(SubmitError) as refused:
        client.submit(SubmitRequest(script=b"x"))
    assert refused.value.argv == ["sbatch"] and refused.value.returncode == 1
    assert "Invalid partition" in str(refused.value)
    with pytest.raises(SlurmUnreachableError) as down:
        client.cancel(["down"])
    assert down.value.returncode == 1800
    with pytest.raises(SlurmError, match="failed in the Slurm worker"):
        client.cancel(["bug"])  # not a refusal: outcome unknown
    client.cancel(["ok"])  # the child survived all three


def test_a_hung_call_times_out_and_the_next_gets_a_new_child(client: ProcessClient) -> None:
    before = client.show("node")[0]["pid"]
    client.timeout = 1.0
    with pytest.raises(SlurmTimeoutError, match="no answer in 1 s"):
        client.cancel(["hang"])
    assert client.restarts == 1
    client.timeout = 20.0  # a new child must import Mirage first: slow on a busy machine
    assert client.show("node")[0]["pid"] != before


def test_a_child_dying_mid_call_is_outcome_unknown(client: ProcessClient) -> None:
    with pytest.raises(SlurmError, match="died mid-call") as died:
        client.cancel(["die"])
    assert not isinstance(died.value, SlurmTimeoutError | SubmitError | SlurmUnreachableError)
    assert client.queue().taken_at == 7  # a new child answers


def test_a_client_that_cannot_start_says_why_on_every_call() -> None:
    c = ProcessClient(broken_factory, timeout=20.0)
    try:
        for _ in range(2):
            with pytest.raises(SlurmError, match=r"No module named .pyslurm"):
                c.queue()
    finally:
        c.close()


def test_a_call_holding_the_gil_in_the_child_leaves_this_process_free(
    client: ProcessClient,
) -> None:
    """What the worker is for: pyslurm holds the GIL through its C calls. Here a regular
    expression holds it in the child for about a second; a thread here keeps ticking."""
    client.show("node")  # the child is up
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.02)

    ticker = threading.Thread(target=tick)
    ticker.start()
    started = time.monotonic()
    client.cancel(["gil"])
    ended = time.monotonic()
    done.set()
    ticker.join()
    during = [t for t in ticks if started < t < ended]
    assert ended - started > 0.2  # the child did work
    assert len(during) >= 3, (ended - started, len(during))
