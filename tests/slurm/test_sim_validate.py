"""`mirage sim validate` on the test cluster's own accounting of the last hour."""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.types import JobState, SubmitRequest
from tests.slurm.conftest import wait_for

pytestmark = pytest.mark.slurm


def _iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_validate_the_last_hour(slurm: CliSlurmClient, tmp_path: Path) -> None:
    # two short jobs of our own, so that the window has started jobs whatever else ran
    name = f"mirage-t-validate-{uuid.uuid4().hex[:8]}"
    t_sub = int(time.time())
    ids = [
        slurm.submit(
            SubmitRequest(
                script=b"#!/bin/sh\nsleep 3\n",
                job_name=name,
                time_limit=120,
                gres="gpu:1",
                partition="gpu",
                chdir=str(tmp_path),
            )
        )
        for _ in range(2)
    ]
    slurm.mine.extend(ids)  # type: ignore[attr-defined]
    for job_id in ids:
        wait_for(
            slurm, job_id, lambda j: j.state is JobState.COMPLETED, timeout=120, what="completed"
        )
    deadline = time.monotonic() + 60  # slurmdbd lags the controller
    while time.monotonic() < deadline:
        done = {j.job_id for j in slurm.accounting(t_sub - 5) if j.end and j.start}
        if set(ids) <= done:
            break
        time.sleep(1)

    now = int(time.time()) + 5
    plot = tmp_path / "cdf.png"
    args = ["sim", "validate", "--start", _iso(now - 3600), "--end", _iso(now)]
    result = CliRunner().invoke(main, [*args, "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    print(json.dumps({k: v for k, v in data.items() if k != "rows"}, indent=1))
    assert data["compared"] >= 2
    assert data["seeded"]["running"] >= 0 and data["seeded"]["pending"] >= 0
    overall = data["rows"][0]
    assert overall["label"] == "all" and overall["jobs"] == data["compared"]
    assert any(r["group"] == "partition" and r["label"] == "gpu" for r in data["rows"])
    assert 0.0 <= overall["wait_ks"] <= 1.0
    shares = overall["within"]
    assert 0.0 <= shares["35s"] <= shares["5min"] <= shares["1h"] <= 1.0
    q = [v for v in overall["start_error_s"].values() if v is not None]
    assert q == sorted(q)
    # sane: the simulator places most jobs of a lightly loaded hour within an hour of reality
    assert shares["1h"] >= 0.5
    waits = overall["mean_wait_s"]
    assert waits["real"] is not None and 0 <= waits["real"] < 3600
    assert waits["simulated"] is None or (
        waits["simulated"] >= 0 and math.isfinite(waits["simulated"])
    )
    assert plot.read_bytes()[:4] == b"\x89PNG"

    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0, text.output
    print(text.output)
    assert "seeded from the real state" in text.output and "partition=gpu" in text.output
