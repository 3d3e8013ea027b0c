"""``mirage evaluate``: tune the baselines on the tuning split, report them on test."""

from __future__ import annotations

import json
import logging
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mirage.evaluate.protocol import (
    HOUR,
    MINUTE,
    Protocol,
    Setting,
    Split,
    default_splits,
    sample_times,
    scaled_nodes,
    spread,
)
from mirage.paths import models_root, trace_roots
from mirage.slurm.syntax import parse_when

if TYPE_CHECKING:
    import pandas as pd

    from mirage.learn.rolling import Rolling
    from mirage.profile.schema import ClusterProfile

KNOWN_TRACES = {
    "ls6": "tacc_ls6_a100/ls6-a100.log.gz",
    "theta": "alcf_theta_2023/theta_argonne.swf.gz",
    "cerit": "cerit_wagap_2013/wagap-2013.swf.gz",
}

log = logging.getLogger(__name__)


def default_trace(cluster: str) -> str | None:
    rel = KNOWN_TRACES.get(cluster)
    if rel is None:
        return None
    for root in trace_roots():
        if (root / rel).exists():
            return str(root / rel)
    return None


def default_profile(cluster: str) -> str:
    calibrated = models_root() / cluster / "profile.toml"
    return str(calibrated) if calibrated.exists() else cluster


@dataclass(frozen=True)
class SplitSetting:
    """A split of a known cluster's trace as `mirage evaluate` replays it (for scripts)."""

    setting: Setting
    profile: ClusterProfile
    partition: str
    times: list[int]


def default_test_setting(
    cluster: str, load: float, every_h: float, split_name: str = "test"
) -> SplitSetting:
    """The default test split (or ``split_name``: "tune", "train") of ``cluster``'s known
    trace and calibrated profile at ``load``, one sample every ``every_h`` hours;
    SystemExit when the trace is missing."""
    from mirage.profile.schema import load_profile
    from mirage.trace.readers import load_trace

    trace = default_trace(cluster)
    if trace is None:
        raise SystemExit(f"no {cluster} trace found")
    profile_name = default_profile(cluster)
    profile = load_profile(profile_name)
    df = load_trace(trace).jobs
    first, last = int(df["submit"].min()), int(df["submit"].max())
    split = default_splits(cluster, profile.timezone, first, last)[split_name]
    part = profile.partition(None)
    if part.nodes is None:
        raise SystemExit(f"profile {profile_name} gives no node count")
    protocol = Protocol(every_s=int(every_h * HOUR))
    nodes = scaled_nodes(part.nodes, load)
    setting = Setting(trace, profile_name, nodes, load, split, protocol)
    return SplitSetting(setting, profile, part.name, sample_times(split, protocol, first))


def cli_protocol(kw: dict[str, Any], every_s: int = Protocol.every_s) -> Protocol:
    """The protocol of ``mirage evaluate``'s and ``mirage train``'s options (hours, minutes)."""
    try:
        return Protocol(
            nodes=kw["nodes"],
            gpus=kw["gpus"],
            time_limit_s=int(kw["time_limit_h"] * HOUR),
            step_s=int(kw["step_min"] * MINUTE),
            every_s=every_s,
            window_s=int(kw["window_h"] * HOUR),
            warmup_s=int(kw["warmup_h"] * HOUR),
            alpha=kw["alpha"],
        )
    except (ValueError, OverflowError) as exc:  # OverflowError: an infinite duration
        raise click.UsageError(str(exc)) from exc


def read_inputs(trace: str, profile_name: str) -> tuple[ClusterProfile, pd.DataFrame]:
    """The profile and the trace's jobs, or one clear error naming what is wrong."""
    from mirage.profile.schema import ProfileError, load_profile
    from mirage.trace.load import TraceFormatError
    from mirage.trace.readers import load_trace

    try:
        profile = load_profile(profile_name)
        load = load_trace(trace)
    except (ProfileError, TraceFormatError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    jobs = load.jobs
    if jobs.empty:
        raise click.ClickException(f"{trace}: no jobs in this trace")
    if jobs["submit"].isna().all():
        raise click.ClickException(f"{trace}: no job in this trace has a submit time")
    # A job replays only with submit, start and end known (see sim.workload.from_table).
    if not jobs[["submit", "start", "end"]].notna().all(axis=1).any():
        raise click.ClickException(
            f"{trace}: no job in this trace has a known submit, start and end time "
            "(nothing to replay)"
        )
    _say_trace_use(trace, profile, jobs, len(load.skipped))
    return profile, jobs


def _say_trace_use(
    trace: str, profile: ClusterProfile, jobs: pd.DataFrame, unreadable: int
) -> None:
    """How much of the trace a replay at the profile's size uses (a log line; a warning
    when more than 5% is left out: mirage.sim.workload.TraceUse)."""
    from mirage.sim.workload import from_table

    use = from_table(jobs, profile).use(unreadable=unreadable)
    log.info("%s: %s", trace, use.line())
    said = use.check()
    if said:
        log.warning("%s: %s", trace, said)


def positive_loads(values: tuple[float, ...]) -> tuple[float, ...]:
    """Load factors are positive and finite (a cluster of 1/load of its nodes)."""
    bad = [v for v in values if not 0 < v < math.inf]
    if bad:
        raise click.BadParameter(f"a load must be a positive number, got {bad[0]}")
    return values


#: START:END, where END starts with a year: the colons of START's time of day stay in START.
_SPLIT = re.compile(r"(.+?):(\d{4}-.*)")


def parse_split(text: str | None, name: str, tz: str, default: Split) -> Split:
    """ "2023-02-01:2023-03-01" (or with times, "2023-02-01T12:00:2023-03-01") -> a Split."""
    if not text:
        return default
    m = _SPLIT.fullmatch(text)
    hint = f"--{name}-split"
    if m is None:
        raise click.BadParameter(f"expected START:END dates, got {text!r}", param_hint=hint)
    try:
        split = Split(name, parse_when(m[1], tz), parse_when(m[2], tz))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from exc
    if split.end <= split.start:
        raise click.BadParameter(f"{text!r} ends before it starts", param_hint=hint)
    return split


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
@click.option("--alpha", default=0.5, show_default=True, help="J = interruption + alpha*overlap.")
@click.option("--tune-split", default=None, help="START:END of the tuning split.")
@click.option("--test-split", default=None, help="START:END of the test split.")
@click.option(
    "--max-samples",
    default=0,
    help="Use at most this many samples per split, spread evenly over it (0: all).",
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
def evaluate(**kw: Any) -> None:
    """Tune the baselines on the tuning split and report every method on the test split."""
    from mirage.evaluate.harness import METHODS
    from mirage.policy.lookahead import check_stat

    cluster = kw["cluster"]
    trace = kw["trace_path"] or default_trace(cluster)
    if trace is None:
        raise click.UsageError(f"no known trace for {cluster!r}: pass --trace")
    methods = [m.strip() for m in kw["policies"].split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise click.BadParameter(f"unknown: {', '.join(bad)}; known: {', '.join(METHODS)}")
    if "reactive" not in methods:
        methods.insert(0, "reactive")  # load levels and "J removed" need it
    try:
        check_stat(kw["lookahead_stat"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lookahead-runtime") from exc
    protocol = cli_protocol(kw, every_s=int(kw["every_h"] * HOUR))
    profile_name = kw["profile_name"] or default_profile(cluster)
    profile, df = read_inputs(trace, profile_name)
    kw["learned"] = _load_learned(methods, Path(kw["models_dir"] or models_root() / cluster))
    part = profile.partition(protocol.partition)
    if part.nodes is None:
        raise click.UsageError(f"profile {profile_name!r} has no node count: calibrate it first")
    first, last = int(df["submit"].min()), int(df["submit"].max())
    splits = default_splits(cluster, profile.timezone, first, last)
    tune_split = parse_split(kw["tune_split"], "tune", profile.timezone, splits["tune"])
    test_split = parse_split(kw["test_split"], "test", profile.timezone, splits["test"])
    if tune_split.end > test_split.start:
        raise click.UsageError("the tuning split must end before the test split starts")
    out_dir = Path(kw["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "cluster": cluster,
        "trace": trace,
        "profile": profile_name,
        "protocol": protocol.__dict__,
        "methods": methods,
        "lookahead_runtime": kw["lookahead_stat"],
        "lookahead_draws": kw["lookahead_draws"],
        "splits": {"tune": tune_split.as_dict(), "test": test_split.as_dict()},
        "loads": {},
    }
    texts = []
    for load in kw["loads"] or (1.0,):
        text, entry = _evaluate_load(
            load, trace, profile_name, protocol, (tune_split, test_split), first, methods, kw
        )
        texts.append(text)
        report["loads"][f"{load:g}"] = entry
    # one file per set of loads, so that separate runs at other loads do not overwrite it
    path = out_dir / f"eval-{cluster}-load{'+'.join(report['loads'])}.json"
    path.write_text(json.dumps(_clean(report), indent=1, sort_keys=True), encoding="utf-8")
    if kw["as_json"]:
        click.echo(json.dumps(_clean(report), sort_keys=True))
    else:
        click.echo("\n\n".join(texts))
        plotted = any(e.get("plots") for e in report["loads"].values())
        click.echo(f"\nwrote {path}" + (f" and plots in {out_dir}" if plotted else ""))


def _evaluate_load(  # noqa: PLR0917 - one call site
    load: float,
    trace: str,
    profile_name: str,
    protocol: Protocol,
    splits: tuple[Split, Split],
    first: int,
    methods: list[str],
    kw: dict[str, Any],
) -> tuple[str, dict[str, Any]]:
    from mirage.evaluate.harness import SELECTED, Walker
    from mirage.evaluate.report import (
        plots,
        render,
        render_ceiling,
        render_gains,
        render_shipped,
        to_json,
    )
    from mirage.evaluate.stats import (
        ceiling,
        gains,
        level_counts,
        table,
        warnings_for,
    )
    from mirage.profile.schema import load_profile

    profile = load_profile(profile_name)
    part = profile.partition(protocol.partition)
    assert part.nodes is not None
    nodes = scaled_nodes(part.nodes, load)
    t0 = time.perf_counter()
    rolling = kw["recal_every_days"] > 0
    walkers, queues = {}, {}
    for split in splits:
        setting = Setting(trace, profile_name, nodes, load, split, protocol)
        times = sample_times(split, protocol, first)
        if kw["max_samples"]:
            times = spread(times, kw["max_samples"])
        # learned policies' decision rows: on the test split, and on the tuning split
        # where it tunes them (rolling) or chooses among methods (selected)
        rows = bool(kw["learned"]) and (split.name == "test" or rolling or SELECTED in methods)
        recorded = _records(setting, times, methods, rows, kw)
        walkers[split.name] = Walker(
            recorded[0], protocol, profile, part.name, recorded[1],
            no_arrivals=recorded[2], lookahead=recorded[3],
        )  # fmt: skip
        queues[split.name] = recorded
    tuned_params: Any  # one set of constants, or one per block
    tuned_scores: Any
    selection: dict[str, Any] | None = None
    if rolling:
        rolled = _rolling(walkers["test"], queues, protocol, profile, part.name, splits[1],
                          methods, kw)  # fmt: skip
        results, tuned_params, tuned_scores = rolled.results, rolled.blocks, None
        cover: dict[str, float | None] = dict(rolled.coverage)
    else:
        results, tuned_params, tuned_scores, selection = _tune_once(walkers, methods, protocol, kw)
        cover = {m: walkers["test"].interval_coverage(p) for m, p in kw["learned"].items()}
    tab = table(results, protocol.alpha, boot=kw["boot"])
    ceil = ceiling(tab)
    gained = gains(results, protocol.alpha, boot=kw["boot"])
    h2h, picked, ahead_h2h, shipped = _head_to_heads(results, protocol.alpha, kw["boot"])
    tag = f"{kw['cluster']}-load{load:g}"
    pngs = [] if _plots_missing() else plots(results, protocol.alpha, Path(kw["out_dir"]), tag)
    test = splits[1]
    how = (
        f"recalibrated every {kw['recal_every_days']:g} days on the "
        f"{kw['recal_window_days']:g} days before"
        if rolling
        else f"tuned on {len(walkers['tune'].samples)}: {tuned_params}"
    )
    title = (
        f"{kw['cluster']} load {load:g} ({nodes} nodes), test {_day(test.start)} to "
        f"{_day(test.end)}: {len(walkers['test'].samples)} usable samples; {how}"
    )
    entry = {
        "nodes": nodes,
        "samples": {k: len(w.samples) for k, w in walkers.items()},
        "levels": level_counts(results),
        "tuned": tuned_params,
        "tuning_scores_mean_J_s": tuned_scores,
        **({"selected": selection} if selection else {}),
        "table": to_json(tab),
        "ceiling_removed": {level: c.as_dict() for level, c in ceil.items()},
        "oracle_gain": {level: g.as_dict() for level, g in gained.items()},
        "head_to_head": {level: h.as_dict() for level, h in h2h.items()},
        "selected_head_to_head": {level: h.as_dict() for level, h in picked.items()},
        **_shipped_json(shipped),
        **(
            {"lookahead_head_to_head": {level: h.as_dict() for level, h in ahead_h2h.items()}}
            if ahead_h2h
            else {}
        ),
        "plots": [str(p) for p in pngs],
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    stated = {m: c for m, c in cover.items() if c is not None}
    if stated:
        entry["interval_coverage_90"] = stated
    said = warnings_for(tuned_scores, selection, entry["levels"], stated)
    for line in said:
        log.warning("load %g: %s", load, line)
    entry["warnings"] = said
    text = render(tab, title) + render_ceiling(ceil) + render_gains(gained)
    text += render_shipped(shipped)
    return text + _comparisons(h2h, picked, stated, ahead_h2h), entry


def _shipped_json(rows: Any) -> dict[str, Any]:
    """The shipped configuration's rows (none: no key); the targets are per level, so
    "all" gets no verdict."""
    if not rows:
        return {}
    out = {lv: r.as_dict() for lv, r in rows.items()}
    if "all" in out:
        out["all"]["meets_targets"] = None
    return {"shipped": out}


def _head_to_heads(results: Any, alpha: float, boot: int) -> tuple[Any, Any, Any, Any]:
    """Against the best baseline: the best learned method, the selected one, the
    look-ahead; and the shipped configuration's summary rows."""
    from mirage.evaluate.harness import BASELINES, LEARNED, LOOKAHEAD, REFERENCES, SELECTED
    from mirage.evaluate.stats import head_to_head, shipped_rows

    baselines = [m for m in BASELINES if m not in REFERENCES]
    return (
        head_to_head(results, alpha, LEARNED, baselines, boot=boot),
        head_to_head(results, alpha, [SELECTED], baselines, boot=boot),
        head_to_head(results, alpha, [LOOKAHEAD], baselines, boot=boot),
        shipped_rows(results, alpha, baselines, boot=boot),
    )


def _records(
    setting: Setting, times: list[int], methods: list[str], rows: bool, kw: dict[str, Any]
) -> tuple[list[Any], list[Any] | None, list[Any] | None, list[Any] | None]:
    """A split's recorded samples: the probes, the queue features (``rows``), and the
    no-arrival and look-ahead curves where a method asked for reads them."""
    from mirage.evaluate.features import FEATURES
    from mirage.evaluate.harness import LOOKAHEAD, RUNTIME_ORACLE
    from mirage.evaluate.lookahead import lookahead_recorder
    from mirage.evaluate.probes import PROBES
    from mirage.evaluate.whatif import NO_ARRIVALS

    samples = _generate(PROBES, setting, times, kw)
    queue = [c.queue for c in _generate(FEATURES, setting, times, kw)] if rows else None
    noarr = ahead = None
    if RUNTIME_ORACLE in methods:
        noarr = [c.start for c in _generate(NO_ARRIVALS, setting, times, kw)]
    if LOOKAHEAD in methods:
        rec = lookahead_recorder(kw["lookahead_stat"], kw["lookahead_draws"])
        ahead = [c.start for c in _generate(rec, setting, times, kw)]
    return samples, queue, noarr, ahead


def _comparisons(h2h: Any, picked: Any, stated: dict[str, float], ahead: Any) -> str:
    """The text after a load's table: head to head (best learned, selected, look-ahead),
    coverage."""
    from mirage.evaluate.report import render_head_to_head

    text = render_head_to_head(h2h) if h2h else ""
    if picked:
        text += render_head_to_head(picked, "the method selected on the tuning split")
    if ahead:
        text += render_head_to_head(ahead, "lookahead")
    if stated:
        text += "\nstated 90% intervals of the successor's wait covering the truth (test): "
        text += ", ".join(f"{m} {c:.0%}" for m, c in stated.items())
    return text


def _tune_once(
    walkers: dict[str, Any], methods: list[str], protocol: Protocol, kw: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """The default protocol: constants tuned on the tuning split, every method run on the
    test split; ``selected`` (if asked) is the method of least J on the tuning split.
    Returns the results, the constants, their tuning scores and the selection."""
    from mirage.evaluate.harness import SELECTED, select, tune
    from mirage.evaluate.harness import evaluate as run_methods

    plain = [m for m in methods if m != SELECTED]
    tuned = tune(walkers["tune"], plain, protocol.alpha)
    learned = kw["learned"]
    results = run_methods(walkers["test"], plain, tuned.params, protocol.alpha, learned=learned)
    if SELECTED not in methods:
        return results, tuned.params, tuned.scores, None
    chosen, scores = select(walkers["tune"], plain, tuned.params, protocol.alpha, learned)
    results[SELECTED] = results[chosen]
    return results, tuned.params, tuned.scores, {"chosen": chosen, "tune_mean_J_h": scores}


def _rolling(  # noqa: PLR0917 - one call site
    test: Any,
    queues: dict[str, Any],
    protocol: Protocol,
    profile: Any,
    partition: str,
    split: Split,
    methods: list[str],
    kw: dict[str, Any],
) -> Rolling:
    """Rolling recalibration over the test split (:mod:`mirage.learn.rolling`)."""
    from mirage.evaluate.harness import Walker
    from mirage.learn.rolling import blocks, run_rolling

    (s_tune, q_tune, n_tune, a_tune), (s_test, q_test, n_test, a_test) = (
        queues["tune"],
        queues["test"],
    )
    queue = None if q_tune is None or q_test is None else [*q_tune, *q_test]
    noarr = None if n_tune is None or n_test is None else [*n_tune, *n_test]
    ahead = None if a_tune is None or a_test is None else [*a_tune, *a_test]
    history = Walker([*s_tune, *s_test], protocol, profile, partition, queue,
                     no_arrivals=noarr, lookahead=ahead)  # fmt: skip
    # the test samples are history's last ones: share their contexts and matrices
    first_test = len(history.samples) - len(test.samples)
    test = history.subset(range(first_test, len(history.samples)))
    day = 86400
    plan = blocks(split.start, split.end, int(kw["recal_every_days"] * day),
                  int(kw["recal_window_days"] * day))  # fmt: skip
    try:
        return run_rolling(history, test, methods, protocol.alpha, kw["learned"], plan)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


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


def _day(t: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def _generate(rec: Any, setting: Setting, times: list[int], kw: dict[str, Any]) -> Any:
    """Every sample's record of ``rec`` (probes, feature or no-arrival curves): cached,
    in parallel or on the Dask cluster, with a progress bar."""
    from mirage.evaluate.probes import record_all
    from mirage.progress import progress_bars

    with progress_bars() as bars:
        return record_all(
            setting,
            times,
            rec,
            cache=kw["cache"] or None,
            n_jobs=kw["n_jobs"],
            dask_address=kw["dask_address"],
            progress=bars.counter(f"probes {setting.split.name}"),
        )


def _clean(x: Any) -> Any:
    """NaN -> None, so that the JSON is standard."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def _plots_missing() -> bool:
    """Without the plots extra the tables and JSON are still written: one line says so."""
    from mirage.extras import MissingExtra, missing

    module = missing("plots")
    if module is None:
        return False
    click.echo(f"PNG plots skipped: {MissingExtra('plots', module, 'plotting')}", err=True)
    return True
