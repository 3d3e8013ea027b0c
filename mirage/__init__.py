"""Mirage: a proactive provisioner for chained deep-learning jobs on Slurm GPU clusters."""

__version__ = "0.1.0"
