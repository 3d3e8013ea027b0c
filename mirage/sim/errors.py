"""The simulated controller's refusal, in a module of its own: the engine and the limits
it applies both raise it, and the limits must not import the engine that runs them."""

from __future__ import annotations


class SimError(ValueError):
    """A request the simulated controller refuses (unknown job, bad dependency, ...).

    ``reason`` is a short key for counting refusals (``Simulation.skipped``).
    """

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason
