"""Learned provisioning policies: datasets, forecasters, RL agents, artifacts, `mirage train`."""
