"""What an evaluation reads, and its settings from plain values: the known traces and
calibrated profiles of the clusters the project knows, the profile and the trace's jobs
(checked, with how much of the trace a replay uses), the protocol from hours and minutes,
and splits from dates. Shared by ``mirage evaluate``, ``mirage train`` and scripts.

Every refusal is an :class:`InputError` (a ``ValueError``) with one clear line; the click
commands show it as a usage error.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mirage.evaluate.protocol import (
    HOUR,
    MINUTE,
    Protocol,
    Setting,
    Split,
    default_splits,
    sample_times,
    scaled_nodes,
)
from mirage.paths import models_root, trace_roots
from mirage.policy.cost import DEFAULT_COST, CostModel
from mirage.slurm.syntax import parse_when

if TYPE_CHECKING:
    import pandas as pd

    from mirage.profile.schema import ClusterProfile

log = logging.getLogger(__name__)


class InputError(ValueError):
    """An evaluation's input that cannot be used: one line saying why."""


KNOWN_TRACES = {
    "ls6": "tacc_ls6_a100/ls6-a100.log.gz",
    "theta": "alcf_theta_2023/theta_argonne.swf.gz",
    "cerit": "cerit_wagap_2013/wagap-2013.swf.gz",
}

log = logging.getLogger(__name__)


def default_trace(cluster: str) -> str | None:
    rel = KNOWN_TRACES.get(cluster)
    if rel is None:
        return None
    for root in trace_roots():
        if (root / rel).exists():
            return str(root / rel)
    return None


def default_profile(cluster: str) -> str:
    calibrated = models_root() / cluster / "profile.toml"
    return str(calibrated) if calibrated.exists() else cluster


@dataclass(frozen=True)
class SplitSetting:
    """A split of a known cluster's trace as `mirage evaluate` replays it (for scripts)."""

    setting: Setting
    profile: ClusterProfile
    partition: str
    times: list[int]


def default_test_setting(
    cluster: str,
    load: float,
    every_h: float,
    split_name: str = "test",
    *,
    profile_name: str | None = None,
    step_min: float | None = None,
) -> SplitSetting:
    """The default test split (or ``split_name``: "tune", "train") of ``cluster``'s known
    trace and calibrated profile (or ``profile_name``) at ``load``, one sample every
    ``every_h`` hours, deciding every ``step_min`` minutes (default: the protocol's);
    SystemExit when the trace is missing."""
    from mirage.profile.schema import load_profile
    from mirage.trace.readers import load_trace

    trace = default_trace(cluster)
    if trace is None:
        raise SystemExit(f"no {cluster} trace found")
    profile_name = profile_name or default_profile(cluster)
    profile = load_profile(profile_name)
    df = load_trace(trace).jobs
    first, last = int(df["submit"].min()), int(df["submit"].max())
    split = default_splits(cluster, profile.timezone, first, last)[split_name]
    part = profile.partition(None)
    if part.nodes is None:
        raise SystemExit(f"profile {profile_name} gives no node count")
    protocol = Protocol(every_s=int(every_h * HOUR))
    if step_min is not None:
        protocol = dataclasses.replace(protocol, step_s=round(step_min * MINUTE))
    nodes = scaled_nodes(part.nodes, load)
    setting = Setting(trace, profile_name, nodes, load, split, protocol)
    return SplitSetting(setting, profile, part.name, sample_times(split, protocol, first))


def protocol_from(options: Mapping[str, Any], every_s: int = Protocol.every_s) -> Protocol:
    """The protocol from ``mirage evaluate``'s and ``mirage train``'s units: ``nodes``,
    ``gpus``, ``time_limit_h``, ``step_min``, ``window_h``, ``warmup_h``, and the cost's
    ``restart_min``, ``handoff_s``, ``extra_idle_h``, ``held_twice`` (:func:`cost_from`)."""
    try:
        return Protocol(
            nodes=options["nodes"],
            gpus=options["gpus"],
            time_limit_s=int(options["time_limit_h"] * HOUR),
            step_s=int(options["step_min"] * MINUTE),
            every_s=every_s,
            window_s=int(options["window_h"] * HOUR),
            warmup_s=int(options["warmup_h"] * HOUR),
            cost=cost_from(options),
        )
    except (ValueError, OverflowError) as exc:  # OverflowError: an infinite duration
        raise InputError(str(exc)) from exc


def cost_from(options: Mapping[str, Any]) -> CostModel:
    """The cost of record from the commands' units (:mod:`mirage.policy.cost`): the restart
    in minutes, the handoff window in seconds, the extra transition's idle in hours;
    ``held_twice``: the job cannot hand off (SC'23's J). Absent keys keep the defaults."""
    d = DEFAULT_COST
    return CostModel(
        restart_s=float(options.get("restart_min", d.restart_s / MINUTE)) * MINUTE,
        handoff_s=float(options.get("handoff_s", d.handoff_s)),
        extra_idle_s=float(options.get("extra_idle_h", d.extra_idle_s / HOUR)) * HOUR,
        hands_off=not options.get("held_twice", False),
    )


def read_inputs(trace: str, profile_name: str) -> tuple[ClusterProfile, pd.DataFrame]:
    """The profile and the trace's jobs, or one clear error naming what is wrong."""
    from mirage.profile.schema import ProfileError, load_profile
    from mirage.trace.load import TraceFormatError
    from mirage.trace.readers import load_trace

    try:
        profile = load_profile(profile_name)
        load = load_trace(trace)
    except (ProfileError, TraceFormatError, OSError) as exc:
        raise InputError(str(exc)) from exc
    jobs = load.jobs
    if jobs.empty:
        raise InputError(f"{trace}: no jobs in this trace")
    if jobs["submit"].isna().all():
        raise InputError(f"{trace}: no job in this trace has a submit time")
    # A job replays only with submit, start and end known (see sim.workload.from_table).
    if not jobs[["submit", "start", "end"]].notna().all(axis=1).any():
        raise InputError(
            f"{trace}: no job in this trace has a known submit, start and end time "
            "(nothing to replay)"
        )
    _say_trace_use(trace, profile, jobs, len(load.skipped))
    return profile, jobs


def _say_trace_use(
    trace: str, profile: ClusterProfile, jobs: pd.DataFrame, unreadable: int
) -> None:
    """How much of the trace a replay at the profile's size uses (a log line; a warning
    when more than 5% is left out: mirage.sim.workload.TraceUse)."""
    from mirage.sim.workload import from_table

    use = from_table(jobs, profile).use(unreadable=unreadable)
    log.info("%s: %s", trace, use.line())
    said = use.check()
    if said:
        log.warning("%s: %s", trace, said)


#: START:END, where END starts with a year: the colons of START's time of day stay in START.
_SPLIT = re.compile(r"(.+?):(\d{4}-.*)")


def parse_split(text: str | None, name: str, tz: str, default: Split) -> Split:
    """ "2023-02-01:2023-03-01" (or with times, "2023-02-01T12:00:2023-03-01") -> a Split
    named ``name``; ``default`` when ``text`` is empty."""
    if not text:
        return default
    m = _SPLIT.fullmatch(text)
    if m is None:
        raise InputError(f"expected START:END dates, got {text!r}")
    try:
        split = Split(name, parse_when(m[1], tz), parse_when(m[2], tz))
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if split.end <= split.start:
        raise InputError(f"{text!r} ends before it starts")
    return split
