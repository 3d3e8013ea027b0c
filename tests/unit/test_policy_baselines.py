"""Cost formulas and each baseline's decision on hand-made contexts."""

from __future__ import annotations

import numpy as np
import pytest

from mirage.policy.base import DecisionContext, PendingTransition, WaitHistory
from mirage.policy.baselines import (
    FixedLead,
    Qbets,
    Reactive,
    RunningAverage,
    SlurmEstimate,
    binomial_upper_index,
)
from mirage.policy.cost import HELD_TWICE, CostModel, Transition
from mirage.profile.schema import ClusterProfile, Partition
from mirage.slurm.types import QueueSnapshot, StartEstimate, SubmitRequest

H = 3600
PROFILE = ClusterProfile("t", (Partition("gpu", 8, 1000, nodes=4, gpus_per_node=2),))
P = PendingTransition("c", "1", pred_start=0, pred_time_limit=48 * H, succ_nodes=1,
                      succ_gpus=2, succ_time_limit=48 * H, partition="gpu")  # fmt: skip


def ctx(
    now: int, est: int | None = None, waits: list[tuple[int, int]] | None = None
) -> DecisionContext:
    def estimate(req: SubmitRequest) -> StartEstimate:
        assert req.nodes == 1 and req.gres == "gpu:2" and req.partition == "gpu"
        return StartEstimate(None, est)

    hist = None
    if waits is not None:
        a = np.array(waits, dtype=np.int64).reshape(-1, 2)
        hist = WaitHistory(a[:, 0], a[:, 1])
    return DecisionContext(now, QueueSnapshot(now, ()), PROFILE, estimate, hist)


@pytest.mark.parametrize(
    ("succ", "intr", "ovl", "gap", "held_twice"),
    [
        (48 * H, 0, 0, 0, 0.0),  # seamless
        (50 * H, 2 * H, 0, 2 * H, 2.0 * H),  # late by 2 h
        (44 * H, 0, 4 * H, -4 * H, 2.0 * H),  # 4 h early: overlap at SC'23's 0.5
    ],
)
def test_cost_hand_cases(succ: int, intr: int, ovl: int, gap: int, held_twice: float) -> None:
    t = Transition(pred_start=0, pred_time_limit=48 * H, pred_end=48 * H, succ_start=succ)
    assert (t.interruption, t.overlap, t.gap, t.cost(HELD_TWICE)) == (intr, ovl, gap, held_twice)
    assert t.cost(CostModel(hands_off=False, held_twice_weight=1.0)) == intr + ovl
    # a job that hands off: an early start costs h plus its share of one more segment
    early = 0.0 if ovl == 0 else 10 + ovl * (600 + 3600) / (48 * H - 600)
    assert t.cost() == pytest.approx(intr + early)


def test_cost_early_end_predecessor() -> None:
    # predecessor ends early at 40 h; successor at 45 h: 5 h idle, 3 h overlap by plan
    t = Transition(0, 48 * H, 40 * H, 45 * H)
    assert (t.interruption, t.overlap, t.gap) == (5 * H, 3 * H, -3 * H)


def test_reactive_never_submits() -> None:
    assert not Reactive().decide(ctx(47 * H), [P, P])[1].submit


def test_fixed_lead() -> None:
    pol = FixedLead(2 * H)
    assert not pol.decide(ctx(45 * H), [P])[0].submit
    assert pol.decide(ctx(46 * H), [P])[0].submit
    with pytest.raises(ValueError):
        FixedLead(-1)


def test_slurm_estimate_submits_at_the_last_step_that_still_starts_in_time() -> None:
    pol = SlurmEstimate(lookahead_s=600)
    # idle cluster (estimate = now): wait while there is time, submit in the last step
    assert not pol.decide(ctx(40 * H, est=40 * H), [P])[0].submit
    assert not pol.decide(ctx(48 * H - 601, est=48 * H - 601), [P])[0].submit
    assert pol.decide(ctx(48 * H - 600, est=48 * H - 600), [P])[0].submit
    # a 7 h queue wait: submit once now + 7 h + one step reaches the planned end
    assert not pol.decide(ctx(40 * H, est=47 * H), [P])[0].submit
    d = pol.decide(ctx(41 * H - 600, est=48 * H - 600), [P])[0]
    assert d.submit and d.predicted_start == 48 * H - 600
    assert not pol.decide(ctx(40 * H, est=None), [P])[0].submit  # no estimate: wait
    with pytest.raises(ValueError):
        SlurmEstimate(lookahead_s=-1)


def test_running_average_uses_recent_started_jobs_only() -> None:
    waits = [(10 * H, 100 * H), (30 * H, 2 * H), (39 * H, 4 * H), (41 * H, 50 * H)]
    pol = RunningAverage(factor=1.0, window_s=24 * H)
    # at 40 h: jobs started in (16 h, 40 h] -> waits 2 h and 4 h, mean 3 h; 40 + 3 < 48
    assert not pol.decide(ctx(40 * H, waits=waits), [P])[0].submit
    assert pol.decide(ctx(45 * H, waits=waits[:3]), [P])[0].submit
    assert RunningAverage(factor=3.0).decide(ctx(40 * H, waits=waits), [P])[0].submit
    assert not pol.decide(ctx(40 * H, waits=[]), [P])[0].submit  # no history: wait 0


def test_binomial_upper_index() -> None:
    # n = 1, q = .5: P(Binom < 1) = .5 < .95, so even the max does not bound it
    assert binomial_upper_index(1, 0.5, 0.95) == 2
    # n = 10, q = .5: P(B <= 7) = .945, P(B <= 8) = .989 -> index 9
    assert binomial_upper_index(10, 0.5, 0.95) == 9
    assert binomial_upper_index(0, 0.5, 0.95) == 1


def test_qbets() -> None:
    waits = [(30 * H + k, k * 600) for k in range(10)]  # 0, 10, ..., 90 min
    pol = Qbets(quantile=0.5)
    assert pol.predicted_wait(np.array([w for _, w in waits])) == 80 * 60  # 9th smallest
    assert not pol.decide(ctx(46 * H, waits=waits), [P])[0].submit  # 46 h + 80 min < 48 h
    assert pol.decide(ctx(47 * H, waits=waits), [P])[0].submit
    big = np.arange(1000, dtype=np.int64)
    assert 500 <= Qbets(0.5).predicted_wait(big) <= 560
    with pytest.raises(ValueError):
        Qbets(quantile=1.0)
