"""Session-wide ordering: tests marked ``slurm_last`` (they stop the test cluster's daemons)
run after every other test, whatever their module's name; the rest keep pytest's order."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slurm_last") is not None)
