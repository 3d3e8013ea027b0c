"""The fidelity-suite recorder's sbatch requests (no cluster needed)."""

from __future__ import annotations

import pwd

import pytest

from mirage.sim import record
from mirage.sim.fidelity import BURST_LEAD_S
from mirage.sim.suite import SuiteJob, Workload
from mirage.slurm.cli_backend import sbatch_options


def _job(**kw: object) -> SuiteJob:
    base: dict[str, object] = {
        "key": "j1",
        "offset": 5,
        "partition": "gpu",
        "nodes": 2,
        "gpus_per_node": 3,
        "cpus_per_node": 6,
        "limit_min": 2,
        "run_s": 40,
    }
    base.update(kw)
    return SuiteJob(**base)  # type: ignore[arg-type]


def test_request_shape() -> None:
    req = record.submit_request(_job(), "mirage-fid-x-j1", "/tmp/w", "/tmp/w/j1.sh")
    opts = sbatch_options(req)
    assert "--time=0-00:02:00" in opts and "--nodes=2" in opts and "--gres=gpu:3" in opts
    assert "--partition=gpu" in opts and "--cpus-per-task=6" in opts
    assert "--ntasks-per-node=1" in opts and "--output=/dev/null" in opts
    assert not any(o.startswith(("--uid", "--array", "--begin", "--exclusive")) for o in opts)
    assert "--hold" not in opts and req.dependency is None
    assert record.job_script(_job()) == "#!/bin/sh\nsleep 40\n"


def test_request_options() -> None:
    job = _job(gpus_per_node=0, partition="cpu", exclusive=True, array=4, hold_until=9)
    req = record.submit_request(job, "n", "/w", "/w/s.sh", begin=1e9, dependency="afterok:7")
    opts = sbatch_options(req)
    assert not any(o.startswith("--gres") for o in opts)
    assert "--exclusive" in opts and "--array=0-3" in opts and "--hold" in opts
    assert "--dependency=afterok:7" in opts
    assert any(o.startswith("--begin=") for o in opts)


def test_user_args() -> None:
    assert record.user_args("root") == []
    nobody = pwd.getpwnam("nobody")
    assert record.user_args("nobody")[0] == "--uid=nobody"
    assert record.user_args("nobody")[1].startswith("--gid=") and nobody.pw_gid >= 0
    with pytest.raises(KeyError):
        record.user_args("mirage-no-such-user-xyz")


def test_burst_lead_grows_with_the_burst() -> None:
    small = Workload("w", {}, (_job(offset=0),))
    big = Workload("w", {}, tuple(_job(key=f"j{i}", offset=0) for i in range(60)))
    assert record.burst_lead_s(small) == BURST_LEAD_S
    assert record.burst_lead_s(big) > BURST_LEAD_S
