"""``mirage evaluate --plans`` as a Python call: :func:`run_plans`.

Per load, every decision point sampled from the test split's chains (:mod:`.chainwork`)
is recorded by :mod:`.plans` (the habitual, planned and every grid shape's true
completion; cached like the probes, ``<cache>/<setting key>/<t>.plans-<tag>.npz``) and
summarised by :mod:`.planstats`. E.g.::

    from mirage.evaluate.planrun import run_plans
    ev = run_plans("ls6", profile="models/ls6/profile.toml", loads=[1.0], every_h=24)
    ev.report["loads"]["1"]["planned_minus_habitual"]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
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
from mirage.evaluate.plans import (
    PlanProtocol,
    PlanRecord,
    plan_recorder,
    planned_recorder,
    predictions_recorder,
    wait_pairs,
)
from mirage.evaluate.planstats import render, summarize
from mirage.evaluate.probes import R, Recorder, record_all
from mirage.evaluate.protocol import (
    HOUR,
    Protocol,
    Setting,
    Split,
    default_splits,
    scaled_nodes,
    spread,
)
from mirage.plan.calibrate import (
    MIN_PAIRS,
    PLAN_FILE,
    WaitCalibration,
    WaitPairs,
    fit,
    picked_mean_s,
)
from mirage.profile.schema import ClusterProfile
from mirage.progress import progress_bars

log = logging.getLogger(__name__)


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
    calibration: WaitCalibration | None = None,
    fit_to: str | Path | None = None,
    tune_split: str | None = None,
) -> Evaluation:
    """Habitual, planned and hindsight-best completion per load on the test split.
    ``plan``: the grid and horizon (default :class:`PlanProtocol`; an "auto" size unit
    is set from the trace: whole nodes where the trace records no GPU counts).
    ``calibration``: the planner's wait calibration (:mod:`mirage.plan.calibrate`; the
    uncalibrated planner's figures are reported beside). ``fit_to``: first fit one on the
    tuning split's samples (``tune_split``, default the cluster's) at the same loads and
    write it as ``fit_to/plan.toml`` (it replaces ``calibration``)."""
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
    splits = default_splits(cluster, prof.timezone, first, last)
    test = splits["test"]
    if test_split:
        test = parse_split(test_split, "test", prof.timezone, test)
    points = _points(df, prof, test.start, test.end, first, pp, every_h, max_samples)
    report: dict[str, Any] = {
        "cluster": cluster, "trace": trace, "profile": profile_name,
        "plan_protocol": dataclasses.asdict(pp), "every_h": every_h,
        "split": test.as_dict(), "samples": len(points), "loads": {},
    }  # fmt: skip
    inputs = _Inputs(trace, profile_name, part.nodes, pp, cache, n_jobs)
    if fit_to is not None:
        tune = parse_split(tune_split, "tune", prof.timezone, splits["tune"])
        tpoints = _points(df, prof, tune.start, tune.end, first, pp, every_h, max_samples, "tuning")
        calibration = _fit(inputs, tune, tpoints, loads, Path(fit_to), cluster)
        report["calibration_fit"] = {"split": tune.as_dict(), "samples": len(tpoints),
                                     "file": str(Path(fit_to) / PLAN_FILE)}  # fmt: skip
    if calibration is not None:
        report["calibration"] = dataclasses.asdict(calibration)
    rows = {}
    for load in loads:
        t0 = time.perf_counter()
        setting = inputs.setting(load, test)
        records = _record(setting, points, plan_recorder(points, pp), inputs, "plans")
        entry: dict[str, Any] = {"nodes": setting.nodes}
        records = _planned(setting, points, records, inputs, None)
        if calibration is not None:
            entry["uncalibrated"] = _brief(summarize(records, boot=boot))
            records = _planned(setting, points, records, inputs, calibration)
        entry.update(summarize(records, boot=boot))
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
    split: str = "test",
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
            f"no chain decision point in the {split} split with its horizon before the split's "
            "end and enough work left: shorten the horizon or lower the minimum work"
        )
    return pts


@dataclass(frozen=True)
class _Inputs:
    """What every split's recording shares."""

    trace: str
    profile: str
    nodes: int
    pp: PlanProtocol
    cache: str | None
    n_jobs: int

    def setting(self, load: float, split: Split) -> Setting:
        return Setting(self.trace, self.profile, scaled_nodes(self.nodes, load), load, split,
                       Protocol())  # fmt: skip


def _record(
    setting: Setting, points: list[ChainPoint], rec: Recorder[R], inputs: _Inputs, label: str
) -> list[R]:
    with progress_bars() as bars:
        return record_all(
            setting, [p.t for p in points], rec, cache=inputs.cache, n_jobs=inputs.n_jobs,
            progress=bars.counter(f"{label} load {setting.load:g}"),
        )  # fmt: skip


def _planned(
    setting: Setting,
    points: list[ChainPoint],
    records: list[PlanRecord],
    inputs: _Inputs,
    calibration: WaitCalibration | None,
) -> list[PlanRecord]:
    """``records`` with the present planner's paths (recorded apart: a planner change
    re-runs them, not the grid's truths)."""
    label = "planned" + (", calibrated" if calibration is not None else "")
    planned = _record(setting, points, planned_recorder(points, inputs.pp, calibration),
                      inputs, label)  # fmt: skip
    return [p.into(r) for p, r in zip(planned, records, strict=True)]


def _fit(  # noqa: PLR0917 - private, one call site
    inputs: _Inputs,
    tune: Split,
    points: list[ChainPoint],
    loads: Sequence[float],
    folder: Path,
    cluster: str,
) -> WaitCalibration:
    """The wait calibration fitted on the tuning split's pairs at ``loads``, written as
    ``folder/plan.toml``."""
    pairs = []
    for load in loads:
        setting = inputs.setting(load, tune)
        truths = _record(setting, points, plan_recorder(points, inputs.pp), inputs, "plans")
        preds = _record(setting, points, predictions_recorder(points, inputs.pp), inputs,
                            "plan predictions")  # fmt: skip
        pairs.append(wait_pairs(truths, preds))
    every = WaitPairs.concat(pairs)
    cal = fit(every)
    folder.mkdir(parents=True, exist_ok=True)
    note = (
        f"Fitted by mirage evaluate --plans --plan-fit on {cluster}'s tuning split, "
        f"{_day(tune.start)} to {_day(tune.end)}:\n{len(points)} decision points at load(s) "
        f"{', '.join(f'{ld:g}' for ld in loads)}, every grid shape's true completion.\n"
        "start = by predicted runs + alpha x (by limits - by predicted runs), per width "
        "class:\nthe alphas under which the planner's picks finished soonest there (with "
        f"{picked_mean_s(cal, every) / HOUR:.1f} h on average).\nnode_edges: the classes' upper "
        f"bounds in nodes; pairs: the pairs per class (under {MIN_PAIRS}: the narrower "
        "class's alpha)."
    )
    path = folder / PLAN_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(cal.to_toml(note), encoding="utf-8")
    tmp.replace(path)
    log.info("wait calibration written to %s", path)
    return cal


def _brief(s: dict[str, Any]) -> dict[str, Any]:
    """The uncalibrated planner's figures kept beside the calibrated ones."""
    keys = ("planned", "planned_minus_habitual", "planned_over_best", "planned_is_best")
    return {k: s[k] for k in keys if k in s}


def _day(t: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))
