"""Two local Unix users and one root daemon on the real cluster: each sees and changes only
their own chain, and each chain's jobs run as its owner in Slurm.

The daemon is the real ``mirage daemon`` process, as root, with ``run_as_owner = "always"``
(sbatch and scancel run with the owner's uid and groups). mirage-alice and mirage-bob
(``scripts/slurm-testbed/users.sh``, idempotent) register a chain each as themselves
(``runuser``) through the daemon's Unix socket, which knows them by SO_PEERCRED. Their
config, socket and job directories live in a world-readable temp directory outside
pytest's private one; each job directory belongs to its user.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirage.daemon.store import Chain, ChainState, Segment
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.types import SlurmError
from tests.slurm.conftest import REPO, MirageDaemon, until

pytestmark = pytest.mark.slurm

USERS_SCRIPT = REPO / "scripts" / "slurm-testbed" / "users.sh"
ALICE, BOB = "mirage-alice", "mirage-bob"
MIRAGE = str(REPO / ".venv" / "bin" / "mirage")

SCRIPT = """#!/bin/bash
#SBATCH --output=slurm-%j.out
id -un > "who.$SLURM_JOB_ID"
sleep 300
"""


@pytest.fixture
def users() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates local users and runs commands as them")
    res = subprocess.run(
        [str(USERS_SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
    for name in (ALICE, BOB):
        pwd.getpwnam(name)


@pytest.fixture
def root_daemon(users: None) -> Iterator[MirageDaemon]:
    """A root daemon acting as the chains' owners, in a directory the users can read."""
    top = Path(tempfile.mkdtemp(prefix="mg-users-", dir="/tmp"))
    top.chmod(0o755)
    (top / "daemon").mkdir()
    d = MirageDaemon(top / "daemon", "users", run_as_owner="always")
    yield d
    d.stop()
    with d.store.sessions() as s:
        live = list(s.scalars(select(Segment.job_id)))
    if live:
        with contextlib.suppress(SlurmError):
            CliSlurmClient(timeout=60.0).cancel(live)
    shutil.rmtree(d.sock_dir, ignore_errors=True)
    shutil.rmtree(top, ignore_errors=True)


def mirage_for(user: str) -> tuple[list[str], dict[str, str]]:
    """How ``user`` runs the ``mirage`` command: the checkout's own when they may execute
    its interpreter; else (a virtualenv on a pyenv Python under root's 0700 home) the same
    package and site-packages under the system's Python of the same minor version."""
    env = dict(os.environ)
    probe = ["runuser", "-u", user, "--", str(REPO / ".venv" / "bin" / "python3"), "-c", ""]
    if subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0:
        return [MIRAGE], env
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.exists():
        pytest.skip(f"{user} can execute neither the venv's Python nor {system}")
    site = next((REPO / ".venv" / "lib").glob("python3.*/site-packages"))
    env["PYTHONPATH"] = f"{REPO}:{site}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return [str(system), "-c", "import sys; from mirage.cli import main; sys.exit(main())"], env


def as_user(d: MirageDaemon, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``mirage ARGS --config … --json`` run as ``user`` (runuser), in their job directory."""
    mirage, env = mirage_for(user)
    cmd = ["runuser", "-u", user, "--", *mirage, *args[:2], "--config", str(d.config), "--json"]
    return subprocess.run(
        [*cmd, *args[2:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=workdir(d, user),
        env=env,
    )


def ok(res: subprocess.CompletedProcess[str]) -> Any:
    assert res.returncode == 0, (res.args, res.stdout, res.stderr)
    return json.loads(res.stdout)


def workdir(d: MirageDaemon, user: str) -> Path:
    return d.root.parent / user


def chain_of(d: MirageDaemon, chain_id: str) -> Chain:
    with d.store.sessions() as s:
        c = s.get(Chain, chain_id)
        assert c is not None
        return c


def first_job(d: MirageDaemon, chain_id: str) -> str | None:
    with d.store.sessions() as s:
        q = select(Segment.job_id).where(Segment.chain_id == chain_id, Segment.index == 0)
        return s.scalars(q).first()


def test_two_users_see_and_cancel_only_their_own_chains(root_daemon: MirageDaemon) -> None:
    d = root_daemon
    d.sock_dir.chmod(0o755)  # the socket itself is 0666: who connects is SO_PEERCRED's
    script = d.root.parent / "seg.sbatch"
    script.write_text(SCRIPT)
    script.chmod(0o644)
    for user in (ALICE, BOB):
        w = workdir(d, user)
        w.mkdir()
        pw = pwd.getpwnam(user)
        os.chown(w, pw.pw_uid, pw.pw_gid)
    d.start()
    sock = d.sock_dir / "mirage.sock"
    until(sock.is_socket, 30, f"the daemon's socket\n{d.tail()}")

    chains: dict[str, str] = {}
    for user in (ALICE, BOB):
        out = ok(
            as_user(
                # one segment: no successor, so no handoff signal to this trap-less script
                d, user, "chain", "submit", str(script), "--segments", "1",
                "--name", f"{user}-chain",
                "--", "-p", "gpu", "--gres=gpu:1", "--time=1", f"--chdir={workdir(d, user)}",
            )
        )  # fmt: skip
        assert out["first_segment"] == "daemon", out  # registered over the socket
        chains[user] = str(out["chain_id"])
    owners = {user: chain_of(d, cid) for user, cid in chains.items()}
    for user, c in owners.items():
        assert (c.owner, c.uid) == (user, pwd.getpwnam(user).pw_uid), (c.owner, c.uid)

    # each chain's first segment: submitted by the root daemon, running as its owner
    client = CliSlurmClient(timeout=60.0)
    jobs: dict[str, str] = {}
    for user, cid in chains.items():
        until(lambda cid=cid: first_job(d, cid) is not None, 60, f"{user}'s segment 1")  # type: ignore[misc]
        job = first_job(d, cid)
        assert job is not None
        jobs[user] = job
    for user, job in jobs.items():
        in_queue = client.queue().by_id()[job]
        assert in_queue.user == user, (job, in_queue.user)
        who = workdir(d, user) / f"who.{job}"
        until(who.exists, 60, f"{user}'s job {job} to run\n{d.tail()}")
        assert who.read_text().strip() == user  # the job's processes are the owner's
        assert who.stat().st_uid == pwd.getpwnam(user).pw_uid

    # each sees only their own chain; root sees both
    for user, other in ((ALICE, BOB), (BOB, ALICE)):
        listed = ok(as_user(d, user, "chain", "list"))
        assert [r["id"] for r in listed] == [chains[user]], (user, listed)
        shown = as_user(d, user, "chain", "show", chains[other])
        assert shown.returncode != 0 and f"no chain {chains[other]} of yours" in shown.stderr
    assert {r["id"] for r in d.cli("chain", "list")} == set(chains.values())

    # alice cannot cancel bob's chain: a clear error, and the chain and its job go on
    res = as_user(d, ALICE, "chain", "cancel", chains[BOB])
    assert res.returncode != 0, res.stdout
    assert f"no chain {chains[BOB]} of yours" in res.stderr, res.stderr
    time.sleep(5)  # two poll cycles: nothing the daemon does about it
    assert chain_of(d, chains[BOB]).state is ChainState.ACTIVE
    assert client.queue().by_id()[jobs[BOB]].state.is_active
    assert [r["state"] for r in ok(as_user(d, BOB, "chain", "list"))] == ["ACTIVE"]

    # bob cancels his own: the daemon cancels his job (as bob); alice's chain is untouched
    out = ok(as_user(d, BOB, "chain", "cancel", chains[BOB]))
    assert out == {"chain_id": chains[BOB], "was": "ACTIVE", "state": "CANCELLED"}, out
    c = chain_of(d, chains[BOB])
    assert c.state is ChainState.CANCELLED and c.reason == "cancelled by its owner", c.reason
    until(
        lambda: (
            jobs[BOB] not in client.queue().by_id()
            or client.queue().by_id()[jobs[BOB]].state.is_finished
        ),
        30,
        f"bob's job to be cancelled\n{d.tail()}",
    )
    since = int(time.time()) - 600
    until(
        lambda: any(j.job_id == jobs[BOB] for j in client.accounting(since)),
        30,
        "bob's job in sacct",
    )
    acct = next(j for j in client.accounting(since) if j.job_id == jobs[BOB])
    assert acct.user == BOB and acct.state.value == "CANCELLED", (acct.user, acct.state)
    assert chain_of(d, chains[ALICE]).state is ChainState.ACTIVE
    assert client.queue().by_id()[jobs[ALICE]].state.is_active
    assert [r["state"] for r in ok(as_user(d, ALICE, "chain", "list"))] == ["ACTIVE"]
