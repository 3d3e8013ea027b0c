"""Synthetic job traces: an SDV synthesizer of job attributes, a calendar-driven arrival
process for submit times, and fidelity reports (marginals, correlations, queueing).

SDV is an optional extra (``pip install 'mirage-provisioner[synth]'``, Business Source
License); only :mod:`mirage.synth.tabular` imports it, lazily.
"""
