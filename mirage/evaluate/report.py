"""The evaluation table as text and JSON, and the PNG plots."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mirage.evaluate.harness import Outcomes
from mirage.evaluate.stats import (
    LEVELS,
    METRICS,
    MIN_N,
    NO_HARM_H,
    Cell,
    HeadToHead,
    LevelGains,
    ShippedRow,
    load_levels,
)
from mirage.fmt import HOURS, HourUnit, hours_unit
from mirage.policy.cost import CostModel

SHORT = {
    "mean_J_h": "J h",
    "mean_interruption_h": "intr h",
    "mean_overlap_h": "ovl h",
    "mean_abs_gap_h": "|gap| h",
    "zero_interruption": "intr=0",
    "abs_gap_le_30min": "|gap|<=30m",
    "p90_interruption_h": "p90 intr h",
    "revoked": "revoked",
    "removed": "J removed",
    "interruption_removed": "intr removed",
    "handoffs": "handoffs",
    "mean_J_sc23_h": "J(0.5) h",
    "beyond_training_h": "beyond h",
}


def _fmt(c: Cell, unit: HourUnit = HOURS) -> str:
    """``value [lo,hi]``, hours in ``unit`` (a share or a count: the default, as it is)."""
    if math.isnan(c.value):
        return "-"
    lo = "?" if math.isnan(c.lo) else unit.fmt(c.lo)
    hi = "?" if math.isnan(c.hi) else unit.fmt(c.hi)
    return f"{unit.fmt(c.value)} [{lo},{hi}]"


def table_unit(tab: Mapping[str, Mapping[str, Mapping[str, Cell]]]) -> HourUnit:
    """The unit of every figure in hours in a load's text: minutes or seconds where the
    table's largest is under an hour (a short log's J reads "4.50 min", not "0.08")."""
    return hours_unit(
        c.value for per in tab.values() for cells in per.values()
        for k, c in cells.items() if k.endswith("_h")
    )  # fmt: skip


def _label(metric: str, unit: HourUnit) -> str:
    """The column's short name, its unit of hours swapped for ``unit``'s."""
    short = SHORT[metric]
    return short.removesuffix(" h") + f" {unit.name}" if metric.endswith("_h") else short


def render(tab: Mapping[str, Mapping[str, Mapping[str, Cell]]], title: str = "",
           unit: HourUnit = HOURS) -> str:  # fmt: skip
    """One block per load level: a row per method, a column per metric (value [95% CI])."""
    lines = [title] if title else []
    methods = list(tab)
    for level in LEVELS:
        n = next(iter(tab.values()))[level]["mean_J_h"].n if tab else 0
        flag = "" if level == "all" or n >= MIN_N else f"  (n < {MIN_N}: does not count)"
        lines.append(f"\n[{level}] n = {n}{flag}")
        header = ["method"] + [_label(m, unit) for m in METRICS]
        rows = [
            [m] + [_fmt(tab[m][level][k], unit if k.endswith("_h") else HOURS) for k in METRICS]
            for m in methods
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


def render_head_to_head(h2h: Mapping[str, HeadToHead], who: str = "best learned",
                        unit: HourUnit = HOURS) -> str:  # fmt: skip
    """One line per level: ``who`` vs the best baseline, the paired difference."""
    lines = [
        f"\n{who} against best non-oracle baseline (paired difference of mean J, {unit.name}):"
    ]
    for level, h in h2h.items():
        lines.append(f"  [{level}] {h.learned} - {h.baseline}: {_fmt(h.diff, unit)}  {h.verdict}")
    return "\n".join(lines)


def render_ceiling(ceil: Mapping[str, Cell]) -> str:
    """One line: per level that counts, the most of reactive's J any policy can remove."""
    if not ceil:
        return ""
    parts = [f"[{lv}] {c.value:.0%} [{c.lo:.0%}, {c.hi:.0%}]" for lv, c in ceil.items()]
    return (
        "\nthe most of reactive's J any policy can remove on these samples (the oracle's share;"
        " its bounds bound every method's): " + "  ".join(parts)
    )


def render_gains(per_level: Mapping[str, LevelGains], unit: HourUnit = HOURS) -> str:
    """Per level that counts: the oracle gain, and per method its share of it and the
    paired interval of its J minus reactive's (no harm: upper bound <= NO_HARM_H)."""
    if not per_level:
        return ""
    lines = [
        f"\noracle gain (reactive's mean J minus the oracle's, {unit.name}) and each method's "
        f"share of it; no harm: the paired 95% interval of (method - reactive) J ends at most "
        f"+{NO_HARM_H * unit.per_hour:g} {unit.name} above 0"
    ]
    for level, g in per_level.items():
        gain = _fmt(g.oracle_gain, unit)
        lines.append(f"  [{level}] n = {g.oracle_gain.n}, oracle gain {gain}")
        header = ["method", "share", f"method - reactive, {unit.name}", "no harm"]
        rows = [
            [
                m,
                "-" if math.isnan(x.share) else f"{x.share:.0%}",
                _fmt(x.harm, unit),
                "yes" if x.no_harm else "NO",
            ]
            for m, x in g.methods.items()
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for r in [header, *rows]:
            lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


def render_shipped(rows: Mapping[str, ShippedRow], unit: HourUnit = HOURS) -> str:
    """The shipped configuration against reactive, the oracle and the best baseline, per
    level that counts; "meets" says whether the level holds the targets (no harm; where
    the oracle gain is at least 1 h, at least 85% of it and better than the best baseline;
    the targets are per level, so "all" gets none)."""
    if not rows:
        return ""
    header = ["level", "n", "reactive", "oracle", "oracle gain", "best baseline", "shipped J",
              "share", f"shipped - reactive, {unit.name}", f"shipped - best, {unit.name}",
              "meets"]  # fmt: skip
    body = [
        [lv, str(r.n), unit.fmt(r.reactive_h), unit.fmt(r.oracle_h), unit.fmt(r.gain.value),
         f"{r.best_baseline} {unit.fmt(r.best_baseline_h)}", unit.fmt(r.shipped_h),
         "-" if math.isnan(r.shipped.share) else f"{r.shipped.share:.0%}",
         _fmt(r.shipped.harm, unit), _fmt(r.against_best, unit),
         "-" if lv == "all" else "yes" if r.meets else "NO"]
        for lv, r in rows.items()
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [f"\nthe shipped configuration (the daemon's default [policy]; mean J, {unit.name}):"]
    for r in [header, *body]:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


def to_json(tab: Mapping[str, Mapping[str, Mapping[str, Cell]]]) -> dict[str, Any]:
    return {
        m: {lv: {k: c.as_dict() for k, c in cells.items()} for lv, cells in per.items()}
        for m, per in tab.items()
    }


def plots(
    results: Mapping[str, Outcomes], cost_model: CostModel, out: Path, tag: str
) -> list[Path]:
    """J and gap CDFs per method and load level; box plots of interruption and overlap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    levels = load_levels(results["reactive"].gap) if "reactive" in results else None
    written = []
    for what in ("J", "gap"):
        fig, axes = plt.subplots(1, len(LEVELS), figsize=(4 * len(LEVELS), 3.4), squeeze=False)
        for ax, level in zip(axes[0], LEVELS, strict=True):
            for name, o in results.items():
                x = o.cost(cost_model) if what == "J" else o.gap
                if levels is not None and level != "all":
                    x = x[levels == level]
                if x.size == 0:
                    continue
                xs = np.sort(x) / 3600
                ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", label=name)
            ax.set_title(f"{level}")
            ax.set_xlabel(f"{what} (h)")
            ax.set_ylabel("CDF")
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"{what} CDF ({tag})")
        fig.tight_layout()
        path = out / f"{tag}-{what.lower()}-cdf.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    names = list(results)
    for ax, what in zip(axes, ("interruption", "overlap"), strict=True):
        data = [getattr(results[n], what) / 3600 for n in names]
        ax.boxplot(data)
        ax.set_xticks(range(1, len(names) + 1), names, rotation=30, fontsize=7)
        ax.set_ylabel(f"{what} (h)")
    fig.suptitle(f"interruption and overlap ({tag})")
    fig.tight_layout()
    path = out / f"{tag}-box.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)
    return written
