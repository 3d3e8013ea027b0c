"""Trace-driven, discrete-event Slurm simulator (engine, backfill planning, fork, backend)."""

from mirage.sim.engine import Simulation
from mirage.sim.errors import SimError
from mirage.sim.views import JobView
from mirage.sim.workload import JobSpec, Workload, from_table

__all__ = ["JobSpec", "JobView", "SimError", "Simulation", "Workload", "from_table"]
