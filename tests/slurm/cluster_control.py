"""Stopping and restarting the test cluster's daemons (the outage tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.slurm.conftest import START_SCRIPT


def stop_daemon(pidfile: Path, comm: str) -> None:
    pid = int(pidfile.read_text().strip())
    assert Path(f"/proc/{pid}/comm").read_text().strip() == comm
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        time.sleep(0.1)
    raise AssertionError(f"{comm} ({pid}) did not stop")


def restart_cluster() -> None:
    res = subprocess.run([str(START_SCRIPT)], capture_output=True, text=True, timeout=180,
                         check=False)  # fmt: skip
    # a failed restart fails every later Slurm test: say why, with start.sh's own words
    assert res.returncode == 0, f"start.sh rc {res.returncode}:\n{res.stdout[-3000:]}{res.stderr}"
