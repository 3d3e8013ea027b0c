"""`mirage daemon` as systemd runs it: READY=1, WATCHDOG=1 per cycle, metrics, socket, SIGTERM.

Slurm's commands are scripted (squeue/sacct print recorded 22.05 output from
tests/data/slurm), so this runs anywhere and never touches a real controller.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from mirage.daemon.api import call

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_service_notifies_serves_and_stops(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, fixture in (("squeue", "squeue.json"), ("sacct", "sacct-X.json")):
        script = bindir / name
        script.write_text(f"#!/bin/sh\ncat {DATA / fixture}\n")
        script.chmod(0o755)
    port = _free_port()
    sock_path = tmp_path / "mirage.sock"
    cfg = tmp_path / "mirage.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\npoll_interval_s = 1\n'
        f"lease_ttl_s = 2\nbackoff_max_s = 1\n"
        f'[slurm]\nbin_dir = "{bindir}"\n'
        f'[metrics]\nport = {port}\n[socket]\npath = "{sock_path}"\n'
    )
    notify_path = tmp_path / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(20)
    env = dict(os.environ, NOTIFY_SOCKET=str(notify_path), PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mirage.cli", "daemon", "--config", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        messages: list[str] = []
        deadline = time.monotonic() + 30
        while messages.count("WATCHDOG=1") < 3 and time.monotonic() < deadline:
            messages.append(notify.recv(4096).decode())
        assert messages[0] == "READY=1"
        assert messages.count("WATCHDOG=1") >= 3  # fed after each finished cycle
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        text = body.decode()
        assert "mirage_slurm_reachable 1.0" in text
        assert 'mirage_slurm_commands_total{command="squeue"}' in text
        assert "mirage_lease_held 1.0" in text
        status = call(sock_path, {"op": "status"})
        assert status["ok"] and status["status"]["chains"] == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        while "STOPPING=1" not in messages:
            messages.append(notify.recv(4096).decode())
        assert not sock_path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.stdout.read().decode() if proc.stdout else ""
        notify.close()
    assert "Traceback" not in out, out
