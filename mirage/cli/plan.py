"""``mirage plan``: rank a chain's candidate shapes by predicted completion.

The queue comes from the daemon's socket when a daemon runs (its last poll serves
everyone: no extra squeue/sacct on the controller), else from Slurm directly (one squeue,
one sacct of the last 14 days), or, with ``--backend sim``, from a trace replayed in the
simulator (the simulated demo's cluster). The options become one request
(:mod:`mirage.plan.request`) either way.
"""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable, Sequence
from typing import Any

import click

from mirage.daemon.cli import (
    ask_daemon,
    config_option,
    config_or_fail,
    daemon_socket,
    echo_json,
    json_option,
)
from mirage.daemon.config import Config

HOUR = 3600


def plan_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The work and the candidates: shared by ``mirage plan`` and ``chain submit --plan``."""
    opts = [
        click.option("--work", "work", default=None,
                     help="The work left, as TIME@SIZE: 96h@4gpu (or 300h@2node)."),
        click.option("--scaling", type=click.Choice(["linear", "sqrt", "none"]),
                     default="linear", show_default=True,
                     help="How the run time changes with the size, beyond measured points."),
        click.option("--point", "points", multiple=True,
                     help="A measured run time at another size, SIZE=TIME: 2gpu=170h."),
        click.option("--partition", "-p", "partitions", multiple=True,
                     help="Candidate partition (repeat; default: every one with GPUs)."),
        click.option("--size", "sizes", type=click.IntRange(min=1), multiple=True,
                     help="Candidate GPU (or node) count (repeat; default from the profile)."),
        click.option("--limit", "limits", multiple=True,
                     help="Candidate segment limit, e.g. 12h or 1-00:00:00 (repeat; default "
                     "6, 12, 24, 48 h and the partition's maximum)."),
        click.option("--overhead", default="10m", show_default=True,
                     help="Checkpoint/restart overhead per segment (work lost and reloaded)."),
        click.option("--later-waits", "later_wait_share", type=click.FloatRange(0, 1),
                     default=1.0, show_default=True,
                     help="Share of the first wait each later segment waits (1: submitted "
                     "one after another; less when the daemon pre-submits)."),
        click.option("--draws", type=click.IntRange(0, 64), default=4, show_default=True,
                     help="Queue passes with drawn run times, for the interval (0: none)."),
        click.option("--method", type=click.Choice(["plan", "simulate"]), default="plan",
                     show_default=True,
                     help="plan: one planning pass over the queue (fast); simulate: the "
                     "look-ahead's event simulation per shape (slow on deep queues)."),
    ]  # fmt: skip
    for opt in reversed(opts):
        f = opt(f)
    return f


def plan_request_of(params: dict[str, Any]) -> dict[str, Any]:
    """The request (mirage.plan.request) from the options' values, checked before any
    queue is read: a bad work spec is one line at once."""
    from mirage.plan.request import check_request
    from mirage.plan.work import PlanInputError

    if not params.get("work"):
        raise click.UsageError("--work TIME@SIZE is needed, e.g. --work 96h@4gpu")
    request = {
        "work": params["work"],
        "scaling": params["scaling"],
        "points": list(params["points"]),
        "partitions": list(params["partitions"]),
        "sizes": list(params["sizes"]),
        "limits": list(params["limits"]),
        "overhead": params["overhead"],
        "later_wait_share": params["later_wait_share"],
        "draws": params["draws"],
        "method": params["method"],
        "partition": params["partitions"][0] if params["partitions"] else None,
    }
    try:
        check_request(request)
    except PlanInputError as exc:
        raise click.UsageError(str(exc)) from exc
    return request


@click.command("plan")
@plan_options
@click.option("--backend", type=click.Choice(["auto", "cli", "sim"]), default="auto",
              show_default=True,
              help="auto: the daemon's socket if it runs, else Slurm; cli: Slurm directly; "
              "sim: a trace replayed in the simulator (with --trace, --profile).")  # fmt: skip
@click.option("--profile", "profile_name", default=None,
              help="The cluster profile (name or TOML; default: the models' profile of the "
              "configuration, else the live cluster's partitions).")  # fmt: skip
@click.option("--trace", "trace_path", default=None, help="--backend sim: the trace replayed.")
@click.option("--trace-format", default=None, help="The trace's format (default: guessed).")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="--backend sim: nodes of the default partition.")  # fmt: skip
@click.option("--start-hours", type=float, default=None,
              help="--backend sim: plan this many hours after the trace's first submit "
              "(default: its busiest hour).")  # fmt: skip
@click.option("--top", type=click.IntRange(min=0), default=0, help="Show only the N best.")
@config_option
@json_option
def plan_cmd(**params: Any) -> None:
    """Rank candidate shapes (partition, GPUs, segment limit) of a chain by predicted
    completion of the whole chain, from the present queue; e.g.
    `mirage plan --work 96h@4gpu --overhead 10m`."""
    from mirage.plan.report import plan_lines

    request = plan_request_of(params)
    plan = _plan(request, params)
    if params["as_json"]:
        echo_json(plan)
        return
    for line in plan_lines(plan, top=params["top"]):
        click.echo(line)


def _plan(request: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The plan's JSON form, from the daemon or made here."""
    backend = params["backend"]
    if backend == "sim":
        return _local(request, _sim_snapshot(params))
    cfg = config_or_fail(params["config_path"])
    sock = daemon_socket(cfg) if backend == "auto" else None
    if sock is not None:
        plan: dict[str, Any] = ask_daemon(sock, {"op": "plan", **request})["plan"]
        return plan
    return _local(request, _slurm_snapshot(cfg, params["profile_name"]))


def plan_for_chain(request: dict[str, Any], config_path: str | None) -> dict[str, Any]:
    """``chain submit --plan``: the plan from the daemon, else from Slurm directly."""
    return _plan(request, {"backend": "auto", "config_path": config_path, "profile_name": None})


def _local(request: dict[str, Any], q: Any) -> dict[str, Any]:
    from mirage.plan.request import plan_request
    from mirage.plan.work import PlanInputError

    try:
        return plan_request(q, request).to_dict()
    except PlanInputError as exc:
        raise click.UsageError(str(exc)) from exc


def _slurm_snapshot(cfg: Config, profile_name: str | None) -> Any:
    """One squeue and one sacct through the Slurm client, on the configured profile."""
    from mirage.daemon.cli import read_client
    from mirage.plan.source import read_snapshot
    from mirage.slurm.types import SlurmError

    client = read_client(cfg, "cli")
    try:
        profile = _profile(cfg, profile_name, client)
        return read_snapshot(client, profile, now=int(time.time()), user=getpass.getuser())
    except SlurmError as exc:
        raise click.ClickException(f"cannot read the queue: {exc}") from exc


def _profile(cfg: Config, name: str | None, client: Any) -> Any:
    """``--profile``, else the models' profile of the configuration, else the live one."""
    from pathlib import Path

    from mirage.profile.capture import capture_profile
    from mirage.profile.schema import ProfileError, load_profile

    beside = Path(cfg.policy.models_dir) / cfg.policy.cluster / "profile.toml"
    try:
        if name:
            return load_profile(name)
        if cfg.policy.cluster and beside.is_file():
            return load_profile(str(beside))
        return capture_profile(client, "live")
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from exc


def _sim_snapshot(params: dict[str, Any]) -> Any:
    """The trace replayed to the instant asked (else its busiest hour), as the demo does."""
    from mirage.demo.run import DemoError, load_jobs
    from mirage.plan.source import read_snapshot
    from mirage.profile.schema import ProfileError, load_profile
    from mirage.sim import Simulation
    from mirage.sim.backend import SimSlurmClient
    from mirage.sim.calibrate import with_settings
    from mirage.trace.load import TraceFormatError

    if not params["trace_path"]:
        raise click.UsageError("--backend sim needs --trace FILE (and --profile)")
    try:
        profile = with_settings(load_profile(params["profile_name"] or "testbed"), params["nodes"])
        if profile.partition().nodes is None:
            raise click.UsageError(f"profile {profile.name!r} leaves node counts open: --nodes N")
        jobs = load_jobs(params["trace_path"], params["trace_format"], profile)
    except (ProfileError, DemoError, TraceFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"{params['trace_path']}: {exc}") from exc
    first = jobs[0].submit
    hours = params["start_hours"]
    at = first + int(hours * HOUR) if hours is not None else _busiest(profile, jobs)
    sim = Simulation(profile, start_time=first, track_estimates=False)
    sim.add_jobs(jobs)
    client = SimSlurmClient(sim, user=getpass.getuser())
    client.advance_to(at)
    return read_snapshot(client, profile, user=getpass.getuser())


def _busiest(profile: Any, jobs: Sequence[Any]) -> int:
    """The hour of the replay with the most pending jobs."""
    from mirage.sim import Simulation

    sim = Simulation(profile, start_time=jobs[0].submit, track_estimates=False)
    sim.add_jobs(jobs)
    first: int = jobs[0].submit
    best, most, t = first, -1, first
    while t <= jobs[-1].submit:
        sim.run_until(t)
        if len(sim.pending) > most:
            best, most = t, len(sim.pending)
        t += HOUR
    return best
