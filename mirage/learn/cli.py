"""``mirage train``: learned policies for one cluster, from its trace or its accounting."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import click

from mirage.learn.artifacts import POLICIES, ModelError
from mirage.paths import models_root

log = logging.getLogger(__name__)

HOUR = 3600


def _import_history(cluster: str, days: float) -> str:
    """The cluster's accounting history through the Slurm client, as a Parquet trace."""
    from mirage.slurm.types import SlurmError
    from mirage.trace.accounting import import_accounting
    from mirage.trace.cli import make_slurm_client
    from mirage.trace.parquet import write_parquet

    out = Path("out") / "traces" / f"{cluster}-accounting.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    end = int(time.time())
    try:
        load = import_accounting(make_slurm_client(), end - int(days * 86400), end)
    except SlurmError as exc:
        raise click.ClickException(f"cannot read {cluster}'s accounting: {exc}") from exc
    write_parquet(load, str(out))
    click.echo(f"imported {len(load.jobs)} jobs of accounting into {out}", err=True)
    return str(out)


@click.command("train")
@click.option("--cluster", required=True, help="Cluster name: models go to models/NAME/.")
@click.option(
    "--trace",
    "trace_path",
    default=None,
    help="Trace file (default: the known "
    "trace of NAME, else the cluster's own accounting through Slurm).",
)
@click.option("--profile", "profile_name", default=None, help="Profile (default: calibrated).")
@click.option(
    "--policy",
    "policy",
    default="all",
    show_default=True,
    help=f"One of {', '.join(POLICIES)}, or all (comma-separated list allowed).",
)
@click.option("--seed", default=0, show_default=True, help="Same seed, same model.")
@click.option(
    "--load",
    "loads",
    multiple=True,
    help="Training load factor(s), each LOAD[:EVERY_H[:STEP_MIN]] to give it its own sample "
    "spacing (training and tuning) and training decision step (deep queues make probes slow).",
)
@click.option(
    "--train-only-load",
    "train_only",
    multiple=True,
    help="A load (LOAD[:EVERY_H[:STEP_MIN]]) used for training only, not for tuning: wider "
    "queues for the models to learn from.",
)
@click.option(
    "--models",
    "models_dir",
    default=None,
    help="Models root, written as ROOT/CLUSTER/POLICY/ (default: $MIRAGE_MODELS, else "
    "models in the current directory).",
)
@click.option(
    "--recalibrate",
    "source",
    default=None,
    type=click.Path(file_okay=False, exists=True),
    help="A folder of models trained on another cluster (models/OTHER), or on this one "
    "earlier: keep the models and re-tune only their decision constants (forecasters' "
    "quantiles, bands and interval pads, agents' margins) on this cluster's tuning split "
    "(a month of its history instead of four).",
)
@click.option("--cache", default="out/probe-cache", show_default=True, help="Probe cache.")
@click.option("--jobs", "n_jobs", default=1, show_default=True, help="Parallel processes.")
@click.option("--every-h", default=4.0, show_default=True, help="Training sample spacing.")
@click.option(
    "--train-step-min",
    default=None,
    type=float,
    help="Decision step of the "
    "training split (default: --step-min; coarser is cheaper at heavy load).",
)
@click.option("--agent-steps", default=300_000, show_default=True, help="RL timesteps.")
@click.option(
    "--history-days",
    default=180.0,
    show_default=True,
    help="Without a trace: days of accounting to import.",
)
@click.option("--train-split", default=None, help="START:END of the training split.")
@click.option("--tune-split", default=None, help="START:END of the tuning split.")
@click.option(
    "--tune-last-days",
    default=None,
    type=click.FloatRange(min=1.0),
    help="Tune on the trace's last N days (what a weekly recalibration on a live cluster "
    "uses, with --recalibrate); overrides --tune-split.",
)
@click.option("--nodes", default=1, show_default=True, help="Chain request: nodes.")
@click.option("--gpus", default=0, show_default=True, help="Chain request: GPUs (0: whole nodes).")
@click.option("--time-limit-h", default=48.0, show_default=True)
@click.option("--step-min", default=10.0, show_default=True, help="Decision step.")
@click.option("--window-h", default=120.0, show_default=True, help="Sample window.")
@click.option("--warmup-h", default=48.0, show_default=True)
@click.option("--alpha", default=0.5, show_default=True, help="J = interruption + alpha*overlap.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def train_cmd(**kw: Any) -> None:
    """Train learned provisioning policies and save them under models/CLUSTER/POLICY/."""
    from mirage.evaluate.inputs import InputError

    try:
        _train(kw)
    except InputError as exc:
        raise click.UsageError(str(exc)) from exc


def _train(kw: dict[str, Any]) -> None:
    from mirage.evaluate.inputs import (
        default_profile,
        default_trace,
        parse_split,
        protocol_from,
        read_inputs,
    )
    from mirage.evaluate.protocol import Split, default_splits
    from mirage.learn.train import TrainConfig

    cluster = kw["cluster"]
    policies = _policies(kw["policy"], kw["source"])
    trace = (
        kw["trace_path"] or default_trace(cluster) or _import_history(cluster, kw["history_days"])
    )
    profile_name = kw["profile_name"] or default_profile(cluster)
    profile, jobs = read_inputs(trace, profile_name)
    first, last = int(jobs["submit"].min()), int(jobs["submit"].max())
    splits = default_splits(cluster, profile.timezone, first, last)
    splits = {
        name: parse_split(kw[f"{name}_split"], name, profile.timezone, splits[name])
        for name in ("train", "tune")
    }
    if kw["tune_last_days"]:
        end = last + 1
        splits["tune"] = Split("tune", end - int(kw["tune_last_days"] * 86400), end)
    if kw["source"]:  # only the tuning split is read (and recorded in the metadata)
        del splits["train"]
    elif splits["train"].end > splits["tune"].start:
        raise click.UsageError("the training split must end before the tuning split starts")
    schedule = [_load_spec(text) for text in kw["loads"]]
    extra = [_load_spec(text) for text in kw["train_only"]]
    protocol = protocol_from(kw)
    if not kw["every_h"] * HOUR >= 1 or (kw["train_step_min"] or 1) * 60 < 1:
        raise click.UsageError("--every-h and --train-step-min must be at least one second")
    cfg = TrainConfig(
        cluster=cluster,
        protocol=protocol,
        alpha=kw["alpha"],
        trace=trace,
        profile=profile_name,
        splits=splits,
        loads=tuple(load for load, _ in schedule) or (1.0,),
        schedule={load: when for load, when in schedule + extra if when is not None},
        train_only_loads=tuple(load for load, _ in extra),
        train_every_s=int(kw["every_h"] * HOUR),
        train_step_s=int(kw["train_step_min"] * 60) if kw["train_step_min"] else None,
        seed=kw["seed"],
        cache=kw["cache"] or None,
        n_jobs=kw["n_jobs"],
        agent_steps=kw["agent_steps"],
        first_submit=first,
    )
    t0 = time.perf_counter()
    try:
        metrics = _run(cfg, policies, Path(kw["models_dir"] or models_root()), kw["source"])
    except (ValueError, ModelError) as exc:
        raise click.ClickException(str(exc)) from exc
    wall = time.perf_counter() - t0
    if kw["as_json"]:
        click.echo(json.dumps({"wall_s": round(wall, 1), "policies": metrics}, sort_keys=True))
        return
    _print(metrics, wall)


def _policies(text: str, source: str | None) -> list[str]:
    """The policies asked for; "all" with --recalibrate: those the source folder holds."""
    if text != "all":
        policies = text.split(",")
    elif source:
        policies = [k for k in POLICIES if (Path(source) / k / "metadata.json").is_file()]
        if not policies:
            raise click.UsageError(f"{source}: no trained policy to recalibrate")
    else:
        policies = list(POLICIES)
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        what = "recalibrate" if source else "train"
        raise click.BadParameter(
            f"cannot {what} {', '.join(bad)}; known: {', '.join(POLICIES)}, all",
            param_hint="--policy",
        )
    return policies


def _load_spec(text: str) -> tuple[float, tuple[int, int] | None]:
    """ "1.13:12:30" -> (1.13, (12 h, 30 min)); "1" -> (1.0, None)."""
    parts = text.split(":")
    try:
        values = [float(p) for p in parts]
    except ValueError as exc:
        raise click.BadParameter(f"expected LOAD[:EVERY_H[:STEP_MIN]], got {text!r}") from exc
    load = values[0]
    every = values[1] * HOUR if len(values) > 1 else HOUR
    step = values[2] * 60 if len(values) > 2 else 600.0
    # spacing and step are whole seconds: under one second they would never advance
    ok = all(math.isfinite(v) for v in values) and load > 0 and every >= 1 and step >= 1
    if not ok or len(parts) > 3:
        raise click.BadParameter(f"expected positive LOAD[:EVERY_H[:STEP_MIN]], got {text!r}")
    return load, (int(every), int(step)) if len(values) > 1 else None


def _run(
    cfg: Any, policies: list[str], root: Path, source: str | None
) -> dict[str, dict[str, Any]]:
    from mirage.learn.train import recalibrate, train
    from mirage.progress import progress_bars

    with progress_bars() as bars:
        if source:
            recal: dict[str, dict[str, Any]] = recalibrate(
                cfg, policies, Path(source), root, bars.update
            )
            return recal
        out: dict[str, dict[str, Any]] = train(cfg, policies, root, bars.update)
        return out


def _print(metrics: dict[str, dict[str, Any]], wall: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"mirage train ({wall:.0f} s): tuning-split mean J, hours")
    for col in ("policy", "samples", "J", "reactive J", "oracle J", "fit s", "90% cover", "model"):
        table.add_column(col)
    for kind, m in metrics.items():
        t = m["tune"]
        cover = m.get("tune_interval_coverage_90")
        table.add_row(
            kind,
            str(t["samples"]),
            f"{t['mean_J_h']:.2f}",
            f"{t['reactive_mean_J_h']:.2f}",
            f"{t['oracle_mean_J_h']:.2f}",
            f"{m['fit_s']:.0f}",
            "-" if cover is None else f"{cover:.0%}",
            m["folder"],
        )
    Console().print(table)
    from mirage.evaluate.stats import COVERAGE_WARN

    for kind, m in metrics.items():
        cover = m.get("tune_interval_coverage_90")
        if cover is not None and cover < COVERAGE_WARN:
            log.warning(
                "%s: its stated 90%% intervals held only %.0f%% of the tuning split's true "
                "waits: too little or too unlike data to forecast from; the daemon will "
                "set it aside when coverage stays low ([policy] coverage_min)",
                kind,
                100 * cover,
            )
