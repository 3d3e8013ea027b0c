"""Fit a synthetic-trace model on a trace's training split, save it, sample traces from it.

A model directory holds ``synthesizer.pkl`` (the SDV synthesizer of job attributes),
``arrivals.json`` (the arrival process, :mod:`mirage.synth.arrivals`) and
``metadata.json`` (columns, trace hash, training window, cluster limits, versions, fit
time). Sampled traces are canonical tables (:mod:`mirage.trace.schema`) the simulator
replays: submits from the arrival process, attributes from the synthesizer.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mirage import __version__
from mirage.synth import tabular
from mirage.synth.arrivals import ArrivalModel, fit_arrivals
from mirage.synth.chains import ChainModel, apply_chains, chain_groups, fit_chains
from mirage.trace.schema import conform

FORMAT_VERSION = 1
SYNTH_FILE = "synthesizer.pkl"
ARRIVALS_FILE = "arrivals.json"
CHAINS_FILE = "chains.json"  # absent in model directories fitted before chains existed
META_FILE = "metadata.json"
#: Request columns a burst's jobs share with its first job (97% of ls6 bursts have one
#: user, 98% one node count, 93% one limit: a burst is one script submitting copies).
BURST_SHARED = ("user", "partition", "nodes", "gpus", "cpus", "time_limit")


class ModelDirError(ValueError):
    """A model directory that is missing, incomplete or of another format/SDV version."""


def file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@dataclass
class FitResult:
    metadata: dict[str, Any]
    synthesizer: Any
    arrivals: ArrivalModel
    chains: ChainModel | None = None


def fit_trace(
    jobs: pd.DataFrame,
    *,
    model: str,
    tz: str,
    before: int,
    after: int | None = None,
    epochs: int | None = None,
    max_nodes: int | None = None,
    trace_path: str | None = None,
    verbose: bool = False,
    seed: int = 0,
) -> FitResult:
    """Fit on the jobs submitted in [after, before) only: nothing later is looked at."""
    import torch

    torch.manual_seed(seed)  # the GANs' and TVAE's initialisation and batches
    np.random.seed(seed)  # SDV's own sampling of conditional vectors uses the global RNG
    sub = jobs["submit"]
    keep = sub.notna() & (sub < before)
    if after is not None:
        keep &= sub >= after
    train = jobs.loc[keep.to_numpy(dtype=bool)]
    if max_nodes is not None:
        # Jobs larger than the cluster cannot be replayed; do not teach them to the model.
        train = train.loc[(train["nodes"].fillna(1) <= max_nodes).to_numpy(dtype=bool)]
    frame = tabular.training_frame(train)
    if len(frame.data) < 20:
        raise ValueError(f"only {len(frame.data)} jobs ran in the training window: too few")
    synth = tabular.make_synthesizer(model, frame, epochs, verbose)
    t0 = time.perf_counter()
    tabular.fit(synth, frame)
    fit_s = time.perf_counter() - t0
    submits = train["submit"].astype("int64").to_numpy()
    t1 = time.perf_counter()
    arrivals = fit_arrivals(submits, tz, start=after, end=before)
    arr_s = time.perf_counter() - t1
    chains = fit_chains(train)
    params = synth.get_parameters()
    users = sorted(set(frame.data["user"])) if "user" in frame.categorical else []
    newcomers = new_user_share(train) if users else 0.0
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "model": model,
        "epochs": params.get("epochs"),
        "batch_size": params.get("batch_size"),
        "seed": seed,
        "columns": {"numeric": frame.numeric, "categorical": frame.categorical},
        "constants": frame.constants,
        "rows": len(frame.data),
        "users": users,
        "new_user_share": newcomers,
        "trace": {
            "path": trace_path,
            "sha256_16": file_hash(trace_path) if trace_path else None,
        },
        "training_window": {
            "after": after,
            "before": before,
            "first_submit": int(submits.min()),
            "last_submit": int(submits.max()),
            "tz": tz,
        },
        "limits": {
            "max_nodes": max_nodes,
            "max_time_limit": int(_limits(frame.data, frame.constants).max()),
            "run_over_limit_share": frame.run_over_limit,
        },
        "fit_s": {"synthesizer": fit_s, "arrivals": arr_s},
        "arrivals": {
            "jobs_per_day": arrivals.jobs_per_day,
            "bursts": arrivals.bursts,
            "day_shape": arrivals.day_shape,
            "observed_hours": arrivals.observed_hours,
        },
        "chains": {
            "held_chains": len(chains.lengths),
            "job_share": chains.job_share,
            "mean_length": float(np.mean(chains.lengths)) if chains.lengths else 0.0,
        },
        "versions": {
            "mirage": __version__,
            "sdv": tabular.sdv_version(),
            "python": platform.python_version(),
        },
    }
    return FitResult(meta, synth, arrivals, chains)


def save_model(res: FitResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tabular.save(res.synthesizer, out / SYNTH_FILE)
    (out / ARRIVALS_FILE).write_text(json.dumps(res.arrivals.to_dict()))
    if res.chains is not None:
        (out / CHAINS_FILE).write_text(json.dumps(res.chains.to_dict()))
    (out / META_FILE).write_text(json.dumps(res.metadata, indent=2, sort_keys=True))


def load_model(model_dir: Path) -> FitResult:
    """Load a model directory; refuse another format or another SDV major.minor version
    (pickled synthesizers do not survive SDV's internal changes)."""
    meta_path = model_dir / META_FILE
    if not meta_path.is_file():
        raise ModelDirError(f"{model_dir}: no {META_FILE} (not a `mirage synth fit` output)")
    meta = json.loads(meta_path.read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelDirError(f"{model_dir}: format {meta.get('format_version')}, "
                            f"this Mirage reads {FORMAT_VERSION}")  # fmt: skip
    have, saved = tabular.sdv_version(), str(meta["versions"]["sdv"])
    if have.split(".")[:2] != saved.split(".")[:2]:
        raise ModelDirError(f"{model_dir}: fitted with SDV {saved}, installed SDV {have}; refit")
    synth = tabular.load(model_dir / SYNTH_FILE)
    arrivals = ArrivalModel.from_dict(json.loads((model_dir / ARRIVALS_FILE).read_text()))
    chains_path = model_dir / CHAINS_FILE
    chains = (
        ChainModel.from_dict(json.loads(chains_path.read_text())) if chains_path.is_file() else None
    )
    return FitResult(meta, synth, arrivals, chains)


def sample_trace(
    res: FitResult,
    n: int | None,
    start: int,
    seed: int = 0,
    *,
    sdv_arrivals: bool = False,
    until: int | None = None,
    rate_scale: float = 1.0,
    chains: bool = True,
    new_users: bool = True,
) -> pd.DataFrame:
    """``n`` synthetic jobs from ``start`` (epoch s) as a canonical table; with ``until``,
    at most ``n`` (``n`` None: all) submitted before it. ``rate_scale`` scales the arrival
    rates. ``chains``: cut the fitted share of held chains out of the arrival process's
    bursts (:mod:`mirage.synth.chains`; never with SDV inter-arrivals, which have none).
    ``new_users``: give the training split's share of newcomers' jobs to users the
    synthesizer never saw (:func:`relabel_new_users`).

    Submits come from the arrival process (``sdv_arrivals``: from the synthesizer's own
    ``interarrival_s`` column instead, the baseline the arrival process is judged
    against). Each job starts at its submit and ends after its run time: the simulator
    decides the real start; ``start``/``end`` only carry the run time.
    """
    import torch

    if n is not None and n <= 0:
        raise ValueError("n must be positive")
    if until is not None and until <= start:
        raise ValueError("the end must come after the start")
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    if sdv_arrivals:
        if n is None or until is not None or rate_scale != 1.0:
            raise ValueError("SDV inter-arrivals take a job count only (no end, no rate scale)")
        rows = _valid_rows(res, n)
        gaps = np.nan_to_num(rows["interarrival_s"].to_numpy(dtype=np.float64), nan=0.0)
        submit = start + np.cumsum(np.maximum(gaps, 0.0)).astype(np.int64)
        groups: list[np.ndarray] = []
    else:
        submit, burst, rows = _process_arrivals(
            res, n, start, rng, until=until, rate_scale=rate_scale
        )
        groups = chain_groups(burst, res.chains, rng) if chains and res.chains else []
    n = len(rows)
    limit = rows["time_limit"].to_numpy(dtype=np.float64)
    run = np.floor(np.clip(rows["run_frac"].to_numpy(dtype=np.float64), 0, 1) * limit)
    cols: dict[str, Any] = {
        "job_id": [f"s{i + 1}" for i in range(n)],
        # Unique names: no synthetic job is mistaken for a chain link by chain detection.
        "name": [f"synth{i + 1:08d}" for i in range(n)],
        "submit": submit,
        "start": submit,
        "end": submit + run.astype(np.int64),
        "time_limit": limit.astype(np.int64),
        "exit_code": np.zeros(n, dtype=np.int64),
    }
    for col in ("nodes", "gpus", "cpus"):
        if col in rows.columns:
            cols[col] = rows[col].to_numpy(dtype=np.int64)
    for col in ("user", "partition", "state"):
        if col in rows.columns:
            cols[col] = rows[col].astype(str).to_numpy()
        else:
            cols[col] = [res.metadata["constants"].get(col, "")] * n
    if new_users and "user" in rows.columns:
        share = float(res.metadata.get("new_user_share", 0.0))
        cols["user"] = relabel_new_users(np.asarray(cols["user"], dtype=object), share, rng)
    if not groups:
        return conform(pd.DataFrame(cols))
    apply_chains(cols, groups)  # chain segments take their head's submit: sort again
    table = pd.DataFrame(cols).sort_values("submit", kind="stable", ignore_index=True)
    table["job_id"] = [f"s{i + 1}" for i in range(n)]
    return conform(table)


#: The last stretch of the training split in which newcomers are counted (at most; at
#: most a third of the split, so that the users seen before it are a fair history).
NEWCOMER_WINDOW_S = 30 * 86400


def new_user_share(train: pd.DataFrame) -> float:
    """Share of the jobs of the training split's last 30 days (or last third) whose user
    had submitted nothing before them in the split (new users keep arriving)."""
    sub = train["submit"].astype("int64").to_numpy()
    if sub.size == 0:
        return 0.0
    span = int(sub.max()) - int(sub.min())
    cut = int(sub.max()) - min(NEWCOMER_WINDOW_S, span // 3)
    user = train["user"].astype(str).to_numpy()
    before, recent = set(user[sub < cut]), user[sub >= cut]
    if not before or recent.size == 0:
        return 0.0
    return float(np.mean([u not in before for u in recent]))


def relabel_new_users(users: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """Give whole users' jobs, in random order, to fresh user names (``new00001``, ...)
    until ``share`` of the jobs belong to users the synthesizer never saw: a newcomer
    behaves like a known user but cannot be recognised by name."""
    out = users.copy()
    if share <= 0 or users.size == 0:
        return out
    text = users.astype(str)
    names, counts = np.unique(text, return_counts=True)
    moved = 0
    for k, i in enumerate(rng.permutation(len(names)).tolist(), start=1):
        if moved >= share * users.size:
            break
        out[text == names[i]] = f"new{k:05d}"
        moved += int(counts[i])
    return out


def _process_arrivals(
    res: FitResult,
    n: int | None,
    start: int,
    rng: np.random.Generator,
    *,
    until: int | None,
    rate_scale: float,
) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """Submits and burst ids from the arrival process, and one synthesizer row per submit;
    jobs of one burst share the request of its first job (:data:`BURST_SHARED`)."""
    # Arrivals first: with an end time they decide how many rows are needed.
    sb = res.arrivals.sample(n, start, rng, end=until, rate_scale=rate_scale)
    submit, burst = sb[0], sb[1]
    if submit.size == 0:
        raise ValueError("no arrival before the end: widen the window")
    rows = _valid_rows(res, int(submit.size))
    first = np.concatenate([[True], burst[1:] != burst[:-1]])
    lead = np.maximum.accumulate(np.where(first, np.arange(submit.size), 0))
    for col in BURST_SHARED:
        if col in rows.columns:
            rows[col] = rows[col].to_numpy()[lead]
    return submit, burst, rows


def _valid_rows(res: FitResult, n: int) -> pd.DataFrame:
    """``n`` synthesizer rows that make valid jobs (rejection sampling, then clipping).

    Valid: at least one node and at most the cluster's (when known), a positive limit not
    above the training maximum, non-negative sizes, a known user.
    """
    limits = res.metadata["limits"]
    max_nodes = limits.get("max_nodes")
    max_limit = int(limits["max_time_limit"])
    users = set(res.metadata.get("users") or [])
    got: list[pd.DataFrame] = []
    have = 0
    for _ in range(10):
        rows = tabular.sample_rows(res.synthesizer, max(64, int((n - have) * 1.2)))
        rows["time_limit"] = _limits(rows, res.metadata["constants"])
        ok = (rows["nodes"] >= 1) & (rows["time_limit"] >= 1)
        if max_nodes is not None:
            ok &= rows["nodes"] <= max_nodes
        if users and "user" in rows.columns:
            ok &= rows["user"].isin(users)
        rows = rows.loc[ok.to_numpy(dtype=bool)]
        got.append(rows)
        have += len(rows)
        if have >= n:
            break
    out = pd.concat(got, ignore_index=True)
    if len(out) < n:
        raise ValueError(f"the synthesizer gave only {len(out)} valid rows of {n} asked")
    out = out.iloc[:n].reset_index(drop=True)
    out["time_limit"] = out["time_limit"].clip(lower=1, upper=max_limit)
    for col in ("gpus", "cpus"):
        if col in out.columns:
            out[col] = out[col].clip(lower=0)
    return out


def _limits(rows: pd.DataFrame, constants: dict[str, str]) -> pd.Series:
    """Time limits (int seconds) of synthesizer rows: a category column, or a constant."""
    if "time_limit" in rows.columns:
        vals = pd.to_numeric(rows["time_limit"].astype(str), errors="coerce")
    else:
        vals = pd.Series(float(constants["time_limit"]), index=rows.index)
    out: pd.Series = vals.fillna(0).astype(np.int64)
    return out
