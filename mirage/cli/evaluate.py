"""``mirage evaluate``: the click command around :func:`mirage.evaluate.run`.

It sits at the top layer because it loads the trained policies the evaluation judges and
wires their rolling recalibration (``mirage.learn``), which the evaluation itself may not
import.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from mirage.evaluate.costopts import cost_kwargs, cost_options
from mirage.paths import models_root


def positive_loads(values: tuple[float, ...]) -> tuple[float, ...]:
    """Load factors are positive and finite (a cluster of 1/load of its nodes)."""
    bad = [v for v in values if not 0 < v < math.inf]
    if bad:
        raise click.BadParameter(f"a load must be a positive number, got {bad[0]}")
    return values


@click.command("evaluate")
@click.option("--cluster", required=True, help="Cluster name (ls6, theta, cerit, ...).")
@click.option("--trace", "trace_path", default=None, help="Trace file (default: known path).")
@click.option("--profile", "profile_name", default=None, help="Profile (default: calibrated).")
@click.option(
    "--policies",
    default="reactive,fixed-lead,slurm-estimate,running-average,qbets,shipped,oracle",
    show_default=True,
    help="Comma-separated methods (shipped: the daemon's default configuration); also rf, "
    "xgb, dqn, pg (trained, --models), lookahead "
    "(model-based), runtime-oracle (a reference) and selected.",
)
@click.option(
    "--load",
    "loads",
    multiple=True,
    type=float,
    callback=lambda _ctx, _param, values: positive_loads(values),
    help="Load factor(s) (default 1).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", "out_dir", default="out/eval", show_default=True, help="JSON and PNGs.")
@click.option("--cache", default="out/probe-cache", show_default=True, help="Probe cache.")
@click.option("--jobs", "n_jobs", default=1, show_default=True, help="Parallel processes.")
@click.option("--dask-address", default=None, help="Run probes on this Dask scheduler.")
@click.option("--nodes", default=1, show_default=True, help="Chain request: nodes.")
@click.option("--gpus", default=0, show_default=True, help="Chain request: GPUs (0: whole nodes).")
@click.option("--time-limit-h", default=48.0, show_default=True)
@click.option("--step-min", default=10.0, show_default=True, help="Decision step.")
@click.option("--every-h", default=4.0, show_default=True, help="One sample every ...")
@click.option("--window-h", default=120.0, show_default=True, help="Sample window.")
@click.option("--warmup-h", default=48.0, show_default=True)
@cost_options
@click.option("--tune-split", default=None, help="START:END of the tuning split.")
@click.option("--test-split", default=None, help="START:END of the test split.")
@click.option(
    "--max-samples",
    default=0,
    help="Use at most this many samples per split, spread evenly over it (0: all).",
)
@click.option(
    "--cached-only",
    is_flag=True,
    help="Report on the samples already in the probe cache (what a long run has recorded "
    "so far, while it runs); each split says how many it left out.",
)
@click.option("--boot", default=2000, show_default=True, help="Bootstrap resamples.")
@click.option(
    "--recalibrate-every-days",
    "recal_every_days",
    default=0.0,
    show_default=True,
    help="Rolling recalibration: cut the test split into blocks of this many days and "
    "re-tune every constant (baselines' and forecasters') before each block on the "
    "samples of the window before it (0: tune once, on the tuning split).",
)
@click.option(
    "--recalibrate-window-days",
    "recal_window_days",
    default=28.0,
    show_default=True,
    help="Rolling recalibration: days of history each block is tuned on.",
)
@click.option(
    "--lookahead-runtime",
    "lookahead_stat",
    default="median",
    show_default=True,
    help="lookahead: how a job's run time is predicted from its user's history "
    "(median, mean, or a quantile such as q25).",
)
@click.option(
    "--lookahead-draws",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),  # MAX_DRAWS
    help="lookahead: the median start over this many simulations, each with every job's "
    "run time drawn from its user's history (1: one simulation with --lookahead-runtime).",
)
@click.option(
    "--models",
    "models_dir",
    default=None,
    help="Trained models for rf/xgb/dqn/pg (default: models/CLUSTER).",
)
@click.option(
    "--plans",
    is_flag=True,
    help="Evaluate `mirage plan` instead: per load, the whole-chain completion of the "
    "habitual, planned and hindsight-best shapes at the test split's chain decision points "
    "(--every-h, --max-samples, --test-split, --load, --boot, --cache, --jobs apply; "
    "--tune-split with --plan-fit).",
)
@click.option("--plan-horizon-h", default=168.0, show_default=True, help="--plans: censor after.")
@click.option(
    "--plan-overhead-min", default=10.0, show_default=True, help="--plans: lost per segment."
)
@click.option(
    "--plan-work-h",
    default="6:96",
    show_default=True,
    help="--plans: MIN:MAX hours of work left (less: not sampled; more: capped).",
)
@click.option(
    "--plan-sizes",
    default="1,2,4",
    show_default=True,
    help="--plans: sizes, in --plan-size-unit (gpu, node).",
)
@click.option(
    "--plan-size-unit",
    type=click.Choice(["auto", "gpu", "node", "cpu"]),
    default="auto",
    show_default=True,
    help="--plans: GPUs, whole nodes or CPUs (auto: CPUs on a partition without GPUs, "
    "nodes on a trace that records no GPU counts).",
)
@click.option(
    "--plan-cpu-scales",
    default="0.25,0.5,1,2,4",
    show_default=True,
    help="--plans, cpu unit: sizes as multiples of each chain's own CPU count.",
)
@click.option(
    "--plan-replan/--plan-no-replan",
    default=True,
    show_default=True,
    help="--plans: plan again before every segment (else keep the first shape).",
)
@click.option(
    "--plan-calibration/--plan-no-calibration",
    default=True,
    show_default=True,
    help="--plans: the planner reads the cluster's wait calibration, plan.toml in --models "
    "(default models/CLUSTER), where there is one, as mirage plan does; the figures "
    "without it are printed beside.",
)
@click.option(
    "--plan-fit",
    "plan_fit",
    default=None,
    metavar="FOLDER",
    help="--plans: first fit the wait calibration on the tuning split's decision points (the "
    "same loads and spacing; every grid shape's truth and prediction) and write it as "
    "FOLDER/plan.toml; the test split is then planned with it.",
)
def evaluate(**kw: Any) -> None:
    """Tune the baselines on the tuning split and report every method on the test split."""
    if kw["plans"]:
        _evaluate_plans(kw)
        return
    from mirage.evaluate import run
    from mirage.evaluate.inputs import InputError
    from mirage.learn.rolling import run_rolling
    from mirage.policy.guard import PolicyFileError, shipped_for

    methods = [m.strip() for m in kw["policies"].split(",") if m.strip()]
    folder = Path(kw["models_dir"] or models_root() / kw["cluster"])
    try:
        shipped = shipped_for(folder)  # the cluster's own choice, where it ships one
    except PolicyFileError as exc:
        raise click.UsageError(str(exc)) from exc
    learned = _load_learned(_with_shipped(methods, shipped), folder)
    try:
        ev = run(
            kw["cluster"], trace=kw["trace_path"], profile=kw["profile_name"], policies=methods,
            loads=kw["loads"] or (1.0,), learned=learned,
            rolling=run_rolling, out_dir=kw["out_dir"], cache=kw["cache"] or None,
            n_jobs=kw["n_jobs"], dask_address=kw["dask_address"], nodes=kw["nodes"],
            gpus=kw["gpus"], time_limit_h=kw["time_limit_h"], step_min=kw["step_min"],
            every_h=kw["every_h"], window_h=kw["window_h"], warmup_h=kw["warmup_h"],
            **cost_kwargs(kw), tune_split=kw["tune_split"], test_split=kw["test_split"],
            max_samples=kw["max_samples"], boot=kw["boot"],
            recalibrate_every_days=kw["recal_every_days"],
            recalibrate_window_days=kw["recal_window_days"],
            lookahead_runtime=kw["lookahead_stat"], lookahead_draws=kw["lookahead_draws"],
            cached_only=kw["cached_only"], shipped=shipped,
        )  # fmt: skip
    except InputError as exc:
        raise click.UsageError(str(exc)) from exc
    if kw["as_json"]:
        click.echo(json.dumps(ev.report, sort_keys=True))
        return
    click.echo(ev.text())
    out_dir = kw["out_dir"]
    click.echo(f"\nwrote {ev.path}" + (f" and plots in {out_dir}" if ev.plots else ""))


def _with_shipped(methods: list[str], shipped: Any) -> list[str]:
    """``methods``, and where ``shipped`` is among them and runs a trained model by
    default (a cluster's ``policy.toml``), that model's name too, so that it is loaded."""
    from mirage.evaluate.harness import LEARNED, SHIPPED_METHOD

    if SHIPPED_METHOD in methods and shipped.policy in LEARNED and shipped.policy not in methods:
        return [*methods, shipped.policy]
    return methods


def _load_learned(methods: list[str], folder: Path) -> dict[str, Any]:
    """The trained policies among ``methods``, checked against this code (clear errors)."""
    from mirage.evaluate.harness import LEARNED
    from mirage.learn.artifacts import ModelError, load_policy

    out = {}
    for m in methods:
        if m not in LEARNED:
            continue
        try:
            out[m], _meta = load_policy(folder / m)
        except ModelError as exc:
            raise click.ClickException(str(exc)) from exc
    return out


def _evaluate_plans(kw: dict[str, Any]) -> None:
    """``--plans``: :func:`mirage.evaluate.planrun.run_plans` with the options given."""
    from mirage.evaluate.inputs import InputError
    from mirage.evaluate.planrun import run_plans
    from mirage.evaluate.plans import PlanProtocol
    from mirage.plan.calibrate import CalibrationError, read_calibration

    hour = 3600
    folder = Path(kw["models_dir"] or models_root() / kw["cluster"])
    try:
        calibration = read_calibration(folder) if kw["plan_calibration"] else None
    except CalibrationError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        low, _, high = kw["plan_work_h"].partition(":")
        pp = PlanProtocol(
            overhead_s=round(kw["plan_overhead_min"] * 60),
            horizon_s=round(kw["plan_horizon_h"] * hour),
            min_work_s=round(float(low) * hour),
            max_work_s=round(float(high or low) * hour),
            replan=kw["plan_replan"],
            sizes=tuple(int(x) for x in kw["plan_sizes"].split(",") if x.strip()),
            unit=kw["plan_size_unit"],
            cpu_scales=tuple(float(x) for x in kw["plan_cpu_scales"].split(",") if x.strip()),
        )
        ev = run_plans(
            kw["cluster"], trace=kw["trace_path"], profile=kw["profile_name"],
            loads=kw["loads"] or (1.0,), every_h=kw["every_h"], max_samples=kw["max_samples"],
            test_split=kw["test_split"], plan=pp, cache=kw["cache"] or None,
            n_jobs=kw["n_jobs"], boot=kw["boot"], out_dir=kw["out_dir"],
            calibration=calibration, fit_to=kw["plan_fit"], tune_split=kw["tune_split"],
        )  # fmt: skip
    except (InputError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    if kw["as_json"]:
        click.echo(json.dumps(ev.report, sort_keys=True))
        return
    click.echo(ev.text())
    click.echo(f"\nwrote {ev.path}")
