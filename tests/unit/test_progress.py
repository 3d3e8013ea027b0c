"""One progress helper: bars on a terminal, plain log lines otherwise (mirage.progress)."""

from __future__ import annotations

import logging

import pytest

from mirage.progress import fraction_done, progress_bars


def test_plain_lines_start_every_interval_and_end(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    caplog.set_level(logging.INFO, logger="mirage.progress")
    with progress_bars(terminal=False, every_s=30, clock=lambda: now[0]) as bars:
        for done in range(0, 101, 5):  # 100 samples, one every 3 s
            now[0] = done * 3.0 / 5
            bars.update("probes test", done, 100)
        bars.update("probes test", 100, 100)  # a repeated final update: no second line
        frac = bars.fraction("replaying 24776 jobs")
        frac(0.0)
        frac(1.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "probes test: 0/100 (0%) after 0s",
        "probes test: 50/100 (50%) after 30s, 0.6 s each, about 30s left",
        "probes test: 100/100 (100%) after 1m00s, 0.6 s each",
        "replaying 24776 jobs: 0% after 0s",
        "replaying 24776 jobs: 100% after 0s",
    ]


def test_time_per_item_counts_only_the_items_done_here(caplog: pytest.LogCaptureFixture) -> None:
    """40 samples come from the cache at once: the pace and what is left are from the
    ones probed since (20 s each), not 60 items in 400 s."""
    now = [0.0]
    caplog.set_level(logging.INFO, logger="mirage.progress")
    with progress_bars(terminal=False, every_s=30, clock=lambda: now[0]) as bars:
        bars.update("probes test", 40, 100)
        now[0] = 400.0
        bars.update("probes test", 60, 100)
    assert [r.getMessage() for r in caplog.records] == [
        "probes test: 40/100 (40%) after 0s",
        "probes test: 60/100 (60%) after 6m40s, 20.0 s each, about 13m20s left",
    ]


def test_terminal_bars_one_task_per_label(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mirage.progress")
    with progress_bars(terminal=True) as bars:
        bars.update("probes train", 3, 10)
        bars.update("probes tune", 1, 4)
        bars.update("probes train", 10, 10)
        bar = bars._bar
        assert bar is not None
        tasks = {t.description: (t.completed, t.total) for t in bar.tasks}
    assert tasks == {"probes train": (10, 10), "probes tune": (1, 4)}
    assert not caplog.records  # no log lines beside the bars


def test_counter_updates_one_task_by_items(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mirage.progress")
    with progress_bars(terminal=False, clock=lambda: 0.0) as bars:
        count = bars.counter("probes tune")
        count(0, 8)
        count(8, 8)
    assert [r.getMessage() for r in caplog.records] == [
        "probes tune: 0/8 (0%) after 0s",
        "probes tune: 8/8 (100%) after 0s",
    ]


def test_fraction_done_logs_off_a_terminal_and_is_none_when_off(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    caplog.set_level(logging.INFO, logger="mirage.progress")
    with fraction_done("replaying 10 jobs") as update:
        assert update is not None
        update(1.0)
    with fraction_done("replaying 10 jobs", enabled=False) as off:
        assert off is None
    assert [r.getMessage() for r in caplog.records] == ["replaying 10 jobs: 100% after 0s"]
