"""The job-side handoff helper as researchers get it: deploy/examples/mirage_handoff.py is
mirage/daemon/handoff.py byte for byte, runs on a bare python3 (standard library only,
Python 3.6 syntax), and its wait survives a daemon that is down. Slurm is played by fake
``squeue``/``scancel`` scripts on PATH; time by a fake clock."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mirage.daemon import handoff

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "mirage" / "daemon" / "handoff.py"
COPY = REPO / "deploy" / "examples" / "mirage_handoff.py"

# squeue: the state in $FAKE/state ("gone": Slurm no longer lists the job; "down": the
# controller cannot be reached); a SQUEUE_USERS filter from the job's environment would
# hide the job. scancel: logged; with $FAKE/obey, the predecessor checkpoints on the signal.
SQUEUE = """#!/bin/sh
echo "$@" >> "$FAKE/squeue.log"
[ -n "${SQUEUE_USERS:-}" ] && exit 0
state=$(cat "$FAKE/state")
case "$state" in
  gone) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
  down) echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1 ;;
  *) echo "$state" ;;
esac
"""
SCANCEL = """#!/bin/sh
echo "$@" >> "$FAKE/scancel.log"
[ -e "$FAKE/refuse" ] && { echo "scancel: error: Unable to contact slurm controller" >&2; exit 1; }
if [ -e "$FAKE/obey" ]; then
  printf '{"job_id": "100", "state": "checkpointed"}' > "$CKPT/.mirage-segment.json"
  echo COMPLETED > "$FAKE/state"
fi
exit 0
"""


class Clock:
    """monotonic() and sleep() for start(): sleeping only moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeSlurm:
    def __init__(self, root: Path, ckpt: Path) -> None:
        self.root, self.ckpt = root, ckpt
        self.set("RUNNING")

    def set(self, state: str) -> None:
        (self.root / "state").write_text(state)

    def log(self, name: str) -> list[str]:
        path = self.root / f"{name}.log"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "ckpt"
    path.mkdir()
    return path


@pytest.fixture
def slurm(tmp_path: Path, ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = tmp_path / "fake"
    (fake / "bin").mkdir(parents=True)
    for name, body in (("squeue", SQUEUE), ("scancel", SCANCEL)):
        (fake / "bin" / name).write_text(body)
        (fake / "bin" / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE", str(fake))
    monkeypatch.setenv("CKPT", str(ckpt))
    return FakeSlurm(fake, ckpt)


def predecessor_runs(ckpt: Path, job_id: str = "100") -> None:
    handoff._write(ckpt, job_id, "running")


def record(ckpt: Path) -> dict[str, object]:
    rec = handoff._read(ckpt)
    assert rec is not None
    return rec


def start(ckpt: Path, clock: Clock, **kw: float) -> int:
    opts = {"grace": 60.0, "timeout": 60.0, "poll": 5.0, **kw}
    return handoff.start(ckpt, "101", clock=clock, sleep=clock.sleep, **opts)  # type: ignore[arg-type]


# ---- the copy researchers take ------------------------------------------------------------


def test_example_copy_is_the_module_byte_for_byte() -> None:
    assert COPY.read_bytes() == SOURCE.read_bytes(), (
        "deploy/examples/mirage_handoff.py must be a copy of mirage/daemon/handoff.py: "
        "cp mirage/daemon/handoff.py deploy/examples/mirage_handoff.py"
    )


def test_helper_imports_only_the_standard_library() -> None:
    tree = ast.parse(COPY.read_text(), feature_version=(3, 6))  # no 3.8+ syntax either
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "__future__" not in names  # Python 3.6 has no `annotations` future
    assert {n.split(".")[0] for n in names} <= sys.stdlib_module_names


def _old_pythons() -> list[str]:
    """Python 3.6 and 3.7 interpreters on this machine (PATH or pyenv), if any."""
    found = [shutil.which(f"python3.{minor}") or "" for minor in (6, 7)]
    found += [str(p) for p in Path.home().glob(".pyenv/versions/3.[67].*/bin/python3")]
    real = {str(Path(p).resolve()) for p in found if p and "/shims/" not in p}
    return sorted(real)


@pytest.mark.parametrize("python", [sys.executable, *_old_pythons()])
def test_helper_runs_alone_on_a_bare_python(
    python: str, tmp_path: Path, ckpt: Path, slurm: FakeSlurm
) -> None:
    """Isolated (-I: no PYTHONPATH, no user site; -S: no site-packages), from an empty
    directory: a first segment starts, a successor waits for a predecessor that Slurm no
    longer lists (--timeout) and goes on."""
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(COPY, alone / "mirage_handoff.py")
    run = [python, "-I", "-S", str(alone / "mirage_handoff.py")]
    env = {**os.environ, "SLURM_JOB_ID": "100"}
    first = subprocess.run(
        [*run, "start", str(ckpt)], env=env, cwd=alone, capture_output=True, text=True, check=False
    )
    assert (first.returncode, first.stdout) == (0, ""), first.stderr  # job logs get words
    slurm.set("gone")
    env["SLURM_JOB_ID"] = "101"
    args = ["start", str(ckpt), "--timeout", "0.2", "--poll", "0.05"]
    second = subprocess.run(
        [*run, *args], env=env, cwd=alone, capture_output=True, text=True, check=False
    )
    assert second.returncode == 0, second.stderr
    assert "job 100 left the queue (no longer listed)" in second.stderr
    assert json.loads((ckpt / handoff.STATE_FILE).read_text())["job_id"] == "101"
    assert subprocess.run([*run, "done", str(ckpt)], env=env, check=False).returncode == 0
    assert (record(ckpt)["job_id"], record(ckpt)["state"]) == ("101", "checkpointed")


# ---- the wait: the daemon is down, the predecessor still runs ---------------------------


def test_first_segment_and_a_checkpointed_predecessor_go_at_once(
    ckpt: Path, slurm: FakeSlurm
) -> None:
    clock = Clock()
    assert start(ckpt, clock) == 0  # no state file: the first segment
    handoff.done(ckpt, "101")
    assert handoff.start(ckpt, "102", clock=clock, sleep=clock.sleep) == 0
    assert clock.now == 1000.0 and slurm.log("squeue") == []
    assert record(ckpt)["job_id"] == "102"


def test_daemon_signalled_in_time_no_second_signal(ckpt: Path, slurm: FakeSlurm) -> None:
    predecessor_runs(ckpt)
    clock = Clock()

    def sleep(seconds: float) -> None:  # the predecessor checkpoints 20 s in (the daemon's signal)
        clock.sleep(seconds)
        if clock.now >= 1020:
            handoff.done(ckpt, "100")

    assert handoff.start(ckpt, "101", grace=60, poll=5, clock=clock, sleep=sleep) == 0
    assert slurm.log("scancel") == []
    assert 1020 <= clock.now < 1060
    assert slurm.log("squeue")[0] == "-h -t all -j 100 -o %T"


def test_daemon_down_successor_signals_its_predecessor_after_the_grace(
    ckpt: Path, slurm: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    predecessor_runs(ckpt)
    (slurm.root / "obey").touch()
    clock = Clock()
    assert start(ckpt, clock, grace=60, poll=5) == 0
    assert slurm.log("scancel") == ["--batch --signal=USR1 100"]  # once, after the grace
    assert 1060 <= clock.now <= 1070
    err = capsys.readouterr().err
    assert "job 100 still runs 60s after this segment (job 101) started: signalling it (USR1)" in (
        err
    )
    assert record(ckpt)["job_id"] == "101"


def test_no_timeout_while_the_predecessor_runs(ckpt: Path, slurm: FakeSlurm) -> None:
    """The old helper gave up after --timeout (exit 3: the chain stopped). Now a running
    predecessor is waited for however long; a failed scancel is retried each --retry."""
    predecessor_runs(ckpt)
    (slurm.root / "refuse").touch()
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 1000 + 3600:  # an hour later it checkpoints (Slurm's own warning)
            handoff.done(ckpt, "100")

    kw = {"grace": 60.0, "timeout": 10.0, "poll": 5.0, "retry": 60.0}
    assert handoff.start(ckpt, "101", clock=clock, sleep=sleep, **kw) == 0  # type: ignore[arg-type]
    assert clock.now >= 4600
    assert 55 <= len(slurm.log("scancel")) <= 61  # about once a minute, never every poll


def test_squeue_down_counts_as_running(ckpt: Path, slurm: FakeSlurm) -> None:
    predecessor_runs(ckpt)
    slurm.set("down")
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 1500:
            handoff.done(ckpt, "100")

    assert handoff.start(ckpt, "101", timeout=10, poll=5, clock=clock, sleep=sleep) == 0
    assert clock.now >= 1500  # waited past --timeout: Slurm could not say it ended


@pytest.mark.parametrize("state", ["gone", "TIMEOUT", "COMPLETED", "CANCELLED"])
def test_predecessor_gone_without_checkpointed_goes_on_after_timeout(
    ckpt: Path, slurm: FakeSlurm, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed at its limit (or its `done` not visible yet): --timeout bounds this wait."""
    predecessor_runs(ckpt)
    slurm.set(state)
    clock = Clock()
    assert start(ckpt, clock, timeout=30, poll=5) == 0
    assert 1030 <= clock.now <= 1035
    assert slurm.log("scancel") == []
    listed = "no longer listed" if state == "gone" else state
    assert f"job 100 left the queue ({listed}) without recording its last checkpoint" in (
        capsys.readouterr().err
    )


def test_checkpointed_seen_late_after_the_job_left(ckpt: Path, slurm: FakeSlurm) -> None:
    """A shared filesystem shows `done` after Slurm forgot the job: picked up, no warning."""
    predecessor_runs(ckpt)
    slurm.set("gone")
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 1015:
            handoff.done(ckpt, "100")

    assert handoff.start(ckpt, "101", timeout=60, poll=5, clock=clock, sleep=sleep) == 0
    assert clock.now == 1015


def test_the_job_environment_does_not_filter_squeue(
    ckpt: Path, slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQUEUE_USERS", "someone-else")  # would hide the predecessor
    assert handoff.job_state("100") == "RUNNING"
    slurm.set("COMPLETED")
    assert not handoff.job_alive("100")
    slurm.set("down")
    assert handoff.job_alive("100")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert handoff.job_state("100") == handoff.UNKNOWN


def test_unreadable_state_file_exits_3_after_timeout(ckpt: Path, slurm: FakeSlurm) -> None:
    (ckpt / handoff.STATE_FILE).mkdir()  # exists, cannot be read (even by root)
    clock = Clock()
    assert start(ckpt, clock, timeout=20, poll=5) == 3
    assert 1020 <= clock.now <= 1025


def test_garbled_state_file_is_no_predecessor(ckpt: Path, slurm: FakeSlurm) -> None:
    (ckpt / handoff.STATE_FILE).write_text("{not json")
    assert start(ckpt, Clock()) == 0
    assert record(ckpt)["job_id"] == "101"


def test_done_leaves_another_jobs_record(ckpt: Path) -> None:
    handoff._write(ckpt, "200", "running")
    assert handoff.done(ckpt, "100") == 0
    assert record(ckpt)["job_id"] == "200"
    assert handoff.done(ckpt, "200") == 0
    assert record(ckpt)["state"] == "checkpointed"


def test_cli_options(ckpt: Path, slurm: FakeSlurm) -> None:
    predecessor_runs(ckpt)
    slurm.set("gone")
    args = ["start", str(ckpt), "--job-id", "101", "--timeout", "0", "--grace", "5"]
    assert handoff.main([*args, "--poll", "0.01", "--signal", "TERM"]) == 0
    with pytest.raises(SystemExit):
        handoff.main(["start", str(ckpt), "--job-id", ""])


# ---- who is who: the segment's number and its predecessor from Mirage -------------------


def obey_as(slurm: FakeSlurm, job_id: str, segment: int) -> None:
    """The fake scancel: the signalled predecessor records its checkpoint as ``job_id``."""
    rec = json.dumps({"job_id": job_id, "segment": segment, "state": "checkpointed"})
    (slurm.root / "bin" / "scancel").write_text(
        "#!/bin/sh\n"
        'echo "$@" >> "$FAKE/scancel.log"\n'
        f"printf '%s' '{rec}' > \"$CKPT/{handoff.STATE_FILE}\"\n"
    )


def test_a_successor_signals_its_running_predecessor_at_once(ckpt: Path, slurm: FakeSlurm) -> None:
    """The handoff starts when the successor starts, whatever the daemon's poll interval."""
    handoff._write(ckpt, "100", "running", 2)
    obey_as(slurm, "100", 2)
    clock = Clock()
    assert handoff.start(ckpt, "101", segment=3, pred="100", clock=clock, sleep=clock.sleep) == 0
    assert slurm.log("scancel") == ["--batch --signal=USR1 100"]
    assert clock.now <= 1001.0  # signalled before the first poll, checkpointed within one
    assert (record(ckpt)["job_id"], record(ckpt)["segment"]) == ("101", 3)


def test_the_predecessor_is_the_one_mirage_named_not_an_older_record(
    ckpt: Path, slurm: FakeSlurm
) -> None:
    """The trial's three segments: segment 3 (job 289) still waits in its own start when
    segment 4 (job 290) starts, and the file shows segment 2's (288) `checkpointed`. 290
    must not resume from 288's checkpoint while 289 may still train: it signals 289 (no
    other job) and goes on only after 289's own `done`."""
    handoff._write(ckpt, "288", "checkpointed", 2)
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now == 1003.0:  # 289 sees 288's done and takes over...
            handoff._write(ckpt, "289", "running", 3)
        if clock.now == 1006.0:  # ...then, signalled, records its checkpoint and exits
            handoff.done(ckpt, "289", 3)

    code = handoff.start(ckpt, "290", segment=4, pred="289", clock=clock, sleep=sleep)
    assert code == 0
    assert clock.now == 1006.0
    assert slurm.log("scancel") == ["--batch --signal=USR1 289"]
    assert (record(ckpt)["job_id"], record(ckpt)["segment"]) == ("290", 4)


def test_an_overtaken_segment_neither_trains_nor_signals_its_successor(
    ckpt: Path, slurm: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old helper, overtaken while it waited, took the later segment (290) for its
    predecessor and signalled it after the grace. Now it exits OVERTAKEN and writes nothing."""
    handoff._write(ckpt, "288", "running", 2, "c1")
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now == 1004.0:
            handoff._write(ckpt, "290", "running", 4, "c1")

    code = handoff.start(ckpt, "289", segment=3, pred="288", chain="c1", clock=clock, sleep=sleep)
    assert code == handoff.OVERTAKEN
    assert slurm.log("scancel") == ["--batch --signal=USR1 288"]  # its own predecessor only
    assert record(ckpt)["job_id"] == "290"
    assert "a later segment (job 290) already took over" in capsys.readouterr().err
    handoff.done(ckpt, "289", 3, "c1")
    assert record(ckpt)["job_id"] == "290"  # done leaves the later segment's record


def test_an_earlier_chains_record_is_no_later_segment(ckpt: Path, slurm: FakeSlurm) -> None:
    """A new chain continues a training in the same directory: the old chain's segment 5
    came before this chain's segment 1, whatever their numbers."""
    handoff._write(ckpt, "500", "checkpointed", 5, "old-chain")
    clock = Clock()
    assert (
        handoff.start(ckpt, "600", segment=1, chain="new-chain", clock=clock, sleep=clock.sleep)
        == 0
    )
    assert (record(ckpt)["job_id"], record(ckpt)["chain"], record(ckpt)["segment"]) == (
        "600",
        "new-chain",
        1,
    )
    assert clock.now == 1000.0 and slurm.log("scancel") == []


def test_by_hand_the_first_job_seen_running_is_the_predecessor(
    ckpt: Path, slurm: FakeSlurm
) -> None:
    """Without Mirage's variables (plain sbatch) a job that appears after the predecessor
    is a later segment, not a new predecessor."""
    predecessor_runs(ckpt, "288")
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now == 1002.0:
            handoff._write(ckpt, "290", "running")

    code = handoff.start(ckpt, "289", clock=clock, sleep=sleep)
    assert code == handoff.OVERTAKEN
    assert slurm.log("scancel") == ["--batch --signal=USR1 288"]


def test_a_predecessor_that_never_recorded_anything_is_waited_for_in_slurm(
    ckpt: Path, slurm: FakeSlurm
) -> None:
    """The named predecessor ended without ever writing to the file (it failed before its
    own start): --timeout after Slurm stops listing it, from the last complete checkpoint."""
    handoff._write(ckpt, "288", "checkpointed", 2)
    slurm.set("FAILED")
    clock = Clock()
    assert (
        handoff.start(
            ckpt, "290", segment=4, pred="289", timeout=30, clock=clock, sleep=clock.sleep
        )
        == 0
    )
    assert 1030.0 <= clock.now <= 1031.0
    assert slurm.log("scancel") == []  # an ended job is not signalled


def test_the_cli_reads_mirages_variables(
    ckpt: Path, slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRAGE_CHAIN_ID", "c7")
    monkeypatch.setenv("MIRAGE_SEGMENT", "2")
    monkeypatch.setenv("MIRAGE_PREV_JOB_ID", "100")
    handoff._write(ckpt, "100", "checkpointed", 1)
    assert handoff.main(["start", str(ckpt), "--job-id", "101"]) == 0
    assert (record(ckpt)["job_id"], record(ckpt)["segment"], record(ckpt)["state"]) == (
        "101",
        2,
        "running",
    )
    assert handoff.main(["done", str(ckpt), "--job-id", "101"]) == 0
    assert (record(ckpt)["segment"], record(ckpt)["state"]) == (2, "checkpointed")
    assert record(ckpt)["chain"] == "c7"
    assert slurm.log("squeue") == []  # its predecessor had recorded its checkpoint
