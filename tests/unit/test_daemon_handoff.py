"""The job-side handoff helper, and the example batch script's signal forwarding."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mirage.daemon import handoff

REPO = Path(__file__).resolve().parents[2]


def test_successor_waits_for_the_predecessor_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff, "job_alive", lambda _job: True)
    assert handoff.start(tmp_path, "100", timeout=5, poll=0.01) == 0  # first segment
    threading.Timer(0.3, lambda: handoff.done(tmp_path, "100")).start()
    began = time.monotonic()
    assert handoff.start(tmp_path, "101", timeout=5, poll=0.01) == 0
    assert time.monotonic() - began >= 0.25  # it waited for "checkpointed"
    assert handoff._read(tmp_path)["job_id"] == "101"
    # a predecessor that never checkpoints: timeout, exit 3
    assert handoff.start(tmp_path, "102", timeout=0.1, poll=0.01) == 3
    # ... unless Slurm says it is gone
    monkeypatch.setattr(handoff, "job_alive", lambda _job: False)
    assert handoff.start(tmp_path, "102", timeout=0.1, poll=0.01) == 0


FAKE_TRAIN = """
import signal, sys, time, pathlib
ckpt = pathlib.Path(sys.argv[sys.argv.index("--checkpoint-dir") + 1])
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
(ckpt / "started").write_text("1")
while not got:
    time.sleep(0.01)
(ckpt / "last.pt").write_text("checkpoint")
sys.exit(0)
"""


def test_example_script_forwards_usr1_to_background_training(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(REPO / "deploy" / "examples" / "train.sbatch", job / "train.sbatch")
    (job / "train.py").write_text(FAKE_TRAIN)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    ckpt = tmp_path / "ckpt"
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "SLURM_JOB_ID": "7",
        "CKPT": str(ckpt),
    }
    proc = subprocess.Popen(["bash", str(job / "train.sbatch")], env=env, cwd=job)
    deadline = time.monotonic() + 30
    while not (ckpt / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGUSR1)  # what --signal=B:USR1 / Mirage's handoff does
    assert proc.wait(timeout=30) == 0
    assert (ckpt / "last.pt").read_text() == "checkpoint"
    assert handoff._read(ckpt)["state"] == "checkpointed"
