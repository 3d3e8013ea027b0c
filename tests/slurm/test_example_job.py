"""deploy/examples as shipped, on the real test cluster, and the submit directory that
Mirage's sbatch gives a job (SLURM_SUBMIT_DIR).

The example runs as root: the checkout's virtualenv sits on a pyenv Python under root's
0700 home, which mirage-alice cannot execute (MIRAGE_PYTHON must be a Python the job's
user can run). The submit-directory tests run sbatch as root and as mirage-alice.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mirage.daemon.identity import OwnerRunner
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.run import WorkdirError
from mirage.slurm.types import SubmitRequest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples"
ALICE = "mirage-alice"
ECHO_SUBMIT_DIR = b'#!/bin/sh\necho "$SLURM_SUBMIT_DIR" > "submit_dir.$SLURM_JOB_ID"\n'


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory under /tmp that every user may traverse (pytest's tmp_path is 0700)."""
    top = Path(tempfile.mkdtemp(prefix="mirage-example-", dir="/tmp"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def jobs() -> Iterator[list[str]]:
    """Job ids to cancel after the test, whoever submitted them (root may cancel all)."""
    mine: list[str] = []
    yield mine
    if mine:
        subprocess.run(["scancel", *mine], capture_output=True, timeout=60, check=False)


def until(what: str, timeout: float, check: Callable[[], object]) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1.0)
    raise AssertionError(f"{what}: not within {timeout:.0f}s")


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


# ---- Mirage's sbatch keeps the chain's directory as the job's submit directory ----------


def _submit_dir_of_job(client: CliSlurmClient, work: Path, jobs: list[str]) -> str:
    job_id = client.submit(SubmitRequest(script=ECHO_SUBMIT_DIR, time_limit=60, chdir=str(work)))
    jobs.append(job_id)
    out = work / f"submit_dir.{job_id}"
    until(f"job {job_id} wrote {out}", 120, lambda: text(out).strip())
    return text(out).strip()


def test_submit_runs_sbatch_in_the_chain_directory(tmp_path: Path, jobs: list[str]) -> None:
    """As the daemon's own user: SLURM_SUBMIT_DIR is the request's chdir, not the
    directory the submitting process happens to be in (here tmp_path)."""
    work = tmp_path / "chain-dir"
    work.mkdir()
    assert _submit_dir_of_job(CliSlurmClient(timeout=60.0), work, jobs) == str(work)


def test_owner_sbatch_enters_the_chain_directory_as_the_owner(
    open_tmp: Path, tmp_path: Path, jobs: list[str]
) -> None:
    """A root daemon submitting as mirage-alice: the job's SLURM_SUBMIT_DIR is the chain's
    directory; a directory alice may not enter (root may) or one that is gone is that
    submission's WorkdirError, and nothing is submitted."""
    if os.geteuid() != 0:
        pytest.skip("needs root: submits as mirage-alice")
    try:
        alice = pwd.getpwnam(ALICE)
    except KeyError:
        pytest.skip(f"no {ALICE} (scripts/slurm-testbed/users.sh)")
    work = open_tmp / "alice-chain"
    work.mkdir()
    os.chown(work, alice.pw_uid, alice.pw_gid)
    runner = OwnerRunner(
        alice.pw_uid, alice.pw_gid, [alice.pw_gid], base_env={"PATH": "/usr/bin:/bin"}
    )
    client = CliSlurmClient(runner=runner, binaries={"sbatch": shutil.which("sbatch") or "sbatch"})
    assert _submit_dir_of_job(client, work, jobs) == str(work)
    before = _my_jobs(ALICE)
    for bad in (tmp_path, open_tmp / "gone"):  # tmp_path: root's 0700 pytest directory
        with pytest.raises(WorkdirError, match=f"in {bad}"):
            client.submit(SubmitRequest(script=ECHO_SUBMIT_DIR, time_limit=60, chdir=str(bad)))
    assert _my_jobs(ALICE) == before


def _my_jobs(user: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-u", user, "-o", "%i"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return sorted(out.stdout.split())


# ---- the example job, unchanged: two segments, the second hands off without a daemon -----


def _sbatch(submit_dir: Path, run_dir: Path, env: dict[str, str]) -> str:
    """Plain sbatch, run from the submit directory, the job working in another one (so
    that only SLURM_SUBMIT_DIR, not $PWD or $0, leads the script to its files)."""
    argv = [
        shutil.which("sbatch") or "sbatch", "--parsable", "--time=1", "--signal=B:USR1@15",
        "--gres=gpu:1", f"--chdir={run_dir}", "train.sbatch",
    ]  # fmt: skip
    res = subprocess.run(
        argv, cwd=submit_dir, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def _job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env.update(
        PATH="/usr/local/bin:/usr/bin:/bin",  # the helper runs on the system's python3
        MIRAGE_PYTHON=str(REPO / ".venv" / "bin" / "python"),
        TRAIN_STEPS="1000000",
        TRAIN_STEP_S="0.05",
        TRAIN_EVERY="1000000",  # no periodic checkpoint: only the signal writes one
        MIRAGE_HANDOFF_GRACE="1",  # the successor signals its predecessor itself, soon
    )
    return env


def _gone(job_id: str) -> bool:
    out = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return not out.stdout.strip()


def test_example_chain_hands_off_and_resumes(open_tmp: Path, jobs: list[str]) -> None:
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv with torch")
    submit_dir, run_dir = open_tmp / "project", open_tmp / "run"
    shutil.copytree(EXAMPLES, submit_dir)
    run_dir.mkdir()
    env = _job_env()
    first = _sbatch(submit_dir, run_dir, env)
    jobs.append(first)
    out1 = run_dir / f"slurm-{first}.out"
    until(f"job {first} trains", 120, lambda: "starting from step 0" in text(out1))
    # the successor starts while the first still trains, and no daemon signals the first
    second = _sbatch(submit_dir, run_dir, env)
    jobs.append(second)
    out2 = run_dir / f"slurm-{second}.out"
    until(f"job {second} resumes", 150, lambda: "resumed at step" in text(out2))
    until(f"job {first} leaves the queue", 60, lambda: _gone(first))

    log1, log2 = text(out1), text(out2)
    assert f"submit dir {submit_dir}," in log1 and f"submit dir {submit_dir}," in log2
    ckpt = re.search(r"signalled: checkpointed at step (\d+), exiting", log1)
    assert ckpt and int(ckpt.group(1)) > 0, log1
    assert f"handoff: waiting for job {first}'s last checkpoint" in log2
    assert f"handoff: job {first} still runs " in log2 and "scancel failed" not in log2
    assert f"resumed at step {ckpt.group(1)}\n" in log2, (log1, log2)
    assert (submit_dir / "checkpoints" / "last.pt").exists()
    # the second segment ends at Slurm's own warning (--signal=B:USR1@15), checkpointed
    until(f"job {second} checkpoints on Slurm's warning", 120, lambda: _gone(second))
    later = re.search(r"signalled: checkpointed at step (\d+), exiting", text(out2))
    assert later and int(later.group(1)) > int(ckpt.group(1)), text(out2)
    state = json.loads((submit_dir / "checkpoints" / ".mirage-segment.json").read_text())
    assert (state["job_id"], state["state"]) == (second, "checkpointed")
