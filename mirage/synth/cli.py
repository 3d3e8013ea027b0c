"""``mirage synth fit|sample|report``: synthetic job traces and their fidelity."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mirage.progress import fraction_done

if TYPE_CHECKING:
    import pandas as pd

    from mirage.profile.schema import ClusterProfile

_MODELS = ("ctgan", "tvae", "copulagan", "gaussiancopula")  # = tabular.MODELS (no SDV import)
_PROFILE = click.option(
    "--profile",
    "profile_name",
    default="ls6",
    show_default=True,
    help="Cluster profile (built-in name or TOML path): time zone, node count, splits.",
)
_NODES = click.option("--nodes", type=click.IntRange(min=1), help="Override the node count.")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
def synth() -> None:
    """Synthetic job traces: fit a model on a trace's training split, sample, judge.

    Needs the optional extra `pip install 'mirage-provisioner[synth]'` (SDV, under the
    Business Source License).
    """


def _load(path: str) -> pd.DataFrame:
    from mirage.trace.load import TraceFormatError
    from mirage.trace.readers import load_trace

    try:
        return load_trace(path).jobs
    except (TraceFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _profile(name: str, nodes: int | None) -> ClusterProfile:
    from mirage.profile.schema import ProfileError, load_profile
    from mirage.sim.calibrate import with_settings

    try:
        prof = load_profile(name)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from exc
    return with_settings(prof, nodes, None)


def _when(text: str | None, tz: str, hint: str) -> int | None:
    if text is None:
        return None
    from mirage.slurm.syntax import parse_when

    try:
        return parse_when(text, tz)
    except ValueError as exc:
        raise click.BadParameter(f"not an ISO date/time: {text!r}", param_hint=hint) from exc


@contextmanager
def _sdv_errors() -> Iterator[None]:
    from mirage.synth.model import ModelDirError
    from mirage.synth.tabular import SynthUnavailable

    try:
        yield
    except (SynthUnavailable, ModelDirError) as exc:
        raise click.ClickException(str(exc)) from exc


@synth.command("fit")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False))
@click.option("--model", type=click.Choice(_MODELS), required=True, help="SDV synthesizer.")
@click.option(
    "--epochs",
    type=click.IntRange(1, 1000),
    help="Training epochs (ctgan, tvae, copulagan; default 100: CPU-sized).",
)
@click.option(
    "--before",
    help="End of the training split (ISO, profile's zone; default ls6: 2023-02-01, other "
    "clusters: 60 days before the last submit). Nothing submitted later is read.",
)
@click.option("--after", help="Start of the training split (default: the trace's start).")
@_PROFILE
@_NODES
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Model directory.")
@_JSON
def fit_cmd(
    *,
    trace_path: str,
    model: str,
    epochs: int | None,
    before: str | None,
    after: str | None,
    profile_name: str,
    nodes: int | None,
    seed: int,
    out: str,
    as_json: bool,
) -> None:
    """Fit job attributes (SDV) and the arrival process on a trace's training split."""
    from mirage.evaluate.protocol import default_splits
    from mirage.synth.model import fit_trace, save_model

    prof = _profile(profile_name, nodes)
    jobs = _load(trace_path)
    cut = _when(before, prof.timezone, "--before")
    if cut is None:
        sub = jobs["submit"].dropna().astype("int64")
        if sub.empty:
            raise click.ClickException(f"{trace_path}: no submit time")
        cluster = "ls6" if prof.name.startswith("ls6") else prof.name
        cut = default_splits(cluster, prof.timezone, int(sub.min()), int(sub.max()))["tune"].start
    t0 = time.perf_counter()
    with _sdv_errors():
        try:
            res = fit_trace(jobs, model=model, tz=prof.timezone, before=cut,
                            after=_when(after, prof.timezone, "--after"), epochs=epochs,
                            max_nodes=prof.partition().nodes, trace_path=trace_path,
                            verbose=not as_json, seed=seed)  # fmt: skip
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
        save_model(res, Path(out))
    res.metadata["fit_s"]["total"] = time.perf_counter() - t0
    (Path(out) / "metadata.json").write_text(json.dumps(res.metadata, indent=2, sort_keys=True))
    m = res.metadata
    if as_json:
        click.echo(json.dumps(m, indent=2, sort_keys=True))
        return
    w = m["training_window"]
    click.echo(
        f"{model}: {m['rows']} jobs submitted before {_iso(w['before'], w['tz'])}, "
        f"epochs {m['epochs']}; synthesizer fitted in {m['fit_s']['synthesizer']:.1f} s, "
        f"arrivals in {m['fit_s']['arrivals']:.2f} s "
        f"({m['arrivals']['jobs_per_day']:.0f} jobs/day); saved to {out}"
    )


def _iso(epoch: int, tz: str) -> str:
    import pandas as pd

    return str(pd.Timestamp(epoch, unit="s", tz="UTC").tz_convert(tz).isoformat())


@synth.command("sample")
@click.option("--model-dir", required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--n", "n", type=click.IntRange(min=1),
              help="Jobs to sample (with --until: at most this many).")  # fmt: skip
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Parquet file.")
@click.option("--start", help="First submit (ISO; default: the end of the training split).")
@click.option("--until", help="Sample every arrival before this time (ISO, profile's zone).")
@click.option("--rate-scale", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True,
              help="Multiply the fitted arrival rates (a busier or quieter window).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--new-users/--no-new-users", default=True, show_default=True,
              help="Newcomers' share of jobs (training split) to unseen users.")  # fmt: skip
@click.option("--chains/--no-chains", default=True, show_default=True,
              help="Dependency-held chains, as many as in the training split.")  # fmt: skip
@click.option(
    "--sdv-arrivals",
    is_flag=True,
    help="Submit times from the synthesizer's own inter-arrival column (the baseline the "
    "arrival process is judged against) instead of the arrival process.",
)
@_JSON
def sample_cmd(*, model_dir: str, n: int | None, out: str, start: str | None,
               until: str | None, rate_scale: float, seed: int, chains: bool,
               new_users: bool, sdv_arrivals: bool, as_json: bool) -> None:  # fmt: skip
    """Sample a synthetic trace (canonical Parquet) that `mirage simulate` replays."""
    from mirage.synth.model import load_model, sample_trace
    from mirage.trace.load import TraceLoad
    from mirage.trace.parquet import write_parquet

    with _sdv_errors():
        res = load_model(Path(model_dir))
        w = res.metadata["training_window"]
        first = _when(start, w["tz"], "--start")
        end = _when(until, w["tz"], "--until")
        if n is None and end is None:
            raise click.UsageError("give --n, --until or both")
        t0 = time.perf_counter()
        try:
            jobs = sample_trace(res, n, int(w["before"]) if first is None else first, seed,
                                sdv_arrivals=sdv_arrivals, until=end,
                                rate_scale=rate_scale, chains=chains,
                                new_users=new_users)  # fmt: skip
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    n = len(jobs)
    wall = time.perf_counter() - t0
    note = (f"synthetic: mirage synth sample, model {res.metadata['model']} "
            f"({'sdv' if sdv_arrivals else 'arrival-process'} submits), seed {seed}, "
            f"rate scale {rate_scale:g}")  # fmt: skip
    source = str(Path(model_dir) / "metadata.json")
    load = TraceLoad(jobs=jobs, source=source, format="synthetic", tz=w["tz"], rows_read=n,
                     notes=[note])  # fmt: skip
    write_parquet(load, out)
    span = (int(jobs["submit"].max()) - int(jobs["submit"].min())) / 86400
    info = {"out": out, "jobs": n, "span_days": span, "wall_s": wall, "seed": seed,
            "arrivals": "sdv" if sdv_arrivals else "process",
            "rate_scale": rate_scale}  # fmt: skip
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(f"{n} jobs over {span:.1f} days written to {out} ({wall:.1f} s)")


@synth.command("report")
@click.option("--real", "real_path", required=True, type=click.Path(dir_okay=False))
@click.option("--synthetic", "synth_path", required=True, type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--real-after", help="Only real jobs submitted from this ISO date (profile zone).")
@click.option("--real-before", help="Only real jobs submitted before this ISO date.")
@_PROFILE
@_NODES
@click.option("--queueing/--no-queueing", default=True, show_default=True,
              help="Replay both traces in the simulator and compare their waits.")  # fmt: skip
@click.option("--holds/--no-holds", default=True, show_default=True,
              help="Keep both traces' dependency holds (chains) in their replays.")  # fmt: skip
@_JSON
def report_cmd(
    *,
    real_path: str,
    synth_path: str,
    out: str,
    real_after: str | None,
    real_before: str | None,
    profile_name: str,
    nodes: int | None,
    queueing: bool,
    holds: bool,
    as_json: bool,
) -> None:
    """Fidelity of a synthetic trace: per-column KS and Wasserstein, correlations, CDF and
    heat-map PNGs, and a queueing check (both replayed in the simulator). Writes
    report.json, cdfs.png and correlations.png into OUT."""
    from mirage.synth.report import build_report

    prof = _profile(profile_name, nodes)
    real = _load(real_path)
    lo = _when(real_after, prof.timezone, "--real-after")
    hi = _when(real_before, prof.timezone, "--real-before")
    sub = real["submit"]
    keep = sub.notna()
    if lo is not None:
        keep &= sub >= lo
    if hi is not None:
        keep &= sub < hi
    real = real.loc[keep.to_numpy(dtype=bool)].reset_index(drop=True)
    n = prof.partition().nodes
    if queueing and n is None:
        raise click.ClickException(f"profile {prof.name!r} has no node count: pass --nodes N "
                                   "or a calibrated profile (models/ls6/profile.toml)")  # fmt: skip
    with fraction_done(
        "replaying real and synthetic", enabled=not as_json and queueing
    ) as progress:
        rep = build_report(real, _load(synth_path), Path(out),
                           profile=prof if queueing else None, nodes=n, holds=holds,
                           progress=progress)  # fmt: skip
    if as_json:
        click.echo(json.dumps(rep, indent=2))
        return
    _render(rep, out)


def _render(rep: dict[str, Any], out: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"real {rep['jobs']['real']} jobs vs synthetic {rep['jobs']['synthetic']}")
    for c in ("column", "KS", "Wasserstein", "W / sd", "real mean", "synthetic mean"):
        t.add_column(c, justify="right")
    for col, d in rep["columns"].items():
        if "ks" in d:
            t.add_row(col, f"{d['ks']:.3f}", f"{d['wasserstein']:.4g}",
                      f"{d['wasserstein_per_sd']:.3f}", f"{d['real_mean']:.4g}",
                      f"{d['synthetic_mean']:.4g}")  # fmt: skip
        else:
            t.add_row(col, f"TVD {d['tvd']:.3f}", "", "", "", "")
    console = Console()
    console.print(t)
    c = rep["correlation"]
    console.print(f"correlation ({c['method']}) distance: Frobenius {c['frobenius']:.3f}, "
                  f"max |diff| {c['max_abs']:.3f}")  # fmt: skip
    h = rep["held_chains"]
    console.print(f"held chains: {h['real']['job_share']:.1%} of real jobs (mean length "
                  f"{h['real']['mean_length']:.1f}), {h['synthetic']['job_share']:.1%} of "
                  f"synthetic ({h['synthetic']['mean_length']:.1f})")  # fmt: skip
    q = rep.get("queueing")
    if q:
        console.print(
            f"queueing ({q['profile']}, {q['nodes']} nodes): wait KS {q['ks']:.3f}; "
            f"mean {q['real']['mean_s'] / 3600:.2f} h real vs "
            f"{q['synthetic']['mean_s'] / 3600:.2f} h synthetic; median "
            f"{q['real']['median_s']:.0f} s vs {q['synthetic']['median_s']:.0f} s"
        )
    console.print(f"written: {out}/report.json, cdfs.png, correlations.png")
