"""``mirage evaluate`` as a Python call: :func:`run`, plain arguments in, data out.

Tune every baseline's constants on the tuning split, run every method on the test split,
and report per load and wait level: the table of J, the oracle's ceiling and gain, head to
head against the best baseline, and the shipped configuration's rows. The click command
(``mirage evaluate``) is a thin wrapper around it.

Trained policies (rf, xgb, dqn, pg) reach the evaluation as policies, through
``learned``, loaded by the caller; rolling recalibration (re-tuning learned policies'
constants block by block) through ``rolling``: the judge does not know how the models it
judges are built (``mirage.learn`` is above this layer). E.g. in a notebook::

    from mirage.evaluate import run
    ev = run("ls6", policies=["reactive", "shipped", "oracle"], loads=[1.05], every_h=12)
    ev.report["loads"]["1.05"]["oracle_gain"]

    from mirage.learn.artifacts import load_policy
    from mirage.learn.rolling import run_rolling
    xgb, _meta = load_policy("models/ls6/xgb")
    ev = run("ls6", policies=["reactive", "xgb", "oracle"], learned={"xgb": xgb},
             rolling=run_rolling, recalibrate_every_days=7)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from typing import Protocol as TypingProtocol

from mirage.evaluate.inputs import (
    InputError,
    default_profile,
    default_trace,
    parse_split,
    protocol_from,
    read_inputs,
)
from mirage.evaluate.protocol import (
    HOUR,
    Block,
    Protocol,
    Setting,
    Split,
    default_splits,
    sample_times,
    scaled_nodes,
    spread,
)
from mirage.policy.cost import DEFAULT_COST, CostModel
from mirage.policy.guard import SHIPPED, Shipped

if TYPE_CHECKING:
    from mirage.evaluate.harness import BatchedPolicy, Outcomes, Walker
    from mirage.fmt import HourUnit

log = logging.getLogger(__name__)

#: The methods evaluated unless asked otherwise.
DEFAULT_POLICIES = (
    "reactive", "fixed-lead", "slurm-estimate", "running-average", "qbets", "shipped", "oracle",
)  # fmt: skip


class RollingResult(TypingProtocol):
    """What a rolling recalibration returns (:class:`mirage.learn.rolling.Rolling`)."""

    results: dict[str, Outcomes]
    blocks: list[dict[str, Any]]
    coverage: dict[str, float]


#: history, test, methods, cost, learned, blocks -> the recalibrated results
#: (:func:`mirage.learn.rolling.run_rolling`)
RollingFn = Callable[
    ["Walker", "Walker", Sequence[str], CostModel, Mapping[str, "BatchedPolicy"], Sequence[Block]],
    RollingResult,
]  # fmt: skip


@dataclass
class Evaluation:
    """What :func:`run` measured: ``report`` (the JSON ``mirage evaluate --json`` prints;
    per load under ``report["loads"]``), ``texts`` (each load's tables as printed),
    ``path`` (the JSON file written, when ``out_dir`` was given) and ``plots`` (PNGs)."""

    report: dict[str, Any]
    texts: list[str] = field(default_factory=list)
    path: Path | None = None

    @property
    def plots(self) -> list[str]:
        return [p for e in self.report["loads"].values() for p in e.get("plots", [])]

    def text(self) -> str:
        return "\n\n".join(self.texts)


def run(
    cluster: str,
    *,
    trace: str | None = None,
    profile: str | None = None,
    policies: Sequence[str] = DEFAULT_POLICIES,
    loads: Sequence[float] = (1.0,),
    learned: Mapping[str, BatchedPolicy] | None = None,
    rolling: RollingFn | None = None,
    out_dir: str | Path | None = "out/eval",
    cache: str | None = "out/probe-cache",
    n_jobs: int = 1,
    dask_address: str | None = None,
    nodes: int = 1,
    gpus: int = 0,
    time_limit_h: float = 48.0,
    step_min: float = 10.0,
    every_h: float = 4.0,
    window_h: float = 120.0,
    warmup_h: float = 48.0,
    restart_min: float = DEFAULT_COST.restart_s / 60,
    handoff_s: float = DEFAULT_COST.handoff_s,
    extra_idle_h: float = DEFAULT_COST.extra_idle_s / 3600,
    held_twice: bool = False,
    tune_split: str | None = None,
    test_split: str | None = None,
    max_samples: int = 0,
    boot: int = 2000,
    recalibrate_every_days: float = 0.0,
    recalibrate_window_days: float = 28.0,
    lookahead_runtime: str = "median",
    lookahead_draws: int = 1,
    cached_only: bool = False,
    shipped: Shipped = SHIPPED,
) -> Evaluation:
    """Evaluate ``policies`` on ``cluster``'s trace (``trace``: default, its known trace)
    with its calibrated profile (``profile``), at each of ``loads``. The arguments are
    ``mirage evaluate``'s options (see ``mirage evaluate --help``); ``learned`` maps each
    trained method asked for (rf, xgb, dqn, pg) to its loaded policy. Probes are cached
    in ``cache`` (None: not cached); ``cached_only``: report on the samples already there
    (what a long run has recorded so far), each split saying how many it left out;
    ``shipped``: what the method ``shipped`` runs (a cluster's own choice,
    :func:`mirage.policy.guard.shipped_for`; default the daemon's defaults).
    :class:`InputError` for inputs that cannot be used."""
    from mirage.evaluate.harness import SHIPPED_METHOD

    methods = _methods(policies, learned)
    _check_shipped(methods, shipped, learned)
    if recalibrate_every_days > 0 and rolling is None:
        raise InputError("rolling recalibration needs rolling= (mirage.learn.rolling.run_rolling)")
    _check_lookahead(lookahead_runtime, lookahead_draws)
    if any(not 0 < x < math.inf for x in loads):
        raise InputError(f"a load must be a positive number, got {list(loads)}")
    if cached_only and cache is None:
        raise InputError("--cached-only reads the probe cache: give one (--cache)")
    kw: dict[str, Any] = {
        "cluster": cluster, "out_dir": str(out_dir) if out_dir is not None else None,
        "cache": cache, "n_jobs": n_jobs, "dask_address": dask_address,
        "max_samples": max_samples, "boot": boot, "recal_every_days": recalibrate_every_days,
        "recal_window_days": recalibrate_window_days, "lookahead_stat": lookahead_runtime,
        "lookahead_draws": lookahead_draws, "learned": {
            m: p for m, p in (learned or {}).items()
            if m in methods or (m == shipped.policy and SHIPPED_METHOD in methods)
        }, "rolling": rolling, "cached_only": cached_only, "shipped": shipped,
    }  # fmt: skip
    options = {"nodes": nodes, "gpus": gpus, "time_limit_h": time_limit_h,
               "step_min": step_min, "window_h": window_h, "warmup_h": warmup_h,
               "restart_min": restart_min, "handoff_s": handoff_s,
               "extra_idle_h": extra_idle_h, "held_twice": held_twice}  # fmt: skip
    protocol = protocol_from(options, every_s=int(every_h * HOUR))
    trace = trace or default_trace(cluster)
    if trace is None:
        raise InputError(f"no known trace for {cluster!r}: give trace=")
    profile_name = profile or default_profile(cluster)
    prof, df = read_inputs(trace, profile_name)
    part = prof.partition(protocol.partition)
    if part.nodes is None:
        raise InputError(f"profile {profile_name!r} has no node count: calibrate it first")
    first, last = int(df["submit"].min()), int(df["submit"].max())
    splits = default_splits(cluster, prof.timezone, first, last)
    tune = _split(tune_split, "tune", prof.timezone, splits["tune"])
    test = _split(test_split, "test", prof.timezone, splits["test"])
    if tune.end > test.start:
        raise InputError("the tuning split must end before the test split starts")
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "cluster": cluster,
        "trace": trace,
        "profile": profile_name,
        "protocol": dataclasses.asdict(protocol),
        "shipped_configuration": dataclasses.asdict(shipped),
        "methods": methods,
        "lookahead_runtime": lookahead_runtime,
        "lookahead_draws": lookahead_draws,
        "splits": {"tune": tune.as_dict(), "test": test.as_dict()},
        "loads": {},
    }
    out = Evaluation(report)
    for load in loads or (1.0,):
        text, entry = _evaluate_load(
            load, trace, profile_name, protocol, (tune, test), first, methods, kw
        )
        out.texts.append(text)
        report["loads"][f"{load:g}"] = entry
    out.report = _clean(report)
    if out_dir is not None:
        # one file per set of loads, so that separate runs at other loads do not overwrite it
        out.path = Path(out_dir) / f"eval-{cluster}-load{'+'.join(report['loads'])}.json"
        out.path.write_text(json.dumps(out.report, indent=1, sort_keys=True), encoding="utf-8")
    return out


def _methods(policies: Sequence[str], learned: Mapping[str, Any] | None) -> list[str]:
    """The methods asked for, known and with their trained policies given; reactive
    always (load levels and "J removed" need it)."""
    from mirage.evaluate.harness import LEARNED, METHODS

    methods = [m.strip() for m in policies if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise InputError(f"unknown: {', '.join(bad)}; known: {', '.join(METHODS)}")
    if "reactive" not in methods:
        methods.insert(0, "reactive")
    missing = [m for m in methods if m in LEARNED and m not in (learned or {})]
    if missing:
        raise InputError(f"no trained policy given for {', '.join(missing)} (learned=)")
    return methods


def _check_shipped(methods: list[str], shipped: Shipped, learned: Mapping[str, Any] | None) -> None:
    """``shipped`` whose default is a trained model needs that model among ``learned``."""
    from mirage.evaluate.harness import LEARNED, SHIPPED_METHOD

    if (
        SHIPPED_METHOD in methods
        and shipped.policy in LEARNED
        and shipped.policy not in (learned or {})
    ):
        raise InputError(
            f"shipped: its default is the trained {shipped.policy}; give its model (learned=)"
        )


def _check_lookahead(runtime: str, draws: int) -> None:
    from mirage.policy.lookahead import MAX_DRAWS, check_stat

    try:
        check_stat(runtime)
    except ValueError as exc:
        raise InputError(f"--lookahead-runtime: {exc}") from exc
    if not 1 <= draws <= MAX_DRAWS:
        raise InputError(f"lookahead_draws must be 1 to {MAX_DRAWS}, got {draws}")


def _usable(split: Split, protocol: Protocol, times: list[int], walker: Walker) -> Walker:
    """The split's walker; an :class:`InputError` when it has no usable sample (a table
    of dashes is no result)."""
    if not times:
        raise InputError(
            f"the {split.name} split ({_when(split.start)} to {_when(split.end)}) has no "
            f"sample: each needs its whole window ({_dur(protocol.window_s)}) before the "
            f"split's end, after the warm-up ({_dur(protocol.warmup_s)} from the first "
            "submit); widen the split or shorten --window-h/--warmup-h"
        )
    if not walker.samples:
        raise InputError(
            f"the {split.name} split has no usable sample: in all {len(times)} the chain's "
            f"first segment did not start within the window ({_dur(protocol.window_s)}); "
            "lengthen --window-h (or check the profile's node count)"
        )
    return walker


def _when(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _dur(seconds: int) -> str:
    from mirage.fmt import duration

    return duration(seconds)


def _split(text: str | None, name: str, tz: str, default: Split) -> Split:
    try:
        return parse_split(text, name, tz, default)
    except InputError as exc:
        raise InputError(f"--{name}-split: {exc}") from exc


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
        table_unit,
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
    cached: dict[str, dict[str, int]] = {}
    for split in splits:
        setting = Setting(trace, profile_name, nodes, load, split, protocol)
        times = sample_times(split, protocol, first)
        if kw["max_samples"]:
            times = spread(times, kw["max_samples"])
        # learned policies' decision rows: on the test split, and on the tuning split
        # where it tunes them (rolling) or chooses among methods (selected)
        rows = bool(kw["learned"]) and (split.name == "test" or rolling or SELECTED in methods)
        if kw["cached_only"]:
            times = _cached(setting, times, methods, rows, kw, cached)
        recorded = _records(setting, times, methods, rows, kw)
        walkers[split.name] = _usable(split, protocol, times, Walker(
            recorded[0], protocol, profile, part.name, recorded[1],
            no_arrivals=recorded[2], lookahead=recorded[3], shipped=kw["shipped"],
        ))  # fmt: skip
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
    tab = table(results, protocol.cost, boot=kw["boot"])
    ceil = ceiling(tab)
    gained = gains(results, protocol.cost, boot=kw["boot"])
    h2h, picked, ahead_h2h, shipped = _head_to_heads(results, protocol.cost, kw["boot"])
    tag = f"{kw['cluster']}-load{load:g}"
    out_dir = kw["out_dir"]
    pngs = (
        []
        if out_dir is None or _plots_missing()
        else plots(results, protocol.cost, Path(out_dir), tag)
    )
    title = _title(kw, load, nodes, splits[1], walkers, None if rolling else (tuned_params,),
                   cached)  # fmt: skip
    entry = {
        "nodes": nodes,
        "samples": {k: len(w.samples) for k, w in walkers.items()},
        **({"cached_only": cached} if cached else {}),
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
    unit = table_unit(tab)
    text = render(tab, title, unit) + render_ceiling(ceil) + render_gains(gained, unit)
    text += render_shipped(shipped, unit)
    return text + _comparisons(h2h, picked, stated, ahead_h2h, unit), entry


def _title(  # noqa: PLR0917 - private, one call site
    kw: dict[str, Any],
    load: float,
    nodes: int,
    test: Split,
    walkers: dict[str, Any],
    tuned: tuple[Any] | None,
    cached: dict[str, dict[str, int]],
) -> str:
    """The load's table title: the test split, its samples, how the constants were set
    (``tuned``: the constants tuned once; None: recalibrated)."""
    how = (
        f"tuned on {len(walkers['tune'].samples)}: {tuned[0]}"
        if tuned is not None
        else f"recalibrated every {kw['recal_every_days']:g} days on the "
        f"{kw['recal_window_days']:g} days before"
    )
    left_out = (
        f" (cached only: {cached['test']['used']} of {cached['test']['of']} samples)"
        if cached and cached["test"]["used"] < cached["test"]["of"]
        else ""
    )
    return (
        f"{kw['cluster']} load {load:g} ({nodes} nodes), test {_day(test.start)} to "
        f"{_day(test.end)}: {len(walkers['test'].samples)} usable samples{left_out}; {how}"
    )


def _shipped_json(rows: Any) -> dict[str, Any]:
    """The shipped configuration's rows (none: no key); the targets are per level, so
    "all" gets no verdict."""
    if not rows:
        return {}
    out = {lv: r.as_dict() for lv, r in rows.items()}
    if "all" in out:
        out["all"]["meets_targets"] = None
    return {"shipped": out}


def _head_to_heads(results: Any, cost_model: CostModel, boot: int) -> tuple[Any, Any, Any, Any]:
    """Against the best baseline: the best learned method, the selected one, the
    look-ahead; and the shipped configuration's summary rows."""
    from mirage.evaluate.harness import BASELINES, LEARNED, LOOKAHEAD, REFERENCES, SELECTED
    from mirage.evaluate.stats import head_to_head, shipped_rows

    baselines = [m for m in BASELINES if m not in REFERENCES]
    return (
        head_to_head(results, cost_model, LEARNED, baselines, boot=boot),
        head_to_head(results, cost_model, [SELECTED], baselines, boot=boot),
        head_to_head(results, cost_model, [LOOKAHEAD], baselines, boot=boot),
        shipped_rows(results, cost_model, baselines, boot=boot),
    )


def _cached(  # noqa: PLR0917 - private, one call site
    setting: Setting,
    times: list[int],
    methods: list[str],
    rows: bool,
    kw: dict[str, Any],
    counts: dict[str, dict[str, int]],
) -> list[int]:
    """The sample times whose every record :func:`_records` would read is in the cache;
    ``counts[split]`` says how many of how many."""
    from mirage.evaluate.probes import is_cached

    recs = [r for r in _recorders(methods, rows, kw) if r is not None]
    kept = [t for t in times if all(is_cached(kw["cache"], setting, t, r) for r in recs)]
    name = setting.split.name
    counts[name] = {"used": len(kept), "of": len(times)}
    if len(kept) < len(times):
        log.warning("%s split: %d of %d samples are in the cache; the others are left out "
                    "(--cached-only)", name, len(kept), len(times))  # fmt: skip
    return kept


def _recorders(methods: list[str], rows: bool, kw: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """What a split records: the probes, and where asked for (else None) the queue
    features, the no-arrival curves and the look-ahead curves."""
    from mirage.evaluate.features import FEATURES
    from mirage.evaluate.harness import LOOKAHEAD, RUNTIME_ORACLE, SHIPPED_METHOD
    from mirage.evaluate.lookahead import lookahead_recorder
    from mirage.evaluate.probes import PROBES
    from mirage.evaluate.whatif import NO_ARRIVALS
    from mirage.policy.guard import LOOKAHEAD_GUARDS

    # the shipped guard's look-ahead veto reads the curves too (the daemon's: the median)
    guard = SHIPPED_METHOD in methods and kw["shipped"].guard in LOOKAHEAD_GUARDS
    ahead = (
        lookahead_recorder(kw["lookahead_stat"], kw["lookahead_draws"])
        if LOOKAHEAD in methods or guard
        else None
    )
    return (PROBES, FEATURES if rows else None,
            NO_ARRIVALS if RUNTIME_ORACLE in methods else None, ahead)  # fmt: skip


def _records(
    setting: Setting, times: list[int], methods: list[str], rows: bool, kw: dict[str, Any]
) -> tuple[list[Any], list[Any] | None, list[Any] | None, list[Any] | None]:
    """A split's recorded samples: the probes, the queue features (``rows``), and the
    no-arrival and look-ahead curves where a method asked for reads them."""
    probes, features, noarr_rec, ahead_rec = _recorders(methods, rows, kw)
    samples = _generate(probes, setting, times, kw)
    queue = None if features is None else [c.queue for c in _generate(features, setting, times, kw)]
    noarr = (
        None if noarr_rec is None else [c.start for c in _generate(noarr_rec, setting, times, kw)]
    )
    ahead = (
        None if ahead_rec is None else [c.start for c in _generate(ahead_rec, setting, times, kw)]
    )
    return samples, queue, noarr, ahead


def _comparisons(h2h: Any, picked: Any, stated: dict[str, float], ahead: Any,
                 unit: HourUnit) -> str:  # fmt: skip
    """The text after a load's table: head to head (best learned, selected, look-ahead),
    coverage."""
    from mirage.evaluate.report import render_head_to_head

    text = render_head_to_head(h2h, unit=unit) if h2h else ""
    if picked:
        text += render_head_to_head(picked, "the method selected on the tuning split", unit)
    if ahead:
        text += render_head_to_head(ahead, "lookahead", unit)
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
    tuned = tune(walkers["tune"], plain, protocol.cost)
    learned = kw["learned"]
    results = run_methods(walkers["test"], plain, tuned.params, protocol.cost, learned=learned)
    if SELECTED not in methods:
        return results, tuned.params, tuned.scores, None
    chosen, scores = select(walkers["tune"], plain, tuned.params, protocol.cost, learned)
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
) -> RollingResult:
    """Rolling recalibration over the test split (``kw["rolling"]``: e.g.
    :func:`mirage.learn.rolling.run_rolling`)."""
    from mirage.evaluate.harness import Walker
    from mirage.evaluate.protocol import blocks

    (s_tune, q_tune, n_tune, a_tune), (s_test, q_test, n_test, a_test) = (
        queues["tune"],
        queues["test"],
    )
    queue = None if q_tune is None or q_test is None else [*q_tune, *q_test]
    noarr = None if n_tune is None or n_test is None else [*n_tune, *n_test]
    ahead = None if a_tune is None or a_test is None else [*a_tune, *a_test]
    history = Walker([*s_tune, *s_test], protocol, profile, partition, queue,
                     no_arrivals=noarr, lookahead=ahead, shipped=kw["shipped"])  # fmt: skip
    # the test samples are history's last ones: share their contexts and matrices
    first_test = len(history.samples) - len(test.samples)
    test = history.subset(range(first_test, len(history.samples)))
    day = 86400
    plan = blocks(split.start, split.end, int(kw["recal_every_days"] * day),
                  int(kw["recal_window_days"] * day))  # fmt: skip
    try:
        rolling: RollingFn = kw["rolling"]
        return rolling(history, test, methods, protocol.cost, kw["learned"], plan)
    except ValueError as exc:
        raise InputError(str(exc)) from exc


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
    log.warning("PNG plots skipped: %s", MissingExtra("plots", module, "plotting"))
    return True
