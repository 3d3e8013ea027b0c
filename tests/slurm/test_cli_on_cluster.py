"""`mirage profile capture`, `mirage trace import` and `mirage plan` against the real test
cluster."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.profile.schema import load_profile
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.types import JobState, SlurmJob, SubmitRequest
from mirage.trace.parquet import read_parquet
from tests.slurm.conftest import wait_for

pytestmark = pytest.mark.slurm


def test_profile_capture_reads_the_test_cluster(tmp_path: Path) -> None:
    out = tmp_path / "lab.toml"
    result = CliRunner().invoke(main, ["profile", "capture", "--name", "lab", "--out", str(out)])
    assert result.exit_code == 0, result.output
    prof = load_profile(out)
    gpu = prof.partition("gpu")
    # scripts/slurm-testbed/start.sh: 4 nodes x 16 CPUs x 4 fake A100s, gpu MaxTime 2 days
    assert (gpu.nodes, gpu.cpus_per_node, gpu.gpus_per_node, gpu.gpu_type) == (4, 16, 4, "a100")
    assert gpu.max_time_s == 2 * 86400 and gpu.default
    assert prof.partition("debug").max_time_s == 3600
    assert prof.scheduler.bf_window_s >= gpu.max_time_s
    assert prof.scheduler.priority_weight_age > 0


def test_trace_import_round_trips_a_finished_job(slurm: CliSlurmClient, tmp_path: Path) -> None:
    name = f"mirage-t-import-{uuid.uuid4().hex[:8]}"
    t0 = int(time.time()) - 5
    job_id = slurm.submit(
        SubmitRequest(
            script=b"#!/bin/sh\nsleep 2\n", job_name=name, time_limit=120, chdir=str(tmp_path)
        )
    )
    slurm.mine.append(job_id)  # type: ignore[attr-defined]
    wait_for(slurm, job_id, lambda j: j.state is JobState.COMPLETED, timeout=90, what="completed")
    # slurmdbd lags the controller: poll accounting until the job is there with its end
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(j.job_id == job_id and j.end for j in slurm.accounting(t0, int(time.time()) + 5)):
            break
        time.sleep(1)
    out = tmp_path / "acct.parquet"
    start = pd.Timestamp(t0, unit="s", tz="UTC").isoformat()
    end = pd.Timestamp(int(time.time()) + 5, unit="s", tz="UTC").isoformat()
    result = CliRunner().invoke(
        main, ["trace", "import", "--start", start, "--end", end, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    jobs = read_parquet(out).jobs
    row = jobs[jobs["job_id"] == job_id]
    assert len(row) == 1, jobs
    rec = row.iloc[0]
    assert rec["name"] == name and rec["state"] == "COMPLETED"
    assert rec["time_limit"] == 120
    assert rec["submit"] <= rec["start"] < rec["end"]
    assert 1 <= rec["end"] - rec["start"] <= 30


def test_plan_reads_the_test_cluster_s_queue(slurm: CliSlurmClient, tmp_path: Path) -> None:
    """`mirage plan` without a daemon: one squeue, one sacct, the captured profile. Four
    1-hour jobs take every GPU node: a 4-GPU segment waits for one of them (at most an
    hour, less what they have run), whatever its limit."""
    for k in range(4):
        job_id = slurm.submit(
            SubmitRequest(
                script=b"#!/bin/sh\nsleep 600\n",
                job_name=f"mirage-t-plan-{k}",
                time_limit=3600,
                nodes=1,
                gres="gpu:4",
                partition="gpu",
                chdir=str(tmp_path),
            )
        )
        slurm.mine.append(job_id)  # type: ignore[attr-defined]
        wait_for(slurm, job_id, lambda j: j.state is JobState.RUNNING, timeout=60, what="running")
    args = ["--work", "3h@4gpu", "--partition", "gpu", "--size", "4", "--limit", "30m",
            "--limit", "2h", "--draws", "2", "--backend", "cli", "--json"]  # fmt: skip
    result = CliRunner().invoke(main, ["plan", *args])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert len(plan["candidates"]) == 2
    for c in plan["candidates"]:
        assert 0 < c["first_wait_s"] <= 3600, c
        assert (c["partition"], c["nodes"], c["gpus_per_node"]) == ("gpu", 1, 4)
    assert plan["habitual"]["time_limit_s"] == 2 * 86400  # gpu's MaxTime
    text = CliRunner().invoke(main, ["plan", *args[:-1]])
    assert "recommended: gpu, 4 gpu (1x4)" in text.output, text.output
    # the configured cluster's wait calibration (models/<cluster>/plan.toml), alpha 1 for
    # every width: each start is the limit-based one, when the 1-hour limits end
    from mirage.plan.calibrate import WaitCalibration

    (tmp_path / "models" / "lab").mkdir(parents=True)
    cal = WaitCalibration((0.5,), (1.0, 1.0))
    (tmp_path / "models" / "lab" / "plan.toml").write_text(cal.to_toml())
    cfg = tmp_path / "mirage.toml"
    cfg.write_text(f'[policy]\nmodels_dir = "{tmp_path / "models"}"\ncluster = "lab"\n')
    calibrated = CliRunner().invoke(main, ["plan", *args, "--config", str(cfg)])
    assert calibrated.exit_code == 0, calibrated.output
    plan = json.loads(calibrated.stdout)
    assert any("calibrated" in note for note in plan["notes"]), plan["notes"]
    for c in plan["candidates"]:
        assert 3000 < c["first_wait_s"] <= 3600, c  # the limits' end, less their run so far


def _running_cpu_job(
    slurm: CliSlurmClient, tmp_path: Path, name: str, cpus: int, *extra: str
) -> SlurmJob:
    """A 10-minute job of ``cpus`` CPUs on the CPU partition, once it runs."""
    job_id = slurm.submit(
        SubmitRequest(
            script=b"#!/bin/sh\nsleep 600\n", job_name=f"mirage-t-{name}", time_limit=3600,
            nodes=1, partition="cpu", chdir=str(tmp_path),
            extra_args=(f"--cpus-per-task={cpus}", *extra),
        )
    )  # fmt: skip
    slurm.mine.append(job_id)  # type: ignore[attr-defined]
    return wait_for(slurm, job_id, lambda j: j.state is JobState.RUNNING, timeout=60,
                    what="running")  # fmt: skip


def _cpu_plan_args(work: str, *sizes: int) -> list[str]:
    sized = [x for s in sizes for x in ("--size", str(s))]
    return ["--work", work, "--scaling", "none", "--partition", "cpu", *sized, "--limit",
            "3h", "--draws", "0", "--backend", "cli", "--json"]  # fmt: skip


def _cpu_plan(work: str, *sizes: int) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["plan", *_cpu_plan_args(work, *sizes)])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.output)
    return out


def test_plan_sees_where_running_jobs_sit_on_shared_nodes(
    slurm: CliSlurmClient, tmp_path: Path
) -> None:
    """A 6-CPU job on each of the CPU partition's two 16-CPU nodes: 20 CPUs are free, but
    no node is free. squeue's node list places them where Slurm did, so a whole-node
    (16-CPU) shape waits for one to end, where re-packing both onto one node would have
    left the other idle (a start now, which Slurm would not give)."""
    for k in (1, 2):
        job = _running_cpu_job(slurm, tmp_path, f"frag-{k}", 6, f"--nodelist=cpu{k}")
        assert job.node_list == (f"cpu{k}",)
    plan = _cpu_plan("2h@16cpu", 8, 16)
    waits = {(c["nodes"], c["cpus_per_node"]): c["first_wait_s"] for c in plan["candidates"]}
    assert waits[(1, 8)] <= 120 and 0 < waits[(1, 16)] <= 3600, waits


def test_cpu_plan_reads_shared_nodes_and_its_options_submit(
    slurm: CliSlurmClient, tmp_path: Path
) -> None:
    """On the CPU partition (2 nodes x 16 CPUs, no GPU) a 10-CPU job runs on each node: a
    4-CPU shape starts now beside them, an 8-CPU one waits for one to end; the planned
    options (one task per node with its CPUs) are what sbatch allocates."""
    from mirage.daemon.plancli import planned_args

    for k in range(2):
        _running_cpu_job(slurm, tmp_path, f"cplan-{k}", 10)
    # no speed-up beyond 4 CPUs: the shape that starts now is done first
    plan = _cpu_plan("2h@4cpu", 4, 8)
    args = _cpu_plan_args("2h@4cpu", 4, 8)
    waits = {c["nodes"] * c["cpus_per_node"]: c["first_wait_s"] for c in plan["candidates"]}
    assert waits[4] <= 120 and 0 < waits[8] <= 3600, waits
    best = plan["recommended"]
    assert (best["partition"], best["gpus_per_node"], best["cpus_per_node"]) == ("cpu", 0, 4)
    text = CliRunner().invoke(main, ["plan", *args[:-1]])
    assert "recommended: cpu, 4 cpu (1x4)" in text.output, text.output
    # the options of a 2-node CPU shape, as `chain submit --plan` appends them
    shape = {**best, "nodes": 2, "cpus_per_node": 3, "time_limit_s": 600}
    job_id = slurm.submit(
        SubmitRequest(
            script=b"#!/bin/sh\nsleep 60\n", job_name="mirage-t-cplan-shape", chdir=str(tmp_path),
            extra_args=planned_args(shape, ["--cpus-per-task=1", "-n", "5"]),
        )
    )  # fmt: skip
    slurm.mine.append(job_id)  # type: ignore[attr-defined]
    job = wait_for(slurm, job_id, lambda j: j.state is JobState.RUNNING, timeout=60, what="running")
    assert (job.partition, job.nodes, job.cpus, job.time_limit) == ("cpu", 2, 6, 600)
