"""Chain detection on small hand-made tables with known chains, and on real traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mirage.trace.chains import ChainParams, chain_summary, find_chains
from mirage.trace.readers import load_trace
from mirage.trace.schema import conform, empty_table

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces"
H = 3600


def table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    base = {"user": "u1", "name": "", "nodes": 1, "gpus": 4, "cpus": 32, "time_limit": 2 * H}
    return conform(pd.DataFrame([{**base, "job_id": str(i), **r} for i, r in enumerate(rows)]))


def seg(submit: int, start: int, end: int, **kw: Any) -> dict[str, Any]:
    return {"submit": submit, "start": start, "end": end, **kw}


def test_resubmitted_after_end() -> None:
    jobs = table(
        [
            seg(0, 100, 2 * H, name="train"),
            seg(2 * H + 30, 2 * H + 300, 4 * H, name="train"),  # resubmitted 30 s after
            seg(4 * H + 500, 5 * H, 7 * H, name="train"),  # resubmitted 500 s after
        ]
    )
    ch = find_chains(jobs)
    assert ch.chains == [[0, 1, 2]]
    assert ch.gaps.tolist() == [300, H]  # start(k+1) - end(k)
    s = chain_summary(ch)
    assert s["chains"] == 1
    assert s["length_distribution"] == {3: 1}
    assert s["interruption_share"] == 1.0


def test_held_by_dependency_and_numbered() -> None:
    jobs = table(
        [
            # submitted together, held: dimer.10 -> dimer.11 -> dimer.12
            seg(0, 10, 2 * H, name="dimer.10"),
            seg(0, 2 * H + 5, 4 * H, name="dimer.11"),
            # long queue wait after the dependency cleared: still a chain (numbered)
            seg(0, 9 * H, 11 * H, name="dimer.12"),
            # dimer.14 skips an index and starts late: not linked
            seg(0, 20 * H, 22 * H, name="dimer.14"),
        ]
    )
    ch = find_chains(jobs)
    assert ch.chains == [[0, 1, 2]]
    assert ch.gaps.tolist() == [5, 5 * H]


def test_same_request_without_names() -> None:
    jobs = table(
        [
            seg(0, 0, H),
            seg(H + 60, H + 120, 2 * H),
            seg(H + 60, H + 120, 2 * H, nodes=8, user="u1"),  # different request
        ]
    )
    assert find_chains(jobs).chains == [[0, 1]]


def test_negative_cases() -> None:
    jobs = table(
        [
            seg(0, 0, H, name="a"),
            seg(H + 10, H + 20, 2 * H, name="a", user="u2"),  # different user
            seg(5 * H, 5 * H, 6 * H, name="a"),  # far apart: 4 h after the end
            seg(0, 10, H, name="b"),
            seg(H + 10, H + 20, 2 * H, name="c"),  # different name
            seg(0, 0, H, name="", user=""),  # unknown user never chains
            seg(H, H, 2 * H, name="", user=""),
            # side by side: submitted and started together (zero-length jobs)
            seg(100, 200, 200, name="sig"),
            seg(100, 200, 200, name="sig"),
            # overlapping run: starts long before the previous end
            seg(0, 0, 2 * H, name="d"),
            seg(10, H, 3 * H, name="d"),
        ]
    )
    assert find_chains(jobs).chains == []


def test_parallel_chains_with_the_same_name() -> None:
    """Two chains of one user and name, running side by side, are told apart."""
    jobs = table(
        [
            seg(0, 0, H, name="sweep"),  # chain A
            seg(0, 0, 2 * H, name="sweep"),  # chain B
            seg(H + 30, H + 60, 3 * H, name="sweep"),  # A resubmitted
            seg(2 * H + 20, 2 * H + 40, 4 * H, name="sweep"),  # B resubmitted
            seg(3 * H + 10, 3 * H + 10, 5 * H, name="sweep"),  # A again
        ]
    )
    ch = find_chains(jobs)
    assert sorted(ch.chains) == [[0, 2, 4], [1, 3]]
    assert sorted(ch.gaps.tolist()) == [10, 40, 60]


def test_tolerance_is_configurable() -> None:
    jobs = table([seg(0, 0, H, name="a"), seg(H + 900, H + 900, 2 * H, name="a")])
    assert find_chains(jobs).chains == []
    assert find_chains(jobs, ChainParams(resubmit_tol=1200)).chains == [[0, 1]]


def test_missing_times_and_empty() -> None:
    jobs = table([seg(0, 0, H, name="a"), {"submit": H + 5, "name": "a"}])
    assert find_chains(jobs).chains == [[0, 1]]  # resubmitted; it never started
    assert find_chains(table([{"name": "a"}, {"name": "a"}])).chains == []
    empty = find_chains(empty_table())
    assert empty.chains == []
    assert chain_summary(empty)["interruption_share"] is None


def test_ls6_slice_dimer_chain() -> None:
    load = load_trace(REPO / "traces" / "ls6-a100-slice.log.gz")
    ch = find_chains(load.jobs)
    names = [list(load.jobs["name"].iloc[c]) for c in ch.chains]
    assert [f"dimer.{i}" for i in range(10, 16)] in names


def test_full_ls6_chains() -> None:
    """The whole ls6 trace's chains (its speed is scripts/bench/trace_chains.py's)."""
    if not SHARED.is_dir():
        pytest.skip(f"shared traces not present at {SHARED}")
    jobs = load_trace(SHARED / "tacc_ls6_a100/ls6-a100.log.gz").jobs
    ch = find_chains(jobs)
    assert len(ch.chains) == 3661
    assert sum(len(c) for c in ch.chains) == 13127
    flat = [i for c in ch.chains for i in c]
    assert len(flat) == len(set(flat))


def test_an_absurd_time_in_one_group_leaves_other_groups_alone() -> None:
    # One job ending 2**52 s out once widened the float (group, end) keys so much that a
    # later group's times rounded by several seconds: a resubmission 600 s after the end
    # (the tolerance) was lost. Integer keys keep every group exact.
    odd = [seg(0, 10, 2**52, name="x", user="u0")]
    others = [seg(0, 10, 20, name="f", user=f"f{k}") for k in range(40)]
    t = 1_700_000_000
    for gap in (599, 600):
        first = seg(t, t + 100, t + 2 * H, name="train", user="zz")
        resubmit = t + 2 * H + gap
        rows = [first, seg(resubmit, resubmit + 1000, t + 4 * H, name="train", user="zz")]
        assert find_chains(table([*odd, *others, *rows])).chains == [[41, 42]], gap
