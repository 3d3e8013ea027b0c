"""`mirage status` and `mirage chain list|show` tell the truth (issue #23), human and JSON
alike, on a database built with the Store API (no daemon, no Slurm)."""

from __future__ import annotations

import copy
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

import mirage.daemon.cli as cli_module
from mirage.cli import main
from mirage.daemon import health
from mirage.daemon.cli import _when
from mirage.daemon.config import load_config
from mirage.daemon.policies import model_key
from mirage.daemon.service import open_store
from mirage.daemon.status import list_chains, status
from mirage.daemon.store import (
    Chain,
    ChainState,
    Segment,
    Store,
    Submission,
    SubmissionState,
    new_chain_id,
    new_token,
)
from tests.fakes import cli_setup

UID = 1000
NOW = int(time.time())
HOLDER = "login1:4242:abcd1234"
SLURM_DOWN = "slurmctld unreachable: Connection refused"


@dataclass
class Seg:
    job_id: str
    state: str
    reason: str = ""
    start: int | None = None
    end: int | None = None
    finished: bool = False
    outcome: str | None = None


@dataclass
class Spec:
    name: str
    state: ChainState = ChainState.ACTIVE
    segments: int | None = 3
    until_file: str | None = None
    policy: str = ""
    fallback_for: str = ""
    reason: str = ""
    error: str = ""
    error_at: int | None = None
    errors: int = 0
    note: str = ""
    owner: str = "alice"
    segs: list[Seg] = field(default_factory=list)


#: Every chain state the issue names, by name.
SPECS = [
    # active: segment 2 runs (squeue's reason "None"), its successor pends for Priority
    Spec(
        "train",
        segments=6,
        policy="xgb",
        segs=[
            Seg(
                "101", "TIMEOUT", start=NOW - 4200, end=NOW - 600, finished=True, outcome="CONTINUE"
            ),
            Seg("102", "RUNNING", "None", start=NOW - 600),
            Seg("103", "PENDING", "Priority"),
        ],
    ),
    # active with its own error and a note, on the fallback policy, until a file
    Spec(
        "broken",
        segments=None,
        until_file="done",
        policy="reactive",
        fallback_for="xgb",
        error="sbatch timed out after 60 s",
        error_at=NOW - 125,
        errors=3,
        note="xgb needs the whole queue (sees_all_jobs = false)",
        segs=[Seg("201", "PENDING", "Resources")],
    ),
    # cancelled by its owner; the daemon has not cancelled its job yet
    Spec(
        "cancelled",
        state=ChainState.CANCELLED,
        reason="cancelled by its owner",
        policy="xgb",
        segs=[Seg("301", "RUNNING", "None", start=NOW - 900)],
    ),
    # cancelled, and the daemon cancelled the job: the job's last read state is stale
    Spec(
        "cancelled-done",
        state=ChainState.CANCELLED,
        reason="cancelled by its owner",
        segs=[Seg("401", "RUNNING", "None", start=NOW - 900, finished=True, outcome="CANCELLED")],
    ),
    Spec(
        "done",
        state=ChainState.COMPLETED,
        segments=2,
        reason="ran its 2 segments",
        segs=[
            Seg(
                "501",
                "TIMEOUT",
                start=NOW - 9000,
                end=NOW - 5400,
                finished=True,
                outcome="CONTINUE",
            ),
            Seg(
                "502", "COMPLETED", start=NOW - 5400, end=NOW - 3000, finished=True, outcome="STOP"
            ),
        ],
    ),
    Spec(
        "refused",
        state=ChainState.FAILED,
        reason="sbatch refused segment 1: Invalid account",
        owner="bob",
    ),
]
ACTIVE_NAMES = {"train", "broken"}


def add_chain(store: Store, spec: Spec) -> str:
    """One chain as the daemon would have left it, with its submissions and segments."""
    cid = new_chain_id()
    with store.session() as s:
        s.add(_chain_row(cid, spec))
        s.flush()
        for k, g in enumerate(spec.segs):
            token = new_token()
            s.add(
                Submission(
                    token=token, chain_id=cid, index=k, state=SubmissionState.SUBMITTED,
                    time_limit_s=3600, job_id=g.job_id, presubmitted=k > 0,
                    created_at=NOW - 5000 + k, error="",
                )
            )  # fmt: skip
            s.flush()
            s.add(
                Segment(
                    chain_id=cid, index=k, token=token, job_id=g.job_id,
                    submitted_at=NOW - 5000 + k, presubmitted=k > 0, job_state=g.state,
                    reason=g.reason, start=g.start, end=g.end, time_limit_s=3600,
                    finished=g.finished, outcome=g.outcome,
                )
            )  # fmt: skip
    return cid


def _chain_row(cid: str, spec: Spec) -> Chain:
    return Chain(
        id=cid, name=spec.name, cluster="", owner=spec.owner,
        uid=UID if spec.owner == "alice" else UID + 1, gid=UID, groups=[], state=spec.state,
        reason=spec.reason, script=b"#!/bin/sh\n", script_sha256="0" * 64, chdir="/home/alice",
        sbatch_args=[], time_limit_s=3600, segments_target=spec.segments,
        until_file=spec.until_file, trained_s=0, next_index=len(spec.segs), policy=spec.policy,
        fallback_for=spec.fallback_for,
        rejections=0, error=spec.error, error_at=spec.error_at, errors=spec.errors,
        note=spec.note, created_at=NOW - 6000 + len(spec.name), updated_at=NOW - 60,
    )  # fmt: skip


@dataclass
class World:
    runner: CliRunner
    cfg: Path
    store: Store
    ids: dict[str, str]

    def run(self, *args: str) -> str:
        res = self.runner.invoke(main, [*args, "--config", str(self.cfg)])
        assert res.exit_code == 0, res.output
        return res.output

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json"))


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    cfg, _ = cli_setup(tmp_path, "#!/bin/sh\n")
    store = open_store(load_config(str(cfg)))
    ids = {spec.name: add_chain(store, spec) for spec in SPECS}
    store.set_value(model_key("xgb"), str(NOW - 3 * 86400))
    health.write(
        store,
        health.START_KEY,
        health.StartInfo(
            version="9.9.9", host="login1", pid=4242, holder=HOLDER, started_at=NOW - 3600,
            policy="xgb", model="xgb (ls6, trained 2026-11-20T00:00:00Z)",
            model_created_at=NOW - 3 * 86400, socket="/run/mirage/mirage.sock",
            metrics="127.0.0.1:9750", database="sqlite:////var/lib/mirage/mirage.sqlite",
            models_dir="models/ls6",
        ),
    )  # fmt: skip
    health.write(
        store,
        health.CYCLE_KEY,
        health.CycleInfo(at=NOW - 30, skipped="unreachable", failures_total=2, chain_errors=1),
    )
    health.write(store, health.SLURM_KEY, health.SlurmInfo(False, SLURM_DOWN, NOW - 180))
    assert store.acquire_lease("default", HOLDER, NOW, 600)
    # a user, not root (the tests may run as root): root is asked for explicitly
    monkeypatch.setattr(cli_module, "_uid", lambda: UID)
    # the CLI's clock is NOW: relative times are exact
    clock = SimpleNamespace(
        time=lambda: float(NOW), strftime=time.strftime, gmtime=time.gmtime, sleep=time.sleep
    )
    monkeypatch.setattr(cli_module, "time", clock)
    return World(CliRunner(), cfg, store, ids)


def chunks(human: str, ids: dict[str, str]) -> dict[str, str]:
    """The human output's lines about each chain (its first line names its id)."""
    by_id: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in human.splitlines():
        head = next((cid for cid in ids.values() if cid in line.split()[:2]), None)
        if head is not None:
            current = by_id.setdefault(head, [])
        elif not line.startswith("    "):
            current = None
        if current is not None:
            current.append(line)
    return {cid: "\n".join(lines) for cid, lines in by_id.items()}


def segment_text(r: dict[str, Any]) -> str:
    if r["segment"] is None:
        return "no segment yet"
    return f"segment {r['segment']}" + (f" of {r['segments']}" if r["segments"] else "")


def facts(r: dict[str, Any]) -> list[str]:
    """What the JSON says of a chain that the human output must say too."""
    out = [r["id"], f"[{r['state']}]", segment_text(r)]
    if r["job_id"]:
        out.append(f"job {r['job_id']} {r['job_state']}")
    if r["job_reason"]:
        out.append(f"{r['job_state']} ({r['job_reason']})")
    if r["cancel_pending"]:
        out.append(f"{r['job_state']} (cancel pending)")
    if r["successor_job_id"]:
        out.append(f"job {r['successor_job_id']} {r['successor_state']} ({r['successor_reason']})")
    if r["state"] == "ACTIVE":
        out.append(f"policy: {r['policy_used']}")
    if r["fallback"]:
        out.append(f"(fallback: {r['fallback']})")
    if r["error"]:
        out += [f"error ({r['errors']} so far", r["error"]]
    if r["note"]:
        out.append(f"note: {r['note']}")
    if r["state"] != "ACTIVE":
        out.append(r["reason"])
    return out


def test_status_human_and_json_say_the_same(world: World) -> None:
    data = world.json("status", "--all")
    human = world.run("status", "--all")
    by_chain = chunks(human, world.ids)
    assert {r["name"] for r in data["chains"]} == {s.name for s in SPECS if s.owner == "alice"}
    for r in data["chains"]:
        for fact in facts(r):
            assert fact in by_chain[r["id"]], (r["name"], fact, by_chain[r["id"]])
    # Slurm's reachability and the daemon's facts, in both
    no_word = {"reachable": None, "error": "", "since": None}  # slurmdbd: never asked
    assert data["slurm"] == {
        "reachable": False, "error": SLURM_DOWN, "since": NOW - 180, "accounting": no_word,
    }  # fmt: skip
    assert f"Slurm: UNREACHABLE since {_when(NOW - 180, NOW)}: {SLURM_DOWN}" in human
    assert data["daemon"]["start"]["version"] == "9.9.9" and "mirage 9.9.9 on login1" in human
    assert data["daemon"]["live"] is True and f"held by {HOLDER} (the daemon above)" in human
    assert data["daemon"]["cycle_failures"] == 2 and "2 cycle(s) failed" in human
    assert data["daemon"]["last_cycle"]["skipped"] == "unreachable"
    assert "skipped (unreachable)" in human


def test_chain_list_human_and_json_say_the_same(world: World) -> None:
    rows = world.json("chain", "list", "--all")
    human = world.run("chain", "list", "--all")
    by_chain = chunks(human, world.ids)
    for r in rows:
        for fact in [r["id"], r["state"], segment_text(r), r["error"], r["note"]]:
            assert fact in by_chain[r["id"]], (r["name"], fact)
        if r["job_id"]:
            assert f"job {r['job_id']} {r['job_state']}" in by_chain[r["id"]]


def test_policy_and_model_age_are_the_real_ones(world: World) -> None:
    """Not "model age: baseline (no model)" whatever the policy: the policy deciding, its
    model's age, and for a fallback what it stands in for (the why is the chain's note)."""
    human = world.run("status")
    by_chain = chunks(human, world.ids)
    assert "baseline (no model)" not in human
    assert "policy: xgb, model age 3d00h00m" in by_chain[world.ids["train"]]
    broken = by_chain[world.ids["broken"]]
    assert "policy: reactive (fallback: xgb), no trained model" in broken
    assert "note: xgb needs the whole queue" in broken
    rows = {r["name"]: r for r in world.json("status")["chains"]}
    assert rows["train"]["model_age_s"] == 3 * 86400 and rows["train"]["policy_used"] == "xgb"
    assert (rows["broken"]["policy_used"], rows["broken"]["fallback"]) == ("reactive", "xgb")
    assert rows["broken"]["policy_fallback"] is True and rows["broken"]["model_age_s"] is None


def test_an_ended_chain_claims_no_live_job(world: World) -> None:
    rows = {r["name"]: r for r in world.json("status", "--all")["chains"]}
    # not cancelled yet: it may still run, and the output says the cancel is coming
    assert rows["cancelled"]["job_state"] == "RUNNING" and rows["cancelled"]["cancel_pending"]
    # cancelled by the daemon: its outcome, not the stale RUNNING
    assert rows["cancelled-done"]["job_state"] == "CANCELLED"
    assert not rows["cancelled-done"]["cancel_pending"]
    assert rows["done"]["job_state"] == "COMPLETED" and rows["done"]["segment"] == 2
    by_chain = chunks(world.run("status", "--all"), world.ids)
    assert "job 301 RUNNING (cancel pending)" in by_chain[world.ids["cancelled"]]
    done = by_chain[world.ids["cancelled-done"]]
    assert "job 401 CANCELLED" in done and "RUNNING" not in done
    shown = world.run("chain", "show", world.ids["cancelled-done"])
    assert "RUNNING" not in shown and "job 401 CANCELLED" in shown


def test_times_show_how_far_from_now() -> None:
    assert _when(NOW - 42, NOW).endswith("Z (42s ago)")
    assert _when(NOW + 185, NOW).endswith("Z (in 3m05s)")
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", _when(NOW, NOW))


def test_no_slurm_poll_recorded_reads_unknown(tmp_path: Path) -> None:
    cfg, _ = cli_setup(tmp_path, "#!/bin/sh\n")
    res = CliRunner().invoke(main, ["status", "--json", "--config", str(cfg)])
    data = json.loads(res.output)
    unknown = {"reachable": None, "error": "", "since": None}
    assert data["slurm"] == {**unknown, "accounting": unknown}
    assert data["daemon"]["start"] is None and data["daemon"]["live"] is False
    res = CliRunner().invoke(main, ["status", "--config", str(cfg)])
    assert "Slurm: unknown (no poll recorded)" in res.output
    assert "daemon: no start recorded" in res.output


def test_pending_reason_is_shown(world: World) -> None:
    by_chain = chunks(world.run("status"), world.ids)
    assert "successor: job 103 PENDING (Priority)" in by_chain[world.ids["train"]]
    assert "job 201 PENDING (Resources)" in by_chain[world.ids["broken"]]
    listed = world.run("chain", "list")
    assert "job 201 PENDING (Resources)" in listed
    rows = {r["name"]: r for r in world.json("status")["chains"]}
    assert rows["train"]["successor_reason"] == "Priority"
    assert rows["broken"]["job_reason"] == "Resources"


def test_no_reason_is_the_string_none(world: World) -> None:
    """squeue says "None" for a job without a pending reason (a running one): that is no
    reason, "" in the JSON, never "None"."""
    for args in (["status", "--all"], ["chain", "list", "--all"]):
        text = world.run(*args, "--json")
        assert '"None"' not in text, args
    shown = world.json("chain", "show", world.ids["train"])
    assert [g["reason"] for g in shown["segments_run"]] == ["", "", "Priority"]
    assert "None" not in world.run("chain", "show", world.ids["train"])


def test_ended_chains_are_hidden_unless_all(world: World) -> None:
    data = world.json("status")
    assert {r["name"] for r in data["chains"]} == ACTIVE_NAMES
    assert data["ended_hidden"] == 3  # alice's: cancelled, cancelled-done, done
    assert "3 ended chains hidden (--all)" in world.run("status")
    assert {r["name"] for r in world.json("chain", "list")} == ACTIVE_NAMES
    assert "3 ended chains hidden (--all)" in world.run("chain", "list")
    assert len(world.json("chain", "list", "--all")) == 5
    assert world.json("status", "--all")["ended_hidden"] == 0
    # the socket API's calls (no keyword) still get every chain
    assert len(list_chains(world.store, UID)) == 5
    assert len(status(world.store, NOW, UID)["chains"]) == 5
    assert len(list_chains(world.store, UID, include_ended=False)) == 2


def test_ended_chains_hidden_from_the_daemons_answer(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the socket the daemon answers every chain: the CLI filters."""
    answers = {
        "status": {"status": status(world.store, NOW, UID)},
        "list": {"chains": list_chains(world.store, UID)},
    }
    monkeypatch.setattr(cli_module, "daemon_socket", lambda cfg: Path("/run/mirage/mirage.sock"))
    monkeypatch.setattr(
        cli_module, "ask_daemon", lambda path, req: copy.deepcopy(answers[req["op"]])
    )
    assert {r["name"] for r in world.json("status")["chains"]} == ACTIVE_NAMES
    assert {r["name"] for r in world.json("chain", "list")} == ACTIVE_NAMES
    assert "3 ended chains hidden (--all)" in world.run("status")


def test_root_sees_an_owner_column(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_module, "_uid", lambda: None)
    for args in (["status", "--all"], ["chain", "list", "--all"]):
        lines = world.run(*args).splitlines()
        heads = {
            line.split()[1]: line.split()[0] for line in lines if line.startswith(("alice", "bob"))
        }
        assert heads[world.ids["refused"]] == "bob", args
        assert heads[world.ids["train"]] == "alice", args
    # a user's own output has no owner column
    monkeypatch.setattr(cli_module, "_uid", lambda: UID)
    assert not any(line.startswith("alice") for line in world.run("status").splitlines())


def test_chain_show_prints_human_times(world: World) -> None:
    shown = world.run("chain", "show", world.ids["train"])
    for raw in (NOW - 4200, NOW - 600, NOW - 5000, NOW - 6000 + len("train")):
        assert str(raw) not in shown
    assert f"started {_when(NOW - 600, NOW)}" in shown
    assert re.search(r"started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(10m00s ago\)", shown)
    assert "segment 2 of 6: job 102 RUNNING" in shown


def test_error_and_note_everywhere(world: World) -> None:
    cid = world.ids["broken"]
    want = "error (3 so far, last 2m05s ago): sbatch timed out after 60 s"
    for args in (["status"], ["chain", "list"], ["chain", "show", cid]):
        text = world.run(*args)
        assert want in text, args
        assert "note: xgb needs the whole queue (sees_all_jobs = false)" in text, args
    shown = world.json("chain", "show", cid)
    assert (shown["error"], shown["errors"], shown["error_at"]) == (
        "sbatch timed out after 60 s", 3, NOW - 125,
    )  # fmt: skip
    assert shown["note"].startswith("xgb needs")
    row = next(r for r in world.json("chain", "list") if r["id"] == cid)
    assert row["error"] and row["note"] and row["errors"] == 3


def test_segment_k_of_n_everywhere(world: World) -> None:
    for args in (["status"], ["chain", "list"], ["chain", "show", world.ids["train"]]):
        text = world.run(*args)
        assert "segment 2 of 6" in text, args
        train = chunks(text, world.ids)[world.ids["train"]]
        assert "2/6" not in train and "/6h00m" not in train, args  # the old k/N, trained/budget
    # --until-file alone: no N
    assert "segment 1: job 201" in world.run("chain", "list")
    helped = world.runner.invoke(main, ["chain", "submit", "--help"]).output
    assert "Run at most N segments (jobs) of the chain" in " ".join(helped.split())


def test_status_names_a_dead_lease_holder(world: World) -> None:
    """The breakage: after kill -9, `mirage status` named the dead process as the holder."""
    import socket
    import subprocess

    child = subprocess.Popen(["true"])
    child.wait()
    holder = f"{socket.gethostname()}:{child.pid}:dead0001"
    world.store.release_lease("default", HOLDER)
    assert world.store.acquire_lease("default", holder, NOW, 600)
    shown = world.json("status", "--json")["daemon"]
    assert shown["lease_holder"] == holder and shown["holder_alive"] is False
    assert f"held by {holder}, a process that is gone" in world.run("status")
