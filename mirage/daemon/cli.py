"""``mirage chain …``, ``mirage status`` and ``mirage daemon``.

The user commands talk to the daemon's Unix socket (``[socket] path``) when it exists:
the daemon knows the caller from SO_PEERCRED and shows or changes only their chains.
Without a socket (no daemon running yet, a per-user setup, tests) they read and write
the database directly, filtered by the caller's uid, which protects nothing against a
user who can open the database file: that fallback is for single-user setups.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from mirage.daemon.config import (
    DEFAULT_CONFIG_PATH,
    MAX_DURATION_S,
    Config,
    ConfigError,
    load_config,
)

if TYPE_CHECKING:
    from mirage.daemon.simdemo import DemoSpec

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"Daemon configuration (default {DEFAULT_CONFIG_PATH}, if present).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def _config(path: str | None) -> Config:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _store(cfg: Config) -> Any:
    from mirage.daemon.service import StartupError, open_store

    try:
        return open_store(cfg)
    except StartupError as exc:
        raise click.ClickException(str(exc)) from exc


def _socket(cfg: Config) -> Path | None:
    path = Path(cfg.socket.path)
    return path if path.is_socket() else None


def _ask(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    from mirage.daemon.api import call

    try:
        answer = call(path, request)
    except OSError as exc:
        raise click.ClickException(f"cannot reach the daemon at {path}: {exc}") from exc
    except ValueError as exc:  # it closed the connection early, or is not Mirage's daemon
        raise click.ClickException(f"the daemon at {path} gave no valid answer: {exc}") from exc
    if not answer.get("ok"):
        raise click.ClickException(str(answer.get("error")))
    return answer


def _uid() -> int | None:
    uid = os.getuid()
    return None if uid == 0 else uid


def _when(t: int | None, now: int) -> str:
    if t is None:
        return "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    delta = t - now
    rel = f"in {_dur(delta)}" if delta >= 0 else f"{_dur(-delta)} ago"
    return f"{stamp}Z ({rel})"


def _dur(s: int | None) -> str:
    if s is None:
        return "-"
    d, rest = divmod(int(s), 86400)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    return f"{d}d{h:02d}h{m:02d}m" if d else f"{h}h{m:02d}m"


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


# ---- mirage chain ----------------------------------------------------------------------


@click.group()
def chain() -> None:
    """Register, list, show and cancel chains of checkpoint/resume jobs."""


@chain.command("submit", context_settings={"ignore_unknown_options": True})
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--segments",
    type=click.IntRange(min=1),
    default=None,
    help="N time limits of training.",
)
@click.option("--until-file", default=None, help="The chain ends when the job writes this file.")
@click.option("--name", default=None, help="The chain's name (default: the script's name).")
@click.option("--no-submit", is_flag=True, help="Register only; the daemon submits segment 1.")
@config_option
@json_option
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
def chain_submit(
    *,
    script: str,
    segments: int | None,
    until_file: str | None,
    name: str | None,
    no_submit: bool,
    config_path: str | None,
    as_json: bool,
    sbatch_args: tuple[str, ...],
) -> None:
    """Register SCRIPT as a chain and submit its first segment.

    sbatch options follow the script (after `--`): e.g.
    `mirage chain submit job.sbatch --segments 6 -- --time=2-00:00:00 -p gpu --gres=gpu:4`.
    """
    from mirage.daemon.chains import ChainSpecError, build_chain
    from mirage.daemon.core import perform_submission, register_chain
    from mirage.daemon.identity import action_clients
    from mirage.daemon.store import Chain, ChainState

    cfg = _config(config_path)
    try:
        data = Path(script).read_bytes()
    except OSError as exc:
        raise click.ClickException(f"cannot read the script {script}: {exc.strerror}") from exc
    sock = _socket(cfg)
    if sock is not None:
        import base64

        answer = _ask(
            sock,
            {
                "op": "register",
                "script_b64": base64.b64encode(data).decode(),
                "script_path": script,
                "sbatch_args": list(sbatch_args),
                "segments": segments,
                "until_file": until_file,
                "name": name,
                "cwd": str(Path.cwd()),
                "environ": dict(os.environ),
            },
        )
        if as_json:
            _echo_json({"chain_id": answer["chain_id"], "first_segment": "daemon"})
        else:
            click.echo(f"chain {answer['chain_id']} registered; the daemon submits segment 1")
        return
    try:
        new = build_chain(
            script,
            data,
            sbatch_args,
            segments=segments,
            until_file=until_file,
            name=name,
            cwd=str(Path.cwd()),
            environ=dict(os.environ),
            cluster=cfg.daemon.cluster,
        )
    except ChainSpecError as exc:
        raise click.ClickException(str(exc)) from exc
    store = _store(cfg)
    now = int(time.time())
    sub = register_chain(store, new, now, first_intent=not no_submit)
    outcome = "registered"
    if sub is not None:
        with store.sessions() as s:
            c = s.get(Chain, new.id)
            x = s.merge(sub)
            assert c is not None
            outcome = perform_submission(s, c, x, action_clients(cfg)(c), now)
            if outcome == "rejected":  # the user fixes the request and registers again
                c.state = ChainState.FAILED
                c.reason = f"sbatch refused segment 1: {x.error}"
            s.commit()
            job_id = x.job_id
            error = x.error
    else:
        job_id, error = None, ""
    result = {"chain_id": new.id, "first_segment": outcome, "job_id": job_id, "error": error}
    if as_json:
        _echo_json(result)
    elif outcome == "rejected":
        raise click.ClickException(f"sbatch refused segment 1 (chain {new.id} FAILED): {error}")
    else:
        tail = {
            "submitted": f", segment 1 is job {job_id}",
            "registered": "; the daemon submits segment 1",
            "unknown": "; sbatch did not answer: the daemon will find the job by its token",
            "unanswered": "; sbatch's answer was unreadable: the daemon will find the job by its "
            "token",
        }[outcome]
        click.echo(f"chain {new.id} registered{tail}")


@chain.command("list")
@config_option
@json_option
def chain_list(config_path: str | None, as_json: bool) -> None:
    """Your chains."""
    from mirage.daemon.status import list_chains

    cfg = _config(config_path)
    sock = _socket(cfg)
    if sock is not None:
        rows = _ask(sock, {"op": "list"})["chains"]
    else:
        rows = list_chains(_store(cfg), _uid())
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        budget = f"{_dur(r['trained_s'])}/{_dur(r['budget_s'])}" if r["budget_s"] else "-"
        click.echo(f"{r['id']}  {r['name']:<20} {r['state']:<10} trained {budget}  {r['reason']}")


@chain.command("show")
@click.argument("chain_id")
@config_option
@json_option
def chain_show(chain_id: str, config_path: str | None, as_json: bool) -> None:
    """One chain: its snapshot, segments, submissions and latest events."""
    from mirage.daemon.status import show_chain

    cfg = _config(config_path)
    sock = _socket(cfg)
    if sock is not None:
        data = _ask(sock, {"op": "show", "chain_id": chain_id})["chain"]
    else:
        data = show_chain(_store(cfg), chain_id, _uid())
    if data is None:
        raise click.ClickException(f"no chain {chain_id} of yours")
    if as_json:
        _echo_json(data)
        return
    for key in ("id", "name", "state", "reason", "chdir", "script_sha256", "policy"):
        click.echo(f"{key:>14}: {data[key]}")
    for g in data["segments_run"]:
        click.echo(segment_line(g))


def segment_line(g: dict[str, Any]) -> str:
    """One segment of `mirage chain show`: its job, times, outcome, and the forecast it was
    pre-submitted on (predicted start and stated 90% interval), where there was one."""
    # a revoked pre-submission keeps its row (outcome REVOKED); one being revoked says so
    revoking = " (being revoked)" if g.get("revoke_at") and g["outcome"] is None else ""
    stated = g.get("predicted_interval")
    forecast = f" predicted={g['predicted_start']} [{stated[0]}, {stated[1]}]" if stated else ""
    return (
        f"  segment {g['index'] + 1}: job {g['job_id']} {g['state']} "
        f"start={g['start']} end={g['end']} outcome={g['outcome']}{revoking}{forecast}"
    )


@chain.command("cancel")
@click.argument("chain_id")
@config_option
@json_option
def chain_cancel(chain_id: str, config_path: str | None, as_json: bool) -> None:
    """Cancel a chain: the daemon cancels its jobs at its next cycle."""
    from sqlalchemy import select

    from mirage.daemon.store import Chain, ChainState, event_row

    cfg = _config(config_path)
    sock = _socket(cfg)
    if sock is not None:
        was_text = _ask(sock, {"op": "cancel", "chain_id": chain_id})["was"]
        if as_json:
            _echo_json({"chain_id": chain_id, "was": was_text, "state": "CANCELLED"})
        else:
            click.echo(f"chain {chain_id}: {was_text} -> CANCELLED")
        return
    store = _store(cfg)
    uid = _uid()
    now = int(time.time())
    with store.session() as s:
        q = select(Chain).where(Chain.id == chain_id)
        c = s.scalars(q if uid is None else q.where(Chain.uid == uid)).first()
        if c is None:
            raise click.ClickException(f"no chain {chain_id} of yours")
        was = c.state
        if c.state is ChainState.ACTIVE:
            c.state = ChainState.CANCELLED
            c.reason = "cancelled by its owner"
            c.updated_at = now
            s.add(event_row(now, "chain.cancel", c.id, "mirage chain cancel", uid=os.getuid()))
    if as_json:
        _echo_json({"chain_id": chain_id, "was": was.value, "state": "CANCELLED"})
    else:
        click.echo(f"chain {chain_id}: {was.value} -> CANCELLED")


# ---- mirage status ---------------------------------------------------------------------


@click.command("status")
@config_option
@json_option
def status_cmd(config_path: str | None, as_json: bool) -> None:
    """Per chain: segment, time left, successor, predicted start, Slurm's estimate, policy."""
    from mirage.daemon.status import interval_summary, status

    cfg = _config(config_path)
    now = int(time.time())
    sock = _socket(cfg)
    if sock is not None:
        data = _ask(sock, {"op": "status"})["status"]
    else:
        data = status(_store(cfg), now, _uid(), cluster=cfg.daemon.cluster)
    if as_json:
        _echo_json(data)
        return
    click.echo(
        f"daemon: lease {data['lease_holder'] or 'not held'}, last poll "
        f"{_when(data['last_poll'], now)}"
    )
    held = data.get("stated_intervals_7d") or {}
    if sum(held.values()):
        click.echo(interval_summary(held, "last 7 days"))
    for r in data["chains"]:
        seg = f"{r['segment']}/{r['segments'] or '?'}" if r["segment"] else "-"
        click.echo(
            f"{r['id']} {r['name']} [{r['state']}] segment {seg} job {r['job_id'] or '-'} "
            f"{r['job_state'] or ''} left {_dur(r['time_left_s'])}"
        )
        if r["state"] != "ACTIVE":
            click.echo(f"    {r['reason']}")
            continue
        succ = r["successor_job_id"]
        sub = f"{succ} pre-submitted {_when(r['successor_submitted_at'], now)}" if succ else "-"
        click.echo(f"    successor: {sub}")
        interval = r["predicted_interval"]
        pred = _when(r["predicted_start"], now)
        if interval:
            pred += f" [{_when(interval[0], now)} .. {_when(interval[1], now)}]"
        click.echo(
            f"    predicted start: {pred}; Slurm's estimate: {_when(r['slurm_estimate'], now)}"
        )
        note = " (fallback: the daemon cannot see the whole queue)" if r["policy_fallback"] else ""
        click.echo(f"    policy: {r['policy'] or '-'}{note}; model age: baseline (no model)")


# ---- mirage daemon ---------------------------------------------------------------------


@click.command("daemon")
@config_option
@click.option(
    "--backend",
    type=click.Choice(["cli", "sim"]),
    default="cli",
    help="cli: the real cluster; sim: the simulator in accelerated time.",
)
@click.option(
    "--profile",
    "profile_name",
    default="testbed",
    help="--backend sim: the cluster profile (name or TOML).",
)
@click.option(
    "--speed",
    type=click.FloatRange(min=0, min_open=True, max=1e9),
    default=60.0,
    help="--backend sim: simulated seconds per wall second.",
)
@click.option(
    "--trace",
    "trace_path",
    default=None,
    help="--backend sim: replay this trace as the other users' workload (starting now).",
)
@click.option("--trace-format", default=None, help="The trace's format (default: guessed).")
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=None,
    help="--backend sim: nodes of partitions the profile leaves open; with --demo-chains: "
    "of the default partition (the replay's cluster, shrunk to make the queue busier).",
)
@click.option(
    "--cycles",
    type=click.IntRange(min=0),
    default=0,
    help="Stop after this many cycles (0: run on).",
)
@click.option(
    "--demo-chains",
    type=click.IntRange(min=1),
    default=None,
    help="--backend sim --trace: the demo. Run N chains on the replay with the policy, "
    "again with reactive submission, and print the gap table (a temporary database).",
)
@click.option(
    "--segments",
    type=click.IntRange(min=2),
    default=3,
    show_default=True,
    help="Demo: segments per chain.",
)
@click.option(
    "--time-limit",
    default="2:00:00",
    show_default=True,
    help="Demo: each segment's time limit (Slurm format).",
)
@click.option(
    "--policy",
    type=click.Choice(["fixed-lead", "reactive", "lookahead", "rf", "xgb", "dqn", "pg"]),
    default=None,
    help="Demo: the daemon's policy (default: the configuration's). A trained one is read "
    "from the configuration's models_dir and cluster (default: models/ls6).",
)
@click.option(
    "--lead",
    "lead_s",
    type=click.IntRange(min=0, max=MAX_DURATION_S),
    default=None,
    help="Demo: fixed-lead's lead, seconds.",
)
@click.option(
    "--start-hours",
    type=float,
    default=None,
    help="Demo: register the chains this many hours after the trace's first submit "
    "(default: a busy instant, chosen by a quick replay).",
)
@json_option
def daemon_cmd(
    *,
    config_path: str | None,
    backend: str,
    profile_name: str,
    speed: float,
    trace_path: str | None,
    trace_format: str | None,
    nodes: int | None,
    cycles: int,
    demo_chains: int | None,
    segments: int,
    time_limit: str,
    policy: str | None,
    lead_s: int | None,
    start_hours: float | None,
    as_json: bool,
) -> None:
    """Run the provisioner daemon (systemd: deploy/systemd/mirage.service).

    With `--backend sim --trace FILE --demo-chains N`: the daemon on a replayed real
    trace, in accelerated time, against reactive submission (`make demo`), e.g.
    `mirage daemon --backend sim --trace traces/ls6-a100-slice.log.gz
    --profile models/ls6/profile.toml --nodes 70 --demo-chains 4`.
    """
    from mirage.daemon.core import Daemon
    from mirage.daemon.identity import action_clients, owner_marker_check, runs_as_owner
    from mirage.daemon.service import open_store, run_service

    cfg = _config(config_path)
    if trace_path and backend != "sim":
        raise click.UsageError("--trace needs --backend sim")
    with _startup_errors():  # a model, profile, database or socket that cannot be used: say why
        if demo_chains is not None:
            if not trace_path:
                raise click.UsageError("--demo-chains needs --backend sim and --trace FILE")
            demo = _DemoArgs(demo_chains, segments, time_limit, policy, lead_s, start_hours)
            _run_demo(cfg, profile_name, (trace_path, trace_format), nodes, demo, as_json=as_json)
            return
        store = open_store(cfg)
        if backend == "sim":
            _run_sim(
                cfg,
                store,
                profile_name,
                speed=speed,
                cycles=cycles,
                trace=(trace_path, trace_format),
                nodes=nodes,
            )
            return
        from mirage.slurm.cli_backend import CliSlurmClient
        from mirage.slurm.run import SubprocessRunner

        sl = cfg.slurm
        client = CliSlurmClient(
            runner=SubprocessRunner(timeout=sl.timeout_s),
            bin_dir=sl.bin_dir or None,
            timeout=sl.timeout_s,
            accounting_timeout=sl.accounting_timeout_s,
            submit_timeout=sl.submit_timeout_s,
        )
        daemon = Daemon(
            store,
            client,
            config=cfg,
            action_clients=action_clients(cfg),
            marker_check=owner_marker_check(cfg),
            # a root daemon runs each chain's jobs as its owner: root's chains only if asked
            refuse_root_chains=runs_as_owner(cfg) and not cfg.daemon.allow_root_chains,
        )
        if cycles:
            try:
                for n in range(cycles):
                    report = daemon.cycle(int(time.time()))
                    click.echo(json.dumps(report.__dict__, default=str))
                    if n + 1 < cycles:
                        time.sleep(cfg.daemon.poll_interval_s)
            finally:
                store.release_lease(cfg.daemon.cluster, daemon.holder)
            return
        run_service(daemon, cfg)


@contextlib.contextmanager
def _startup_errors() -> Iterator[None]:
    """What stops the daemon from starting becomes one CLI error: a trained model (loaded
    once, when the daemon is built), a profile, the database, the socket (a metrics port
    that cannot be bound is only logged: ``service.serve_metrics``)."""
    from mirage.daemon.service import StartupError
    from mirage.learn.artifacts import ModelError
    from mirage.profile.schema import ProfileError

    try:
        yield
    except (ModelError, ProfileError, StartupError) as exc:
        raise click.ClickException(str(exc)) from exc


def _run_sim(
    cfg: Config,
    store: Any,
    profile_name: str,
    *,
    speed: float,
    cycles: int,
    trace: tuple[str | None, str | None],
    nodes: int | None,
) -> None:
    """The daemon against the simulator: simulated time advances one interval per cycle."""
    from mirage.daemon.core import Daemon
    from mirage.profile.schema import load_profile
    from mirage.sim import Simulation
    from mirage.sim.backend import SimSlurmClient

    profile = load_profile(profile_name) if profile_name != "testbed" else None
    if profile is None:
        from mirage.sim.scenario import testbed_profile

        profile = testbed_profile()
    if any(p.nodes is None for p in profile.partitions):
        if nodes is None:
            raise click.UsageError(f"profile {profile.name!r} leaves node counts open: --nodes N")
        import dataclasses

        parts = tuple(
            p if p.nodes is not None else dataclasses.replace(p, nodes=nodes)
            for p in profile.partitions
        )
        profile = dataclasses.replace(profile, partitions=parts)
    sim = Simulation(profile)
    client = SimSlurmClient(sim, user=os.environ.get("USER", "mirage"))
    t = int(time.time())
    if trace[0]:
        _replay_trace(sim, profile, trace[0], trace[1], t)
    client.advance_to(t)
    daemon = Daemon(store, client, config=cfg, profile=profile)
    try:
        _sim_loop(daemon, client, cfg, t, speed=speed, cycles=cycles)
    finally:
        store.release_lease(cfg.daemon.cluster, daemon.holder)


def _sim_loop(daemon: Any, client: Any, cfg: Config, t: int, *, speed: float, cycles: int) -> None:
    n = 0
    while not cycles or n < cycles:
        client.advance_to(t)
        report = daemon.cycle(t)
        click.echo(
            f"t={t} acted={report.acted} submitted={report.submitted} "
            f"ended={report.ended} signalled={report.signalled}",
            file=sys.stderr,
        )
        n += 1
        t += cfg.daemon.poll_interval_s
        time.sleep(cfg.daemon.poll_interval_s / speed)


def _replay_trace(sim: Any, profile: Any, path: str, fmt: str | None, t0: int) -> None:
    """Add a trace's jobs to the simulation, shifted so that the first arrives at ``t0``."""
    import dataclasses

    from mirage.sim.workload import from_table
    from mirage.trace.load import TraceFormatError
    from mirage.trace.readers import load_trace

    try:
        table = load_trace(path, fmt).jobs
    except TraceFormatError as exc:  # it names the file
        raise click.ClickException(str(exc)) from exc
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"{path}: {exc}") from exc
    jobs = from_table(table, profile).jobs
    if not jobs:
        raise click.ClickException(f"{path}: no job the simulator can replay")
    shift = t0 - jobs[0].submit
    sim.add_jobs(
        dataclasses.replace(
            j, submit=j.submit + shift, begin=None if j.begin is None else j.begin + shift
        )
        for j in jobs
    )
    click.echo(f"replaying {len(jobs)} jobs of {path} from t={t0}", err=True)


# ---- mirage daemon --backend sim --demo-chains N ------------------------------------------


class _DemoArgs(NamedTuple):
    chains: int
    segments: int
    time_limit: str
    policy: str | None
    lead_s: int | None
    start_hours: float | None


def _run_demo(
    cfg: Config,
    profile_name: str,
    trace: tuple[str, str | None],
    nodes: int | None,
    args: _DemoArgs,
    *,
    as_json: bool,
) -> None:
    """The demo (mirage.daemon.simdemo): live view on the terminal, then the gap table."""
    from rich.console import Console

    from mirage.daemon.simdemo import render, run_demo
    from mirage.learn.artifacts import ModelError

    spec = _demo_spec(cfg, profile_name, trace, nodes, args)
    # the view goes to stderr under --json, so that stdout is only the JSON
    view = Console(stderr=as_json)
    click.echo(_demo_intro(spec, nodes), err=True)
    try:
        out = run_demo(spec, cfg, view)
    except ModelError as exc:  # a trained policy asked for, and not there or not loadable
        raise click.ClickException(str(exc)) from exc
    if as_json:
        _echo_json(out)
        return
    console = Console()
    render(out, console if console.is_terminal else Console(width=max(console.width, 110)))


def _demo_spec(
    cfg: Config,
    profile_name: str,
    trace: tuple[str, str | None],
    nodes: int | None,
    args: _DemoArgs,
) -> DemoSpec:
    from mirage.daemon.chains import ChainSpecError, parse_time_limit
    from mirage.daemon.simdemo import DemoError, DemoSpec, load_jobs
    from mirage.profile.schema import ProfileError, load_profile
    from mirage.sim.calibrate import with_settings
    from mirage.trace.load import TraceFormatError

    try:
        limit = parse_time_limit(args.time_limit)
        profile = with_settings(load_profile(profile_name), nodes)
        if profile.partition().nodes is None:
            raise click.UsageError(f"profile {profile.name!r} leaves node counts open: --nodes N")
        jobs = load_jobs(trace[0], trace[1], profile)
    except (ChainSpecError, ProfileError, DemoError, TraceFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"{trace[0]}: {exc}") from exc
    max_time = profile.partition().max_time_s
    if max_time is not None and limit > max_time:
        raise click.UsageError(f"--time-limit {args.time_limit} is over the partition's limit")
    start = None
    if args.start_hours is not None:
        start = jobs[0].submit + int(args.start_hours * 3600)
    return DemoSpec(
        profile=profile,
        jobs=jobs,
        trace=trace[0],
        chains=args.chains,
        segments=args.segments,
        time_limit_s=limit,
        policy=args.policy or cfg.policy.default,
        lead_s=cfg.policy.lead_s if args.lead_s is None else args.lead_s,
        models_dir=cfg.policy.models_dir or "models",
        model_cluster=cfg.policy.cluster or "ls6",
        start=start,
    )


def _demo_intro(spec: DemoSpec, nodes: int | None) -> str:
    part = spec.profile.partition()
    shrunk = f" (--nodes {nodes}: fewer than the profile's, for a busier queue)" if nodes else ""
    return (
        f"demo: {spec.chains} chains x {spec.segments} segments on {len(spec.jobs)} replayed "
        f"jobs of {spec.trace}, cluster {spec.profile.name}: {part.nodes} nodes of "
        f"{part.name}{shrunk}; policy {spec.policy}, then reactive on the same replay"
    )
