"""Trace-driven, discrete-event Slurm simulator (engine, backfill planning, fork, backend).

:func:`replay` is ``mirage simulate`` as a Python call (:mod:`mirage.sim.api`).
"""

from mirage.sim.api import Replayed, ReplayError, replay
from mirage.sim.engine import Simulation
from mirage.sim.errors import SimError
from mirage.sim.views import JobView
from mirage.sim.workload import JobSpec, Workload, from_table

__all__ = [
    "JobSpec", "JobView", "ReplayError", "Replayed", "SimError", "Simulation", "Workload",
    "from_table", "replay",
]  # fmt: skip
