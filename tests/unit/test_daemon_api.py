"""The users' socket: who is calling comes from SO_PEERCRED; users see only their own chains."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from mirage.daemon.api import ApiServer, call

SCRIPT = b"#!/bin/bash\n#SBATCH --time=10\ntrue\n"


def register(segments: int = 2) -> dict[str, object]:
    return {
        "op": "register",
        "script_b64": base64.b64encode(SCRIPT).decode(),
        "script_path": "job.sbatch",
        "sbatch_args": ["-p", "gpu"],
        "segments": segments,
        "cwd": "/tmp",
        "environ": {"PATH": "/usr/bin"},
    }


#: A client without Mirage (the venv may not be readable by the other user).
CLIENT = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\\n")
print(s.makefile().readline())
"""
SYSTEM_PYTHON = Path("/usr/bin/python3")


def as_user(uid: int, path: Path, request: dict[str, object]) -> dict[str, object]:
    """Call the socket from a child process running as ``uid`` (a real second user)."""
    out = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", CLIENT, str(path), json.dumps(request)],
        capture_output=True,
        check=True,
        user=uid,
        group=uid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    answer = json.loads(out.stdout)
    assert isinstance(answer, dict)
    return answer


def test_own_chains_only(server: tuple[ApiServer, Path]) -> None:
    _srv, path = server
    mine = call(path, register())
    assert mine["ok"], mine
    if os.geteuid() != 0 or not SYSTEM_PYTHON.exists():
        pytest.skip("the second-user half needs root (to start a child as another uid)")
    nobody = 65534
    theirs = as_user(nobody, path, register(3))
    assert theirs["ok"], theirs
    listed = as_user(nobody, path, {"op": "list"})
    assert [c["id"] for c in listed["chains"]] == [theirs["chain_id"]]  # type: ignore[attr-defined]
    assert listed["chains"][0]["owner"] == "nobody"  # type: ignore[index]
    # the client cannot claim another identity: owner comes from the kernel
    forged = dict(register(), uid=0, owner="root")
    got = as_user(nobody, path, forged)
    shown = call(path, {"op": "show", "chain_id": got["chain_id"]})
    assert shown["chain"]["owner"] == "nobody"
    # another user's chain: invisible and untouchable
    assert not as_user(nobody, path, {"op": "show", "chain_id": mine["chain_id"]})["ok"]
    assert not as_user(nobody, path, {"op": "cancel", "chain_id": mine["chain_id"]})["ok"]
    assert as_user(nobody, path, {"op": "cancel", "chain_id": theirs["chain_id"]})["ok"]
    # root sees everyone's
    assert len(call(path, {"op": "list"})["chains"]) == 3
    assert call(path, {"op": "status"})["ok"]


def test_bad_requests(server: tuple[ApiServer, Path]) -> None:
    _srv, path = server
    assert call(path, {"op": "fly"}) == {"ok": False, "error": "unknown op 'fly'"}
    bad = dict(register(), sbatch_args=["--comment=x"])
    answer = call(path, bad)
    assert not answer["ok"] and "--comment" in str(answer["error"])
