"""``mirage train`` as a Python call: :func:`train_models`, plain arguments in, data out.

Train learned provisioning policies (rf, xgb, dqn, pg) for one cluster from its trace (or
its accounting), or re-tune the constants of policies trained elsewhere
(``recalibrate``), save them under ``models_dir/<cluster>/<policy>/`` and return their
tuning-split metrics, as ``mirage train --json`` prints them. The click command is a thin
wrapper around it. (The function is not called ``train``: :mod:`mirage.learn.train` is the
training pipeline's module.) E.g. in a notebook::

    from mirage.learn import train_models
    out = train_models("ls6", policies=["xgb"], loads=[2], every_h=12,
                       train_split="2022-11-06:2022-11-12", tune_split="2022-11-12:2022-11-15",
                       models_dir="models")
    out["policies"]["xgb"]["tune"]["mean_J_h"], out["wall_s"]

    from mirage.learn.artifacts import load_policy
    xgb, meta = load_policy("models/ls6/xgb")  # the policy to evaluate or serve

This module's imports stay light (the package imports it): the pipeline loads on the
first call.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.evaluate.inputs import InputError
from mirage.policy.cost import DEFAULT_COST

if TYPE_CHECKING:
    from mirage.evaluate.probes import SampleResult
    from mirage.evaluate.protocol import Protocol, Split
    from mirage.learn.train import TrainConfig

log = logging.getLogger(__name__)

#: ``mirage train --quiet-every-h``'s default: a busy month's quiet days are few, and at
#: a 12 h spacing CERIT's February held none (at 2 h: 6, which showed the harm March's 57
#: confirmed); a census costs one fork a sample and runs only where a load holds fewer
#: than 30 quiet samples at its own, coarser spacing.
QUIET_EVERY_H = 2.0

HOUR = 3600
#: A load: its factor, or "LOAD[:EVERY_H[:STEP_MIN]]" (its own sample spacing and step).
Load = float | str


class OptionError(InputError):
    """An argument :func:`train_models` cannot use; ``option`` names the ``mirage train``
    option at fault when one is (``--policy``): the command reports it as a bad value."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class TrainError(RuntimeError):
    """Training (or recalibration) could not be done with these inputs (no usable
    samples, say), or the cluster's accounting could not be read: one line saying why."""


def train_models(
    cluster: str,
    *,
    policies: str | Sequence[str] = "all",
    trace: str | None = None,
    profile: str | None = None,
    seed: int = 0,
    loads: Sequence[Load] = (),
    train_only_loads: Sequence[Load] = (),
    models_dir: str | Path | None = None,
    recalibrate: str | Path | None = None,
    cache: str | None = "out/probe-cache",
    n_jobs: int = 1,
    every_h: float = 4.0,
    train_step_min: float | None = None,
    agent_steps: int = 300_000,
    history_days: float = 180.0,
    train_split: str | None = None,
    tune_split: str | None = None,
    tune_last_days: float | None = None,
    nodes: int = 1,
    gpus: int = 0,
    time_limit_h: float = 48.0,
    step_min: float = 10.0,
    window_h: float = 120.0,
    warmup_h: float = 48.0,
    restart_min: float = DEFAULT_COST.restart_s / 60,
    handoff_s: float = DEFAULT_COST.handoff_s,
    extra_idle_h: float = DEFAULT_COST.extra_idle_s / 3600,
    held_twice: bool = False,
    policy_file: bool = True,
    quiet_every_h: float = QUIET_EVERY_H,
    notify: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train ``policies`` ("all", or some of rf, xgb, dqn, pg) for ``cluster`` and save
    them under ``models_dir/<cluster>/<policy>/``; return ``{"wall_s": ..., "policies":
    {policy: metrics}, "shipped": ...}`` (what ``mirage train --json`` prints).

    The arguments are ``mirage train``'s options (see ``mirage train --help``): ``trace``
    (default: the cluster's known trace, else ``history_days`` of its accounting read
    through Slurm, which ``notify`` is told of; default: logged), ``profile`` (default:
    calibrated), ``loads`` and ``train_only_loads`` (each a factor or
    "LOAD[:EVERY_H[:STEP_MIN]]"), ``models_dir`` (default: $MIRAGE_MODELS, else
    ``models``), ``recalibrate`` (a folder of trained policies: keep them, re-tune only
    their constants on the tuning split), the splits ("START:END"; ``tune_last_days``
    overrides ``tune_split``) and the protocol. With ``policy_file`` (the default), the
    shipped configuration is then chosen on the same tuning samples and written as
    ``models_dir/<cluster>/policy.toml`` (:mod:`mirage.learn.ship`; ``shipped`` says what
    and where, or why no file was written); with ``quiet_every_h``, a tuning load whose
    samples hold fewer than 30 quiet ones has every quiet sample at that spacing added to
    the choice's walk (:func:`mirage.learn.train.quiet_samples`). :class:`InputError` (an
    :class:`OptionError` for a bad option value) for inputs that cannot be used,
    :class:`TrainError` when training cannot be done with them,
    :class:`~mirage.learn.artifacts.ModelError` for models that cannot be recalibrated.
    """
    from mirage.paths import models_root

    source = str(recalibrate) if recalibrate is not None else None
    chosen = _policies(policies, source)
    cfg = _config(cluster, trace, profile, locals())  # the options, by name
    t0 = time.perf_counter()
    try:
        root = Path(models_dir or models_root())
        metrics, shipped = _run(cfg, chosen, root, source, policy_file)
    except ValueError as exc:  # ModelError (a RuntimeError) goes through as it is
        raise TrainError(str(exc)) from exc
    return {"wall_s": round(time.perf_counter() - t0, 1), "policies": metrics,
            "shipped": shipped}  # fmt: skip


def _config(
    cluster: str, trace: str | None, profile: str | None, kw: dict[str, Any]
) -> TrainConfig:
    """The training's configuration from :func:`train_models`' arguments (``kw``)."""
    from mirage.evaluate.inputs import default_profile, default_trace, protocol_from, read_inputs
    from mirage.learn.train import TrainConfig

    trace = trace or default_trace(cluster) or _import_history(cluster, kw)
    profile_name = profile or default_profile(cluster)
    prof, jobs = read_inputs(trace, profile_name)
    first, last = int(jobs["submit"].min()), int(jobs["submit"].max())
    splits = _splits(cluster, prof.timezone, (first, last), kw)
    schedule = [load_spec(x) for x in kw["loads"]]
    extra = [load_spec(x) for x in kw["train_only_loads"]]
    # recalibration reads only the tuning split: --every-h spaces it (else the protocol's 4 h,
    # the spacing `mirage evaluate` tunes on)
    recal = kw["recalibrate"] is not None
    protocol = protocol_from(kw, **({"every_s": int(kw["every_h"] * HOUR)} if recal else {}))
    if not kw["every_h"] * HOUR >= 1 or (kw["train_step_min"] or 1) * 60 < 1:
        raise InputError("--every-h and --train-step-min must be at least one second")
    quiet = kw["quiet_every_h"]
    if not (quiet == 0 or (math.isfinite(quiet) and quiet * HOUR >= 1)):
        raise OptionError(f"expected 0 (off) or a spacing of at least 1 s, got {quiet}",
                          "--quiet-every-h")  # fmt: skip
    return TrainConfig(
        cluster=cluster,
        protocol=protocol,
        cost=protocol.cost,
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
        quiet_every_s=int(kw["quiet_every_h"] * HOUR),
    )


def _splits(
    cluster: str, tz: str, submits: tuple[int, int], kw: dict[str, Any]
) -> dict[str, Split]:
    """The training and tuning splits: the cluster's defaults, or as asked; with
    ``recalibrate`` only the tuning split (it alone is read, and recorded)."""
    from mirage.evaluate.inputs import parse_split
    from mirage.evaluate.protocol import Split, default_splits

    first, last = submits
    splits = default_splits(cluster, tz, first, last)
    splits = {
        name: parse_split(kw[f"{name}_split"], name, tz, splits[name]) for name in ("train", "tune")
    }
    if kw["tune_last_days"]:
        end = last + 1
        splits["tune"] = Split("tune", end - int(kw["tune_last_days"] * 86400), end)
    if kw["recalibrate"] is not None:
        del splits["train"]
    elif splits["train"].end > splits["tune"].start:
        raise InputError("the training split must end before the tuning split starts")
    return splits


def _import_history(cluster: str, kw: dict[str, Any]) -> str:
    """The cluster's accounting history through the Slurm client, as a Parquet trace."""
    from mirage.slurm.types import SlurmError
    from mirage.trace.accounting import import_accounting
    from mirage.trace.cli import make_slurm_client
    from mirage.trace.parquet import write_parquet

    out = Path("out") / "traces" / f"{cluster}-accounting.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    end = int(time.time())
    try:
        load = import_accounting(make_slurm_client(), end - int(kw["history_days"] * 86400), end)
    except SlurmError as exc:
        raise TrainError(f"cannot read {cluster}'s accounting: {exc}") from exc
    write_parquet(load, str(out))
    (kw["notify"] or log.info)(f"imported {len(load.jobs)} jobs of accounting into {out}")
    return str(out)


def _policies(asked: str | Sequence[str], source: str | None) -> list[str]:
    """The policies asked for; "all" with ``recalibrate``: those the source folder holds."""
    from mirage.learn.artifacts import POLICIES

    if isinstance(asked, str) and asked != "all":
        policies = asked.split(",")
    elif not isinstance(asked, str):
        policies = list(asked)
    elif source:
        policies = [k for k in POLICIES if (Path(source) / k / "metadata.json").is_file()]
        if not policies:
            raise InputError(f"{source}: no trained policy to recalibrate")
    else:
        policies = list(POLICIES)
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        what = "recalibrate" if source else "train"
        raise OptionError(
            f"cannot {what} {', '.join(bad)}; known: {', '.join(POLICIES)}, all", "--policy"
        )
    return policies


def _few_quiet(
    by_load: Mapping[float, tuple[Protocol, list[SampleResult]]], quiet_every_s: int
) -> None:
    """Say where the choice cannot judge the quiet days well, and what would help."""
    from mirage.evaluate.shipping import SELECT_MIN_N
    from mirage.evaluate.stats import MIN_N
    from mirage.learn.train import quiet_count

    for load, (protocol, samples) in by_load.items():
        n = quiet_count(samples)
        if n < MIN_N:
            how = _census_said(protocol.every_s, quiet_every_s)
            log.warning("tuning load %g: %d quiet samples (%s), under the %d a report "
                        "counts; the shipped choice judges a level from %d",
                        load, n, how, MIN_N, SELECT_MIN_N)  # fmt: skip


def _census_said(every_s: int, quiet_every_s: int) -> str:
    """How a load's quiet samples were found (the census runs as mirage.learn.train rules)."""
    from mirage.fmt import duration
    from mirage.learn.train import census_runs

    if not quiet_every_s:
        return f"--quiet-every-h {QUIET_EVERY_H:g} finds more; it is off"
    census = duration(quiet_every_s)
    if census_runs(every_s, quiet_every_s):
        return f"with every quiet sample at a {census} spacing"
    return f"sampled every {duration(every_s)}, no census (its spacing: {census})"


def load_spec(spec: Load) -> tuple[float, tuple[int, int] | None]:
    """ "1.13:12:30" -> (1.13, (12 h, 30 min)); "1" or 1.0 -> (1.0, None)."""
    text = spec if isinstance(spec, str) else repr(float(spec))
    parts = text.split(":")
    try:
        values = [float(p) for p in parts]
    except ValueError as exc:
        raise OptionError(f"expected LOAD[:EVERY_H[:STEP_MIN]], got {text!r}") from exc
    load = values[0]
    every = values[1] * HOUR if len(values) > 1 else HOUR
    step = values[2] * 60 if len(values) > 2 else 600.0
    # spacing and step are whole seconds: under one second they would never advance
    ok = all(math.isfinite(v) for v in values) and load > 0 and every >= 1 and step >= 1
    if not ok or len(parts) > 3:
        raise OptionError(f"expected positive LOAD[:EVERY_H[:STEP_MIN]], got {text!r}")
    return load, (int(every), int(step)) if len(values) > 1 else None


def _run(
    cfg: TrainConfig, policies: list[str], root: Path, source: str | None, policy_file: bool
) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """The policies' metrics, and the shipped configuration chosen on the same tuning
    samples (written as the cluster's policy.toml) unless ``policy_file`` is off."""
    from mirage.learn.ship import choose_and_write
    from mirage.learn.train import (
        load_data,
        quiet_samples,
        recalibrate,
        train,
        tuning_curves,
        tuning_data,
    )
    from mirage.progress import progress_bars

    with progress_bars() as bars:
        if source:
            tuning = tuning_data(cfg, bars.update)
            metrics = recalibrate(cfg, policies, Path(source), root, bars.update, tuning=tuning)
            by_load = tuning[2]
        else:
            data = load_data(cfg, bars.update)
            metrics = train(cfg, policies, root, bars.update, data)
            by_load = data.tune_by_load
        # the shipped choice's look-ahead veto reads the tuning samples' look-ahead
        curves = tuning_curves(cfg, bars.update) if policy_file else None
        extra = (
            quiet_samples(cfg, by_load, bars.update) if policy_file and cfg.quiet_every_s else {}
        )
    if not policy_file or curves is None:
        return metrics, None
    walked = dict(by_load)
    for load, (samples, more) in extra.items():
        protocol, have = by_load[load]
        walked[load] = (protocol, [*have, *samples])
        curves[load] = [*curves[load], *more]
    _few_quiet(walked, cfg.quiet_every_s)
    folder = root / cfg.cluster
    quiet = {load: (len(s), cfg.quiet_every_s) for load, (s, _) in extra.items()}
    return metrics, choose_and_write(
        cfg.cluster,
        cfg.profile,
        cfg.splits["tune"],
        walked,
        folder=folder,
        cost_model=cfg.cost,
        lookahead=curves,
        quiet=quiet,
    )
