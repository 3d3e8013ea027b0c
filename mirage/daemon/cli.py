"""``mirage chain …``, ``mirage status`` and ``mirage daemon``.

The user commands talk to the daemon's Unix socket (``[socket] path``) when it exists:
the daemon knows the caller from SO_PEERCRED and shows or changes only their chains.
Without a socket (no daemon running yet, a per-user setup, tests) they read and write
the database directly, filtered by the caller's uid, which protects nothing against a
user who can open the database file: that fallback is for single-user setups.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mirage.daemon.clicommon import (
    ask_daemon,
    config_option,
    config_or_fail,
    daemon_socket,
    echo_json,
    json_option,
    read_client,
)
from mirage.daemon.config import Config, PolicySection
from mirage.daemon.plancli import plan_options
from mirage.fmt import duration
from mirage.slurm.syntax import format_duration

if TYPE_CHECKING:
    from mirage.daemon.core import Daemon
    from mirage.daemon.health import StartInfo

log = logging.getLogger(__name__)


def _store(cfg: Config) -> Any:
    from mirage.daemon.service import StartupError, open_store

    try:
        return open_store(cfg)
    except StartupError as exc:
        raise click.ClickException(str(exc)) from exc


def _uid() -> int | None:
    uid = os.getuid()
    return None if uid == 0 else uid


def _when(t: int | None, now: int) -> str:
    """A time in UTC ISO form with how far it is from now: "2026-11-20T01:02:03Z (42s ago)"."""
    if t is None:
        return "-"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
    delta = t - now
    rel = (
        "now" if delta == 0 else f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"
    )
    return f"{stamp}Z ({rel})"


# ---- mirage chain ----------------------------------------------------------------------


@click.group()
def chain() -> None:
    """Register, list, show and cancel chains of checkpoint/resume jobs."""


@chain.command("submit", context_settings={"ignore_unknown_options": True})
# not exists=True: click says "does not exist" of a file it may not stat (a link into a
# folder the user cannot enter); reading it says why (Permission denied, No such file)
@click.argument("script", type=click.Path(dir_okay=False))
@click.option(
    "--segments",
    type=click.IntRange(min=1),
    default=None,
    help="Run at most N segments (jobs) of the chain; with --until-file the chain also ends "
    "when the job writes that file.",
)
@click.option("--until-file", default=None, help="The chain ends when the job writes this file.")
@click.option("--name", default=None, help="The chain's name (default: the script's name).")
@click.option("--no-submit", is_flag=True, help="Register only; the daemon submits segment 1.")
@click.option(
    "--plan",
    "use_plan",
    is_flag=True,
    help="Choose the shape (partition, GPUs, time limit) by `mirage plan` (needs --work): "
    "its options override the sbatch options', and its segment count is --segments' default.",
)
@plan_options(partition=("--plan-partition",))
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
    use_plan: bool,
    config_path: str | None,
    as_json: bool,
    sbatch_args: tuple[str, ...],
    **plan_params: Any,
) -> None:
    """Register SCRIPT as a chain and submit its first segment.

    sbatch options follow the script (after `--`): e.g.
    `mirage chain submit job.sbatch --segments 6 -- --time=2-00:00:00 -p gpu --gres=gpu:4`;
    or let the plan choose the shape:
    `mirage chain submit job.sbatch --plan --work 96h@4gpu --overhead 10m`.
    """
    from mirage.daemon.chains import ChainSpecError, build_chain, check_limits
    from mirage.daemon.context import local_marker_check
    from mirage.daemon.identity import owner_access_check

    cfg = config_or_fail(config_path)
    try:
        data = Path(script).read_bytes()
    except IsADirectoryError as exc:
        raise click.ClickException(f"the script {script} is a directory") from exc
    except OSError as exc:
        raise click.ClickException(f"cannot read the script {script}: {exc.strerror}") from exc
    plan = None
    if use_plan:
        plan, sbatch_args, segments = _planned_shape(
            plan_params, config_path, sbatch_args, segments
        )
        if not as_json:
            click.echo(_plan_line(plan))
    elif plan_params.get("work"):
        raise click.UsageError("--work and the other plan options need --plan")
    sock = daemon_socket(cfg)
    if sock is not None:
        request = {
            "script_path": script,
            "sbatch_args": list(sbatch_args),
            "segments": segments,
            "until_file": until_file,
            "name": name,
            "plan": plan,
        }
        _register_via_daemon(sock, data, request, as_json=as_json)
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
        new.plan = plan
        check_limits(new, _cluster_partitions(cfg))
        refused = owner_access_check(cfg)(new)
        if refused:
            raise ChainSpecError(refused)
        if new.until_file and local_marker_check(new):
            raise ChainSpecError(
                f"the until-file {Path(new.chdir) / new.until_file} exists already (a finished "
                "or earlier run's, or a link): the chain would end after its first segment; "
                "remove it or name another"
            )
    except ChainSpecError as exc:
        raise click.ClickException(str(exc)) from exc
    _register_here(cfg, new, no_submit=no_submit, as_json=as_json)


def _register_via_daemon(
    sock: Path, data: bytes, request: dict[str, Any], *, as_json: bool
) -> None:
    """The daemon registers the chain (as the socket's peer) and submits segment 1."""
    import base64

    answer = ask_daemon(
        sock,
        {
            "op": "register",
            "script_b64": base64.b64encode(data).decode(),
            **request,
            "cwd": str(Path.cwd()),
            "environ": dict(os.environ),
        },
    )
    if as_json:
        echo_json({"chain_id": answer["chain_id"], "first_segment": "daemon"})
    else:
        click.echo(f"chain {answer['chain_id']} registered; the daemon submits segment 1")


def _register_here(cfg: Config, new: Any, *, no_submit: bool, as_json: bool) -> None:
    """No daemon: register in the database and submit segment 1 (unless --no-submit)."""
    from mirage.daemon.identity import action_clients
    from mirage.daemon.ledger import perform_submission, register_chain
    from mirage.daemon.outcomes import SubmitOutcome
    from mirage.daemon.store import Chain, ChainState

    store = _store(cfg)
    now = int(time.time())
    sub = register_chain(store, new, now, first_intent=not no_submit)
    outcome: str = "registered"
    if sub is not None:
        with store.sessions() as s:
            c = s.get(Chain, new.id)
            x = s.merge(sub)
            assert c is not None
            outcome = perform_submission(s, c, x, action_clients(cfg)(c), now)
            if outcome is SubmitOutcome.REJECTED:  # the user fixes the request and registers again
                c.state = ChainState.FAILED
                c.reason = f"sbatch refused segment 1: {x.error}"
            s.commit()
            job_id = x.job_id
            error = x.error
    else:
        job_id, error = None, ""
    result = {"chain_id": new.id, "first_segment": str(outcome), "job_id": job_id, "error": error}
    if as_json:
        echo_json(result)
    elif outcome == SubmitOutcome.REJECTED:
        raise click.ClickException(f"sbatch refused segment 1 (chain {new.id} FAILED): {error}")
    else:
        tail = {
            "submitted": f", segment 1 is job {job_id}",
            "registered": "; the daemon submits segment 1",
            "unknown": "; sbatch did not answer: the daemon will find the job by its token",
            "unreachable": "; the controller could not be reached: the daemon will find the job "
            "by its token, or submit it",
            "unanswered": "; sbatch's answer was unreadable: the daemon will find the job by its "
            "token",
        }[outcome]
        click.echo(f"chain {new.id} registered{tail}")


def _planned_shape(
    params: dict[str, Any],
    config_path: str | None,
    sbatch_args: tuple[str, ...],
    segments: int | None,
) -> tuple[dict[str, Any], tuple[str, ...], int | None]:
    """The plan (as the chain keeps it), the sbatch options with the recommended shape
    last (they win), and the segment count (the plan's unless --segments gave one)."""
    from mirage.daemon.plancli import plan_for_chain, plan_record, plan_request_of, planned_args

    request = plan_request_of(params)
    plan = plan_for_chain(request, config_path)
    best = plan["recommended"]
    record = plan_record(plan, request, segments_from_plan=segments is None)
    return record, planned_args(best, sbatch_args), segments or best["segments"]


def _plan_line(plan: dict[str, Any]) -> str:
    best = plan["shape"]
    now = int(plan["planned_at"])
    return (
        f"plan: {best['partition']}, {best['nodes']} node(s) x {_per_node(best)}, "
        f"--time={format_duration(best['time_limit_s'])}, {best['segments']} segment(s); "
        f"whole chain done {_when(plan['completion'], now)}"
    )


all_option = click.option(
    "--all", "show_all", is_flag=True, help="Ended chains too (default: only the ACTIVE ones)."
)


def _owner_column() -> bool:
    """Root sees every user's chains: the human output then says whose each is."""
    return _uid() is None


def _owner_cell(r: dict[str, Any], owner: bool) -> str:
    return f"{r.get('owner') or '-':<12} " if owner else ""


def _seg_text(k: int | None, n: int | None) -> str:
    """ "segment k of N" (``--segments N``), "segment k" (``--until-file`` alone)."""
    if k is None:
        return "no segment yet"
    return f"segment {k}" if n is None else f"segment {k} of {n}"


def _job_text(
    state: str | None,
    reason: str = "",
    *,
    cancel_pending: bool = False,
    missing_since: int | None = None,
    now: int,
) -> str:
    """A job's state as it stands: "PENDING (Priority)", "RUNNING (cancel pending)"."""
    notes = [reason] if reason else []
    if cancel_pending:
        notes.append("cancel pending")
    if missing_since is not None:
        notes.append(f"not listed by Slurm since {_when(missing_since, now)}")
    text = state or "-"
    return f"{text} ({'; '.join(notes)})" if notes else text


def _current_job(r: dict[str, Any], now: int) -> str:
    """A chain's current segment and job, as in ``mirage status`` and ``chain list``."""
    seg = _seg_text(r.get("segment"), r.get("segments"))
    if not r.get("job_id"):
        return f"{seg}: no job yet"
    job = _job_text(
        r.get("job_state"),
        r.get("job_reason") or "",
        cancel_pending=bool(r.get("cancel_pending")),
        missing_since=r.get("missing_since"),
        now=now,
    )
    return f"{seg}: job {r['job_id']} {job}"


def _trouble_lines(r: dict[str, Any], now: int) -> list[str]:
    """The chain's own error (with how many so far and when) and its note."""
    out = []
    if r.get("error"):
        at = r.get("error_at")
        when = f", last {duration(now - at)} ago" if at is not None else ""
        out.append(f"    error ({r.get('errors') or 1} so far{when}): {r['error']}")
    if r.get("note"):
        out.append(f"    note: {r['note']}")
    return out


def _hidden_line(hidden: int) -> list[str]:
    if not hidden:
        return []
    return [f"{hidden} ended chain{'s' if hidden > 1 else ''} hidden (--all)"]


def _cluster_partitions(cfg: Config) -> tuple[Any, ...]:
    """The cluster's partitions (``scontrol show``), to check a registration against;
    () when they cannot be read (sbatch then has the last word)."""
    from mirage.profile.capture import capture_profile
    from mirage.profile.schema import ProfileError
    from mirage.slurm.cli_backend import CliSlurmClient
    from mirage.slurm.types import SlurmError

    client = CliSlurmClient(bin_dir=cfg.slurm.bin_dir or None, timeout=cfg.slurm.timeout_s)
    try:
        return capture_profile(client, "live").partitions
    except (SlurmError, ProfileError, ValueError, OSError):
        return ()


@chain.command("list")
@config_option
@json_option
@all_option
def chain_list(config_path: str | None, as_json: bool, show_all: bool) -> None:
    """Your active chains (--all: ended ones too); root: everyone's."""
    from mirage.daemon.status import hide_ended, list_chains

    cfg = config_or_fail(config_path)
    sock = daemon_socket(cfg)
    if sock is not None:
        rows = ask_daemon(sock, {"op": "list"})["chains"]
    else:
        rows = list_chains(_store(cfg), _uid())
    # the daemon answers every chain (older daemons know no filter): the CLI filters
    hidden = 0
    if not show_all:
        rows, hidden = hide_ended(rows)
    if as_json:
        echo_json(rows)
        return
    now, owner = int(time.time()), _owner_column()
    for r in rows:
        click.echo(
            f"{_owner_cell(r, owner)}{r['id']}  {r['name']:<20} {r['state']:<10} "
            f"{_current_job(r, now)}" + (f"  {r['reason']}" if r.get("reason") else "")
        )
        for line in _trouble_lines(r, now):
            click.echo(line)
    for line in _hidden_line(hidden):
        click.echo(line)


@chain.command("show")
@click.argument("chain_id")
@config_option
@json_option
def chain_show(chain_id: str, config_path: str | None, as_json: bool) -> None:
    """One chain: its snapshot, segments, submissions and latest events."""
    from mirage.daemon.status import show_chain

    cfg = config_or_fail(config_path)
    sock = daemon_socket(cfg)
    if sock is not None:
        data = ask_daemon(sock, {"op": "show", "chain_id": chain_id})["chain"]
    else:
        data = show_chain(_store(cfg), chain_id, _uid())
    if data is None:
        raise click.ClickException(f"no chain {chain_id} of yours")
    if as_json:
        echo_json(data)
        return
    now = int(time.time())
    for key, value in _show_fields(data, now):
        click.echo(f"{key:>14}: {value}")
    for line in _trouble_lines(data, now):
        click.echo(line)
    for g in data["segments_run"]:
        click.echo(segment_line(g, now))


def _show_fields(data: dict[str, Any], now: int) -> list[tuple[str, str]]:
    """`mirage chain show`'s header: the chain, where it stands, its trouble, its snapshot."""
    fields = [
        ("id", data["id"]),
        ("name", data["name"]),
        ("owner", data.get("owner") or "-"),
        ("state", data["state"]),
        ("reason", data.get("reason") or "-"),
        ("current", _current_job(data, now)),
        ("policy", data.get("policy") or "-"),
        ("shape", _shape_text(data)),
        ("plan", _plan_text(data, now)),
        ("created", _when(data.get("created_at"), now)),
        ("updated", _when(data.get("updated_at"), now)),
    ]
    fields += [("chdir", data["chdir"]), ("script_sha256", data["script_sha256"])]
    return [(k, str(v)) for k, v in fields]


def segment_line(g: dict[str, Any], now: int | None = None) -> str:
    """One segment of `mirage chain show`: its job, times, outcome, and the forecast it was
    pre-submitted on (predicted start and stated 90% interval), where there was one."""
    now = int(time.time()) if now is None else now
    # a revoked pre-submission keeps its row (outcome REVOKED); one being revoked says so
    revoking = " (being revoked)" if g.get("revoke_at") and g["outcome"] is None else ""
    stated = g.get("predicted_interval")
    forecast = ""
    if stated:
        forecast = (
            f"; predicted start {_when(g['predicted_start'], now)} "
            f"[{_when(stated[0], now)} .. {_when(stated[1], now)}]"
        )
    job = _job_text(
        g["state"],
        g.get("reason") or "",
        cancel_pending=bool(g.get("cancel_pending")),
        missing_since=g.get("missing_since"),
        now=now,
    )
    return (
        f"  segment {g['index'] + 1}: job {g['job_id']} {job}; submitted "
        f"{_when(g.get('submitted_at'), now)}, started {_when(g['start'], now)}, ended "
        f"{_when(g['end'], now)}; outcome {g['outcome'] or '-'}{revoking}{forecast}"
    )


@chain.command("cancel")
@click.argument("chain_id")
@config_option
@json_option
def chain_cancel(chain_id: str, config_path: str | None, as_json: bool) -> None:
    """Cancel a chain: the daemon cancels its jobs at its next cycle."""
    from sqlalchemy import select

    from mirage.daemon.store import Chain, ChainState, event_row

    cfg = config_or_fail(config_path)
    sock = daemon_socket(cfg)
    if sock is not None:
        was_text = ask_daemon(sock, {"op": "cancel", "chain_id": chain_id})["was"]
        if as_json:
            echo_json({"chain_id": chain_id, "was": was_text, "state": "CANCELLED"})
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
        echo_json({"chain_id": chain_id, "was": was.value, "state": "CANCELLED"})
    else:
        click.echo(f"chain {chain_id}: {was.value} -> CANCELLED")


# ---- mirage status ---------------------------------------------------------------------


@click.command("status")
@config_option
@json_option
@all_option
def status_cmd(config_path: str | None, as_json: bool, show_all: bool) -> None:
    """The daemon, Slurm, and per active chain (--all: ended ones too): segment, job, time
    left, successor, predicted start, Slurm's estimate, policy, error."""
    from mirage.daemon.status import hide_ended, status

    cfg = config_or_fail(config_path)
    now = int(time.time())
    sock = daemon_socket(cfg)
    if sock is not None:
        data = ask_daemon(sock, {"op": "status"})["status"]
        now = int(data.get("now") or now)  # the daemon's clock: its times are relative to it
    else:
        data = status(_store(cfg), now, _uid(), cluster=cfg.daemon.cluster)
    # the daemon answers every chain (older daemons know no filter): the CLI filters
    data["ended_hidden"] = 0
    if not show_all:
        data["chains"], data["ended_hidden"] = hide_ended(data["chains"])
    if as_json:
        echo_json(data)
        return
    for line in _status_lines(data, now, owner=_owner_column()):
        click.echo(line)


def _status_lines(data: dict[str, Any], now: int, *, owner: bool) -> list[str]:
    from mirage.daemon.status import interval_summary

    lines = _daemon_lines(data, now)
    held = data.get("stated_intervals_7d") or {}
    if sum(held.values()):
        lines.append(interval_summary(held, "last 7 days"))
    for r in data["chains"]:
        lines += _chain_lines(r, now, owner=owner, as_of=data.get("last_poll"))
    return lines + _hidden_line(data.get("ended_hidden") or 0)


def _daemon_lines(data: dict[str, Any], now: int) -> list[str]:
    """Who started the daemon, with what; whether it holds the lease; its last cycle; Slurm."""
    facts = data.get("daemon") or {}
    start = facts.get("start")
    if start:
        head = (
            f"daemon: mirage {start.get('version') or '?'} on {start.get('host') or '?'} "
            f"(pid {start.get('pid') or '?'}), started {_when(start.get('started_at'), now)}"
        )
        lines = [head, f"    {_start_policy(start, now)}", f"    {_start_places(start)}"]
    else:
        lines = ["daemon: no start recorded"]
    lease = _lease_text(
        data.get("lease_holder"), start, facts.get("live"), facts.get("holder_alive")
    )
    lines.append(f"    lease: {lease}")
    lines.append(
        f"    last cycle: {_cycle_text(facts.get('last_cycle'), now)}; last good poll "
        f"{_when(data.get('last_poll'), now)}"
    )
    db = data.get("database") or {}
    if db.get("writable") is False:
        lines.append(
            f"    DATABASE NOT WRITABLE since {_when(db.get('since'), now)}: {db.get('error')}; "
            "the daemon cannot record its cycles, so no chain advances and nothing is "
            "submitted until it can (the last cycle above is the last one recorded)"
        )
    if start and start.get("install"):
        lines.append(f"    INSTALL: {start['install']}")
    lines.append(_slurm_line(data.get("slurm") or {}, now))
    return lines


def start_text(start: dict[str, Any], now: int) -> str:
    """The daemon's start facts (``health.StartInfo``), for its start line: policy, model and
    its age, fallback, socket, metrics, database, models."""
    return f"{_start_policy(start, now)}, {_start_places(start)}"


def _start_policy(start: dict[str, Any], now: int) -> str:
    text = f"policy {start.get('policy') or '-'}"
    if start.get("model"):
        created = start.get("model_created_at")
        age = f", age {duration(now - created)}" if isinstance(created, int) else ""
        text += f" [model {start['model']}{age}]"
    if start.get("guard"):
        text += f" [guard: {start['guard']}]"
    if start.get("fallback"):
        text += f" [fallback: {start['fallback']}]"
    return text


def guard_text(pcfg: PolicySection) -> str:
    """The default policy's guard, as the start line shows it ("" for reactive)."""
    from mirage.policy.guard import ESTIMATE_GUARDS, LOOKAHEAD_GUARDS, vetoes_text

    if pcfg.default == "reactive":
        return ""
    on = pcfg.guard in ESTIMATE_GUARDS
    est = pcfg.guard_margin_s / 3600 if on and pcfg.guard_margin_s is not None else None
    ahead = pcfg.guard_lookahead_margin_s / 3600 if pcfg.guard in LOOKAHEAD_GUARDS else None
    return vetoes_text(est, ahead, estimate_fraction=pcfg.guard_margin_fraction if on else None)


def _start_places(start: dict[str, Any]) -> str:
    return (
        f"socket {start.get('socket') or '-'}, metrics {start.get('metrics') or 'off'}, "
        f"database {start.get('database') or '-'}, models {start.get('models_dir') or 'none'}"
    )


def _lease_text(
    holder: str | None, start: dict[str, Any] | None, live: bool | None, alive: bool | None
) -> str:
    if not holder:
        return "not held (no daemon acts now)"
    if alive is False:
        return (
            f"held by {holder}, a process that is gone (killed?): no daemon acts now; one "
            "started on this host takes the lease at once"
        )
    if live:
        return f"held by {holder} (the daemon above)"
    return f"held by {holder}" + (" (not the daemon that started last)" if start else "")


def _cycle_text(cycle: dict[str, Any] | None, now: int) -> str:
    if not cycle:
        return "none recorded"
    text = _when(cycle.get("at"), now)
    if not cycle.get("finished", True):
        text += f", FAILED: {cycle.get('error') or 'no error recorded'}"
    elif cycle.get("skipped"):
        text += f", skipped ({cycle['skipped']})"
        text += f": {cycle['error']}" if cycle.get("error") else ""
    if cycle.get("chain_errors"):
        text += f", {cycle['chain_errors']} chain(s) had an error"
    if cycle.get("failures_total"):
        text += f"; {cycle['failures_total']} cycle(s) failed since the daemon started"
    return text


def _slurm_line(slurm: dict[str, Any], now: int) -> str:
    reachable = slurm.get("reachable")
    if reachable is None:
        return "Slurm: unknown (no poll recorded)"
    since = slurm.get("since")
    if not reachable:
        return f"Slurm: UNREACHABLE since {_when(since, now)}: {slurm.get('error') or '-'}"
    text = f"Slurm: reachable since {_when(since, now)}"
    acct = slurm.get("accounting") or {}
    if acct.get("reachable") is False:
        text += (
            f"; accounting (slurmdbd, sacct) UNREACHABLE since {_when(acct.get('since'), now)}: "
            f"{acct.get('error') or '-'}. Chains go on from squeue; a segment squeue no longer "
            "lists, and a submission whose outcome is unknown, wait for accounting"
        )
    return text


def _time_left_text(r: dict[str, Any], as_of: int | None, now: int) -> str:
    """ ", 12m05s left (as of 20s ago)": the job's state is the last poll's, not now's; a job
    at its limit is ending (Slurm kills it, or it exits on its warning), not running on."""
    left = r.get("time_left_s")
    if left is None:
        return ""
    text = ", at its time limit: ending" if left == 0 else f", {duration(left)} left"
    return text + (f" (as of the poll {duration(max(0, now - as_of))} ago)" if as_of else "")


def _chain_lines(
    r: dict[str, Any], now: int, *, owner: bool, as_of: int | None = None
) -> list[str]:
    """One chain of ``mirage status``: where it stands, its successor, and for an ACTIVE one
    the forecast and the policy; its error and note. ``as_of``: the last poll's time."""
    left = _time_left_text(r, as_of, now) if r["state"] == "ACTIVE" else ""
    lines = [
        f"{_owner_cell(r, owner)}{r['id']} {r['name']} [{r['state']}] {_current_job(r, now)}{left}"
    ]
    if r["state"] != "ACTIVE":
        lines.append(f"    {r.get('reason') or 'ended'}")
    if r.get("successor_job_id") or r["state"] == "ACTIVE":
        lines.append(f"    successor: {_successor_text(r, now)}")
    if r["state"] == "ACTIVE":
        lines.append(
            f"    predicted start: {_prediction_text(r, now)}; "
            f"Slurm's estimate: {_when(r.get('slurm_estimate'), now)}"
        )
        lines.append(f"    policy: {_policy_text(r)}")
        lines.append(f"    shape: {_shape_text(r)}; {_plan_text(r, now)}")
    return lines + _trouble_lines(r, now)


def _prediction_text(r: dict[str, Any], now: int) -> str:
    """The successor's predicted start and interval, said as what it is: a prediction made
    before the current segment started was about that segment's own start (none yet for
    the next one); one whose time has passed says what the successor is doing instead."""
    pred, decided, began = r.get("predicted_start"), r.get("decided_at"), r.get("job_start")
    if pred is None:
        return "-"
    if decided is not None and began is not None and decided < began:
        return (
            f"none yet for the next segment (the last one was for this segment: "
            f"{_when(pred, now)}; it started {_when(began, now)})"
        )
    text = _when(pred, now)
    interval = r.get("predicted_interval")
    if interval:
        text += f" [{_when(interval[0], now)} .. {_when(interval[1], now)}]"
    if pred < now:
        state = r.get("successor_state")
        if not r.get("successor_job_id"):
            text += ", passed: the successor is not submitted yet"
        elif state == "PENDING":
            why = f" ({r['successor_reason']})" if r.get("successor_reason") else ""
            text += f", passed: the successor is still PENDING{why}"
    return text


def _per_node(shape: dict[str, Any]) -> str:
    """ "2 GPUs", "32 CPUs" (a CPU shape), "0 GPUs" (whole nodes of a CPU partition)."""
    if shape.get("cpus_per_node"):
        return f"{shape['cpus_per_node']} CPUs"
    return f"{shape['gpus_per_node']} GPUs"


def _shape_text(r: dict[str, Any]) -> str:
    """ "gpu-a100, 2 node(s) x 2 GPUs, 12h00m": what each segment asks for."""
    gpus = f" x {_per_node(r)}" if r.get("gpus_per_node") or r.get("cpus_per_node") else ""
    return (
        f"{r.get('partition') or 'default partition'}, {r.get('nodes', 1)} node(s){gpus}, "
        f"{duration(r['time_limit_s'])}"
    )


def _plan_text(r: dict[str, Any], now: int) -> str:
    """The whole chain's predicted completion, where it was planned (chain submit --plan)."""
    plan = r.get("plan")
    if not plan or plan.get("completion") is None:
        return "not planned"
    text = f"whole chain done {_when(plan['completion'], now)}"
    lo, hi = plan.get("interval") or (None, None)
    if lo is not None and lo != hi:
        text += f" [{_when(lo, now)} .. {_when(hi, now)}]"
    replans = plan.get("replans") or 0
    return text + (f", re-planned {replans} time(s)" if replans else "")


def _successor_text(r: dict[str, Any], now: int) -> str:
    succ = r.get("successor_job_id")
    if not succ:
        return "-"
    job = _job_text(
        r.get("successor_state"),
        r.get("successor_reason") or "",
        cancel_pending=bool(r.get("successor_cancel_pending")),
        now=now,
    )
    return f"job {succ} {job}, pre-submitted {_when(r.get('successor_submitted_at'), now)}"


def _policy_text(r: dict[str, Any]) -> str:
    """The policy that decides for the chain, what it stands in for, and its model's age
    (why a fallback decides is the chain's note)."""
    label = r.get("policy") or ""
    if not label:
        return "- (no decision yet)"
    used = r.get("policy_used") or label.split(" ", 1)[0]
    text = used + (f" (fallback: {r['fallback']})" if r.get("fallback") else "")
    age = r.get("model_age_s")
    return text + (f", model age {duration(age)}" if age is not None else ", no trained model")


# ---- mirage daemon ---------------------------------------------------------------------


@click.command("daemon")
@config_option
@click.option(
    "--backend",
    type=click.Choice(["cli", "pyslurm", "sim"]),
    default=None,
    help="cli or pyslurm: the real cluster, read through squeue/sacct or through pyslurm "
    "(default: [slurm] backend); sim: the simulator in accelerated time.",
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
    help="--backend sim: nodes of partitions the profile leaves open.",
)
@click.option(
    "--cycles",
    type=click.IntRange(min=0),
    default=0,
    help="Stop after this many cycles (0: run on).",
)
@json_option
def daemon_cmd(
    *,
    config_path: str | None,
    backend: str | None,
    profile_name: str,
    speed: float,
    trace_path: str | None,
    trace_format: str | None,
    nodes: int | None,
    cycles: int,
    as_json: bool,
) -> None:
    """Run the provisioner daemon (systemd: deploy/systemd/mirage.service).

    `--backend sim` runs it on the simulator in accelerated time instead of the cluster
    (`mirage demo` compares it there against reactive submission).
    """
    from mirage.daemon.core import Daemon
    from mirage.daemon.identity import (
        action_clients,
        owner_marker_check,
        owner_report_read,
        runs_as_owner,
    )
    from mirage.daemon.service import open_store, run_service

    cfg = config_or_fail(config_path)
    if trace_path and backend != "sim":
        raise click.UsageError("--trace needs --backend sim")
    with startup_errors():  # a model, profile, database or socket that cannot be used: say why
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
        client = read_client(cfg, backend or cfg.slurm.backend)
        daemon = Daemon(
            store,
            client,
            config=cfg,
            action_clients=action_clients(cfg),
            marker_check=owner_marker_check(cfg),
            report_read=owner_report_read(cfg),
            # a root daemon runs each chain's jobs as its owner: root's chains only if asked
            refuse_root_chains=runs_as_owner(cfg) and not cfg.daemon.allow_root_chains,
        )
        announce(daemon, cfg)
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


def announce(daemon: Daemon, cfg: Config) -> None:
    """The daemon's one start line (what an admin checks first in the journal) and the same
    facts in the database, for ``mirage status``."""
    from mirage.daemon import health

    daemon.partitions(int(time.time()))  # the cluster's shape, for a model's fit
    info = start_info(daemon, cfg, int(time.time()))
    health.write(daemon.store, health.START_KEY, info)
    facts = dataclasses.asdict(info)
    log.info(
        "mirage %s started: %s, lease holder %s",
        info.version,
        start_text(facts, info.started_at),
        info.holder,
    )
    if info.fallback:
        log.warning("[policy] %s is not used as is: %s", info.policy, info.fallback)
    if info.install:
        log.warning("%s", info.install)


def start_info(daemon: Daemon, cfg: Config, now: int) -> StartInfo:
    """What the daemon starts with: its version, process, policy and model, and where it
    serves and stores (the database URL's password hidden)."""
    import socket

    from sqlalchemy.engine import make_url

    from mirage import __version__
    from mirage.daemon.health import StartInfo
    from mirage.daemon.store import database_url

    summary = daemon.policy_summary()
    url = database_url(cfg.daemon.database_url, cfg.daemon.state_dir)
    pcfg = cfg.policy
    # trained policies live in <models_dir>/<cluster>/ (policies.py)
    models = str(Path(pcfg.models_dir) / pcfg.cluster) if pcfg.models_dir and pcfg.cluster else ""
    return StartInfo(
        version=__version__,
        host=socket.gethostname(),
        pid=os.getpid(),
        holder=daemon.holder,
        started_at=now,
        policy=str(summary["policy"]),
        model=str(summary.get("model") or ""),
        model_created_at=summary.get("model_created_at"),
        fallback=str(summary.get("fallback") or ""),
        socket=cfg.socket.path,
        metrics=f"{cfg.metrics.address}:{cfg.metrics.port}" if cfg.metrics.port else "",
        database=make_url(url).render_as_string(hide_password=True),
        models_dir=models,
        guard=guard_text(pcfg),
        install=users_install_problem(),
    )


def users_install_problem() -> str:
    """A root daemon serves other users: can they run this install? ("" when they can, or
    when the daemon is a user's own.)"""
    from mirage.daemon.install_check import install_problem

    if os.geteuid() != 0:
        return ""
    command = sys.argv[0] if Path(sys.argv[0]).name == "mirage" else None
    return install_problem(command)


@contextlib.contextmanager
def startup_errors() -> Iterator[None]:
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
