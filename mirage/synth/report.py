"""How close a synthetic trace is to a real one: marginals, correlations, arrivals, queueing.

Everything is computed on quantities derived from the canonical tables (never on the
synthesizer's internal columns), so any two traces can be compared, whatever made them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mirage.extras import missing
from mirage.sim.prepare import ks_distance
from mirage.synth.arrivals import hourly_counts, interarrivals

#: Numeric columns compared one by one (``hourly_count``: jobs per observed clock hour).
COLUMNS = ("interarrival_s", "hourly_count", "nodes", "gpus", "cpus", "time_limit", "run_s",
           "run_frac")  # fmt: skip
#: Columns of the correlation matrices (per job; Spearman, as sizes and times are skewed).
CORR_COLUMNS = ("interarrival_s", "nodes", "gpus", "cpus", "time_limit", "run_s")
LOG_X = {"interarrival_s", "time_limit", "run_s", "wait_s"}


def derived(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per-job quantities of a canonical table (jobs that ran, sorted by submit)."""
    ok = jobs["submit"].notna() & jobs["start"].notna() & jobs["end"].notna()
    df = jobs.loc[ok.to_numpy(dtype=bool)].sort_values("submit", kind="stable")
    submit = df["submit"].astype("int64").to_numpy()
    run = (df["end"] - df["start"]).astype("float64").to_numpy()
    limit = df["time_limit"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    out = pd.DataFrame(
        {
            "submit": submit,
            "interarrival_s": np.concatenate([[np.nan], np.diff(submit)]).astype(np.float64),
            "time_limit": limit,
            "run_s": run,
            "run_frac": np.where(limit > 0, np.clip(run / limit, 0, None), np.nan),
        }
    )
    for col in ("nodes", "gpus", "cpus"):
        out[col] = df[col].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    out["user"] = df["user"].astype(str).to_numpy()
    out["state"] = df["state"].astype(str).to_numpy()
    return out


def _finite(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x[np.isfinite(x)]
    return out


def column_distances(real: pd.DataFrame, synth: pd.DataFrame) -> dict[str, dict[str, float]]:
    """KS and Wasserstein distance per column (Wasserstein also over the real column's
    standard deviation, to compare columns of different units). Columns unknown in either
    trace (all NaN) are left out."""
    from scipy.stats import wasserstein_distance

    out: dict[str, dict[str, float]] = {}
    for col in COLUMNS:
        if col == "hourly_count":
            a = hourly_counts(real["submit"].to_numpy()).astype(np.float64)
            b = hourly_counts(synth["submit"].to_numpy()).astype(np.float64)
        else:
            a, b = _finite(real[col].to_numpy()), _finite(synth[col].to_numpy())
        if a.size == 0 or b.size == 0:
            continue
        w = float(wasserstein_distance(a, b))
        sd = float(np.std(a))
        out[col] = {
            "ks": ks_distance(a, b),
            "wasserstein": w,
            "wasserstein_per_sd": w / sd if sd > 0 else float("nan"),
            "real_mean": float(np.mean(a)),
            "synthetic_mean": float(np.mean(b)),
        }
    for col in ("user", "state"):
        p = real[col].value_counts(normalize=True)
        q = synth[col].value_counts(normalize=True)
        p, q = p.align(q, fill_value=0.0)
        # Total variation distance: the categorical counterpart of KS.
        out[col] = {"tvd": float(0.5 * np.abs(p - q).sum()), "real_levels": int((p > 0).sum()),
                    "synthetic_levels": int((q > 0).sum())}  # fmt: skip
    return out


def corr_columns(real: pd.DataFrame, synth: pd.DataFrame) -> list[str]:
    """Correlation columns known and not constant in both traces."""
    return [
        c for c in CORR_COLUMNS
        if real[c].notna().any() and synth[c].notna().any()
        and real[c].nunique() > 1 and synth[c].nunique() > 1
    ]  # fmt: skip


def correlations(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    out: pd.DataFrame = df[cols].corr(method="spearman")
    return out


@dataclass
class Queueing:
    """Simulated waits (from eligible time, after the warm-up) of both replays."""

    real: dict[str, Any]
    synthetic: dict[str, Any]
    ks: float
    real_waits: np.ndarray
    synthetic_waits: np.ndarray

    def as_dict(self) -> dict[str, Any]:
        return {"real": self.real, "synthetic": self.synthetic, "ks": self.ks}


def queueing_check(
    real: pd.DataFrame,
    synth: pd.DataFrame,
    profile: Any,
    nodes: int,
    *,
    holds: bool = True,
    progress: Callable[[float], None] | None = None,
) -> Queueing:
    """Replay both traces on ``profile`` with ``nodes`` nodes; compare the simulated waits.

    Both traces keep their dependency holds (``holds``: chains wait on their predecessors,
    as on the real cluster; a synthetic trace has them when sampled with its chain model),
    and waits count from eligible time. Waits under the 60 s scheduling granularity count as
    0 for the KS distance (as in calibration).
    """
    from mirage.sim.prepare import FLOOR_S, prepare_trace, replay, sim_waits

    stats: list[dict[str, Any]] = []
    waits: list[np.ndarray] = []
    for k, df in enumerate((real, synth)):
        prep = prepare_trace(df, profile, max_nodes=nodes, holds=holds)

        def part(f: float, k: int = k) -> None:
            if progress is not None:
                progress(0.5 * k + 0.5 * f)

        rep = replay(prep, profile, nodes, progress=part)
        w = sim_waits(prep, rep.sim)[prep.measured]
        started = w[~np.isnan(w)]
        waits.append(np.where(np.isnan(w), np.inf, np.where(w < FLOOR_S, 0.0, w)))
        stats.append(
            {
                "jobs": len(prep.jobs),
                "measured": int(w.size),
                "unstarted": int(np.isnan(w).sum()),
                "dropped": {k2: v for k2, v in prep.workload.dropped.items() if v},
                "mean_s": float(started.mean()) if started.size else float("nan"),
                "median_s": float(np.median(started)) if started.size else float("nan"),
                "p90_s": float(np.quantile(started, 0.9)) if started.size else float("nan"),
                "zero_wait_share": float(np.mean(started < FLOOR_S)) if started.size else 0.0,
                "utilisation": _utilisation(rep.sim),
                "wall_s": rep.wall_s,
            }
        )
    return Queueing(stats[0], stats[1], ks_distance(waits[0], waits[1]), waits[0], waits[1])


def _utilisation(sim: Any) -> float:
    from mirage.sim.report import summarize

    return float(summarize(sim, 0.0).utilisation)


def plot_cdfs(
    real: pd.DataFrame,
    synth: pd.DataFrame,
    cols: list[str],
    path: Path,
    extra: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> None:
    """One panel per column: empirical CDFs of real and synthetic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for col in cols:
        if col == "hourly_count":
            ra = hourly_counts(real["submit"].to_numpy()).astype(np.float64)
            series[col] = (ra, hourly_counts(synth["submit"].to_numpy()).astype(np.float64))
        else:
            series[col] = (_finite(real[col].to_numpy()), _finite(synth[col].to_numpy()))
    series.update(extra or {})
    n = len(series)
    ncols = 3
    nrows = max(1, -(-n // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (col, (a, b)) in zip(axes.flat, series.items(), strict=False):
        for raw, label, style in ((a, "real", "-"), (b, "synthetic", "--")):
            x = np.sort(raw[np.isfinite(raw)])
            if col in LOG_X:
                x = np.maximum(x, 1.0)  # zero gaps and waits drawn at 1 s on a log axis
            ax.step(x, np.arange(1, x.size + 1) / max(1, x.size), style, label=label,
                    where="post")  # fmt: skip
        if col in LOG_X:
            ax.set_xscale("log")
        ax.set_title(col)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_correlations(cr: pd.DataFrame, cs: pd.DataFrame, path: Path) -> None:
    """Real, synthetic and difference heat maps of the Spearman correlation matrices."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    cols = list(cr.columns)
    mats = ((cr, "real"), (cs, "synthetic"), (cs - cr, "synthetic - real"))
    for ax, (m, title) in zip(axes, mats, strict=True):
        im = ax.imshow(m.to_numpy(dtype=np.float64), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
        ax.set_yticks(range(len(cols)), cols)
        for i in range(len(cols)):
            for j in range(len(cols)):
                val = float(m.to_numpy(dtype=np.float64)[i, j])
                ax.text(j, i, f"{val:.2f}", ha="center", va="center", fontsize=8)
        ax.set_title(title)
    fig.colorbar(im, ax=list(axes), shrink=0.8)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def chain_stats(jobs: pd.DataFrame) -> dict[str, float]:
    """Dependency-held chains as :func:`mirage.synth.chains.fit_chains` sees them."""
    from mirage.synth.chains import fit_chains

    model = fit_chains(jobs)
    return {
        "chains": len(model.lengths),
        "job_share": model.job_share,
        "mean_length": float(np.mean(model.lengths)) if model.lengths else 0.0,
    }


def build_report(
    real_jobs: pd.DataFrame,
    synth_jobs: pd.DataFrame,
    out: Path,
    *,
    profile: Any | None = None,
    nodes: int | None = None,
    holds: bool = True,
    progress: Callable[[float], None] | None = None,
) -> dict[str, Any]:
    """Write ``report.json``, ``cdfs.png`` and ``correlations.png`` (and the queueing check
    when a profile and node count are given) into ``out``; return the JSON."""
    out.mkdir(parents=True, exist_ok=True)
    real, synth = derived(real_jobs), derived(synth_jobs)
    cols = column_distances(real, synth)
    ccols = corr_columns(real, synth)
    cr, cs = correlations(real, ccols), correlations(synth, ccols)
    diff = (cs - cr).to_numpy(dtype=np.float64)
    rep: dict[str, Any] = {
        "jobs": {"real": len(real), "synthetic": len(synth)},
        "span_days": {
            "real": float(np.ptp(real["submit"])) / 86400 if len(real) else 0.0,
            "synthetic": float(np.ptp(synth["submit"])) / 86400 if len(synth) else 0.0,
        },
        "columns": cols,
        "correlation": {
            "method": "spearman",
            "columns": ccols,
            # Frobenius norm of the difference, and its largest entry.
            "frobenius": float(np.sqrt(np.nansum(diff**2))),
            "max_abs": float(np.nanmax(np.abs(diff))) if diff.size else 0.0,
            "real": cr.round(4).to_numpy().tolist(),
            "synthetic": cs.round(4).to_numpy().tolist(),
        },
        "plots": ["cdfs.png", "correlations.png"],
        "held_chains": {"real": chain_stats(real_jobs), "synthetic": chain_stats(synth_jobs)},
    }
    extra: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if profile is not None and nodes is not None:
        q = queueing_check(real_jobs, synth_jobs, profile, nodes, holds=holds,
                           progress=progress)  # fmt: skip
        rep["queueing"] = {"profile": profile.name, "nodes": nodes, "real_holds": holds,
                           **q.as_dict()}  # fmt: skip
        extra["wait_s"] = (q.real_waits, q.synthetic_waits)
    if missing("plots") is None:  # else the JSON report alone, its "plots" empty
        plot_cdfs(real, synth, [c for c in COLUMNS if c in cols], out / "cdfs.png", extra)
        plot_correlations(cr, cs, out / "correlations.png")
    else:
        rep["plots"] = []
    (out / "report.json").write_text(json.dumps(rep, indent=2, allow_nan=True))
    return rep


def arrival_distances(real_submits: np.ndarray, synth_submits: np.ndarray) -> dict[str, float]:
    """KS distances of inter-arrival times and of hourly arrival counts."""
    ia = ks_distance(interarrivals(real_submits).astype(np.float64),
                     interarrivals(synth_submits).astype(np.float64))  # fmt: skip
    hc = ks_distance(hourly_counts(real_submits).astype(np.float64),
                     hourly_counts(synth_submits).astype(np.float64))  # fmt: skip
    return {"interarrival_ks": ia, "hourly_count_ks": hc}
