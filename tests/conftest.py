"""Session-wide ordering: tests marked ``slurm_last`` (they stop the test cluster's daemons)
run after every other test, whatever their module's name; before them, the tests of the
pyslurm backend (``make test`` builds pyslurm beside the first Slurm tests and they wait
for it); the rest keep pytest's order."""

from __future__ import annotations

import pytest


def _needs_pyslurm(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return "pyslurm" in params or item.path.name == "test_backends.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(
        key=lambda item: (item.get_closest_marker("slurm_last") is not None, _needs_pyslurm(item))
    )
