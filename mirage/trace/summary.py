"""A trace at a glance: size, span, users, waits, requests and chains (dict or rich tables)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mirage.fmt import duration
from mirage.trace.chains import ChainParams, find_chains
from mirage.trace.load import TraceLoad
from mirage.trace.stats import quantile_summary
from mirage.trace.tz import iso_utc

TOP = 8


def _stats(values: pd.Series) -> dict[str, float | int | None]:
    return quantile_summary(values.dropna().to_numpy(dtype=np.float64))


def _top(values: pd.Series, n: int = TOP) -> list[list[int | str]]:
    counts = values.dropna().value_counts()
    return [[_plain(k), int(c)] for k, c in counts.head(n).items()]


def _plain(value: object) -> int | str:
    if isinstance(value, (int, np.integer)):
        return int(value)
    return str(value)


def summarize(load: TraceLoad, params: ChainParams | None = None) -> dict[str, Any]:
    """Everything ``mirage trace inspect`` shows, as plain JSON-able values."""
    jobs = load.jobs
    submit = jobs["submit"].dropna()
    span: dict[str, Any] = {"first_submit": None, "last_submit": None, "days": None}
    if len(submit):
        lo, hi = int(submit.min()), int(submit.max())
        span = {"first_submit": iso_utc(lo), "last_submit": iso_utc(hi), "days": (hi - lo) / 86400}
    users = jobs["user"][jobs["user"] != ""]
    wait = jobs["start"] - jobs["submit"]
    p = params or ChainParams()
    chains = find_chains(jobs, p)
    return {
        "source": load.source,
        "format": load.format,
        "tz": load.tz,
        "rows_read": load.rows_read,
        "jobs": len(jobs),
        "skipped": len(load.skipped),
        "skipped_rows": [
            {"file": s.file, "line": s.line, "reason": s.reason} for s in load.skipped[:20]
        ],
        "ambiguous_times": load.ambiguous_times,
        "missing_times": load.missing_times,
        "span": span,
        "users": int(users.nunique()),
        "unknown_user_jobs": int((jobs["user"] == "").sum()),
        "wait_s": _stats(wait),
        "wait_from_eligible_s": _stats(jobs["start"] - jobs["eligible"]),
        "time_limit_s": _top(jobs["time_limit"]),
        "nodes": _top(jobs["nodes"]),
        "gpus": _top(jobs["gpus"]),
        "states": _top(jobs["state"][jobs["state"] != ""]),
        "chains": chains.summary(p.interruption_s),
        "notes": list(load.notes),
    }


def render(summary: dict[str, Any], console: Console | None = None) -> None:
    """Print ``summary`` (from :func:`summarize`) as rich tables.

    Every string from the trace (path, zone, states, notes, skip reasons) is escaped:
    rich would read "[/]" or "[red]" in it as markup (and fail on unbalanced tags).
    """
    con = console or Console()
    overview = Table(title=f"trace {escape(summary['source'])}", show_header=False)
    overview.add_column("what", style="bold")
    overview.add_column("value")
    span = summary["span"]
    days = f"{span['days']:.1f} days" if span["days"] is not None else "-"
    rows = [
        ("format / zone", escape(f"{summary['format']} / {summary['tz'] or '-'}")),
        ("jobs", f"{summary['jobs']:,} kept of {summary['rows_read']:,} rows read"),
        ("skipped rows", str(summary["skipped"])),
        ("DST ambiguous / missing", f"{summary['ambiguous_times']} / {summary['missing_times']}"),
        ("span (submit, UTC)", f"{span['first_submit']} -> {span['last_submit']} ({days})"),
        ("users", f"{summary['users']} (+{summary['unknown_user_jobs']} jobs of unknown user)"),
    ]
    for name, value in rows:
        overview.add_row(name, value)
    con.print(overview)

    waits = Table(title="wait (seconds-based)")
    for col in ("", "count", "p10", "p50", "p90", "mean", "max"):
        waits.add_column(col)
    for label, key in (("start - submit", "wait_s"), ("start - eligible", "wait_from_eligible_s")):
        st = summary[key]
        waits.add_row(
            label,
            str(st["count"]),
            *(duration(st[k]) for k in ("p10", "p50", "p90", "mean", "max")),
        )
    con.print(waits)

    dist = Table(title="requests (top values: value x jobs)")
    dist.add_column("time limit")
    dist.add_column("nodes")
    dist.add_column("GPUs")
    dist.add_column("state")
    cols = [
        [f"{duration(float(v))} x{c}" for v, c in summary["time_limit_s"]],
        [f"{v} x{c}" for v, c in summary["nodes"]],
        [f"{v} x{c}" for v, c in summary["gpus"]],
        [escape(f"{v} x{c}") for v, c in summary["states"]],
    ]
    for i in range(max((len(c) for c in cols), default=0)):
        dist.add_row(*(c[i] if i < len(c) else "" for c in cols))
    con.print(dist)

    ch = summary["chains"]
    chains = Table(title="chains", show_header=False)
    chains.add_column("what", style="bold")
    chains.add_column("value")
    lengths = ", ".join(f"{k}:{v}" for k, v in list(ch["length_distribution"].items())[:12])
    gap = ch["gap_s"]
    share = ch["interruption_share"]
    chains.add_row("chains / jobs in chains", f"{ch['chains']} / {ch['jobs_in_chains']}")
    chains.add_row("length: count", lengths or "-")
    chains.add_row(
        "gap start(k+1)-end(k)",
        f"p10 {duration(gap['p10'])}, p50 {duration(gap['p50'])}, p90 {duration(gap['p90'])}, "
        f"mean {duration(gap['mean'])}, max {duration(gap['max'])}",
    )
    chains.add_row(
        f"interrupted (gap > {ch['interruption_threshold_s']} s)",
        f"{share:.1%}" if share is not None else "-",
    )
    con.print(chains)
    for note in summary["notes"]:
        con.print(f"[dim]note: {escape(note)}[/dim]")
    for row in summary["skipped_rows"]:
        where = escape(f"{row['file']}:{row['line']}: {row['reason']}")
        con.print(f"[yellow]skipped {where}[/yellow]")
