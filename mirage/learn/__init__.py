"""Learned provisioning policies: datasets, forecasters, RL agents, artifacts, `mirage train`.

:func:`train_models` is ``mirage train`` as a Python call (:mod:`mirage.learn.api`; the
name ``train`` is the training pipeline's module, :mod:`mirage.learn.train`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mirage.learn.api import OptionError, TrainError, train_models

__all__ = ["OptionError", "TrainError", "train_models"]


def __getattr__(name: str) -> Any:
    """The API on first use: the daemon imports this package's models (artifacts) and
    need not load the evaluation's inputs the API's errors derive from."""
    if name in __all__:
        return getattr(importlib.import_module("mirage.learn.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
