"""``mirage train``: the click command around :func:`mirage.learn.train_models`."""

from __future__ import annotations

import json
import logging
from typing import Any

import click

from mirage.evaluate.costopts import cost_kwargs, cost_options
from mirage.learn.api import QUIET_EVERY_H
from mirage.learn.artifacts import POLICIES, ModelError

log = logging.getLogger(__name__)


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
@click.option(
    "--every-h",
    default=4.0,
    show_default=True,
    help="Sample spacing of the training split (with --recalibrate, of the tuning split, the "
    "only one read).",
)
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
@cost_options
@click.option(
    "--policy-file/--no-policy-file",
    default=True,
    show_default=True,
    help="Then choose the shipped configuration (a wait baseline or Slurm's estimate behind "
    "the estimate guard, the look-ahead veto or both; the look-ahead's curves are recorded "
    "on the tuning split for it) on the same tuning split, the safe one of least mean J, "
    "and write it as models/NAME/policy.toml: the daemon's [policy] defaults on this cluster.",
)
@click.option(
    "--quiet-every-h",
    default=QUIET_EVERY_H,
    show_default=True,
    help="For the shipped configuration on a busy cluster: where a tuning load's samples "
    "hold fewer than 30 quiet ones, also find every quiet sample at this denser spacing "
    "(one fork each) and probe it, so that the choice judges the quiet days (0: off).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def train_cmd(**kw: Any) -> None:
    """Train learned provisioning policies and save them under models/CLUSTER/POLICY/."""
    from mirage.evaluate.inputs import InputError
    from mirage.learn.api import OptionError, TrainError, train_models

    try:
        out = train_models(
            kw["cluster"], policies=kw["policy"], trace=kw["trace_path"],
            profile=kw["profile_name"], seed=kw["seed"], loads=kw["loads"],
            train_only_loads=kw["train_only"], models_dir=kw["models_dir"],
            recalibrate=kw["source"], cache=kw["cache"], n_jobs=kw["n_jobs"],
            every_h=kw["every_h"], train_step_min=kw["train_step_min"],
            agent_steps=kw["agent_steps"], history_days=kw["history_days"],
            train_split=kw["train_split"], tune_split=kw["tune_split"],
            tune_last_days=kw["tune_last_days"], nodes=kw["nodes"], gpus=kw["gpus"],
            time_limit_h=kw["time_limit_h"], step_min=kw["step_min"], window_h=kw["window_h"],
            warmup_h=kw["warmup_h"], **cost_kwargs(kw), policy_file=kw["policy_file"],
            quiet_every_h=kw["quiet_every_h"], notify=lambda said: click.echo(said, err=True),
        )  # fmt: skip
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.option) from exc
    except InputError as exc:
        raise click.UsageError(str(exc)) from exc
    except (TrainError, ModelError) as exc:
        raise click.ClickException(str(exc)) from exc
    if kw["as_json"]:
        click.echo(json.dumps(out, sort_keys=True))
        return
    _print(out["policies"], out["wall_s"])
    if out["shipped"] is not None:
        click.echo(_shipped_line(out["shipped"]))


def _shipped_line(shipped: dict[str, Any]) -> str:
    """One line: the shipped configuration chosen, and its file (or why none)."""
    what = shipped.get("label") or shipped["policy"]
    if shipped["file"] is None:
        return f"shipped configuration: none written ({shipped['reason']})"
    return f"shipped configuration: {what} -> {shipped['file']}"


def _print(metrics: dict[str, dict[str, Any]], wall: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from mirage.fmt import hours_unit

    js = ("mean_J_h", "reactive_mean_J_h", "oracle_mean_J_h")
    unit = hours_unit(m["tune"][k] for m in metrics.values() for k in js)
    table = Table(title=f"mirage train ({wall:.0f} s): tuning-split mean J, {unit.name}")
    for col in ("policy", "samples", "J", "reactive J", "oracle J", "fit s", "90% cover", "model"):
        table.add_column(col)
    for kind, m in metrics.items():
        t = m["tune"]
        cover = m.get("tune_interval_coverage_90")
        table.add_row(
            kind,
            str(t["samples"]),
            *(unit.fmt(t[k]) for k in js),
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
