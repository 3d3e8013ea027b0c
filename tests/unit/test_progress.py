"""One progress helper: bars on a terminal, plain log lines otherwise (mirage.progress)."""

from __future__ import annotations

import logging

import pytest

from mirage.progress import progress_bars


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
        "probes test: 0/100 (0%) after 0m00s",
        "probes test: 50/100 (50%) after 0m30s",
        "probes test: 100/100 (100%) after 1m00s",
        "replaying 24776 jobs: 0% after 0m00s",
        "replaying 24776 jobs: 100% after 0m00s",
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
