"""The daemon end to end on the real test cluster, time scaled down (1-minute segments).

A chain of 1-minute segments whose job exits cleanly on USR1. Fixed-lead pre-submits the
successor 40 s before the predecessor's planned end; on the idle test cluster it starts
at once, the daemon signals the predecessor (handoff), the predecessor exits, and the
chain goes on until its budget (--segments 2: two jobs) is used.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import select

from mirage.daemon.config import (
    Config,
    DaemonSection,
    PolicySection,
    SlurmSection,
    config_from_dict,
)
from mirage.daemon.core import Daemon
from mirage.daemon.identity import action_clients
from mirage.daemon.ledger import register_chain
from mirage.daemon.store import Chain, ChainState, Event, Segment, Store, new_chain_id
from mirage.policy.base import DecisionContext, PendingTransition
from mirage.policy.simple import FixedLeadPolicy
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.types import JobState

SCRIPT = b"""#!/bin/bash
#SBATCH --output=slurm-%j.out
trap 'echo "USR1: checkpoint and exit"; exit 0' USR1
sleep 600 &
wait
"""


def one_minute_chain(store: Store, jobdir: Path, name: str, partition: str, gpus: int) -> Chain:
    """A registered chain of two 1-minute segments on one node, the caller's own."""
    chain = Chain(
        id=new_chain_id(), name=name, cluster="", owner="root", uid=os.getuid(),
        gid=os.getgid(), groups=[], state=ChainState.ACTIVE, reason="", script=SCRIPT,
        script_sha256=hashlib.sha256(SCRIPT).hexdigest(), script_path="inline",
        chdir=str(jobdir), export="NONE", environment={}, sbatch_args=[], partition=partition,
        time_limit_s=60, nodes=1, gpus_per_node=gpus, gres=f"gpu:{gpus}", segments_target=2,
        until_file=None, trained_s=0, next_index=0, policy="", rejections=0,
    )  # fmt: skip
    register_chain(store, chain, int(time.time()), first_intent=False)
    return chain


def run_until_done(d: Daemon, store: Store, chain_id: str, client: CliSlurmClient) -> None:
    """Cycle every 5 s until the chain ends (7 minutes at most); cancel what is left."""
    deadline = time.monotonic() + 420
    try:
        while time.monotonic() < deadline:
            report = d.cycle(int(time.time()))
            assert report.slurm_reads in (0, 2)
            with store.sessions() as s:
                c = s.get(Chain, chain_id)
                assert c is not None
                if c.state is not ChainState.ACTIVE:
                    break
            time.sleep(5)
    finally:
        with store.sessions() as s:
            live = [g.job_id for g in s.scalars(select(Segment).where(Segment.finished.is_(False)))]
        if live:
            client.cancel(live)


def run_one_chain(
    store: Store, jobdir: Path, cfg: Config, client: CliSlurmClient, name: str
) -> tuple[Chain, list[Segment], list[str], Daemon]:
    """A two-segment chain run to its end by a daemon of ``cfg``: the chain (completed),
    its segments, the kinds of its events and the daemon."""
    chain = one_minute_chain(store, jobdir, name, "gpu", gpus=1)
    d = Daemon(store, client, config=cfg, action_clients=action_clients(cfg))
    run_until_done(d, store, chain.id, client)
    with store.sessions() as s:
        c = s.get(Chain, chain.id)
        segs = list(s.scalars(select(Segment).order_by(Segment.index)))
        kinds = [e.kind for e in s.scalars(select(Event).order_by(Event.id))]
    assert c is not None and c.state is ChainState.COMPLETED, (c and c.reason, kinds)
    return c, segs, kinds, d


def test_chain_with_handoff_on_real_slurm(tmp_path: Path, jobdir: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'mirage.sqlite'}")
    cfg = Config(
        daemon=DaemonSection(
            poll_interval_s=5,
            lease_ttl_s=60,
            backoff_max_s=60,
            sacct_overlap_s=120,
            run_as_owner="never",
        ),
        slurm=SlurmSection(timeout_s=60),
        policy=PolicySection(default="fixed-lead", lead_s=40, guard="none"),
    )
    client = CliSlurmClient(timeout=60.0)
    c, segs, kinds, _ = run_one_chain(store, jobdir, cfg, client, "e2e")
    # Training time is what the segments ran: the predecessor until its handoff (the
    # successor is pre-submitted 40 s before its planned end, so it ran at least ~20 s),
    # the last one its whole minute. Their sum lands near 90 s, so no fixed bound there.
    ran = [g.end - g.start for g in segs if g.start is not None and g.end is not None]
    assert len(ran) == len(segs) and c.trained_s == sum(ran)
    assert ran[0] >= 60 - 40 - 5 and ran[-1] >= 60 - 5, ran
    assert len({g.job_id for g in segs}) == len(segs) >= 2
    assert "handoff" in kinds  # the successor started early and the predecessor was signalled
    assert segs[1].presubmitted
    # every job carries its own token; none was submitted twice
    tokens = [
        j.comment for j in client.accounting(int(time.time()) - 900) if "mirage:" in j.comment
    ]
    mine = {f"mirage:{g.token}" for g in segs}
    assert mine <= set(tokens) and all(tokens.count(t) == 1 for t in mine)


def test_guard_holds_back_on_the_idle_real_cluster(tmp_path: Path, jobdir: Path) -> None:
    """The shipped estimate guard on real Slurm: the fixed lead would pre-submit 40 s
    before the predecessor's planned end, but `sbatch --test-only` (run by the daemon with
    its stub script) says the idle cluster would start the successor at once, so it waits
    until that start lies the margin (1/6 of the 1-minute limit: 10 s) after the planned
    end. slurmctld enforces limits on its own timer, so the predecessor may still run then:
    the successor may go in before its end and take over, never before its planned end."""
    store = Store.open(f"sqlite:///{tmp_path / 'mirage.sqlite'}")
    cfg = Config(
        daemon=DaemonSection(poll_interval_s=5, lease_ttl_s=60, backoff_max_s=60,
                             sacct_overlap_s=120, run_as_owner="never"),
        slurm=SlurmSection(timeout_s=60),
        policy=PolicySection(default="fixed-lead", lead_s=40),  # guard: the default
    )  # fmt: skip
    assert cfg.policy.guard == "estimate" and cfg.daemon.test_only_per_cycle > 0
    assert cfg.policy.guard_margin_s is None  # the margin: a share of the limit
    margin = round(cfg.policy.guard_margin_fraction * 60)
    client = CliSlurmClient(timeout=60.0)
    _, segs, _, d = run_one_chain(store, jobdir, cfg, client, "guarded")
    assert len(segs) == 2 and segs[0].start is not None and segs[1].start is not None
    planned_end = segs[0].start + 60
    # the fixed lead alone would have submitted it at planned_end - 40; where the
    # predecessor ended first, it went in at that end
    at, end = segs[1].submitted_at, segs[0].end
    after_end = not segs[1].presubmitted and end is not None and at >= end
    assert at >= planned_end + margin or after_end, (at, planned_end, end)
    assert segs[1].start >= planned_end
    assert d.metrics.value("mirage_test_only_total") >= 1  # Slurm was asked


@pytest.mark.slurm_slow
def test_cerit_s_shipped_choice_on_the_idle_real_cluster(tmp_path: Path, jobdir: Path) -> None:
    """models/cerit/policy.toml as the daemon takes it (QBETS 0.9 behind the look-ahead
    veto, -2 h) on real Slurm: CERIT's profile has no partition of this cluster's, so the
    look-ahead cannot judge the chain and the guard holds it back, as it does a chain on a
    partition the profile lacks: the successor goes in at the predecessor's end and the
    chain completes. The policy asks no `sbatch --test-only` (the look-ahead veto alone)."""
    from mirage.policy.guard import Guard

    store = Store.open(f"sqlite:///{tmp_path / 'mirage.sqlite'}")
    models = Path(__file__).resolve().parents[2] / "models"
    cfg = Config(
        daemon=DaemonSection(poll_interval_s=5, lease_ttl_s=60, backoff_max_s=60,
                             sacct_overlap_s=120, run_as_owner="never"),
        slurm=SlurmSection(timeout_s=60),
        policy=config_from_dict(
            {"policy": {"models_dir": str(models), "cluster": "cerit"}}, "t"
        ).policy,
    )  # fmt: skip
    assert (cfg.policy.default, cfg.policy.guard) == ("qbets", "lookahead")
    assert cfg.policy.guard_lookahead_margin_s == -7200
    client = CliSlurmClient(timeout=60.0)
    _, segs, kinds, d = run_one_chain(store, jobdir, cfg, client, "cerit-choice")
    assert isinstance(d.policies["qbets"], Guard)
    assert len(segs) == 2 and not segs[1].presubmitted and "handoff" not in kinds
    assert segs[0].end is not None and segs[1].start is not None
    assert segs[1].start >= segs[0].end
    # one: the estimate `mirage status` shows for the waiting successor; the policy asks none
    assert d.metrics.value("mirage_test_only_total") == 1


@pytest.mark.slurm_slow
def test_lookahead_guard_holds_back_on_the_idle_real_cluster(tmp_path: Path, jobdir: Path) -> None:
    """``guard = "lookahead"`` on real Slurm, set up as docs/admin/configuration.md says:
    the cluster's profile captured from the controller (`mirage profile capture`) under
    models_dir/cluster. The fixed lead would pre-submit 40 s early; the look-ahead
    simulates the idle cluster's squeue and starts the successor at once, so the guard
    holds it back until the predecessor's planned end (there the look-ahead start is no
    longer early; the predecessor, at its limit, is handed off as Slurm ends it)."""
    from mirage.policy.guard import Guard
    from mirage.profile.capture import capture_profile
    from mirage.profile.schema import profile_to_toml

    client = CliSlurmClient(timeout=60.0)
    models = tmp_path / "models"
    (models / "testbed").mkdir(parents=True)
    prof = capture_profile(client, "testbed")
    (models / "testbed" / "profile.toml").write_text(profile_to_toml(prof), "utf-8")
    store = Store.open(f"sqlite:///{tmp_path / 'mirage.sqlite'}")
    cfg = Config(
        daemon=DaemonSection(poll_interval_s=5, lease_ttl_s=60, backoff_max_s=60,
                             sacct_overlap_s=120, run_as_owner="never"),
        slurm=SlurmSection(timeout_s=60),
        policy=PolicySection(default="fixed-lead", lead_s=40, guard="lookahead",
                             models_dir=str(models), cluster="testbed"),
    )  # fmt: skip
    _, segs, kinds, d = run_one_chain(store, jobdir, cfg, client, "lookahead-guarded")
    guard = d.policies["fixed-lead"]
    assert isinstance(guard, Guard) and guard.lookahead_margin_s == 0
    assert d.profile is not None and "gpu" in {p.name for p in d.profile.partitions}
    assert len(segs) == 2 and segs[0].start is not None
    # the fixed lead alone submits 40 s before the planned end (test_chain_with_handoff...)
    assert segs[1].submitted_at >= segs[0].start + 60, kinds


class RevokeOnce(FixedLeadPolicy):
    """Fixed lead, and "revoke" the first time it is asked about a pending pre-submission
    (stands for a trained policy that finds it far too early)."""

    name = "revoke-once"

    def __init__(self, lead_s: int) -> None:
        super().__init__(lead_s)
        self.revoked = False

    @property
    def revocable(self) -> bool:
        return True

    def revoke(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[bool]:
        answer, self.revoked = not self.revoked, True
        return [answer] * len(pending)


def test_revoked_presubmission_on_real_slurm(tmp_path: Path, jobdir: Path) -> None:
    """Partition "debug" is one node of four GPUs and each segment takes all four: the
    pre-submitted successor pends while its predecessor runs. The policy revokes it once:
    the daemon holds and cancels it (never started, CANCELLED in sacct), pre-submits a new
    one, which starts when the predecessor times out."""
    store = Store.open(f"sqlite:///{tmp_path / 'mirage.sqlite'}")
    cfg = Config(
        daemon=DaemonSection(
            poll_interval_s=5,
            lease_ttl_s=60,
            backoff_max_s=60,
            sacct_overlap_s=120,
            run_as_owner="never",
        ),
        slurm=SlurmSection(timeout_s=60),
        policy=PolicySection(default="fixed-lead", lead_s=50, guard="none"),
    )  # fmt: skip
    chain = one_minute_chain(store, jobdir, "revoke", "debug", gpus=4)
    client = CliSlurmClient(timeout=60.0)
    policy = RevokeOnce(50)
    d = Daemon(store, client, config=cfg, action_clients=action_clients(cfg),
               policies={"fixed-lead": policy})  # fmt: skip
    started = int(time.time())
    run_until_done(d, store, chain.id, client)
    with store.sessions() as s:
        c = s.get(Chain, chain.id)
        segs = list(s.scalars(select(Segment).where(Segment.chain_id == chain.id)
                              .order_by(Segment.id)))  # fmt: skip
        kinds = [e.kind for e in s.scalars(select(Event).order_by(Event.id))]
    assert c is not None and c.state is ChainState.COMPLETED, (c and c.reason, kinds)
    assert [g.outcome for g in segs] == ["CONTINUE", "REVOKED", "CONTINUE"], kinds
    first, revoked, succ = segs
    assert revoked.index == succ.index == 1 and succ.submitted_at > revoked.submitted_at
    assert succ.start is not None and first.end is not None and succ.start >= first.end
    # held, then cancelled: never eligible, so sacct's window leaves it out unless it
    # selects by state, as the daemon's poll does
    plain = {j.job_id for j in client.accounting(started - 60)}
    records = {j.job_id: j for j in client.accounting(started - 60, every_state=True)}
    assert revoked.job_id not in plain and first.job_id in plain
    assert records[revoked.job_id].state is JobState.CANCELLED
    assert records[revoked.job_id].start is None  # cancelled while pending: never ran
    assert d.metrics.value("mirage_revocations_total") == 1
    assert kinds.index("revoke.intent") < kinds.index("revoke") < kinds.index("segment.revoked")


pytestmark = pytest.mark.slurm


def test_cli_chain_submit_runs_real_sbatch_with_the_token(tmp_path: Path, jobdir: Path) -> None:
    import json

    from click.testing import CliRunner

    from mirage.cli import main
    from mirage.daemon.config import load_config

    cfg_path = tmp_path / "mirage.toml"
    cfg_path.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\npoll_interval_s = 5\nlease_ttl_s = 30\n'
        f'[socket]\npath = "{tmp_path / "none.sock"}"\n'
    )
    script = tmp_path / "seg.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --time=1\n#SBATCH --output=slurm-%j.out\nsleep 300\n")
    runner = CliRunner()
    res = runner.invoke(
        main,
        ["chain", "submit", str(script), "--segments", "1", "--config", str(cfg_path), "--json",
         "--", "-p", "gpu", "--gres=gpu:1", f"--chdir={jobdir}"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["first_segment"] == "submitted", out
    client = CliSlurmClient(timeout=60.0)
    job = client.queue().by_id()[out["job_id"]]
    try:
        assert job.comment.startswith("mirage:mg") and job.name.endswith(job.comment[7:])
        res = runner.invoke(main, ["chain", "cancel", out["chain_id"], "--config", str(cfg_path)])
        assert res.exit_code == 0, res.output
        cfg = load_config(cfg_path)
        from mirage.daemon.service import open_store

        d = Daemon(open_store(cfg), client, config=cfg, action_clients=action_clients(cfg))
        report = d.cycle(int(time.time()))
        assert report.cancelled == [out["job_id"]]
    finally:
        client.cancel([out["job_id"]])
