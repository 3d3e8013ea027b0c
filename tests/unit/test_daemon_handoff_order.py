"""Each segment is told its place in the chain; a segment that finished its training
finishes its chain however Slurm reports its end; an until-file that is already there is
refused at registration; every handoff window is measured."""

from __future__ import annotations

import base64
import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from mirage.daemon.api import Api
from mirage.daemon.config import Config, DaemonSection
from mirage.daemon.context import local_marker_check
from mirage.daemon.core import Daemon
from mirage.daemon.ledger import build_request, export_option
from mirage.daemon.states import Action, segment_action
from mirage.daemon.store import ChainState
from mirage.slurm.types import JobState, SubmitRequest
from tests.unit.daemon_support import (
    EndsFailed,
    FaultySim,
    chain_state,
    make_chain,
    make_config,
    make_sim,
    make_store,
    run_cycles,
    segments_of,
)

# ---- the segment's number and its predecessor reach the job ------------------------------


@pytest.mark.parametrize(
    ("export", "expected"),
    [
        ("ALL", "ALL,MIRAGE_SEGMENT=3,MIRAGE_PREV_JOB_ID=41"),
        ("", "ALL,MIRAGE_SEGMENT=3,MIRAGE_PREV_JOB_ID=41"),
        ("ALL,CKPT=/scratch/c", "ALL,CKPT=/scratch/c,MIRAGE_SEGMENT=3,MIRAGE_PREV_JOB_ID=41"),
        ("NONE", "MIRAGE_SEGMENT=3,MIRAGE_PREV_JOB_ID=41"),
        ("HOME,PATH", "HOME,PATH,MIRAGE_SEGMENT=3,MIRAGE_PREV_JOB_ID=41"),
    ],
)
def test_export_adds_the_segment_and_its_predecessor(export: str, expected: str) -> None:
    assert export_option(export, 3, "41") == expected


def test_the_first_segment_has_no_predecessor_and_an_estimate_no_place() -> None:
    assert export_option("ALL", 1, None) == "ALL,MIRAGE_SEGMENT=1"
    assert export_option("ALL", 1, None, "cb6") == "ALL,MIRAGE_CHAIN_ID=cb6,MIRAGE_SEGMENT=1"
    assert export_option("NONE", None, None) == "NONE"


class Recording(FaultySim):
    """The simulator, keeping every sbatch request."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.requests: list[SubmitRequest] = []

    def submit(self, request: SubmitRequest) -> str:
        self.requests.append(request)
        return super().submit(request)


def _export(request: SubmitRequest) -> str:
    return next(a for a in request.extra_args if a.startswith("--export="))


def test_every_segment_is_submitted_with_its_number_and_its_predecessors_job(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path)
    sim = Recording(make_sim().sim)
    chain = make_chain(store, segments=3, limit=1800)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=300))
    run_cycles([d], sim, 0, 3 * 1800 + 600)
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    segs = segments_of(store, chain.id)
    ours = f"--export=MIRAGE_CHAIN_ID={chain.id},MIRAGE_SEGMENT"
    assert [_export(r) for r in sim.requests] == [
        f"{ours}=1",  # the chain exports NONE: only Mirage's variables
        f"{ours}=2,MIRAGE_PREV_JOB_ID={segs[0].job_id}",
        f"{ours}=3,MIRAGE_PREV_JOB_ID={segs[1].job_id}",
    ]
    chain.export = "ALL"
    assert "--export=ALL" in build_request(chain, "mg0", 60).extra_args  # an estimate's


# ---- a finished training finishes its chain ------------------------------------------------


@pytest.mark.parametrize(
    "state", [JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY]
)
def test_the_marker_ends_the_chain_completed_whatever_slurm_reports(state: JobState) -> None:
    v = segment_action(state, until_file=True, marker=True)
    assert (v.action, v.completed) == (Action.STOP, True)
    assert f"Slurm reports it {state.value}" in v.reason
    assert segment_action(state, until_file=True, marker=None).action is Action.WAIT
    assert segment_action(state, until_file=True, marker=False) == segment_action(state)


def test_a_segment_failed_after_writing_the_marker_completes_its_chain(tmp_path: Path) -> None:
    """The trial's job 255: DONE written, then FAILED 10:0 on a late USR1. The chain was
    STOPPED (non-zero exit); it is COMPLETED, and the reason says what Slurm reported."""
    store, sim = make_store(tmp_path), EndsFailed(make_sim().sim)
    chain = make_chain(store, segments=None, limit=1800, until_file="checkpoints/DONE")
    written = {"yes": False}
    d = Daemon(store, sim, config=make_config("reactive"), marker_check=lambda c: written["yes"])
    run_cycles([d], sim, 0, 1800 + 120)
    seg = segments_of(store, chain.id)[-1]
    assert seg.index == 1 and seg.job_state == JobState.RUNNING.value
    written["yes"] = True
    sim.failed.add(seg.job_id)
    run_cycles([d], sim, 1800 + 180, 2 * 1800 + 600)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED, c.reason
    assert "wrote the completion marker" in c.reason and "Slurm reports it" in c.reason


# ---- an until-file that is already there ---------------------------------------------------


def _register(cwd: Path, until_file: str) -> dict[str, Any]:
    script = b"#!/bin/bash\n#SBATCH --time=10\ntrue\n"
    return {
        "op": "register",
        "script_b64": base64.b64encode(script).decode(),
        "script_path": "job.sbatch",
        "sbatch_args": ["-p", "gpu"],
        "segments": 2,
        "until_file": until_file,
        "cwd": str(cwd),
        "environ": {"PATH": "/usr/bin"},
    }


@pytest.mark.parametrize("kind", ["file", "link to a root file", "dangling link"])
def test_an_until_file_that_exists_already_is_refused(tmp_path: Path, kind: str) -> None:
    work = tmp_path / "work"
    (work / "checkpoints").mkdir(parents=True)
    done = work / "checkpoints" / "DONE"
    if kind == "file":
        done.write_text("3600\n")
    elif kind == "link to a root file":
        done.symlink_to("/etc/passwd")
    else:
        done.symlink_to(tmp_path / "nowhere")
    config = Config(daemon=DaemonSection(allow_root_chains=True))  # the tests may run as root
    api = Api(make_store(tmp_path), config=config, marker_check=local_marker_check)
    me = os.getuid()
    answer = api.handle(_register(work, "checkpoints/DONE"), me, os.getgid())
    assert answer["ok"] is False
    assert f"the until-file {done} exists already" in answer["error"]
    done.unlink()
    assert api.handle(_register(work, "checkpoints/DONE"), me, os.getgid())["ok"] is True


# ---- every handoff window is measured -----------------------------------------------------


def test_every_handoff_window_is_measured_whoever_signalled(tmp_path: Path) -> None:
    """A successor that starts early: its predecessor is signalled and exits; the window
    both held is in mirage_handoff_window_seconds and in the transition's event."""
    store = make_store(tmp_path)
    sim = FaultySim(make_sim().sim)
    sim.handoff_exits = True
    chain = make_chain(store, segments=3, limit=1800)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=900))
    run_cycles([d], sim, 0, 4 * 1800)
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    segs = segments_of(store, chain.id)
    windows = [
        max(0, p.end - s.start)
        for p, s in itertools.pairwise(segs)
        if p.end is not None and s.start is not None
    ]
    assert any(w > 0 for w in windows)
    assert d.metrics.value("mirage_handoff_window_seconds_count") == sum(w > 0 for w in windows)
    assert d.metrics.value("mirage_handoff_window_seconds_sum") == sum(windows)


# ---- status: why a chain is held back, and how fresh its job's state is -------------------


def test_a_held_back_chain_says_why_and_an_ended_one_keeps_no_note(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    chain = make_chain(store, segments=2, limit=3600)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=900))
    run_cycles([d], sim, 0, 600)
    assert chain_state(store, chain.id).note == "not pre-submitted yet: lead 900s: wait 2100s"
    run_cycles([d], sim, 660, 2 * 3600 + 600)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED and c.note == ""


def test_a_job_at_its_limit_is_ending_and_its_state_has_the_polls_age() -> None:
    from mirage.daemon.cli import _time_left_text

    now = 1_800_000_000
    assert _time_left_text({"time_left_s": 0}, now - 20, now) == (
        ", at its time limit: ending (as of the poll 20s ago)"
    )
    assert _time_left_text({"time_left_s": 725}, now - 5, now) == (
        ", 12m05s left (as of the poll 5s ago)"
    )
    assert _time_left_text({"time_left_s": None}, now, now) == ""
