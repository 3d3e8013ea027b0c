"""Optional extras: what each one installs, and one clear line when one is missing.

The base install runs the daemon with a baseline, the look-ahead or a forecaster (random
forest, XGBoost). Everything else is an extra of the ``mirage-provisioner`` package
(setup.cfg's ``[options.extras_require]``):

- ``rl``: the DQN and policy-gradient agents (torch, stable-baselines3, gymnasium);
- ``plots``: PNG plots (``mirage evaluate``, ``mirage sim validate --plot``, synth reports);
- ``synth``: synthetic traces (SDV, under the Business Source License);
- ``dask``: probes spread over a Dask cluster (``--dask-address``);
- ``postgres``: the daemon's state in PostgreSQL.

Code that needs an extra calls ``require`` before importing it, so that a user who asks
for it (``default = "dqn"``, ``--plot``, ``mirage synth``) gets one line naming the extra
and the command that installs it, never an ImportError traceback.
"""

from __future__ import annotations

import importlib.util

#: extra -> the top-level modules it provides
EXTRAS: dict[str, tuple[str, ...]] = {
    "rl": ("torch", "stable_baselines3", "gymnasium"),
    "plots": ("matplotlib",),
    "synth": ("sdv",),
    "dask": ("distributed",),
    "postgres": ("psycopg",),
}

PACKAGE = "mirage-provisioner"


class MissingExtra(ImportError):
    """What was asked for needs an extra that is not installed."""

    def __init__(self, extra: str, module: str, what: str) -> None:
        self.extra = extra
        self.module = module
        super().__init__(
            f"{what} needs Mirage's '{extra}' extra ({module} is not installed): "
            f"pip install '{PACKAGE}[{extra}]'"
        )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return False


def missing(extra: str) -> str | None:
    """The first module of ``extra`` that is not installed, or None."""
    for module in EXTRAS[extra]:
        if not _installed(module):
            return module
    return None


def require(extra: str, what: str) -> None:
    """Raise ``MissingExtra`` (naming ``what`` needs it) unless ``extra`` is installed."""
    module = missing(extra)
    if module is not None:
        raise MissingExtra(extra, module, what)
