"""Every SlurmClient backend (``cli``, ``pyslurm``) against the real test cluster
(scripts/slurm-testbed/start.sh): each test runs once per backend (the ``backend`` fixture
of conftest.py), so both keep one contract. What the two must also agree on record for
record, and the array and fault cases: test_backends.py.

Every test uses its own jobs and cancels them; tests may run in parallel (pytest-xdist).
The slow TIMEOUT case submits its job when the module starts and checks it in the last
test, so the ~90 s wait overlaps the other tests.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirage.daemon.revoke import HELD_REASONS
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.client import SlurmClient
from mirage.slurm.types import JobState, SlurmJob, SubmitRequest
from tests.slurm.conftest import wait_for

pytestmark = pytest.mark.slurm

SLEEP = b"#!/bin/sh\nsleep 600\n"


def tag() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def slurm(backend: SlurmClient) -> SlurmClient:
    return backend


def submit(client: SlurmClient, request: SubmitRequest, jobdir: Path) -> str:
    if request.chdir is None:
        request = dataclasses.replace(request, chdir=str(jobdir))
    job_id = client.submit(request)
    client.mine.append(job_id)  # type: ignore[attr-defined]
    return job_id


@pytest.fixture(scope="module")
def timeout_job(_require_slurm: None, jobdir: Path) -> Iterator[tuple[str, int]]:
    """A --time=1 job running sleep 600, submitted first; checked by the last test."""
    client = CliSlurmClient(timeout=60.0)
    submitted = int(time.time())
    job_id = client.submit(
        SubmitRequest(
            script=SLEEP, job_name=f"mirage-t-timeout-{tag()}", time_limit=60, chdir=str(jobdir)
        )
    )
    yield job_id, submitted
    client.cancel([job_id])


def test_timeout_job_submitted(timeout_job: tuple[str, int], slurm: SlurmClient) -> None:
    job_id, _ = timeout_job
    job = wait_for(slurm, job_id, lambda j: j.state is JobState.RUNNING, what="running")
    assert job.time_limit == 60


def test_gpu_job_runs_with_its_gres(slurm: SlurmClient, tmp_path: Path, jobdir: Path) -> None:
    out = tmp_path / "gpu.out"
    script = b'#!/bin/sh\necho "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"\nsleep 30\n'
    job_id = submit(
        slurm,
        SubmitRequest(
            script=script,
            job_name=f"mirage-t-gpu-{tag()}",
            time_limit=300,
            gres="gpu:2",
            extra_args=(f"--output={out}",),
        ),
        jobdir,
    )
    job = wait_for(slurm, job_id, lambda j: j.state is JobState.RUNNING, what="running")
    assert job.gpus == 2
    assert job.nodes == 1
    assert job.partition == "gpu"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "CUDA" not in (out.read_text() if out.exists() else ""):
        time.sleep(0.5)
    line = out.read_text().strip()
    devices = line.split("=", 1)[1].split(",")
    assert len(devices) == 2 and all(d.isdigit() for d in devices), line


def test_dependent_job_waits_for_parent(slurm: SlurmClient, jobdir: Path) -> None:
    parent = submit(
        slurm,
        SubmitRequest(
            script=b"#!/bin/sh\nsleep 6\n", job_name=f"mirage-t-parent-{tag()}", time_limit=120
        ),
        jobdir,
    )
    child = submit(
        slurm,
        SubmitRequest(
            script=b"#!/bin/sh\nsleep 1\n",
            job_name=f"mirage-t-child-{tag()}",
            time_limit=120,
            dependency=f"afterok:{parent}",
        ),
        jobdir,
    )
    waiting = wait_for(
        slurm, child, lambda j: j.reason == "Dependency", timeout=20, what="Dependency"
    )
    assert waiting.state is JobState.PENDING
    assert waiting.dependency.startswith(f"afterok:{parent}")
    assert waiting.start is None
    done = wait_for(
        slurm,
        child,
        lambda j: j.state in {JobState.RUNNING, JobState.COMPLETED},
        timeout=60,
        what="child ran",
    )
    parent_job = slurm.queue().by_id()[parent]
    assert parent_job.state is JobState.COMPLETED
    assert done.start is not None and parent_job.end is not None
    assert done.start >= parent_job.end


def test_test_only_estimate(slurm: SlurmClient) -> None:
    est = slurm.test_only(SubmitRequest(script=b"#!/bin/sh\ntrue\n", time_limit=600, gres="gpu:1"))
    assert est.job_id is not None and est.job_id.isdigit()
    assert est.start is not None
    assert abs(est.start - time.time()) < 3 * 86400
    assert est.partition == "gpu"
    assert est.nodes.startswith("gpu")


def test_comment_and_name_reach_squeue_and_sacct(slurm: SlurmClient, jobdir: Path) -> None:
    name = f"mirage-t-comment-{tag()}"
    comment = f"mirage chain={tag()} step=3"
    since = int(time.time()) - 5
    job_id = submit(
        slurm,
        SubmitRequest(
            script=b"#!/bin/sh\nsleep 2\n", job_name=name, comment=comment, time_limit=60
        ),
        jobdir,
    )
    queued = slurm.queue().by_id()[job_id]
    assert (queued.name, queued.comment) == (name, comment)
    wait_for(slurm, job_id, lambda j: j.state is JobState.COMPLETED, timeout=60, what="done")
    found: SlurmJob | None = None
    deadline = time.monotonic() + 30
    while found is None and time.monotonic() < deadline:
        found = {j.job_id: j for j in slurm.accounting(since)}.get(job_id)
        if found is None or found.state is not JobState.COMPLETED:
            found = None
            time.sleep(1)
    assert found is not None, "job never reached sacct as COMPLETED"
    assert (found.name, found.comment, found.exit_code) == (name, comment, 0)


#: Traps USR1 (so the signal does not end the job) and says when the trap is in place.
TRAP_USR1 = b"""#!/bin/bash
trap 'echo USR1 > "got-$SLURM_JOB_ID"' USR1
touch "ready-$SLURM_JOB_ID"
while :; do sleep 600 & wait $!; done
"""


def _wait_file(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout}s"
        time.sleep(0.5)


def test_hold_update_release_signal_cancel(slurm: SlurmClient, jobdir: Path) -> None:
    job_id = submit(
        slurm,
        SubmitRequest(
            script=TRAP_USR1, job_name=f"mirage-t-hold-{tag()}", time_limit=600, hold=True
        ),
        jobdir,
    )
    held = slurm.queue().by_id()[job_id]
    assert (held.state, held.reason) == (JobState.PENDING, "JobHeldUser")
    assert slurm.start_estimates()[job_id].start is None
    slurm.update_time_limit(job_id, 1200)
    assert slurm.queue().by_id()[job_id].time_limit == 1200
    slurm.release([job_id])
    wait_for(slurm, job_id, lambda j: j.state is JobState.RUNNING, what="running after release")
    # signal only once the batch shell has its trap: before that, USR1 would end the job
    _wait_file(jobdir / f"ready-{job_id}")
    slurm.signal(job_id, "USR1")
    _wait_file(jobdir / f"got-{job_id}")  # it reached the batch shell
    assert slurm.queue().by_id()[job_id].state is JobState.RUNNING
    _revocation(slurm, jobdir, running=job_id)
    slurm.cancel([job_id])
    wait_for(slurm, job_id, lambda j: j.state is JobState.CANCELLED, what="cancelled")
    slurm.cancel([job_id])  # already finished: not an error


def _revocation(slurm: SlurmClient, jobdir: Path, running: str) -> None:
    """What the daemon's revocation relies on (mirage/daemon/revoke.py): hold, then
    ``scancel --state=PENDING``. A running job is held without error (priority 0) and not
    cancelled; a release restores it. A pending job, held, is cancelled."""
    slurm.hold([running])
    slurm.cancel([running], pending_only=True)
    time.sleep(1)
    assert slurm.queue().by_id()[running].state is JobState.RUNNING
    slurm.release([running])
    assert slurm.queue().by_id()[running].priority not in (None, 0)
    request = SubmitRequest(
        script=b"#!/bin/bash\nsleep 1\n",
        job_name=f"mirage-t-revoke-{tag()}",
        time_limit=60,
        dependency=f"afterok:{running}",  # pends while ``running`` runs
    )
    pending = submit(slurm, request, jobdir)
    slurm.hold([pending])
    held = slurm.queue().by_id()[pending]
    # JobHeldAdmin when root holds it (this test), JobHeldUser when its owner does
    assert held.state is JobState.PENDING and held.reason in HELD_REASONS
    slurm.cancel([pending], pending_only=True)
    wait_for(slurm, pending, lambda j: j.state is JobState.CANCELLED, what="revoked")


def test_show_partitions_nodes_config(slurm: SlurmClient) -> None:
    parts = {p["PartitionName"]: p for p in slurm.show("partition")}
    assert parts["gpu"]["MaxTime"] == "2-00:00:00"
    assert parts["debug"]["MaxTime"] == "01:00:00"
    assert (parts["cpu"]["Nodes"], parts["capped"]["QoS"]) == ("cpu[1-2]", "capped")
    nodes = {n["NodeName"]: n for n in slurm.show("node")}
    gpu_nodes = [n for name, n in nodes.items() if name.startswith("gpu")]
    assert len(gpu_nodes) >= 4 and all(n["Gres"] == "gpu:a100:4" for n in gpu_nodes)
    assert nodes["cpu1"]["Gres"] == "(null)" and nodes["cpu1"]["RealMemory"] == "64000"
    (config,) = slurm.show("config")
    assert config["AccountingStoreFlags"] == "job_comment"
    assert "bf_window=2880" in config["SchedulerParameters"]


def test_zz_timeout_reaches_sacct(timeout_job: tuple[str, int], slurm: SlurmClient) -> None:
    """Last in the module: the job was submitted at module start; TIMEOUT comes ~90 s later."""
    job_id, submitted = timeout_job
    deadline = time.monotonic() + 240
    found: SlurmJob | None = None
    while time.monotonic() < deadline:
        found = {j.job_id: j for j in slurm.accounting(submitted - 5)}.get(job_id)
        if found is not None and found.state.is_finished:
            break
        time.sleep(3)
    assert found is not None
    assert found.state is JobState.TIMEOUT, found
    assert found.time_limit == 60
    assert found.elapsed is not None and found.elapsed >= 60
