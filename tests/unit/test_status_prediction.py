"""``mirage status``'s predicted start, said as what it is: the trial
saw predictions shown in the past, for successors that had already started."""

from __future__ import annotations

from typing import Any

from mirage.daemon.cli import _chain_lines, _prediction_text

NOW = 1_000_000


def row(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "c1", "name": "train", "state": "ACTIVE", "owner": "ann", "segment": 2,
        "job_id": "12", "job_state": "RUNNING", "job_start": NOW - 600, "time_left_s": 600,
        "predicted_start": NOW + 300, "predicted_interval": None, "decided_at": NOW - 60,
        "successor_job_id": None, "successor_state": None, "successor_reason": "",
        "slurm_estimate": None, "time_limit_s": 3600, "reason": "",
    }  # fmt: skip
    base.update(kw)
    return base


def test_a_prediction_ahead_is_shown_as_it_is() -> None:
    assert _prediction_text(row(), NOW).endswith("(in 5m00s)")


def test_a_prediction_made_before_this_segment_started_was_about_its_start() -> None:
    text = _prediction_text(row(decided_at=NOW - 900, predicted_start=NOW - 610), NOW)
    assert text.startswith("none yet for the next segment (the last one was for this segment")
    assert "it started" in text and "10m00s ago" in text


def test_a_passed_prediction_says_what_the_successor_does_instead() -> None:
    pending = row(predicted_start=NOW - 120, successor_job_id="13", successor_state="PENDING",
                  successor_reason="Resources")  # fmt: skip
    assert _prediction_text(pending, NOW).endswith(
        "(2m00s ago), passed: the successor is still PENDING (Resources)"
    )
    unsent = row(predicted_start=NOW - 120)
    assert _prediction_text(unsent, NOW).endswith("passed: the successor is not submitted yet")


def test_no_prediction_is_a_dash_and_the_status_line_uses_the_text() -> None:
    assert _prediction_text(row(predicted_start=None), NOW) == "-"
    lines = _chain_lines(row(decided_at=NOW - 900), NOW, owner=False)
    assert any(line.startswith("    predicted start: none yet for the next") for line in lines)
