"""Job traces: readers (sacct exports, SWF, CSV, Parquet), the canonical table, summaries.

:func:`inspect` is ``mirage trace inspect`` as a Python call (:mod:`mirage.trace.api`).
"""

from mirage.trace.api import TraceInputError, inspect

__all__ = ["TraceInputError", "inspect"]
