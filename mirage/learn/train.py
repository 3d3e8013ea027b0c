"""The training pipeline behind ``mirage train``.

1. Worlds: the cluster's trace replayed on its calibrated profile at each training load
   (a load factor shrinks the cluster, as in :mod:`mirage.evaluate.protocol`).
2. Data: counterfactual probes and decision features on the *training* split (ls6: up to
   2023-01-31) and the *tuning* split (ls6: February 2023); the test split is never read
   (the replays are cut at each split's end).
3. Fit: forecasters on the training rows (wait quantiles), agents on episodes of the
   training samples; then each forecaster's band is chosen on the tuning split (least
   mean J over a grid fixed here), and every policy's tuning-split metrics are recorded.
4. Save under ``models/<cluster>/<policy>/`` with metadata.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from mirage.evaluate.features import generate_features
from mirage.evaluate.probes import SampleResult, generate
from mirage.evaluate.protocol import Protocol, Setting, Split, sample_times, scaled_nodes
from mirage.extras import require
from mirage.learn.artifacts import ModelMeta
from mirage.learn.dataset import Dataset
from mirage.policy.cost import DEFAULT_COST, CostModel
from mirage.profile.schema import ClusterProfile, load_profile

log = logging.getLogger(__name__)
HOUR = 3600.0

#: Band grid for the forecasters (hours added to the predicted wait quantile). The deep
#: negative bands let the rule fall back to (almost) reactive submission where the
#: forecasts are far off scale, as a model moved to another cluster's waits may be; the
#: wide positive ones let it submit at the predecessor's start in queues deeper than the
#: forecasts (CERIT's), up to 48 h, where a 48-hour chain's rule saturates.
BANDS_H = (-48.0, -24.0, -12.0, -6.0, -4.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 12.0,
           16.0, 24.0, 48.0)  # fmt: skip

#: (task label, items done, total), as :meth:`mirage.progress.Bars.update` takes them.
Progress = Callable[[str, float, float], None]


@dataclass
class TrainConfig:
    cluster: str
    trace: str
    profile: str
    splits: dict[str, Split]  # "train", "tune"
    loads: tuple[float, ...] = (1.0,)
    protocol: Protocol = field(default_factory=Protocol)
    train_every_s: int = 4 * 3600  # sample spacing on the training split
    # decision step on the training split (probes cost one fork per step: a coarser step
    # makes heavy-load training data affordable; features do not depend on the step)
    train_step_s: int | None = None
    # per load: sample spacing of its training and tuning splits and decision step of its
    # training split, overriding the above
    schedule: dict[float, tuple[int, int]] = field(default_factory=dict)
    # loads seen in training only (widening the range of queues the models have seen),
    # not in tuning: the constants are tuned on the loads that are evaluated
    train_only_loads: tuple[float, ...] = ()
    seed: int = 0
    cost: CostModel = DEFAULT_COST
    cache: str | None = "out/probe-cache"
    n_jobs: int = 1
    agent_steps: int = 300_000
    first_submit: int = 0
    # the shipped choice: where a tuning load's samples hold fewer than MIN_N quiet ones,
    # also every quiet sample at this spacing (0: off; mirage.evaluate.census; mirage train
    # sets mirage.learn.api.QUIET_EVERY_H)
    quiet_every_s: int = 0


@dataclass
class Data:
    train: Dataset
    tune: Dataset
    counts: dict[str, dict[str, int]]  # load -> split -> usable samples
    # per tuning load: its protocol and every recorded sample (usable or not), for the
    # choice of the shipped configuration (mirage.learn.ship)
    tune_by_load: dict[float, tuple[Protocol, list[SampleResult]]] = field(default_factory=dict)


def _setting(cfg: TrainConfig, profile: ClusterProfile, load: float, split: Split) -> Setting:
    part = profile.partition(cfg.protocol.partition)
    assert part.nodes is not None
    protocol = cfg.protocol
    every, step = cfg.schedule.get(load, (cfg.train_every_s, cfg.train_step_s or protocol.step_s))
    if split.name == "train":
        protocol = Protocol(**{**protocol.__dict__, "every_s": every, "step_s": step})
    elif load in cfg.schedule:  # a load's own spacing holds for its tuning samples too
        protocol = Protocol(**{**protocol.__dict__, "every_s": every})
    nodes = scaled_nodes(part.nodes, load)
    return Setting(cfg.trace, cfg.profile, nodes, load, split, protocol)


def load_data(cfg: TrainConfig, progress: Progress | None = None) -> Data:
    """Probes and features for every load on the training and tuning splits (cached)."""
    train, counts, _ = _split_data(cfg, "train", (*cfg.loads, *cfg.train_only_loads), progress)
    tune, tune_counts, by_load = _split_data(cfg, "tune", cfg.loads, progress)
    for load, n in tune_counts.items():
        counts.setdefault(load, {}).update(n)
    return Data(train, tune, counts, by_load)


#: A split's dataset, its usable sample counts (load -> split -> n), and per load its
#: protocol and every recorded sample.
SplitData = tuple[
    Dataset, dict[str, dict[str, int]], dict[float, tuple[Protocol, list[SampleResult]]]
]


def tuning_data(cfg: TrainConfig, progress: Progress | None = None) -> SplitData:
    """The tuning split's probes and features at the tuning loads (cached)."""
    return _split_data(cfg, "tune", cfg.loads, progress)


def tuning_curves(
    cfg: TrainConfig, progress: Progress | None = None
) -> dict[float, list[np.ndarray]]:
    """Per tuning load, each tuning sample's look-ahead curve (cached; in the order of its
    probes, :func:`tuning_data`): the shipped choice's look-ahead veto reads them
    (:mod:`mirage.learn.ship`)."""
    from mirage.evaluate.lookahead import LOOKAHEAD_CURVES
    from mirage.evaluate.probes import record_all

    profile = load_profile(cfg.profile)
    out: dict[float, list[np.ndarray]] = {}
    for load in cfg.loads:
        setting = _setting(cfg, profile, load, cfg.splits["tune"])
        times = sample_times(setting.split, setting.protocol, cfg.first_submit)
        label = f"look-ahead tune load {load:g}"
        bar = None if progress is None else functools.partial(progress, label)
        curves = record_all(setting, times, LOOKAHEAD_CURVES, cache=cfg.cache,
                            n_jobs=cfg.n_jobs, progress=bar)  # fmt: skip
        out[load] = [c.start for c in curves]
    return out


def quiet_count(samples: Sequence[SampleResult]) -> int:
    """How many of ``samples`` are usable and quiet (the low level)."""
    from mirage.evaluate.census import probe_gap
    from mirage.evaluate.stats import load_levels

    known = [g for g in (probe_gap(s) for s in samples) if g is not None]
    return int(np.sum(load_levels(np.array(known, np.int64)) == "low"))


def census_runs(every_s: int, quiet_every_s: int) -> bool:
    """Whether a load sampled every ``every_s`` gets the quiet census at ``quiet_every_s``
    (0: off): only where the census is denser, or it would find nothing new."""
    return 0 < quiet_every_s < every_s


def quiet_samples(
    cfg: TrainConfig,
    by_load: Mapping[float, tuple[Protocol, list[SampleResult]]],
    progress: Progress | None = None,
) -> dict[float, tuple[list[SampleResult], list[np.ndarray]]]:
    """Per tuning load whose samples hold fewer than MIN_N quiet ones: the other quiet
    samples of the tuning split at ``cfg.quiet_every_s`` (found by a census, one fork
    each), their probes and look-ahead curves (cached; the spacing is not part of the
    cache key, so a sample already probed at the coarser spacing is read back). A load
    whose own spacing is already as dense has no census: it would find nothing new."""
    from mirage.evaluate.census import quiet_times
    from mirage.evaluate.lookahead import LOOKAHEAD_CURVES
    from mirage.evaluate.probes import record_all
    from mirage.evaluate.stats import MIN_N

    profile = load_profile(cfg.profile)
    out: dict[float, tuple[list[SampleResult], list[np.ndarray]]] = {}
    for load in cfg.loads:
        have = by_load[load][1]
        if quiet_count(have) >= MIN_N:
            continue
        coarse = _setting(cfg, profile, load, cfg.splits["tune"])
        if not census_runs(coarse.protocol.every_s, cfg.quiet_every_s):
            continue
        setting = replace(coarse, protocol=replace(coarse.protocol, every_s=cfg.quiet_every_s))
        seen = {s.t for s in have}
        times = [t for t in sample_times(setting.split, setting.protocol, cfg.first_submit)
                 if t not in seen]  # fmt: skip
        bar = None if progress is None else functools.partial(progress, f"census load {load:g}")
        quiet = quiet_times(setting, times, cache=cfg.cache, n_jobs=cfg.n_jobs, progress=bar)
        samples = generate(setting, quiet, cache=cfg.cache, n_jobs=cfg.n_jobs)
        curves = record_all(setting, quiet, LOOKAHEAD_CURVES, cache=cfg.cache, n_jobs=cfg.n_jobs)
        out[load] = (samples, [c.start for c in curves])
    return out


def _split_data(
    cfg: TrainConfig, name: str, loads: Sequence[float], progress: Progress | None
) -> SplitData:
    """One split's probes and features at each of ``loads`` (cached), as one dataset; its
    sample counts; and per load, its protocol and samples."""
    profile = load_profile(cfg.profile)
    parts: list[Dataset] = []
    counts: dict[str, dict[str, int]] = {}
    by_load: dict[float, tuple[Protocol, list[SampleResult]]] = {}
    for load in loads:
        setting = _setting(cfg, profile, load, cfg.splits[name])
        times = sample_times(setting.split, setting.protocol, cfg.first_submit)
        label = f"probes {name} load {load:g}"
        bar = None if progress is None else functools.partial(progress, label)
        samples = generate(setting, times, cache=cfg.cache, n_jobs=cfg.n_jobs, progress=bar)
        curves = generate_features(setting, times, cache=cfg.cache, n_jobs=cfg.n_jobs, progress=bar)
        ds = Dataset.build(samples, curves, setting.protocol, profile, cfg.cost)
        parts.append(ds)
        counts[f"{load:g}"] = {name: len(ds.samples)}
        by_load[load] = (setting.protocol, list(samples))
    return Dataset.concat(parts), counts, by_load


# ---- judging on a split ------------------------------------------------------------------


StepRule = Callable[[int, np.ndarray, np.ndarray], int]  # (sample, matrix, left_h) -> k


def walk(rule: StepRule, ds: Dataset) -> np.ndarray:
    """J (hours) of each sample of ``ds`` when submitted at the step a policy picks."""
    out = np.empty(len(ds.samples))
    for i, (s, m) in enumerate(zip(ds.samples, ds.matrices, strict=True)):
        left = (s.planned_end - s.steps[:-1]) / HOUR
        out[i] = ds.cost_curve(i)[rule(i, m, left)]
    return out


PlanRule = Callable[[int, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def walk_plans(plan: PlanRule, ds: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """J (hours) of each sample of ``ds`` under a policy's per-step answers (submit,
    revoke; the daemon's rule, :func:`mirage.policy.base.revocable_step`), and the number
    of revocations of each."""
    from mirage.policy.base import revocable_step

    cost = np.empty(len(ds.samples))
    revoked = np.zeros(len(ds.samples), np.int64)
    for i, (s, m) in enumerate(zip(ds.samples, ds.matrices, strict=True)):
        submit, revoke = plan(i, m, (s.planned_end - s.steps[:-1]) / HOUR)
        k, revoked[i] = revocable_step(submit, revoke, s.succ_start, s.steps)
        cost[i] = ds.cost_curve(i)[k]
    return cost, revoked


def pick_revoke_margin(
    margins: Sequence[float | None], j_for: Callable[[float | None], tuple[np.ndarray, np.ndarray]]
) -> tuple[float | None, dict[str, Any]]:
    """The revocation margin of least mean J on the tuning split; ties go to never revoking,
    then to the widest margin (fewest cancellations). Returns it and the metrics."""
    runs = {m: j_for(m) for m in margins}
    scores = {m: float(j.mean()) for m, (j, _n) in runs.items()}
    best = min(margins, key=lambda m: (scores[m], m is not None, -(m or 0.0)))
    return best, {
        "tune_revoke_scores_mean_J_h": {
            ("never" if m is None else f"{m:g}"): v for m, v in scores.items()
        },
        "tune_revocations": int(runs[best][1].sum()),
    }


def split_metrics(j_h: np.ndarray, ds: Dataset) -> dict[str, float]:
    reactive = np.array([ds.cost_curve(i)[-1] for i in range(len(ds.samples))])
    oracle = np.array([ds.cost_curve(i).min() for i in range(len(ds.samples))])
    return {
        "samples": len(ds.samples),
        "mean_J_h": float(j_h.mean()) if len(j_h) else float("nan"),
        "reactive_mean_J_h": float(reactive.mean()) if len(j_h) else float("nan"),
        "oracle_mean_J_h": float(oracle.mean()) if len(j_h) else float("nan"),
    }


def coverage(q: np.ndarray, wait_h: np.ndarray) -> float:
    """Share of true waits inside the predicted interval (columns: low, high)."""
    inside = (wait_h >= q[:, 0]) & (wait_h <= q[:, -1])
    return float(inside.mean()) if len(inside) else float("nan")


# ---- fitting -----------------------------------------------------------------------------


def fit_forecaster(kind: str, data: Data, cfg: TrainConfig) -> tuple[Any, dict[str, Any]]:
    from mirage.learn.forecast import FORECASTERS, quantile_levels
    from mirage.policy.decision import mask_estimates

    model = FORECASTERS[kind](
        quantile_levels(cfg.cost.early_weight(cfg.protocol.time_limit_s)), seed=cfg.seed
    )
    t0 = time.perf_counter()
    model.fit(mask_estimates(data.train.x, cfg.seed), data.train.wait_h)
    fit_s = time.perf_counter() - t0
    policy, params, metrics = tune_forecaster(kind, model, data.tune)
    metrics = {"fit_s": round(fit_s, 1), **metrics, "train_rows": len(data.train)}
    return (policy, model, params), metrics


def tune_forecaster(
    kind: str, model: Any, tune: Dataset
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """A fitted forecaster's decision constants, chosen on the tuning split: the quantile
    and band acted on (least mean J over a fixed grid), the quiet queue's own, and the
    conformal pad of its 90% interval. Returns (policy, params, metrics)."""
    from mirage.learn.forecast import (
        REVOKE_MARGINS_H,
        ForecastPolicy,
        conformal_pad,
        group_pads,
        newsvendor_level,
        pad_group,
    )

    levels = model.levels
    q_tune = model.predict(tune.x)
    per_sample = [q_tune[tune.sample == i] for i in range(len(tune.samples))]

    def j_for(act: int, busy: float, quiet_act: int, calm: float) -> np.ndarray:
        # the policy's own rule on the cached tuning predictions
        p = ForecastPolicy(model, busy * HOUR, act, kind, quiet_band_s=calm * HOUR,
                           quiet_act=quiet_act)  # fmt: skip

        def rule(i: int, _m: np.ndarray, left: np.ndarray) -> int:
            return p.first_step(per_sample[i], left)

        return walk(rule, tune)

    # one quantile and band everywhere first, then the quiet queue's own (same grids)
    grid = [(a, b) for a in range(len(levels)) for b in BANDS_H]
    scores = {g: float(j_for(g[0], g[1], g[0], g[1]).mean()) for g in grid}
    limit = float(np.median([x.time_limit for x in tune.samples])) if tune.samples else 0.0
    theory = newsvendor_level(tune.cost.early_weight(limit))
    target = min(range(len(levels)), key=lambda i: abs(levels[i] - theory))
    # least J; ties go to the theory's quantile and the smallest band (then: to no change)
    act, band = min(grid, key=lambda g: (scores[g], g[0] != target, abs(g[1])))
    quiet_scores = {g: float(j_for(act, band, g[0], g[1]).mean()) for g in grid}
    calm_act, calm = min(
        grid, key=lambda g: (quiet_scores[g], g != (act, band), g[0] != target, abs(g[1]))
    )

    def plans_for(margin: float | None) -> tuple[np.ndarray, np.ndarray]:
        p = ForecastPolicy(model, band * HOUR, act, kind, quiet_band_s=calm * HOUR,
                           quiet_act=calm_act, revoke_margin_h=margin)  # fmt: skip
        return walk_plans(lambda i, _m, left: p.plan(per_sample[i], left), tune)

    # then whether, and how far too early, to revoke a pending pre-submission
    revoke, revoke_metrics = pick_revoke_margin(REVOKE_MARGINS_H, plans_for)
    pad = conformal_pad(q_tune[:, 0], q_tune[:, -1], tune.wait_h)
    policy = ForecastPolicy(
        model, band * HOUR, act, kind, quiet_band_s=calm * HOUR, interval_pad=pad,
        quiet_act=calm_act, revoke_margin_h=revoke,
    )  # fmt: skip
    mid = q_tune[:, policy.mid]
    pads = policy.interval_pads = group_pads(q_tune[:, 0], q_tune[:, -1], mid, tune.wait_h)
    stated = policy.interval_h(q_tune)
    group = pad_group(mid)
    metrics: dict[str, Any] = {
        "tune": split_metrics(plans_for(revoke)[0], tune),
        "tune_scores_mean_J_h": {f"q{levels[a]:g} {b:+g}h": v for (a, b), v in scores.items()},
        "tune_quiet_scores_mean_J_h": {
            f"q{levels[a]:g} {b:+g}h": v for (a, b), v in quiet_scores.items()
        },
        **revoke_metrics,
        "tune_interval_coverage_90_raw": coverage(q_tune[:, [0, -1]], tune.wait_h),
        "tune_interval_coverage_90": coverage(stated, tune.wait_h),
        "tune_interval_coverage_90_by_group": [
            coverage(stated[group == g], tune.wait_h[group == g]) for g in range(len(pads))
        ],
    }
    params = {
        "band_s": band * HOUR,
        "quiet_band_s": calm * HOUR,
        "quiet_act": calm_act,
        "interval_pad": pad,
        "interval_pads": list(pads),
        "act": act,
        "revoke_margin_h": revoke,
        "levels": list(levels),
        "cost": tune.cost.to_dict(),
    }
    return policy, params, metrics


def tune_agent(kind: str, model: Any, tune: Dataset) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """An agent's margin (:class:`mirage.learn.agents.AgentPolicy`), chosen on the tuning
    split: least mean J over :data:`mirage.learn.agents.MARGINS`, ties to the smallest;
    then its revocation margin (:data:`mirage.learn.agents.REVOKE_MARGINS`).
    Returns (policy, params, metrics) like :func:`tune_forecaster`."""
    require("rl", f"tuning the {kind} policy")
    from mirage.learn.agents import (
        MARGINS,
        REVOKE_MARGINS,
        REWARD_SCALE,
        AgentPolicy,
        first_above,
    )

    plain = AgentPolicy(model, kind)
    per_sample = [plain.scores(m) for m in tune.matrices]

    def j_for(margin: float) -> np.ndarray:
        return walk(lambda i, _m, _left: first_above(per_sample[i], margin), tune)

    scores = {m: float(j_for(m).mean()) for m in MARGINS}
    margin = min(MARGINS, key=lambda m: (scores[m], abs(m)))

    def plans_for(revoke: float | None) -> tuple[np.ndarray, np.ndarray]:
        p = AgentPolicy(model, kind, margin, revoke)
        return walk_plans(lambda i, _m, _left: p.plan(per_sample[i]), tune)

    revoke, revoke_metrics = pick_revoke_margin(REVOKE_MARGINS, plans_for)
    metrics = {
        "tune": split_metrics(plans_for(revoke)[0], tune),
        "tune_scores_mean_J_h": {f"margin {m:+g}": v for m, v in scores.items()},
        **revoke_metrics,
    }
    params = {
        "cost": tune.cost.to_dict(),
        "reward_scale_h": REWARD_SCALE,
        "margin": margin,
        "revoke_margin": revoke,
    }
    return AgentPolicy(model, kind, margin, revoke), params, metrics


def fit_agent(kind: str, data: Data, cfg: TrainConfig) -> tuple[Any, dict[str, Any]]:
    require("rl", f"training the {kind} policy")
    from mirage.learn.agents import REWARD_SCALE, AgentPolicy, ChainEnv, make_model
    from mirage.policy.decision import mask_estimates

    costs = [data.train.cost_curve(i) for i in range(len(data.train.samples))]
    mats = [mask_estimates(m, cfg.seed + i) for i, m in enumerate(data.train.matrices)]
    env = ChainEnv(mats, costs, seed=cfg.seed)
    model = make_model(kind, env, cfg.seed)
    t0 = time.perf_counter()
    model.learn(total_timesteps=cfg.agent_steps, progress_bar=False)
    fit_s = time.perf_counter() - t0
    policy = AgentPolicy(model, kind)
    metrics: dict[str, Any] = {
        "fit_s": round(fit_s, 1),
        "timesteps": cfg.agent_steps,
        "tune": split_metrics(
            walk(lambda _i, m, left: policy.steps_for(m, left), data.tune), data.tune
        ),
        "train_rows": len(data.train),
    }
    return (policy, model, {"cost": cfg.cost.to_dict(), "reward_scale_h": REWARD_SCALE}), metrics


def file_hash(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        return ""
    return hashlib.sha256(p.read_bytes()).hexdigest()


def save(
    *,
    kind: str,
    fitted: Any,
    metrics: dict[str, Any],
    counts: dict[str, dict[str, int]],
    cfg: TrainConfig,
    root: Path,
    origin: dict[str, Any] | None = None,
) -> Path:
    """Write a policy's files and metadata under ``root/<cluster>/<kind>/``. ``origin``:
    where a recalibrated model was trained (:func:`recalibrate`)."""
    _policy, model, params = fitted
    folder = root / cfg.cluster / kind
    folder.mkdir(parents=True, exist_ok=True)
    if kind in ("rf", "xgb"):
        files = model.save(folder)
    else:
        model.save(folder / "model.zip")
        files = ["model.zip"]
    meta = ModelMeta(
        policy=kind,
        cluster=cfg.cluster,
        files=files,
        params=params,
        training={
            "trace": Path(cfg.trace).name,
            "trace_sha256": file_hash(cfg.trace),
            "profile": Path(cfg.profile).name,
            "profile_sha256": file_hash(cfg.profile),
            "splits": {k: v.as_dict() for k, v in cfg.splits.items()},
            "loads": list(cfg.loads),
            "train_only_loads": list(cfg.train_only_loads),
            "samples": counts,
            "protocol": dataclasses.asdict(cfg.protocol),
            "train_every_s": cfg.train_every_s,
            "train_step_s": cfg.train_step_s or cfg.protocol.step_s,
            "schedule": {f"{k:g}": list(v) for k, v in cfg.schedule.items()},
            "seed": cfg.seed,
            # the cluster it is tuned for, as the daemon checks a live cluster against it:
            # each partition's nodes and GPUs per node, and the mean wait of a reactive
            # successor on the tuning split (reactive's J)
            "shape": cluster_shape(cfg.profile),
            "wait_scale_h": (metrics.get("tune") or {}).get("reactive_mean_J_h"),
            **({"recalibrated_from": origin} if origin else {}),
        },
        metrics=metrics,
    )
    meta.write(folder)
    return folder


def cluster_shape(profile_path: str | Path) -> dict[str, dict[str, int | None]]:
    """Partition -> its node count and GPUs per node, from the profile a model is tuned on."""
    from mirage.profile.schema import load_profile

    profile = load_profile(str(profile_path))
    return {
        p.name: {"nodes": p.nodes, "gpus_per_node": p.gpus_per_node} for p in profile.partitions
    }


def train(
    cfg: TrainConfig,
    policies: Sequence[str],
    root: Path,
    progress: Progress | None = None,
    data: Data | None = None,
) -> dict[str, dict[str, Any]]:
    """Train ``policies`` and save them under ``root``; return their metrics."""
    data = data or load_data(cfg, progress)
    if not data.train.samples or not data.tune.samples:
        raise ValueError(f"no usable samples: {data.counts} (a shorter window or lower load?)")
    # With several processes, the policies are fitted side by side, longest first (an
    # agent's 300,000 steps are single-threaded): each fit is seeded and single-process
    # as it would be alone, so the models are the same as one after the other.
    longest_first = sorted(policies, key=FIT_ORDER.index)
    workers = min(cfg.n_jobs, len(policies))
    if workers > 1:
        from joblib import Parallel, delayed

        par = Parallel(n_jobs=workers, pre_dispatch="n_jobs")
        done = par(delayed(_fit_and_save)(k, data, cfg, root) for k in longest_first)
    else:
        done = [_fit_and_save(k, data, cfg, root) for k in longest_first]
    metrics = dict(zip(longest_first, done, strict=True))
    return {kind: metrics[kind] for kind in policies}


#: The policies, longest fit first (ls6, 2 cores: dqn 390 s, pg 275 s, xgb 44 s, rf 23 s).
FIT_ORDER = ("dqn", "pg", "xgb", "rf")


def _fit_and_save(kind: str, data: Data, cfg: TrainConfig, root: Path) -> dict[str, Any]:
    fit = fit_forecaster if kind in ("rf", "xgb") else fit_agent
    fitted, metrics = fit(kind, data, cfg)
    folder = save(kind=kind, fitted=fitted, metrics=metrics, counts=data.counts, cfg=cfg, root=root)
    return {**metrics, "folder": str(folder)}


def recalibrate(
    cfg: TrainConfig,
    policies: Sequence[str],
    source: Path,
    root: Path,
    progress: Progress | None = None,
    *,
    tuning: SplitData | None = None,
) -> dict[str, dict[str, Any]]:
    """Move policies trained on another cluster (``source/<policy>/``) to this one
    (``tuning``: the tuning split's data, :func:`tuning_data`, else read here).

    The models are kept as they are; only their decision constants are re-tuned on this
    cluster's tuning split: a forecaster's quantile and band acted on, the quiet queue's
    and the interval's conformal pads (as :func:`fit_forecaster` tunes them after
    training), an agent's margin (:func:`tune_agent`; training leaves it at 0). Those
    constants are what fails when a model crosses clusters: each cluster's waits sit on
    their own scale, while the ranking of queue states that the model learnt carries over.
    Only the tuning split is replayed, so a new cluster needs a month of history, not four.
    """
    from mirage.learn.artifacts import agent_class, load_policy
    from mirage.learn.forecast import ForecastPolicy

    sources = {kind: load_policy(source / kind) for kind in policies}  # fail before replaying
    tune, counts, _ = tuning or tuning_data(cfg, progress)
    if not tune.samples:
        raise ValueError(f"no usable tuning samples: {counts} (a shorter window or lower load?)")
    out: dict[str, dict[str, Any]] = {}
    for kind, (loaded, meta) in sources.items():
        if isinstance(loaded, ForecastPolicy):
            model = loaded.forecaster
            policy, params, metrics = tune_forecaster(kind, model, tune)
        else:
            agent = agent_class()  # loading an agent needed the rl extra: it is there
            assert agent is not None and isinstance(loaded, agent)
            model = loaded.model
            policy, params, metrics = tune_agent(kind, model, tune)
        metrics = {"fit_s": 0.0, **metrics, "train_rows": 0}
        # a model recalibrated again (weekly, in place) keeps the record of its training
        origin = meta.training.get("recalibrated_from") or {
            "cluster": meta.cluster,
            "folder": str(source / kind),
            "created": meta.created,
            "params": meta.params,
            "training": meta.training,
        }
        metrics["folder"] = str(
            save(
                kind=kind,
                fitted=(policy, model, params),
                metrics=metrics,
                counts=counts,
                cfg=cfg,
                root=root,
                origin=origin,
            )
        )
        out[kind] = metrics
    return out
