"""One summary of a sample of durations, the same in every trace report."""

from __future__ import annotations

import numpy as np


def quantile_summary(values: np.ndarray) -> dict[str, float | int | None]:
    """count, p10, p50, p90, mean and max of ``values`` (NaNs dropped); None when empty."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return {"count": 0, "p10": None, "p50": None, "p90": None, "mean": None, "max": None}
    q = np.quantile(v, [0.1, 0.5, 0.9])
    return {
        "count": int(v.size),
        "p10": float(q[0]),
        "p50": float(q[1]),
        "p90": float(q[2]),
        "mean": float(v.mean()),
        "max": float(v.max()),
    }
