"""What a new chain points at, checked with its owner's rights at registration: the trial
registered alice's chain from bob's directory (it failed at launch with a generic reason)
and a raw request with cwd "/root" (it failed again and again). Checked as the owner, so
these tests need root, to act as nobody (uid 65534); skipped without it."""

from __future__ import annotations

import base64
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirage.daemon.api import Api
from mirage.daemon.chains import build_chain
from mirage.daemon.config import Config, DaemonSection
from mirage.daemon.identity import owner_access_check
from mirage.daemon.store import Chain
from tests.unit.daemon_support import make_store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: checks as nobody")

SCRIPT = b"#!/bin/bash\n#SBATCH --time=10\ntrue\n"
CONFIG = Config(daemon=DaemonSection(run_as_owner="always"))


def _nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")


def _chain(cwd: Path, until_file: str | None = None) -> Chain:
    who = _nobody()
    return build_chain("job.sbatch", SCRIPT, [], segments=2, until_file=until_file, name="t",
                       cwd=str(cwd), environ={}, uid=who.pw_uid, gid=who.pw_gid,
                       groups=[])  # fmt: skip


@pytest.fixture
def top() -> Iterator[Path]:
    """A directory under /tmp that every user may traverse (pytest's tmp_path is 0700)."""
    made = Path(tempfile.mkdtemp(prefix="mirage-access-", dir="/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def home(top: Path) -> Path:
    """nobody's own directory."""
    mine = top / "nobody-home"
    mine.mkdir()
    who = _nobody()
    os.chown(mine, who.pw_uid, who.pw_gid)
    return mine


def test_the_owners_own_directory_passes(home: Path) -> None:
    assert owner_access_check(CONFIG)(_chain(home, "checkpoints/DONE")) == ""


def test_a_directory_the_owner_may_not_write_or_enter_is_refused(home: Path, top: Path) -> None:
    check = owner_access_check(CONFIG)
    others = top / "bob"  # root's 0755: nobody may enter, not write
    others.mkdir(mode=0o755)
    assert "cannot be written by you" in check(_chain(others))
    closed = top / "closed"
    closed.mkdir(mode=0o700)  # root's 0700: nobody may not even enter
    assert "cannot be entered by you" in check(_chain(closed))
    assert "is not a directory" in check(_chain(top / "gone"))


def test_an_until_file_whose_folder_links_out_of_the_directory_is_refused(
    home: Path, top: Path
) -> None:
    outside = top / "elsewhere"
    outside.mkdir(mode=0o755)
    (home / "checkpoints").symlink_to(outside)
    why = owner_access_check(CONFIG)(_chain(home, "checkpoints/DONE"))
    assert "leads out of the chain's directory" in why and str(outside) in why


def _register(cwd: str) -> dict[str, Any]:
    return {
        "op": "register",
        "script_b64": base64.b64encode(SCRIPT).decode(),
        "script_path": "job.sbatch",
        "sbatch_args": ["-p", "gpu"],
        "segments": 2,
        "cwd": cwd,
        "environ": {"PATH": "/usr/bin"},
    }


def test_the_socket_refuses_a_cwd_its_caller_cannot_enter(tmp_path: Path) -> None:
    """A raw request of nobody's with cwd "/root": refused at once, with the reason."""
    who = _nobody()
    api = Api(make_store(tmp_path), config=CONFIG, access_check=owner_access_check(CONFIG))
    answer = api.handle(_register("/root"), who.pw_uid, who.pw_gid)
    assert answer["ok"] is False
    assert answer["error"] == "the chain's directory /root cannot be entered by you", answer
