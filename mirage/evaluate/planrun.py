"""``mirage evaluate --plans`` as a Python call: :func:`run_plans`.

Per load, every decision point sampled from the test split's chains (:mod:`.chainwork`)
is recorded by :mod:`.plans` (the habitual, planned and every grid shape's true
completion; cached like the probes, ``<cache>/<setting key>/<t>.plans-<tag>.npz``) and
summarised by :mod:`.planstats`. E.g.::

    from mirage.evaluate.planrun import run_plans
    ev = run_plans("ls6", profile="models/ls6/profile-limits.toml", loads=[1.0], every_h=24)
    ev.report["loads"]["1"]["planned_minus_habitual"]
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from mirage.evaluate.api import Evaluation, _clean
from mirage.evaluate.chainwork import ChainPoint, chain_points, thin
from mirage.evaluate.inputs import (
    InputError,
    default_profile,
    default_trace,
    parse_split,
    read_inputs,
)
from mirage.evaluate.plans import PlanProtocol, PlanRecord, plan_recorder
from mirage.evaluate.planstats import render, summarize
from mirage.evaluate.probes import record_all
from mirage.evaluate.protocol import HOUR, Protocol, Setting, default_splits, scaled_nodes, spread
from mirage.profile.schema import ClusterProfile
from mirage.progress import progress_bars


def run_plans(
    cluster: str,
    *,
    trace: str | None = None,
    profile: str | None = None,
    loads: Sequence[float] = (1.0,),
    every_h: float = 24.0,
    max_samples: int = 0,
    test_split: str | None = None,
    plan: PlanProtocol | None = None,
    cache: str | None = "out/probe-cache",
    n_jobs: int = 1,
    boot: int = 2000,
    out_dir: str | Path | None = "out/eval",
) -> Evaluation:
    """Habitual, planned and hindsight-best completion per load on the test split.
    ``plan``: the grid and horizon (default :class:`PlanProtocol`; an "auto" size unit
    is set from the trace: whole nodes where the trace records no GPU counts)."""
    trace = trace or default_trace(cluster)
    if trace is None:
        raise InputError(f"no known trace for {cluster!r}: give trace=")
    profile_name = profile or default_profile(cluster)
    prof, df = read_inputs(trace, profile_name)
    part = prof.partition(None)
    if part.nodes is None:
        raise InputError(f"profile {profile_name!r} has no node count: calibrate it first")
    pp = _unit(plan or PlanProtocol(), df, part.gpus_per_node)
    first, last = int(df["submit"].min()), int(df["submit"].max())
    test = default_splits(cluster, prof.timezone, first, last)["test"]
    if test_split:
        test = parse_split(test_split, "test", prof.timezone, test)
    points = _points(df, prof, test.start, test.end, first, pp, every_h, max_samples)
    report: dict[str, Any] = {
        "cluster": cluster, "trace": trace, "profile": profile_name,
        "plan_protocol": dataclasses.asdict(pp), "every_h": every_h,
        "split": test.as_dict(), "samples": len(points), "loads": {},
    }  # fmt: skip
    rows = {}
    for load in loads:
        t0 = time.perf_counter()
        nodes = scaled_nodes(part.nodes, load)
        setting = Setting(trace, profile_name, nodes, load, test, Protocol())
        records = _record(setting, points, pp, cache, n_jobs)
        entry = {"nodes": nodes, **summarize(records, boot=boot)}
        entry["wall_s"] = round(time.perf_counter() - t0, 1)
        report["loads"][f"{load:g}"] = rows[f"{load:g}"] = entry
    title = (
        f"{cluster}: whole-chain completion (hours from the decision point), mean [95% "
        f"bootstrap], {len(points)} chain decision points of {_day(test.start)} to "
        f"{_day(test.end)}"
    )
    out = Evaluation(_clean(report), [render(rows, title)])
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        out.path = Path(out_dir) / f"plans-{cluster}-load{'+'.join(report['loads'])}.json"
        out.path.write_text(json.dumps(out.report, indent=1, sort_keys=True), encoding="utf-8")
    return out


def _unit(pp: PlanProtocol, df: pd.DataFrame, gpus_per_node: int) -> PlanProtocol:
    """The "auto" size unit: CPUs on a partition without GPUs, whole nodes on a trace of
    whole-node requests (no GPU counts), else GPUs."""
    if pp.unit in {"gpu", "node"} and gpus_per_node <= 0:
        raise InputError("the partition has no GPUs: plan in CPUs (--plan-size-unit cpu)")
    if pp.unit != "auto":
        return pp
    if gpus_per_node <= 0:
        return dataclasses.replace(pp, unit="cpu")
    gpus = pd.to_numeric(df["gpus"], errors="coerce").fillna(0)
    return dataclasses.replace(pp, unit="gpu" if (gpus > 0).any() else "node")


def _points(  # noqa: PLR0917 - private, one call site
    df: pd.DataFrame,
    prof: ClusterProfile,
    start: int,
    end: int,
    first: int,
    pp: PlanProtocol,
    every_h: float,
    max_samples: int,
) -> list[ChainPoint]:
    """The split's sampled decision points, each with its horizon before the split's end
    (the replay is cut there: no arrival after it) and after the warm-up."""
    start = max(start, first + Protocol().warmup_s)
    pts = chain_points(df, prof, None, start, end - pp.horizon_s,
                       min_work_s=pp.min_work_s, max_work_s=pp.max_work_s)  # fmt: skip
    pts = thin(pts, max(1, int(every_h * HOUR)), start)
    if max_samples:
        keep = set(spread(list(range(len(pts))), max_samples))
        pts = [p for k, p in enumerate(pts) if k in keep]
    if not pts:
        raise InputError(
            "no chain decision point in the test split with its horizon before the split's "
            "end and enough work left: shorten the horizon or lower the minimum work"
        )
    return pts


def _record(
    setting: Setting, points: list[ChainPoint], pp: PlanProtocol, cache: str | None, n_jobs: int
) -> list[PlanRecord]:
    with progress_bars() as bars:
        return record_all(
            setting, [p.t for p in points], plan_recorder(points, pp), cache=cache,
            n_jobs=n_jobs, progress=bars.counter(f"plans load {setting.load:g}"),
        )  # fmt: skip


def _day(t: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))
