"""running.md's readiness wait, as written, against a dead daemon's socket file: after a
``kill -9`` the file stays until the new daemon replaces it, so a wait for the file alone
returned at once and the next ``mirage status`` got "Connection refused"."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOCK = "/run/mirage/mirage.sock"
# `mirage status`: answers once $ANSWERS exists (the new daemon has bound the socket)
FAKE_MIRAGE = '#!/bin/sh\n[ -e "$ANSWERS" ] || { echo "Connection refused" >&2; exit 1; }\n'


def _readiness_line() -> str:
    text = (REPO / "docs" / "admin" / "running.md").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("timeout ") and SOCK in ln]
    assert len(lines) == 1, lines
    return lines[0]


def _run(line: str, tmp_path: Path, timeout_s: int) -> int:
    sock = tmp_path / "mirage.sock"
    line = line.replace(SOCK, str(sock))
    line = re.sub(r"^timeout \d+", f"timeout {timeout_s}", line)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "ANSWERS": str(tmp_path / "answers")}
    return subprocess.run(["sh", "-c", line], env=env, timeout=60, check=False).returncode


def test_the_readiness_wait_waits_for_an_answer_not_a_stale_socket(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "mirage").write_text(FAKE_MIRAGE)
    (tmp_path / "bin" / "mirage").chmod(0o755)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "mirage.sock"))
    stale.close()  # the file stays, nobody listens: what kill -9 leaves
    line = _readiness_line()
    assert _run(line, tmp_path, 2) == 124  # still waiting when the timeout ends
    (tmp_path / "answers").touch()
    assert _run(line, tmp_path, 10) == 0
