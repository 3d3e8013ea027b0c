"""The evaluation harness: Mirage's protocol, one cost, baselines, the oracle, reports.

:func:`run` is ``mirage evaluate`` as a Python call (:mod:`mirage.evaluate.api`).
"""

from mirage.evaluate.api import Evaluation, run
from mirage.evaluate.inputs import InputError

__all__ = ["Evaluation", "InputError", "run"]
