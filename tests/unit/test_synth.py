"""Synthetic traces (``mirage synth``) on the bundled ls6 slice.

The SDV tests skip when the optional ``synth`` extra is not installed (the test command
installs it through the ``dev`` extra); the arrival-process tests need only numpy/pandas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.slurm.syntax import parse_when
from mirage.synth.arrivals import (
    HOUR,
    fit_arrivals,
    hour_of_week,
    hourly_counts,
    observed_hours,
)
from mirage.trace.readers import load_trace

ROOT = Path(__file__).resolve().parents[2]
SLICE = ROOT / "traces" / "ls6-a100-slice.log.gz"
PROFILE = ROOT / "models" / "ls6" / "profile.toml"
TZ = "America/Chicago"
BEFORE = parse_when("2023-02-01", TZ)
EPOCHS = 5  # CTGAN on ~1,000 rows: ~0.15 s an epoch on one core


def _invoke(args: list[str]) -> str:
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture(scope="module")
def slice_jobs() -> pd.DataFrame:
    return load_trace(SLICE).jobs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sdv", reason="SDV (the optional 'synth' extra) is not installed")
    out = tmp_path_factory.mktemp("synth") / "ctgan"
    _invoke(["synth", "fit", "--trace", str(SLICE), "--model", "ctgan", "--epochs",
             str(EPOCHS), "--profile", str(PROFILE), "--out", str(out), "--json"])  # fmt: skip
    return out


@pytest.fixture(scope="module")
def sampled(model_dir: Path) -> Path:
    out = model_dir.parent / "synthetic.parquet"
    _invoke(["synth", "sample", "--model-dir", str(model_dir), "--n", "800", "--out",
             str(out), "--start", "2023-02-01", "--seed", "3"])  # fmt: skip
    return out


# ---- the arrival process (no SDV needed) -----------------------------------------------


def test_arrival_rates_follow_the_calendar() -> None:
    # Ten weeks of submits only on weekdays 9:00-17:00 local: the fitted process must put
    # its arrivals there too, and bursts of same-second submits must survive.
    rng = np.random.default_rng(0)
    start = parse_when("2023-01-02", TZ)  # a Monday
    submits: list[int] = []
    for day in range(70):
        if day % 7 >= 5:
            continue
        base = start + day * 86400 + 9 * HOUR
        heads = rng.uniform(base, base + 8 * HOUR, size=20).astype(np.int64)
        for h in heads.tolist():
            submits.extend([h] * int(rng.choice([1, 1, 1, 4])))  # some 4-job bursts
    s = np.sort(np.array(submits, dtype=np.int64))
    model = fit_arrivals(s, TZ, start=start, end=start + 70 * 86400)
    got = model.sample(2000, start + 70 * 86400, np.random.default_rng(1))[0]
    assert np.all(np.diff(got) >= 0)
    how = hour_of_week(got, TZ)
    assert np.all((how % 24 >= 9) & (how % 24 < 17) & (how < 5 * 24))
    assert np.mean(np.diff(got) == 0) == pytest.approx(np.mean(np.diff(s) == 0), abs=0.05)
    assert model.jobs_per_day == pytest.approx(len(s) / 70, rel=0.1)


def test_sampling_a_window_and_scaling_the_rate() -> None:
    # Steady arrivals, 10 an hour for four weeks: every arrival of a 14-day window, then the
    # same window at 1.5 times the rate (a busier target month).
    s = np.arange(0, 28 * 86400, 360, dtype=np.int64)
    model = fit_arrivals(s, TZ, start=0, end=28 * 86400)
    start, end = 30 * 86400, 44 * 86400
    base = model.sample(None, start, np.random.default_rng(2), end=end)[0]
    more = model.sample(None, start, np.random.default_rng(2), end=end, rate_scale=1.5)[0]
    assert base.size and base.min() >= start and base.max() < end
    assert base.size == pytest.approx(14 * 240, rel=0.1)
    assert more.size / base.size == pytest.approx(1.5, rel=0.1)
    capped = model.sample(100, start, np.random.default_rng(2), end=end)[0]
    assert capped.size == 100
    with pytest.raises(ValueError, match="count or an end"):
        model.sample(None, start, np.random.default_rng(2))
    with pytest.raises(ValueError, match="positive"):
        model.sample(10, start, np.random.default_rng(2), rate_scale=0)


def test_trace_holes_are_not_quiet_hours() -> None:
    # A 10-day hole between two busy days is not 240 observed hours with no arrivals.
    s = np.concatenate([np.arange(0, 86400, 600), np.arange(11 * 86400, 12 * 86400, 600)])
    hours = observed_hours(s, 0, 12 * 86400, 4 * 86400)
    assert hours.size < 3 * 24
    counts = hourly_counts(s)
    assert counts.size == hours.size and counts.min() >= 5


# ---- fit, sample, report (SDV) ----------------------------------------------------------


def test_fit_metadata(model_dir: Path, slice_jobs: pd.DataFrame) -> None:
    import hashlib

    import sdv

    meta: dict[str, Any] = json.loads((model_dir / "metadata.json").read_text())
    assert meta["model"] == "ctgan" and meta["epochs"] == EPOCHS
    assert meta["versions"]["sdv"] == sdv.__version__
    assert meta["trace"]["sha256_16"] == hashlib.sha256(SLICE.read_bytes()).hexdigest()[:16]
    w = meta["training_window"]
    assert w["before"] == BEFORE and w["last_submit"] < BEFORE  # never the test window
    n_train = int((slice_jobs["submit"] < BEFORE).sum())
    assert meta["rows"] == n_train - 1  # the first job has no inter-arrival gap
    assert {"user", "time_limit", "state"} <= set(meta["columns"]["categorical"])
    assert {"interarrival_s", "nodes", "run_frac"} <= set(meta["columns"]["numeric"])
    assert meta["constants"] == {"partition": ""}  # ls6 records no partition
    assert meta["fit_s"]["synthesizer"] > 0
    assert (model_dir / "synthesizer.pkl").is_file() and (model_dir / "arrivals.json").is_file()


def test_default_before_is_the_ls6_training_split(tmp_path: Path) -> None:
    pytest.importorskip("sdv", reason="SDV (the optional 'synth' extra) is not installed")
    out = tmp_path / "gc"
    _invoke(["synth", "fit", "--trace", str(SLICE), "--model", "gaussiancopula",
             "--profile", str(PROFILE), "--out", str(out), "--json"])  # fmt: skip
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["training_window"]["before"] == BEFORE


def test_sample_is_a_valid_replayable_trace(sampled: Path, model_dir: Path) -> None:
    from mirage.profile.schema import load_profile
    from mirage.sim.prepare import prepare_trace

    jobs = load_trace(sampled).jobs
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert len(jobs) == 800
    submit = jobs["submit"].astype("int64").to_numpy()
    assert submit[0] >= BEFORE and np.all(np.diff(submit) >= 0)
    run = (jobs["end"] - jobs["start"]).astype("int64").to_numpy()
    limit = jobs["time_limit"].astype("int64").to_numpy()
    nodes = jobs["nodes"].astype("int64").to_numpy()
    assert np.all(run >= 0) and np.all(run <= limit) and np.all(limit > 0)
    assert np.all(nodes >= 1) and np.all(nodes <= 79)
    # newcomers: the training split's share of jobs goes to users never seen in training
    known = jobs["user"].isin(meta["users"]).to_numpy(dtype=bool)
    assert set(jobs["user"][~known]) == {u for u in jobs["user"] if u.startswith("new")}
    share = meta["new_user_share"]
    assert 0 < share < 1 and (~known).mean() >= share
    assert (~known).mean() <= share + jobs["user"].value_counts().max() / len(jobs)
    prof = load_profile(str(PROFILE))
    prep = prepare_trace(jobs, prof, max_nodes=79, holds=False)
    assert len(prep.jobs) == 800 and not any(prep.workload.dropped.values())


def test_sample_until_an_end_time(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "window.parquet"
    info = json.loads(_invoke(["synth", "sample", "--model-dir", str(model_dir), "--start",
                               "2023-02-01", "--until", "2023-02-08", "--rate-scale", "2",
                               "--out", str(out), "--json"]))  # fmt: skip
    submit = load_trace(out).jobs["submit"].astype("int64").to_numpy()
    assert info["jobs"] == len(submit) > 0 and info["rate_scale"] == 2
    assert submit.min() >= BEFORE and submit.max() < parse_when("2023-02-08", TZ)
    res = CliRunner().invoke(main, ["synth", "sample", "--model-dir", str(model_dir),
                                    "--out", str(out)])  # fmt: skip
    assert res.exit_code != 0 and "--n, --until" in res.output
    res = CliRunner().invoke(main, ["synth", "sample", "--model-dir", str(model_dir), "--until",
                                    "2023-02-08", "--sdv-arrivals", "--out", str(out)])  # fmt: skip
    assert res.exit_code != 0 and "job count only" in res.output


def test_held_chains_are_sampled_and_found_again(
    sampled: Path, model_dir: Path, tmp_path: Path
) -> None:
    from mirage.profile.schema import load_profile
    from mirage.sim.prepare import prepare_trace
    from mirage.synth.chains import fit_chains

    fitted = json.loads((model_dir / "chains.json").read_text())
    assert 0 < fitted["job_share"] < 1 and min(fitted["lengths"]) >= 2
    jobs = load_trace(sampled).jobs
    member = jobs["name"].str.startswith("synth-chain").to_numpy(dtype=bool)
    # as many chained jobs as in training, give or take one chain
    assert abs(member.mean() - fitted["job_share"]) <= max(fitted["lengths"]) / len(jobs)
    held = 0  # jobs in runs of held links: a segment that ran 0 s holds nothing up
    for _, group in jobs.loc[member].groupby(jobs["name"].str.extract(r"^(.*\.)")[0]):
        chain = group.sort_values("name", key=lambda c: c.str.extract(r"(\d+)$")[0].astype(int))
        assert chain["user"].nunique() == 1 and len(chain) >= 2
        assert chain["submit"].nunique() == 1  # submitted together
        ends = chain["end"].astype("int64").to_numpy()
        starts = chain["start"].astype("int64").to_numpy()
        assert np.all(starts[1:] >= ends[:-1])  # each segment after the one before it
        runs = np.split(np.arange(len(chain)), np.flatnonzero(ends[:-1] == starts[:-1]) + 1)
        held += sum(len(r) for r in runs if len(r) >= 2)
    # chain detection finds exactly those again; no other job is mistaken for a chain link
    again = fit_chains(jobs)
    assert again.job_share * len(jobs) == pytest.approx(held)
    prep = prepare_trace(jobs, load_profile(str(PROFILE)), max_nodes=79, holds=True)
    assert prep.holds.dependencies > 0
    plain = tmp_path / "plain.parquet"
    _invoke(["synth", "sample", "--model-dir", str(model_dir), "--n", "800", "--out",
             str(plain), "--start", "2023-02-01", "--seed", "3", "--no-chains"])  # fmt: skip
    assert fit_chains(load_trace(plain).jobs).job_share == 0.0
    known = tmp_path / "known.parquet"
    _invoke(["synth", "sample", "--model-dir", str(model_dir), "--n", "300", "--out",
             str(known), "--start", "2023-02-01", "--no-new-users"])  # fmt: skip
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert set(load_trace(known).jobs["user"]) <= set(meta["users"])


def test_arrival_process_beats_the_sdv_column(model_dir: Path, slice_jobs: pd.DataFrame) -> None:
    from mirage.synth.model import load_model, sample_trace
    from mirage.synth.report import arrival_distances

    res = load_model(model_dir)
    real = slice_jobs.loc[slice_jobs["submit"] < BEFORE, "submit"].astype("int64").to_numpy()
    ours, theirs = [], []
    for seed in range(2):
        a = sample_trace(res, real.size, int(real.min()), seed)
        b = sample_trace(res, real.size, int(real.min()), seed, sdv_arrivals=True)
        ours.append(arrival_distances(real, a["submit"].astype("int64").to_numpy()))
        theirs.append(arrival_distances(real, b["submit"].astype("int64").to_numpy()))
    for key in ("interarrival_ks", "hourly_count_ks"):
        mine = float(np.mean([d[key] for d in ours]))
        sdv = float(np.mean([d[key] for d in theirs]))
        assert mine < sdv, (key, mine, sdv)
        assert mine < 0.2, (key, mine)


def test_report_files_and_json(sampled: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    text = _invoke(["synth", "report", "--real", str(SLICE), "--synthetic", str(sampled),
                    "--profile", str(PROFILE), "--out", str(out), "--json"])  # fmt: skip
    rep = json.loads(text)
    assert rep == json.loads((out / "report.json").read_text())
    for name in ("cdfs.png", "correlations.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cols = rep["columns"]
    for col in ("interarrival_s", "hourly_count", "nodes", "time_limit", "run_s"):
        assert 0 <= cols[col]["ks"] <= 1 and cols[col]["wasserstein"] >= 0
    assert "gpus" not in cols  # ls6 does not record GPUs: nothing to compare
    assert 0 <= cols["user"]["tvd"] <= 1
    corr = rep["correlation"]
    assert {"interarrival_s", "nodes", "time_limit", "run_s"} <= set(corr["columns"])
    assert corr["frobenius"] >= corr["max_abs"] >= 0
    q = rep["queueing"]
    assert q["nodes"] == 79 and 0 <= q["ks"] <= 1
    assert q["real"]["measured"] > 0 and q["synthetic"]["measured"] > 0
    for side in ("real", "synthetic"):
        assert q[side]["mean_s"] >= 0 and q[side]["median_s"] >= 0
    held = rep["held_chains"]  # both sides have chains: the synthetic one from its model
    assert held["real"]["job_share"] > 0 and held["synthetic"]["job_share"] > 0
    assert held["real"]["mean_length"] >= 2 and held["synthetic"]["mean_length"] >= 2


def test_model_dir_of_another_sdv_version_is_refused(model_dir: Path, tmp_path: Path) -> None:
    import shutil

    from mirage.synth.model import ModelDirError, load_model

    copy = tmp_path / "old"
    shutil.copytree(model_dir, copy)
    meta = json.loads((copy / "metadata.json").read_text())
    meta["versions"]["sdv"] = "0.1.0"
    (copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ModelDirError, match=r"SDV 0\.1\.0"):
        load_model(copy)


def test_missing_sdv_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from mirage.synth import tabular

    def fail(name: str) -> Any:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr("mirage.synth.tabular.importlib.import_module", fail)
    with pytest.raises(tabular.SynthUnavailable, match=r"mirage-provisioner\[synth\]"):
        tabular.sdv_version()
