"""The evaluation harness: Mirage's protocol, one cost, baselines, the oracle, reports."""
