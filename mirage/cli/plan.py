"""``mirage plan``: rank a chain's candidate shapes by predicted completion.

The queue comes from the daemon's socket when a daemon runs (its last poll serves
everyone: no extra squeue/sacct on the controller), else from Slurm directly (one squeue,
one sacct of the last 14 days), or, with ``--backend sim``, from a trace replayed in the
simulator (the simulated demo's cluster). The options become one request
(:mod:`mirage.plan.request`) either way.
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from typing import Any

import click

from mirage.daemon.clicommon import config_option, echo_json, json_option
from mirage.daemon.plancli import make_plan, plan_options, plan_request_of

HOUR = 3600


@click.command("plan")
@plan_options()
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
    plan = make_plan(request, params, sim=lambda: _sim_snapshot(params))
    if params["as_json"]:
        echo_json(plan)
        return
    for line in plan_lines(plan, top=params["top"]):
        click.echo(line)


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
