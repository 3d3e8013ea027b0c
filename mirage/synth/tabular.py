"""The tabular half of a synthetic trace: job attributes from an SDV synthesizer.

SDV is an optional extra (``pip install 'mirage-provisioner[synth]'``): it is distributed
under the Business Source License and pulls in a large stack, so it is imported only here,
lazily, and a missing install is one clear error naming the extra.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

MODELS = ("ctgan", "tvae", "copulagan", "gaussiancopula")
#: Epoch bounds on the CPU: GANs and TVAE improve little past a few hundred epochs on a few
#: thousand rows, and each epoch over ~15k ls6 jobs takes seconds on two cores.
DEFAULT_EPOCHS = {"ctgan": 100, "tvae": 100, "copulagan": 100}
MAX_EPOCHS = 1000

#: Training-frame columns (see :func:`training_frame`).
NUMERIC = ("interarrival_s", "nodes", "gpus", "cpus", "run_frac")
#: Time limits are categories: users pick round values (ls6: 149 distinct, the top 30 cover
#: 94% of jobs), which a continuous column smears into limits nobody asks for.
CATEGORICAL = ("user", "partition", "state", "time_limit")
TABLE = "jobs"


class SynthUnavailable(RuntimeError):
    """SDV is not installed."""


def sdv_version() -> str:
    """The installed SDV version (raises :class:`SynthUnavailable` without SDV)."""
    return str(_sdv().__version__)


def _sdv() -> Any:
    try:
        return importlib.import_module("sdv")
    except ImportError as exc:
        raise SynthUnavailable(
            "synthetic traces need SDV, an optional extra under the Business Source License: "
            "pip install 'mirage-provisioner[synth]'"
        ) from exc


@dataclass
class Frame:
    """A trace as the synthesizer's training table, and what was left out of it."""

    data: pd.DataFrame
    numeric: list[str]
    categorical: list[str]
    constants: dict[str, str]  # categorical columns with one value: filled in on sampling
    run_over_limit: float  # share of jobs whose run time exceeds their limit (+ 60 s)


def training_frame(jobs: pd.DataFrame) -> Frame:
    """Canonical jobs (that ran, sorted by submit) -> the synthesizer's training table.

    Columns: ``interarrival_s`` (gap to the previous submit; kept so the SDV model's own
    arrivals can be judged against the arrival process), ``nodes``, ``gpus`` and ``cpus``
    (only where the trace records them), ``run_frac`` (run time / limit, capped at 1: a
    sampled run time can then never exceed its limit), ``user``, ``partition``, ``state``
    and ``time_limit`` (seconds, as text) as categories. A categorical column with a single value
    (ls6 has no partition) is left out and restored as a constant.
    """
    df = _ran(jobs)
    submit = df["submit"].astype("int64").to_numpy()
    run = (df["end"] - df["start"]).astype("float64").to_numpy()
    limit = df["time_limit"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    # An unknown limit is the run time (as the simulator reads it).
    limit = np.where(np.isnan(limit) | (limit <= 0), np.maximum(run, 60.0), limit)
    out = pd.DataFrame(
        {
            "interarrival_s": np.concatenate([[np.nan], np.diff(submit)]).astype(np.float64),
            "run_frac": np.clip(run / limit, 0.0, 1.0),
        }
    )
    numeric = ["interarrival_s", "run_frac"]
    for col in ("nodes", "gpus", "cpus"):
        vals = df[col].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
        if col == "nodes" or np.isfinite(vals).mean() >= 0.5:
            fill = 1.0 if col == "nodes" else 0.0
            out[col] = np.nan_to_num(vals, nan=fill).clip(min=fill).astype(np.int64)
            numeric.append(col)
    constants: dict[str, str] = {}
    categorical: list[str] = []
    cats = {c: df[c].astype(str).fillna("") for c in CATEGORICAL if c != "time_limit"}
    cats["time_limit"] = pd.Series(limit.astype(np.int64).astype(str))
    for col in CATEGORICAL:
        text = cats[col]
        if text.nunique() <= 1:
            constants[col] = str(text.iloc[0]) if len(text) else ""
        else:
            out[col] = text.to_numpy()
            categorical.append(col)
    out = out.iloc[1:].reset_index(drop=True)  # the first job has no inter-arrival gap
    over = float(np.mean(run > limit + 60)) if run.size else 0.0
    order = [c for c in NUMERIC if c in numeric] + categorical
    return Frame(out[order], [c for c in NUMERIC if c in numeric], categorical, constants, over)


def _ran(jobs: pd.DataFrame) -> pd.DataFrame:
    """Jobs with submit, start and end (end >= start), sorted by submit."""
    ok = jobs["submit"].notna() & jobs["start"].notna() & jobs["end"].notna()
    df = jobs.loc[ok]
    df = df.loc[(df["end"] >= df["start"]).to_numpy(dtype=bool)]
    out: pd.DataFrame = df.sort_values("submit", kind="stable").reset_index(drop=True)
    return out


def make_synthesizer(model: str, frame: Frame, epochs: int | None, verbose: bool) -> Any:
    """An unfitted SDV synthesizer of kind ``model`` over ``frame``'s columns (CPU only)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; one of {', '.join(MODELS)}")
    _sdv()
    from sdv.metadata import Metadata

    meta = Metadata()
    meta.add_table(TABLE)
    for col in frame.numeric:
        # Integer columns stay integers on sampling: SDV rounds to the training data's
        # decimal places (enforce_rounding).
        meta.add_column(col, TABLE, sdtype="numerical")
    for col in frame.categorical:
        meta.add_column(col, TABLE, sdtype="categorical")
    with _quiet():
        return _construct(model, meta, len(frame.data), epochs, verbose)


def _construct(model: str, meta: Any, rows: int, epochs: int | None, verbose: bool) -> Any:
    from sdv.single_table import (
        CopulaGANSynthesizer,
        CTGANSynthesizer,
        GaussianCopulaSynthesizer,
        TVAESynthesizer,
    )

    if model == "gaussiancopula":
        return GaussianCopulaSynthesizer(meta)
    n_epochs = DEFAULT_EPOCHS[model] if epochs is None else epochs
    if not 1 <= n_epochs <= MAX_EPOCHS:
        raise ValueError(f"epochs must be within 1..{MAX_EPOCHS}, got {n_epochs}")
    # Small batches on small traces: SDV's GANs need batch_size divisible by pac (10).
    batch = int(min(500, max(10, (rows // 4) // 10 * 10)))
    common: dict[str, Any] = {"epochs": n_epochs, "verbose": verbose, "enable_gpu": False,
                              "batch_size": batch}  # fmt: skip
    if model == "tvae":
        return TVAESynthesizer(meta, **common)
    if model == "copulagan":
        return CopulaGANSynthesizer(meta, **common)
    return CTGANSynthesizer(meta, **common)


@contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        # SDV warns about its own internals (e.g. pandas FutureWarnings); not ours to fix.
        warnings.simplefilter("ignore", FutureWarning)
        # The synthesizer pickles its metadata with it: no separate JSON needed.
        warnings.filterwarnings("ignore", message=".*save_to_json.*")
        yield


def fit(synth: Any, frame: Frame) -> None:
    with _quiet():
        # SDV 2 takes (and returns) {table name: frame} even for one table; SDV 1 a frame.
        synth.fit({TABLE: frame.data} if _sdv_major() >= 2 else frame.data)


def sample_rows(synth: Any, n: int) -> pd.DataFrame:
    with _quiet():
        got = synth.sample(num_rows=n)
    out: pd.DataFrame = got[TABLE] if isinstance(got, dict) else got
    return out.reset_index(drop=True)


def _sdv_major() -> int:
    return int(sdv_version().split(".")[0])


def save(synth: Any, path: Path) -> None:
    synth.save(str(path))


def load(path: Path) -> Any:
    _sdv()
    from sdv.utils import load_synthesizer

    return load_synthesizer(str(path))
