"""The job-side handoff helper, the example batch script's signal forwarding, and the
daemon's handoff record (its intent committed before the signal: crash safety)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirage.daemon import handoff
from mirage.daemon.advance import HANDOFF_INTENT
from mirage.daemon.core import Daemon
from mirage.daemon.store import ChainState, Event, Segment, Store
from mirage.sim.engine import Simulation
from tests.unit.daemon_support import (
    Crash,
    EndsFailed,
    chain_state,
    make_chain,
    make_config,
    make_sim,
    make_store,
    run_cycles,
)

REPO = Path(__file__).resolve().parents[2]


def test_successor_waits_for_the_predecessor_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff, "job_state", lambda _job: "RUNNING")
    assert handoff.start(tmp_path, "100", timeout=5, poll=0.01) == 0  # first segment
    threading.Timer(0.3, lambda: handoff.done(tmp_path, "100")).start()
    began = time.monotonic()
    assert handoff.start(tmp_path, "101", timeout=5, poll=0.01) == 0
    assert time.monotonic() - began >= 0.25  # it waited for "checkpointed"
    assert (handoff._read(tmp_path) or {})["job_id"] == "101"
    # a predecessor Slurm no longer lists: --timeout bounds the wait (tests/unit/
    # test_jobside_helper.py has the rest: grace, self-signal, daemon down)
    monkeypatch.setattr(handoff, "job_state", lambda _job: "")
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
    """train.sbatch run from a spool copy, as slurmd runs it: it finds train.py and the
    helper in SLURM_SUBMIT_DIR, runs train.py with MIRAGE_PYTHON and the helper with
    python3 -I, and forwards USR1 to the training."""
    job, bindir = example_job(tmp_path, FAKE_TRAIN)
    spool = tmp_path / "spool"
    spool.mkdir()
    shutil.copy(job / "train.sbatch", spool / "slurm_script")
    ckpt = tmp_path / "ckpt"
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "MIRAGE_PYTHON": sys.executable,
        "SLURM_JOB_ID": "7",
        "SLURM_SUBMIT_DIR": str(job),
        "CKPT": str(ckpt),
    }
    proc = subprocess.Popen(["bash", str(spool / "slurm_script")], env=env, cwd=spool)
    deadline = time.monotonic() + 30
    while not (ckpt / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGUSR1)  # what --signal=B:USR1 / Mirage's handoff does
    assert proc.wait(timeout=30) == 0
    assert (ckpt / "last.pt").read_text() == "checkpoint"
    assert (handoff._read(ckpt) or {})["state"] == "checkpointed"


def test_example_script_signalled_while_waiting_trains_nothing(tmp_path: Path) -> None:
    """USR1 while the helper still waits (this segment is itself being handed off): the
    script records its checkpoint as final without starting the training, and exits 0."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    job = tmp_path / "job"
    job.mkdir()
    for name in ("train.sbatch", "mirage_handoff.py"):
        shutil.copy(REPO / "deploy" / "examples" / name, job / name)
    (job / "train.py").write_text("raise SystemExit('must not run')\n")
    ckpt = job / "checkpoints"
    ckpt.mkdir()
    handoff._write(ckpt, "6", "running")  # a predecessor that squeue says still runs
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    (bindir / "squeue").write_text("#!/bin/sh\necho RUNNING\n")
    (bindir / "squeue").chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "MIRAGE_HANDOFF_GRACE": "600"}
    proc = subprocess.Popen(
        ["bash", str(job / "train.sbatch")], env=env, cwd=job, stdout=subprocess.PIPE, text=True
    )
    time.sleep(1.0)  # the helper is polling
    os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(0.3)
    handoff.done(ckpt, "6")  # the predecessor finishes; the helper goes on within a poll
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "signalled before training started" in out
    assert f"submit dir {job}," in out  # no SLURM_SUBMIT_DIR: $PWD
    assert (handoff._read(ckpt) or {}) | {"at": 0} == {
        "job_id": "7",
        "chain": None,
        "segment": None,
        "state": "checkpointed",
        "at": 0,
    }


LATE_SIGNAL_TRAIN = """
import os, signal, sys, pathlib
ckpt = pathlib.Path(sys.argv[sys.argv.index("--checkpoint-dir") + 1])
(ckpt / "DONE").write_text("3600")
print("training complete at step 3600", flush=True)
signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # what Python's shutdown restores
os.kill(os.getpid(), signal.SIGUSR1)  # Slurm's warning, just too late: killed by it
"""


def example_job(tmp_path: Path, train_py: str) -> tuple[Path, Path]:
    """The example's script and helper in ``job/`` with ``train_py`` as train.py, and a
    ``bin/`` whose python3 is this interpreter."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    job = tmp_path / "job"
    job.mkdir()
    for name in ("train.sbatch", "mirage_handoff.py"):
        shutil.copy(REPO / "deploy" / "examples" / name, job / name)
    (job / "train.py").write_text(train_py)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    return job, bindir


def test_example_script_a_finished_training_killed_on_its_way_out_exits_0(
    tmp_path: Path,
) -> None:
    """The trial's job 255: DONE written, then USR1 during the interpreter's exit, and the
    segment ended FAILED 10:0 (train.py's status 138). The script exits 0 once DONE is there,
    and ignores signals after the training (nothing left to checkpoint)."""
    job, bindir = example_job(tmp_path, LATE_SIGNAL_TRAIN)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "MIRAGE_PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(job / "train.sbatch")],
        env=env,
        cwd=job,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "training is complete (DONE) but train.py exited 138" in proc.stdout
    assert (handoff._read(job / "checkpoints") or {})["state"] == "checkpointed"


def test_example_training_ignores_signals_once_it_has_finished(tmp_path: Path) -> None:
    """Python restores a handled signal's default action while it shuts down (a USR1 then
    kills it); one it ignores stays ignored. train.py ignores USR1 and TERM once done."""
    pytest.importorskip("torch")
    train = str(REPO / "deploy" / "examples" / "train.py")
    probe = (
        "import runpy, signal, sys\n"
        f"sys.argv = ['train.py', '--checkpoint-dir', {str(tmp_path / 'ck')!r}, '--steps', '3']\n"
        "try:\n"
        f"    runpy.run_path({train!r}, run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "print(signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN,"
        " signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "True True"
    assert (tmp_path / "ck" / "DONE").read_text() == "3\n"


# ---- the daemon's side: the handoff intent is durable before the signal ------------------


class FailsOnSignal(EndsFailed):
    """A predecessor that exits non-zero on the handoff signal (FAILED, not CANCELLED):
    the case where Mirage's record alone separates a handoff from a broken job."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.handoff_exits = True

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        super().signal(job_id, signal, batch_only)  # raises Crash before delivery if armed
        self.failed.add(job_id)


class CrashAfterSignal(Daemon):
    """Stands for MIRAGE_FAULT=during-handoff's SIGKILL (after the signal, before its record)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ctx.fault_point = self._crash  # type: ignore[method-assign]

    @staticmethod
    def _crash(point: str) -> None:
        if point == "during-handoff":
            raise Crash("killed after the handoff signal, before its record")


def _intents(store: Store) -> list[Event]:
    with store.sessions() as s:
        return list(s.scalars(select(Event).where(Event.kind == HANDOFF_INTENT)))


def _segments(store: Store, chain_id: str) -> list[Segment]:
    with store.sessions() as s:
        rows = s.scalars(
            select(Segment).where(Segment.chain_id == chain_id).order_by(Segment.index)
        )
        return list(rows)


@pytest.mark.parametrize("crash", ["", "before-signal", "after-signal"])
def test_failed_exit_after_a_recorded_handoff_continues_the_chain(
    tmp_path: Path, crash: str
) -> None:
    """Kill the daemon between the recorded intent and the signal, or between the signal and
    its record; the predecessor exits non-zero on the signal. The chain must go on."""
    store, sim = make_store(tmp_path), FailsOnSignal(make_sim().sim)
    chain = make_chain(store, segments=2, limit=3600)
    cfg = make_config("fixed-lead", lead_s=600)
    first_cls = CrashAfterSignal if crash == "after-signal" else Daemon
    first = first_cls(store, sim, config=cfg, holder="A")
    run_cycles([first], sim, 0, 3000)  # the successor is pre-submitted at 3000
    sim.advance_to(3060)  # ... and runs: the handoff is due at this cycle
    pred = _segments(store, chain.id)[0].job_id
    if crash:
        sim.crash = "signal" if crash == "before-signal" else ""
        with pytest.raises(Crash):
            first.cycle(3060)
        # what the kill left: the intent committed, the signal not recorded as sent
        assert [e.data["job_id"] for e in _intents(store)] == [pred]
        assert _segments(store, chain.id)[0].signalled_at is None
        assert (pred in sim.failed) is (crash == "after-signal")
        second = Daemon(store, sim, config=cfg, holder="B")  # restarted; A's lease lapses
        run_cycles([second], sim, 3300, 3 * 3600)
    else:
        run_cycles([first], sim, 3060, 3 * 3600)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED, c.reason
    segs = _segments(store, chain.id)
    assert segs[0].job_state == "FAILED" and segs[0].outcome == "CONTINUE"
    # signalled exactly once: re-sent after a kill before it, not after a kill past it
    assert [j for j, _sig in sim.signals].count(pred) == 1
    assert segs[0].signalled_at == {"": 3060, "before-signal": 3300, "after-signal": None}[crash]
    # one intent per handoff, never recorded twice
    assert [e.data["job_id"] for e in _intents(store)].count(pred) == 1
    assert set(sim.tokens().values()) == {1}


def test_failed_exit_without_a_handoff_stops_the_chain(tmp_path: Path) -> None:
    """The other side: a predecessor that fails on its own (no intent) still stops it."""
    store, sim = make_store(tmp_path), FailsOnSignal(make_sim().sim)
    chain = make_chain(store, segments=2, limit=3600)
    d = Daemon(store, sim, config=make_config("reactive"), holder="A")
    run_cycles([d], sim, 0, 600)
    pred = _segments(store, chain.id)[0].job_id
    sim.signal(pred, "KILL")  # not through Mirage: no intent, no record
    run_cycles([d], sim, 660, 1200)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.STOPPED, c.reason
    assert _intents(store) == []
