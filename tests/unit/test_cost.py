"""The cost of record (mirage.policy.cost): an early start of a job that hands off costs
its handoff window and its share of one more segment; one that cannot, SC'23's J."""

from __future__ import annotations

import numpy as np
import pytest

from mirage.evaluate.inputs import cost_from
from mirage.learn.forecast import newsvendor_level, quantile_levels
from mirage.policy.cost import DEFAULT_COST, HELD_TWICE, CostModel, Transition

H = 3600


def test_the_issues_worked_example() -> None:
    """A 48 h segment that starts 10 h early costs (10/48)(R + I) + h: well under an hour
    (R 10 min, I 1 h, h 10 s), where SC'23's J charged 5 h."""
    t = Transition(pred_start=0, pred_time_limit=48 * H, pred_end=48 * H, succ_start=38 * H)
    got = t.cost()
    assert got == pytest.approx(10 + 10 * H * (600 + H) / (48 * H - 600))
    assert 0.2 * H < got < 0.3 * H
    assert t.cost(HELD_TWICE) == 5 * H


def test_a_late_start_costs_its_idle_hours_under_both() -> None:
    t = Transition(0, 48 * H, 48 * H, 51 * H)
    assert t.cost() == t.cost(HELD_TWICE) == 3 * H


def test_the_early_weight_grows_as_the_segment_shortens() -> None:
    assert DEFAULT_COST.early_weight(48 * H) < DEFAULT_COST.early_weight(6 * H)
    assert DEFAULT_COST.early_weight(2 * H) == pytest.approx((600 + H) / (2 * H - 600))
    assert HELD_TWICE.early_weight(48 * H) == HELD_TWICE.early_weight(2 * H) == 0.5


def test_arrays_and_scalars_agree() -> None:
    intr = np.array([0.0, 2 * H, 0.0, 0.0])
    ovl = np.array([0.0, 0.0, 4 * H, 30.0])
    limits = np.array([48 * H, 48 * H, 48 * H, 2 * H])
    got = DEFAULT_COST.of_arrays(intr, ovl, limits)
    want = [DEFAULT_COST.of(i, o, x) for i, o, x in zip(intr, ovl, limits, strict=True)]
    assert got.tolist() == pytest.approx(want)
    assert DEFAULT_COST.of_arrays(intr, ovl, 48 * H)[:3].tolist() == pytest.approx(want[:3])


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="restart_s"):
        CostModel(restart_s=-1)
    with pytest.raises(ValueError, match="handoff_s"):
        CostModel(handoff_s=float("inf"))


def test_the_commands_units() -> None:
    c = cost_from({"restart_min": 5, "handoff_s": 30, "extra_idle_h": 2, "held_twice": False})
    assert (c.restart_s, c.handoff_s, c.extra_idle_s, c.hands_off) == (300, 30, 2 * H, True)
    assert cost_from({"held_twice": True}) == HELD_TWICE
    assert cost_from({}) == DEFAULT_COST


def test_the_forecasters_target_quantile_follows_the_weight() -> None:
    assert newsvendor_level(0.5) == pytest.approx(2 / 3, abs=1e-4)
    assert newsvendor_level(DEFAULT_COST.early_weight(48 * H)) == 0.95  # capped at the interval
    levels = quantile_levels(0.5)
    assert levels[0] == 0.05 and levels[-1] == 0.95 and 0.6667 in levels


def test_describe_names_the_parameters() -> None:
    assert "h 10 s, R 600 s, I 3600 s" in DEFAULT_COST.describe()
    assert HELD_TWICE.describe() == "J = interruption + 0.5 x overlap (no handoff)"
