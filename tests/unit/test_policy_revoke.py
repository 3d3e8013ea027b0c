"""Revocable pre-submission on recorded samples: :func:`revocable_step` and the tuning pick."""

from __future__ import annotations

import numpy as np

from mirage.learn.train import pick_revoke_margin
from mirage.policy.base import MAX_REVOCATIONS, revocable_step

STEP = 600
K = 10  # decision steps; step K is the planned end
STEPS = np.arange(K + 1) * STEP


def mask(*on: int) -> np.ndarray:
    out = np.zeros(K, bool)
    out[list(on)] = True
    return out


def starts(wait_s: int) -> np.ndarray:
    """Submitted at step k, the successor starts ``wait_s`` later."""
    return STEPS + wait_s


def test_without_revocations_the_first_submission_stands() -> None:
    assert revocable_step(mask(), mask(), starts(0), STEPS) == (K, 0)  # reactive
    assert revocable_step(mask(2, 3, 4), mask(), starts(3000), STEPS) == (2, 0)


def test_a_revoked_pending_submission_is_replaced_by_the_next_one() -> None:
    # submitted at 2 (starts at 2*600 + 3000 = 4200), revoked at 4 (2400 s: still pending)
    assert revocable_step(mask(2, 6, 7), mask(4, 5), starts(3000), STEPS) == (6, 1)
    # revoked, and never asked to submit again: at the planned end
    assert revocable_step(mask(2), mask(4), starts(3000), STEPS) == (K, 1)


def test_a_started_successor_cannot_be_revoked() -> None:
    # submitted at 2, starts at 1200 + 600 = 1800 = step 3: revoking at step 3 is too late
    assert revocable_step(mask(2, 6), mask(3, 4), starts(600), STEPS) == (2, 0)
    # submitted at 1, it starts at 1800 (step 3): at step 2 it still pends and is revoked
    assert revocable_step(mask(1, 6), mask(2), starts(1200), STEPS) == (6, 1)


def test_revocations_are_bounded() -> None:
    submit, revoke = mask(0, 2, 4, 6, 8), mask(1, 3, 5, 7, 9)
    k, n = revocable_step(submit, revoke, starts(10 * STEP), STEPS)
    assert n == MAX_REVOCATIONS and k == 2 * MAX_REVOCATIONS
    assert revocable_step(submit, revoke, starts(10 * STEP), STEPS, limit=1) == (2, 1)


def test_tuning_prefers_never_revoking_on_ties_then_the_widest_margin() -> None:
    runs = {
        None: (np.array([1.0, 1.0]), np.zeros(2, np.int64)),
        4.0: (np.array([1.0, 1.0]), np.array([1, 0])),
        1.0: (np.array([0.5, 1.0]), np.array([1, 1])),
        0.5: (np.array([0.5, 1.0]), np.array([2, 1])),
    }
    best, metrics = pick_revoke_margin(list(runs), runs.__getitem__)
    assert best == 1.0 and metrics["tune_revocations"] == 2
    assert metrics["tune_revoke_scores_mean_J_h"] == {
        "never": 1.0,
        "4": 1.0,
        "1": 0.75,
        "0.5": 0.75,
    }
    flat = {m: (np.ones(2), np.zeros(2, np.int64)) for m in (None, 2.0)}
    assert pick_revoke_margin(list(flat), flat.__getitem__)[0] is None
