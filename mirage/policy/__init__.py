"""Provisioning policies: when to pre-submit a chain's next segment."""
