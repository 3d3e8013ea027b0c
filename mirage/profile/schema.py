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
    node_choice = "lowest"              # "lowest" nodes that fit, or "cons_tres" (as
                                        # select/cons_tres's _eval_nodes: the fewest free
                                        # CPUs within the first run of consecutive nodes
                                        # that fit); "best_fit" (its earlier name) reads
                                        # as "cons_tres"
    bf_reserve_whole_nodes = false      # a backfill reservation for a later start holds
                                        # its nodes whole (sched/backfill's node bitmaps)
    bf_will_run_batches = false         # backfill starts a reservation at the end of a
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
    qos = ""                            # the partition QOS (a [[qos]] name; "": none)
    node_list = ""                      # its nodes as a Slurm hostlist ("gpu[1-4]"),
                                        # as captured; partitions naming one node share
                                        # it in the simulator. "": nodes of its own

    # Limits that make jobs wait besides capacity (Slurm's QOS and association limits,
    # enforced as AccountingStorageEnforce=associations,limits,qos; mirage.sim.limits).
    # Omitted: no limits. TRES lists name cpu, node and gres/gpu ("cpu=64,gres/gpu=8").
    [[qos]]                             # zero or more
    name = "normal"                     # required; jobs without a QOS get "normal" if
                                        # defined (or their association's default_qos)
    max_jobs_per_user = 8               # MaxJobsPerUser (running jobs); omitted = none
    max_submit_jobs_per_user = 100      # MaxSubmitJobsPerUser (pending + running)
    max_tres_per_user = "gres/gpu=12"   # MaxTRESPerUser (running jobs' total)
    grp_tres = "node=40"                # GrpTRES (all the QOS's running jobs)
    grp_jobs = 50                       # GrpJobs
    max_wall_s = 172800                 # MaxWall (a longer time limit pends for ever)
    over_part_qos = false               # Flags=OverPartQOS (the job QOS ranks first)

    [[associations]]                    # zero or more, per user
    user = "*"                          # required; "*": every user without their own
    max_jobs = 8                        # MaxJobs (running jobs)
    max_submit_jobs = 100               # MaxSubmitJobs
    grp_tres = "gres/gpu=12"            # GrpTRES (the user's running jobs)
    grp_jobs = 8                        # GrpJobs
    max_wall_s = 172800                 # MaxWall
    default_qos = ""                    # DefaultQOS (a [[qos]] name)
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from mirage.slurm.hostlist import HostlistError
from mirage.slurm.hostlist import expand as expand_hostlist
from mirage.slurm.syntax import digits, parse_tres
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
    node_choice: Literal["lowest", "cons_tres"] = "lowest"
    bf_reserve_whole_nodes: bool = False
    bf_will_run_batches: bool = False
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
    qos: str = ""
    node_list: str = ""  # Slurm hostlist of its nodes; "": unnamed nodes of its own

    @property
    def total_gpus(self) -> int | None:
        return None if self.nodes is None else self.nodes * self.gpus_per_node


#: The trackable resources (TRES) that limits may name, in Slurm's TRES order (cpu is
#: TRES 1, node 4, GRES after the fixed ones): the first one over its limit names the reason.
LIMIT_TRES = ("cpu", "node", "gres/gpu")


def limit_tres(text: str, where: str = "<tres>") -> dict[str, int]:
    """A TRES limit, "cpu=64,gres/gpu=8" -> {"cpu": 64, "gres/gpu": 8}: a TRES the
    simulator does not model, or an item that is no TRES=count, is an error."""
    bare = [x.strip() for x in text.split(",") if x.strip() and "=" not in x]
    items = {**parse_tres(text), **dict.fromkeys(bare, "")}  # "cpu" alone: no count
    for key, value in items.items():
        if key not in LIMIT_TRES:
            raise ProfileError(
                f"{where}: unknown TRES {key!r} in {text!r}; valid: {', '.join(LIMIT_TRES)}"
            )
        if not digits(value):
            raise ProfileError(f"{where}: {f'{key}={value}'!r} in {text!r} is not TRES=count")
    return {key: int(value) for key, value in items.items()}


@dataclass(frozen=True)
class Qos:
    """A Slurm QOS's limits (None / "": no limit)."""

    name: str
    max_jobs_per_user: int | None = None
    max_submit_jobs_per_user: int | None = None
    max_tres_per_user: str = ""
    grp_tres: str = ""
    grp_jobs: int | None = None
    max_wall_s: int | None = None
    over_part_qos: bool = False

    @property
    def has_limits(self) -> bool:
        return any(
            x not in (None, "")
            for x in (
                self.max_jobs_per_user,
                self.max_submit_jobs_per_user,
                self.max_tres_per_user,
                self.grp_tres,
                self.grp_jobs,
                self.max_wall_s,
            )
        )


@dataclass(frozen=True)
class Association:
    """A user association's limits ("*": every user without one of their own)."""

    user: str
    max_jobs: int | None = None
    max_submit_jobs: int | None = None
    grp_tres: str = ""
    grp_jobs: int | None = None
    max_wall_s: int | None = None
    default_qos: str = ""

    @property
    def has_limits(self) -> bool:
        return (
            any(
                x not in (None, "")
                for x in (self.max_jobs, self.max_submit_jobs, self.grp_tres, self.grp_jobs)
            )
            or self.max_wall_s is not None
        )


@dataclass(frozen=True)
class ClusterProfile:
    name: str
    partitions: tuple[Partition, ...]
    description: str = ""
    timezone: str = "UTC"
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    qos: tuple[Qos, ...] = ()
    associations: tuple[Association, ...] = ()

    def association(self, user: str) -> Association | None:
        """The user's association: their own, else the "*" one, else None."""
        default = None
        for a in self.associations:
            if a.user == user:
                return a
            if a.user == "*":
                default = a
        return default

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
    sched_raw = _renamed(data.get("scheduler", {}))
    scheduler = build(SchedulerSettings, sched_raw, f"{source} [scheduler]")
    qos = tuple(
        build(Qos, q, f"{source} [[qos]] #{i + 1}")
        for i, q in enumerate(_tables(data, "qos", source))
    )
    assocs = tuple(
        build(Association, a, f"{source} [[associations]] #{i + 1}")
        for i, a in enumerate(_tables(data, "associations", source))
    )
    nested = ("partitions", "scheduler", "qos", "associations")
    top = {k: v for k, v in data.items() if k not in nested}
    profile = build(
        ClusterProfile,
        top,
        source,
        nested={
            "partitions": partitions,
            "scheduler": scheduler,
            "qos": qos,
            "associations": assocs,
        },
    )
    _check_timezone(profile.timezone, source)
    _check_limits(profile, source)
    _check_node_lists(profile, source)
    return profile


def _renamed(sched: Any) -> Any:
    """``node_choice = "best_fit"``, the earlier name of "cons_tres" (profiles captured
    before the rule followed _eval_nodes's consecutive node sets), reads as "cons_tres"."""
    if isinstance(sched, dict) and sched.get("node_choice") == "best_fit":
        return {**sched, "node_choice": "cons_tres"}
    return sched


def _check_node_lists(profile: ClusterProfile, source: str) -> None:
    """A partition's node list reads as a hostlist and has as many names as ``nodes``."""
    for p in profile.partitions:
        if not p.node_list:
            continue
        try:
            names = expand_hostlist(p.node_list)
        except HostlistError as exc:
            raise ProfileError(f"{source}: partition {p.name}: node_list: {exc}") from exc
        if p.nodes is not None and len(set(names)) != p.nodes:
            raise ProfileError(
                f"{source}: partition {p.name}: node_list {p.node_list!r} names "
                f"{len(set(names))} nodes, nodes = {p.nodes}"
            )


def _tables(data: dict[str, Any], key: str, source: str) -> list[Any]:
    raw = data.get(key, [])
    if not isinstance(raw, list):
        raise ProfileError(f"{source}: {key} must be an array of tables ([[{key}]])")
    return raw


def _check_limits(profile: ClusterProfile, source: str) -> None:
    """QOS names unique and known where named; TRES lists valid; one association per user."""
    names = [q.name for q in profile.qos]
    if len(set(names)) != len(names):
        raise ProfileError(f"{source}: QOS names repeat: {names}")
    users = [a.user for a in profile.associations]
    if len(set(users)) != len(users):
        raise ProfileError(f"{source}: association users repeat: {users}")
    known = set(names)
    valid = ", ".join(names) or "(none defined)"
    for p in profile.partitions:
        if p.qos and p.qos not in known:
            raise ProfileError(
                f"{source}: partition {p.name!r} names QOS {p.qos!r}; [[qos]] defines: {valid}"
            )
    for a in profile.associations:
        if a.default_qos and a.default_qos not in known:
            raise ProfileError(
                f"{source}: association {a.user!r} names default_qos {a.default_qos!r}; "
                f"[[qos]] defines: {valid}"
            )
        limit_tres(a.grp_tres, f"{source} association {a.user!r} grp_tres")
    for q in profile.qos:
        limit_tres(q.grp_tres, f"{source} QOS {q.name!r} grp_tres")
        limit_tres(q.max_tres_per_user, f"{source} QOS {q.name!r} max_tres_per_user")


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
            if value is not None and not (f.name == "qos" and value == ""):
                lines.append(f"{f.name} = {_toml(value)}")
    for table, cls, rows in (
        ("qos", Qos, profile.qos),
        ("associations", Association, profile.associations),
    ):
        for row in rows:
            lines += ["", f"[[{table}]]"]
            for f in fields(cls):
                value = getattr(row, f.name)
                if f.name in ("name", "user") or (value is not None and value != f.default):
                    lines.append(f"{f.name} = {_toml(value)}")
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'
