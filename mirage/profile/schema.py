"""Cluster profiles: what a cluster looks like to the scheduler (and to the simulator).

A profile is a TOML file. Every key is listed below with its unit and default; unknown
keys are rejected with an error that names the valid ones, so that a typo never
silently falls back to a default. All durations are in seconds (``_s`` suffix), all
memory in MiB (``_mb`` suffix), to avoid Slurm's mixed units (bf_window is minutes in
slurm.conf, PriorityMaxAge is days-hours): capture converts.

    name = "ls6"                       # required
    description = ""                   # free text
    timezone = "America/Chicago"       # IANA zone of the site's local times

    [scheduler]
    priority_weight_age = 1000          # PriorityWeightAge
    priority_weight_job_size = 0        # PriorityWeightJobSize
    priority_weight_fairshare = 0       # PriorityWeightFairshare
    priority_weight_partition = 0       # PriorityWeightPartition
    priority_max_age_s = 604800         # PriorityMaxAge (Slurm default 7-0)
    priority_favor_small = false        # PriorityFavorSmall
    backfill = "slurm"                  # "slurm" (a reservation per tested job) or "easy"
    bf_interval_s = 30                  # bf_interval
    bf_window_s = 86400                 # bf_window (Slurm default 1 day)
    bf_resolution_s = 60                # bf_resolution
    bf_max_job_test = 500               # bf_max_job_test (Slurm 22.05 default)
    sched_interval_s = 60               # sched_interval
    # Optional Slurm details (the defaults keep the simulator's simpler model):
    priority_size_cpus = false          # job size = (nodes/N + cpus/C) / 2, as multifactor
                                        # (false: nodes/N only); --exclusive jobs count
                                        # whole-node CPUs from their first recalculation
    priority_calc_period_s = 300        # PriorityCalcPeriod; omitted or 0 = every pass
    limit_check_interval_s = 30         # jobs past their limit end at the next check
                                        # (slurmctld: ~30 s); omitted = at the limit
    node_choice = "lowest"              # "lowest" nodes that fit, or "best_fit" (fewest
                                        # free CPUs, as select/cons_tres) on shared nodes
    bf_reserve_whole_nodes = false      # a backfill reservation for a later start holds
                                        # its nodes whole (sched/backfill's node bitmaps)
    bf_will_run_batches = true          # backfill starts a reservation at the end of a
                                        # batch of running-job ends, as Slurm's
                                        # _will_run_test (false: at the exact earliest fit)
    bf_window_linear = 0                # bf_window_linear: those batches' window grows by
                                        # this many seconds (0: doubles, Slurm's default)
    kill_wait_s = 30                    # KillWait: backfill guesses a job past its limit
                                        # ends that long after it (_guess_job_end)
    fairshare = "none"                  # "classic": Slurm's classic fair-share factor,
                                        # weighted by priority_weight_fairshare, per user;
                                        # "none": no fair-share term (as on a cluster whose
                                        # jobs carry no association: the test cluster's
                                        # sprio shows none despite a weight of 10000)
    priority_decay_half_life_s = 604800 # PriorityDecayHalfLife of fair-share usage
                                        # (Slurm default 7-0; 0: usage never decays)
    fairshare_usage = "cpus"            # usage billed per allocated "cpus" or "gpus"

    [[partitions]]                      # one or more
    name = "gpu-a100"                   # required
    nodes = 84                          # optional: omitted = unknown (to calibrate)
    cpus_per_node = 128                 # required
    memory_mb_per_node = 256000         # required
    gpus_per_node = 3                   # default 0
    gpu_type = "a100"                   # default ""
    max_time_s = 172800                 # optional: omitted = unlimited
    default = false                     # the partition jobs go to without -p
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from mirage.typedtoml import SchemaError, build, read_toml


class ProfileError(SchemaError):
    """A profile file is missing, unreadable, or does not follow the schema."""


@dataclass(frozen=True)
class SchedulerSettings:
    priority_weight_age: int = 1000
    priority_weight_job_size: int = 0
    priority_weight_fairshare: int = 0
    priority_weight_partition: int = 0
    priority_max_age_s: int = 7 * 86400
    priority_favor_small: bool = False
    backfill: Literal["slurm", "easy"] = "slurm"
    bf_interval_s: int = 30
    bf_window_s: int = 86400
    bf_resolution_s: int = 60
    bf_max_job_test: int = 500
    sched_interval_s: int = 60
    priority_size_cpus: bool = False
    priority_calc_period_s: int | None = None
    limit_check_interval_s: int | None = None
    node_choice: Literal["lowest", "best_fit"] = "lowest"
    bf_reserve_whole_nodes: bool = False
    bf_will_run_batches: bool = True
    bf_window_linear: int = 0
    kill_wait_s: int = 30
    fairshare: Literal["none", "classic"] = "none"
    priority_decay_half_life_s: int = 7 * 86400
    fairshare_usage: Literal["cpus", "gpus"] = "cpus"


@dataclass(frozen=True)
class Partition:
    name: str
    cpus_per_node: int
    memory_mb_per_node: int
    nodes: int | None = None
    gpus_per_node: int = 0
    gpu_type: str = ""
    max_time_s: int | None = None
    default: bool = False

    @property
    def total_gpus(self) -> int | None:
        return None if self.nodes is None else self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class ClusterProfile:
    name: str
    partitions: tuple[Partition, ...]
    description: str = ""
    timezone: str = "UTC"
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)

    def partition(self, name: str | None = None) -> Partition:
        """The named partition, or the default one (the first if none is marked)."""
        if name is None:
            marked = [p for p in self.partitions if p.default]
            return marked[0] if marked else self.partitions[0]
        for p in self.partitions:
            if p.name == name:
                return p
        valid = ", ".join(p.name for p in self.partitions)
        raise ProfileError(f"profile {self.name!r} has no partition {name!r}; it has: {valid}")


def profile_from_dict(data: dict[str, Any], source: str = "<profile>") -> ClusterProfile:
    """Validate a parsed TOML document and build the profile."""
    try:
        return _profile_from_dict(data, source)
    except ProfileError:
        raise
    except SchemaError as exc:
        raise ProfileError(str(exc)) from exc


def _profile_from_dict(data: dict[str, Any], source: str) -> ClusterProfile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a profile must be a table")
    parts_raw = data.get("partitions")
    if not isinstance(parts_raw, list) or not parts_raw:
        raise ProfileError(f"{source}: at least one [[partitions]] table is required")
    partitions = tuple(
        build(Partition, p, f"{source} [[partitions]] #{i + 1}") for i, p in enumerate(parts_raw)
    )
    names = [p.name for p in partitions]
    if len(set(names)) != len(names):
        raise ProfileError(f"{source}: partition names repeat: {names}")
    scheduler = build(SchedulerSettings, data.get("scheduler", {}), f"{source} [scheduler]")
    top = {k: v for k, v in data.items() if k not in ("partitions", "scheduler")}
    profile = build(
        ClusterProfile,
        top,
        source,
        nested={"partitions": partitions, "scheduler": scheduler},
    )
    _check_timezone(profile.timezone, source)
    return profile


def _check_timezone(zone: str, source: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ProfileError(f"{source}: unknown IANA time zone {zone!r}") from exc


BUILTIN_DIR = Path(__file__).parent / "builtin"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def load_profile(name_or_path: str | Path) -> ClusterProfile:
    """Load a profile from a TOML path, or a shipped one by name ("ls6", "pitzer")."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = BUILTIN_DIR / f"{name_or_path}.toml"
        if not path.exists():
            raise ProfileError(
                f"no profile file or built-in profile {str(name_or_path)!r}; "
                f"built-in: {', '.join(builtin_names())}"
            )
    try:
        data = read_toml(path, "profile")
    except SchemaError as exc:
        raise ProfileError(str(exc)) from exc
    return profile_from_dict(data, str(path))


def profile_to_toml(profile: ClusterProfile) -> str:
    """Render a profile as TOML that ``load_profile`` reads back identically."""
    lines = [f"name = {_toml(profile.name)}"]
    if profile.description:
        lines.append(f"description = {_toml(profile.description)}")
    lines.append(f"timezone = {_toml(profile.timezone)}")
    lines += ["", "[scheduler]"]
    for f in fields(SchedulerSettings):
        value = getattr(profile.scheduler, f.name)
        if value is not None:
            lines.append(f"{f.name} = {_toml(value)}")
    for p in profile.partitions:
        lines += ["", "[[partitions]]"]
        for f in fields(Partition):
            value = getattr(p, f.name)
            if value is not None:
                lines.append(f"{f.name} = {_toml(value)}")
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'
