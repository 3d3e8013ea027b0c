"""The options of a plan and where it is made, for ``mirage plan`` (mirage.cli.plan) and
``mirage chain submit --plan``: the daemon's socket when a daemon runs (its last poll
serves everyone), else one squeue and one sacct through the Slurm client."""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from mirage.daemon.clicommon import ask_daemon, config_or_fail, daemon_socket
from mirage.daemon.config import Config
from mirage.slurm.syntax import (
    cpu_task_args,
    format_duration,
    gpu_gres,
    sbatch_gres,
    without_task_args,
)

F = TypeVar("F", bound=Callable[..., Any])


def plan_options(partition: tuple[str, ...] = ("--partition", "-p")) -> Callable[[F], F]:
    """The work and the candidates: shared by ``mirage plan`` and ``chain submit --plan``
    (which names the partition option ``--plan-partition``: its ``--partition`` is
    sbatch's)."""
    return lambda f: _with_plan_options(f, partition)


def _with_plan_options(f: F, partition: tuple[str, ...]) -> F:
    opts = [
        click.option("--work", "work", default=None,
                     help="The work left, as TIME@SIZE: 96h@4gpu (on a partition without "
                     "GPUs: 300h@32cpu, or 300h@2node for whole nodes)."),
        click.option("--scaling", type=click.Choice(["linear", "sqrt", "none"]),
                     default="linear", show_default=True,
                     help="How the run time changes with the size, beyond measured points."),
        click.option("--point", "points", multiple=True,
                     help="A measured run time at another size, SIZE=TIME: 2gpu=170h."),
        click.option(*partition, "partitions", multiple=True,
                     help="Candidate partition (repeat; default: every one with GPUs, with "
                     "CPUs for cpu work)."),
        click.option("--size", "sizes", type=click.IntRange(min=1), multiple=True,
                     help="Candidate GPU (CPU, node) count, in the work's unit (repeat; "
                     "default from the profile)."),
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


def make_plan(
    request: dict[str, Any], params: dict[str, Any], sim: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """The plan's JSON form, from the daemon or made here (``sim``: the snapshot of a
    simulated cluster, for ``--backend sim``)."""
    backend = params["backend"]
    if backend == "sim" and sim is not None:
        return local_plan(request, sim())
    cfg = config_or_fail(params["config_path"])
    sock = daemon_socket(cfg) if backend == "auto" else None
    if sock is not None:
        plan: dict[str, Any] = ask_daemon(sock, {"op": "plan", **request})["plan"]
        return plan
    from mirage.daemon.policies import plan_calibration

    q = _slurm_snapshot(cfg, params["profile_name"])
    # the configured cluster's calibration, unless --profile names another cluster's shape
    calibration = None if params["profile_name"] else plan_calibration(cfg.policy)
    return local_plan(request, q, calibration)


def plan_for_chain(request: dict[str, Any], config_path: str | None) -> dict[str, Any]:
    """``chain submit --plan``: the plan from the daemon, else from Slurm directly."""
    return make_plan(request, {"backend": "auto", "config_path": config_path, "profile_name": None})


def shape_args(best: dict[str, Any], given: Sequence[str] = ()) -> list[str]:
    """The sbatch options of a planned shape (appended: they win over earlier ones); a
    GPU type in the ``given`` options' ``--gres`` is kept (``gpu:a100:4`` -> ``gpu:a100:2``);
    a CPU shape is one task per node with its CPUs (:func:`cpu_task_args`)."""
    args = [
        f"--time={format_duration(best['time_limit_s'])}",
        f"--partition={best['partition']}",
        f"--nodes={best['nodes']}",
    ]
    if best["gpus_per_node"] > 0:
        args.append(f"--gres={gpu_gres(best['gpus_per_node'], sbatch_gres(given))}")
    if best.get("cpus_per_node", 0) > 0:
        args += cpu_task_args(best["nodes"], best["cpus_per_node"])
    return args


def planned_args(best: dict[str, Any], given: Sequence[str]) -> tuple[str, ...]:
    """``given`` with the planned shape's options last; a CPU shape's task options
    replace the given ones (``-n 4`` beside ``--ntasks-per-node=1`` would not submit)."""
    if best.get("cpus_per_node", 0) > 0:
        given = without_task_args(given)
    return (*given, *shape_args(best, given))


def plan_record(
    plan: dict[str, Any], request: dict[str, Any], *, segments_from_plan: bool = True
) -> dict[str, Any]:
    """What the chain keeps of its plan (``chains.plan``): the request, to plan again
    with the work left, and the shape chosen with its predicted completion."""
    best = plan["recommended"]
    return {
        "request": request,
        "overhead_s": plan["overhead_s"],
        "segments_from_plan": segments_from_plan,
        "shape": best,
        "completion": best["completion"],
        "interval": best["interval"],
        "planned_at": plan["now"],
        "for_segment": 0,
        "replans": 0,
    }


def local_plan(request: dict[str, Any], q: Any, calibration: Any = None) -> dict[str, Any]:
    from mirage.plan.request import plan_request
    from mirage.plan.work import PlanInputError

    try:
        return plan_request(q, request, calibration=calibration).to_dict()
    except PlanInputError as exc:
        raise click.UsageError(str(exc)) from exc


def _slurm_snapshot(cfg: Config, profile_name: str | None) -> Any:
    """One squeue and one sacct through the Slurm client, on the configured profile."""
    from mirage.daemon.clicommon import read_client
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
