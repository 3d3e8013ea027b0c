"""Issue 50: each chain's restart overhead R and handoff window h, measured.

The job-side helper writes a segment's timing report (start called, start returned,
training resumed) in the chain's directory; the daemon reads it (as the owner, no link
followed, size-bounded), records R on the segment, exports it and charges the chain's
transitions with its own R and h once it has them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from mirage.daemon import handoff, reconcile
from mirage.daemon.context import StepContext
from mirage.daemon.core import Daemon
from mirage.daemon.metrics import DaemonMetrics
from mirage.daemon.store import (
    Chain,
    ChainState,
    Event,
    Segment,
    Submission,
    SubmissionState,
)
from mirage.daemon.timing import (
    MAX_REPORT_BYTES,
    RETRY_S,
    ReportError,
    chain_cost,
    local_read,
    parse_report,
    retry_after,
)
from mirage.policy.cost import DEFAULT_COST, HELD_TWICE
from tests.unit.daemon_support import (
    FaultySim,
    chain_state,
    make_chain,
    make_config,
    make_sim,
    make_store,
    segments_of,
)

REPO = Path(__file__).resolve().parents[2]


def _job_env(monkeypatch: pytest.MonkeyPatch, where: Path, job: str, segment: int) -> None:
    for name, value in (("MIRAGE_CHAIN_ID", "c0123456789"), ("MIRAGE_SEGMENT", str(segment)),
                        ("SLURM_SUBMIT_DIR", str(where)), ("SLURM_JOB_ID", job)):  # fmt: skip
        monkeypatch.setenv(name, value)


def test_the_helper_reports_when_a_segment_took_over_and_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff, "job_state", lambda _job: "RUNNING")
    ckpt = tmp_path / "ckpt"
    report = tmp_path / ".mirage" / handoff.report_name("c0123456789", 2)
    # not submitted by Mirage (no chain or segment): no report
    assert handoff.start(ckpt, "100", timeout=5, poll=0.01) == 0
    assert handoff.resumed() == 0
    assert not (tmp_path / ".mirage").exists()
    _job_env(monkeypatch, tmp_path, "101", 2)
    # a fresh checkpoint folder: no predecessor to wait for
    assert (
        handoff.start(
            tmp_path / "ckpt2", "101", segment=2, chain="c0123456789", timeout=5, poll=0.01
        )
        == 0
    )
    before = json.loads(report.read_text())
    assert before["job_id"] == "101" and "resumed" not in before
    assert handoff.resumed() == 0
    timing = parse_report(report.read_text(), "101")
    assert timing.began <= timing.took_over <= (timing.resumed or 0)
    assert timing.restart_s is not None and 0 <= timing.restart_s < 60
    # a report left by another job under that name (a resubmitted segment) is replaced
    _job_env(monkeypatch, tmp_path, "102", 2)
    assert handoff.resumed() == 0
    assert json.loads(report.read_text()) == {
        "job_id": "102",
        "chain": "c0123456789",
        "segment": 2,
        "resumed": json.loads(report.read_text())["resumed"],
    }
    # a folder that cannot be written: said on stderr, the segment trains on
    (tmp_path / ".mirage").chmod(0o500)
    try:
        if os.geteuid() != 0:  # root writes anyway
            assert handoff.resumed() == 0
    finally:
        (tmp_path / ".mirage").chmod(0o700)


def test_the_example_helper_reports_resumed_from_the_command_line(tmp_path: Path) -> None:
    """``python3 -I mirage_handoff.py resumed``, as a batch script would call it (the
    example's copy, byte for byte the module)."""
    helper = REPO / "deploy" / "examples" / "mirage_handoff.py"
    assert helper.read_bytes() == Path(handoff.__file__).read_bytes()
    env = {"PATH": os.environ["PATH"], "MIRAGE_CHAIN_ID": "cabc", "MIRAGE_SEGMENT": "3",
           "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "77"}  # fmt: skip
    done = subprocess.run([sys.executable, "-I", str(helper), "resumed"], env=env, check=False)
    assert done.returncode == 0
    rec = json.loads((tmp_path / ".mirage" / "timing-cabc-3.json").read_text())
    assert rec["job_id"] == "77" and rec["segment"] == 3 and rec["resumed"] > 0
    bad = subprocess.run([sys.executable, "-I", str(helper), "done"], env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert bad.returncode == 2 and "needs the checkpoint directory" in bad.stderr


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"job_id": "9", "began": 1, "took_over": 2}', "job '9''s, not 5's"),
        ('{"job_id": "5", "began": 1}', "lacks began or took_over"),
        ('{"job_id": "5", "began": 3, "took_over": 2}', "out of order"),
        ('{"job_id": "5", "began": 1, "took_over": 2, "resumed": 1.5}', "out of order"),
        ('{"job_id": "5", "began": true, "took_over": 2}', "began is not a time"),
        ('{"job_id": "5", "began": 1, "took_over": "2"}', "took_over is not a time"),
    ],
)
def test_an_unusable_report_says_why(text: str, why: str) -> None:
    with pytest.raises(ReportError, match=why.replace("(", r"\(")):
        parse_report(text, "5")


def test_a_report_that_has_not_resumed_yet_has_no_restart() -> None:
    timing = parse_report('{"job_id": "5", "began": 1, "took_over": 4}', "5")
    assert timing.restart_s is None
    assert (
        parse_report('{"job_id": 5, "began": 1, "took_over": 4, "resumed": 34}', "5").restart_s
        == 30
    )


def _chain_at(where: Path) -> Chain:
    return Chain(id="c1", chdir=str(where))


def test_the_daemon_reads_only_a_real_small_file_in_a_real_folder(tmp_path: Path) -> None:
    folder = tmp_path / ".mirage"
    assert local_read(_chain_at(tmp_path), "timing-c1-2.json") is None  # no folder
    folder.mkdir()
    (folder / "timing-c1-2.json").write_text('{"job_id": "5"}')
    assert local_read(_chain_at(tmp_path), "timing-c1-2.json") == '{"job_id": "5"}'
    # a link in the report's place, or in the folder's, is not followed
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    (folder / "timing-c1-3.json").symlink_to(secret)
    assert local_read(_chain_at(tmp_path), "timing-c1-3.json") is None
    other = tmp_path / "other"
    other.mkdir()
    (other / ".mirage").symlink_to(folder)
    assert local_read(_chain_at(other), "timing-c1-2.json") is None
    (folder / "timing-c1-4.json").write_text("x" * (MAX_REPORT_BYTES + 1))
    assert local_read(_chain_at(tmp_path), "timing-c1-4.json") is None
    os.mkfifo(folder / "timing-c1-5.json")  # never blocks on a pipe
    assert local_read(_chain_at(tmp_path), "timing-c1-5.json") is None


def test_a_chain_is_charged_with_its_own_restart_and_handoff_once_measured() -> None:
    assert chain_cost(DEFAULT_COST, [None, None], [None, 0]) == DEFAULT_COST
    own = chain_cost(DEFAULT_COST, [None, 40.0, 20.0, 30.0], [None, 3, 0, 5])
    assert (own.restart_s, own.handoff_s) == (30.0, 4.0)
    # the last RECENT (5) of each
    assert chain_cost(DEFAULT_COST, [900.0] * 3 + [10.0] * 5, []).restart_s == 10.0
    assert chain_cost(HELD_TWICE, [30.0], [5]) == HELD_TWICE  # no handoff: held twice
    # a cheaper restart makes an early start cheaper, as the cost derives
    limit = 4 * 3600
    assert own.early_weight(limit) < DEFAULT_COST.early_weight(limit)


class Reports:
    """The chain directories' reports, as the daemon's reader sees them (scripted)."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.calls: list[str] = []

    def read(self, chain: Chain, name: str) -> str | None:
        self.calls.append(name)
        return self.files.get(name)


def test_the_daemon_records_each_segments_restart_and_a_bad_report_is_the_chains_note(
    tmp_path: Path,
) -> None:
    """Segment 2 reports 30 s of restart once it runs: recorded on its row, in
    mirage_restart_overhead_seconds and an event; segment 3's report is garbled: counted
    unusable, read again on a ramp to every RETRY_S, and the chain completes."""
    store = make_store(tmp_path)
    sim = FaultySim(make_sim().sim)
    chain = make_chain(store, segments=3, limit=1800)
    reports = Reports()
    d = Daemon(store, sim, config=make_config("reactive"), report_read=reports.read)
    t = 0
    while t <= 4 * 1800:
        sim.advance_to(t)
        for seg in segments_of(store, chain.id):
            if seg.start is None or seg.index == 0:
                continue
            name = handoff.report_name(chain.id, seg.index + 1)
            reports.files[name] = (
                json.dumps(
                    {
                        "job_id": seg.job_id,
                        "began": seg.start,
                        "took_over": seg.start + 2,
                        "resumed": seg.start + 32,
                    }
                )
                if seg.index == 1
                else "{garbled"
            )
        d.cycle(t)
        t += 60
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    segs = segments_of(store, chain.id)
    assert [s.restart_s for s in segs] == [None, 30.0, None]
    assert d.metrics.value("mirage_restart_overhead_seconds_count") == 1
    assert d.metrics.value("mirage_restart_overhead_seconds_sum") == 30
    assert d.metrics.value("mirage_timing_reports_total", {"outcome": "read"}) == 1
    unusable = d.metrics.value("mirage_timing_reports_total", {"outcome": "unusable"})
    third = handoff.report_name(chain.id, 3)
    # each segment's first read comes in the cycle that sees it running, before this
    # script has written its report (None: nothing to count); then at the polls (60 s)
    # once 15, 30, 60, 120, 240 s and then every RETRY_S have passed since the last read:
    # at 0, 60, 120, 180, 300, 540, 840, 1140, 1440 and 1740 s into its 1800 s
    assert unusable == reports.calls.count(third) - 1 >= 1
    assert reports.calls.count(third) <= 10, reports.calls.count(third)  # throttled
    assert [retry_after(n) for n in range(1, 8)] == [15, 30, 60, 120, 240, RETRY_S, RETRY_S]
    # segment 2 is read once more, at the next poll, and no more once it has its figure;
    # the first segment never
    assert reports.calls.count(handoff.report_name(chain.id, 2)) == 2
    assert handoff.report_name(chain.id, 1) not in reports.calls
    with store.session() as s:
        ev = s.scalars(select(Event).where(Event.kind == "segment.resumed")).one()
        assert ev.data["restart_s"] == 30 and ev.data["waited_s"] == 2


def test_transitions_are_charged_with_the_chains_own_figures(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    chain = make_chain(store, segments=3)
    other = make_chain(store, segments=3, name="other")
    cfg = make_config().daemon
    ctx = StepContext(cfg=cfg, metrics=DaemonMetrics(), clients=lambda c: None)  # type: ignore[arg-type,return-value]
    with store.session() as s:
        for i, (r, h) in enumerate(((None, None), (20.0, 4), (40.0, 6))):
            s.add(Submission(token=f"t{i}", chain_id=chain.id, index=i, time_limit_s=3600,
                             state=SubmissionState.SUBMITTED, job_id=str(i),
                             created_at=0))  # fmt: skip
            s.flush()  # the submission row before the segment that names it
            s.add(Segment(chain_id=chain.id, index=i, token=f"t{i}", job_id=str(i),
                          submitted_at=0, restart_s=r, handoff_s=h))  # fmt: skip
        s.flush()
        own = reconcile.own_cost(ctx, s, chain.id)
        assert (own.restart_s, own.handoff_s) == (30.0, 5.0)
        assert reconcile.own_cost(ctx, s, other.id) == DEFAULT_COST
