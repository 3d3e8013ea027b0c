"""The daemon's TOML configuration (``/etc/mirage/mirage.toml`` by default).

Every key, its unit and its default (``deploy/mirage.toml.example`` is the same list,
commented). Unknown keys are rejected with an error naming the valid ones, so that a typo
never silently falls back to a default. Durations are seconds (``_s``).

    [daemon]
    cluster = "default"            # the cluster's name: the lease is held under it
    state_dir = "/var/lib/mirage"  # SQLite database (and nothing else) lives here
    database_url = ""              # "" = sqlite:///<state_dir>/mirage.sqlite; or postgresql://…
    poll_interval_s = 60           # one cycle (one squeue, one sacct) every interval
    backoff_max_s = 900            # Slurm errors double the wait between polls up to this
    lease_ttl_s = 180              # the lease lapses if not renewed (>= 2 intervals)
    unknown_timeout_s = 600        # an UNKNOWN submission not found by then is LOST
    sacct_overlap_s = 300          # each sacct window starts this long before the last poll
    max_submits_per_cycle = 50     # sbatch calls per cycle, at most
    max_rejections = 3             # sbatch refusals of one chain in a row before it FAILs
    handoff = true                 # signal the predecessor when its successor starts; false:
                                   # jobs cannot hand off ([policy] keys left out take
                                   # SHIPPED_HELD_TWICE, J charges 0.5 x overlap)
    handoff_signal = "USR1"        # the signal (scancel --batch --signal=…)
    revoke = true                  # cancel a pending pre-submission a policy finds far too early
    run_as_owner = "auto"          # "auto" (when root), "always", "never" (per-user daemon)
    sees_all_jobs = true           # false: squeue shows only our jobs (queue policies fall back)
    test_only_per_cycle = 20       # sbatch --test-only estimates per cycle (each costs a job id;
                                   # the guard asks one per request shape about to be submitted)
    max_chains_per_user = 100      # active chains one user may have registered at once
    max_script_bytes = 1048576     # the largest batch script a chain may register
    allow_root_chains = false      # true: a daemon submitting as owners runs uid 0's chains

    [slurm]
    backend = "cli"                # "cli": squeue/sacct/sbatch/…; "pyslurm": the daemon's reads
                                   # through pyslurm 22.5 in-process (scripts/build-pyslurm.sh;
                                   # submissions and actions on jobs still go through sbatch/
                                   # scancel/scontrol as the chain's owner)
    bin_dir = ""                   # directory of squeue/sacct/sbatch/scancel; "" = $PATH
    timeout_s = 30                 # squeue, scancel, scontrol
    accounting_timeout_s = 120     # sacct
    submit_timeout_s = 60          # sbatch (a timeout makes the submission UNKNOWN)

    [policy]
    default = "qbets"              # "reactive", "fixed-lead", "qbets", "running-average",
                                   # "lookahead" (needs the profile), or a trained "rf", "xgb",
                                   # "dqn", "pg"; the default, with the guard, is the measured
                                   # shipped configuration (docs/evaluation.md)
    guard = "estimate"             # "estimate": no pre-submission Slurm's own estimate starts
                                   # before the planned end + its margin (and such a pending
                                   # one is revoked); "lookahead": none the look-ahead's simulated
                                   # start puts before the end + guard_lookahead_margin_s (needs
                                   # the profile); "estimate+lookahead": either; "none": the
                                   # policy alone
    guard_margin_fraction = 0.166667 # the estimate veto's margin, as a share of the successor's
                                   # time limit (1/6: 8 h of a 48 h segment, 20 min of 2 h)
    # guard_margin_s = 28800       # or a fixed margin in seconds (may be negative); when set,
                                   # it replaces guard_margin_fraction
    guard_lookahead_margin_s = 0   # the look-ahead veto's margin (may be negative)
    qbets_quantile = 0.95          # qbets: the quantile of the last day's waits bounded (95%)
    average_factor = 1.5           # running-average: predicted wait = factor x the mean wait
    lead_s = 900                   # fixed-lead: submit this long before the planned end
    lookahead_margin_s = 0         # lookahead: submit once simulated start + margin >= the end
                                   # (may be negative: submit later than the simulation says)
    lookahead_runtime = "median"   # lookahead: run time from the user's history: median, mean, q25
    lookahead_draws = 1            # lookahead: >1: median start over simulations of drawn run times
    fallback = "reactive"          # when the chosen policy cannot run: sees_all_jobs=false, a
                                   # model tuned for another cluster or partition, coverage lost
    coverage_window = 20           # a forecaster is set aside (fallback) when fewer than
    coverage_min = 0.6             # coverage_min of its last coverage_window stated 90%
                                   # intervals held the successor's start (0 = never)
    models_dir = "/var/lib/mirage/models"  # trained policies: <models_dir>/<cluster>/<policy>/
                                   # (where mirage-recalibrate@ rewrites them; "" = none)
    cluster = ""                   # the cluster's name under models_dir (e.g. "ls6")
    max_presubmitted_per_user = 0  # a fairness cap: at most this many of one user's
                                   # pre-submitted successors pending at once; the rest wait
                                   # for their predecessors' ends (0 = no cap)
    presubmit_only_limit_bound = true  # a chain whose last segment ended on its own
                                   # well before its limit (by >10% of it and >10 min) gets
                                   # its successor when that segment ends, until one runs to
                                   # its limit again (false = pre-submit for every chain)

    [policy.partitions]            # per-partition policy names (override `default`)
    # gpu-a100 = "reactive"

    [plan]
    replan = false                 # true: a chain registered with `chain submit --plan` is
                                   # planned again before each segment (`mirage plan` on the
                                   # daemon's poll, the work left): its shape may change
    replan_min_gain_s = 0          # ... only when the new shape is predicted to finish the
                                   # chain at least this much sooner than its present one

    [metrics]
    address = "127.0.0.1"          # Prometheus exporter; port 0 = off
    port = 9750

    [socket]
    path = "/run/mirage/mirage.sock"  # the users' Unix socket (SO_PEERCRED)

    [log]
    level = "info"                 # Mirage's own log lines: "debug", "info", "warning", "error"
                                   # (-v on the command line means debug)

The file read is ``--config FILE``, else ``$MIRAGE_CONFIG``, else the default path (whose
absence means every default; a file named by flag or environment must exist).
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from mirage.policy.guard import GUARDS, LOOKAHEAD_GUARDS, SHIPPED
from mirage.typedtoml import SchemaError, build, read_toml

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = "/etc/mirage/mirage.toml"
CONFIG_ENV = "MIRAGE_CONFIG"  # the configuration's path when --config is not given

#: No duration in the configuration may exceed a year (a typo'd exponent is not a setting).
MAX_DURATION_S = 366 * 86400
#: The database back ends the store is tested on.
DATABASES = ("sqlite", "postgresql")


class ConfigError(SchemaError):
    """The configuration file is missing, unreadable or does not follow the schema."""


@dataclass(frozen=True)
class DaemonSection:
    cluster: str = "default"
    state_dir: str = "/var/lib/mirage"
    database_url: str = ""
    poll_interval_s: int = 60
    backoff_max_s: int = 900
    lease_ttl_s: int = 180
    unknown_timeout_s: int = 600
    sacct_overlap_s: int = 300
    max_submits_per_cycle: int = 50
    max_rejections: int = 3
    handoff: bool = True
    handoff_signal: str = "USR1"
    revoke: bool = True
    run_as_owner: Literal["auto", "always", "never"] = "auto"
    sees_all_jobs: bool = True
    test_only_per_cycle: int = 20
    max_chains_per_user: int = 100
    max_script_bytes: int = 1_048_576
    allow_root_chains: bool = False


@dataclass(frozen=True)
class SlurmSection:
    backend: Literal["cli", "pyslurm"] = "cli"
    bin_dir: str = ""
    timeout_s: int = 30
    accounting_timeout_s: int = 120
    submit_timeout_s: int = 60


@dataclass(frozen=True)
class PolicySection:
    default: str = SHIPPED.policy
    guard: str = "estimate"
    guard_margin_fraction: float = SHIPPED.guard_margin_fraction
    guard_margin_s: int | None = field(default=SHIPPED.guard_margin_s, metadata={"signed": True})
    guard_lookahead_margin_s: int = field(
        default=SHIPPED.guard_lookahead_margin_s, metadata={"signed": True}
    )
    qbets_quantile: float = SHIPPED.qbets_quantile
    average_factor: float = SHIPPED.average_factor
    lead_s: int = 900
    lookahead_margin_s: int = field(default=0, metadata={"signed": True})
    lookahead_runtime: str = "median"
    lookahead_draws: int = 1
    fallback: str = "reactive"
    coverage_window: int = 20
    coverage_min: float = 0.6
    models_dir: str = "/var/lib/mirage/models"  # where mirage-recalibrate@.service writes
    cluster: str = ""
    partitions: dict[str, str] = field(default_factory=dict)
    max_presubmitted_per_user: int = 0
    presubmit_only_limit_bound: bool = True


@dataclass(frozen=True)
class PlanSection:
    replan: bool = False
    # a re-plan changes a chain's shape only when the shape it recommends is predicted to
    # finish the chain at least this much sooner than the chain's present shape (0: any gain)
    replan_min_gain_s: int = 0


@dataclass(frozen=True)
class MetricsSection:
    address: str = "127.0.0.1"
    port: int = 9750


@dataclass(frozen=True)
class SocketSection:
    path: str = "/run/mirage/mirage.sock"


@dataclass(frozen=True)
class LogSection:
    level: str = "info"


LOG_LEVELS = ("debug", "info", "warning", "error")
#: ``guard_margin_fraction`` beyond this many time limits would never let a successor in.
MAX_MARGIN_FRACTION = 4.0


@dataclass(frozen=True)
class Config:
    daemon: DaemonSection = field(default_factory=DaemonSection)
    slurm: SlurmSection = field(default_factory=SlurmSection)
    policy: PolicySection = field(default_factory=PolicySection)
    plan: PlanSection = field(default_factory=PlanSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    socket: SocketSection = field(default_factory=SocketSection)
    log: LogSection = field(default_factory=LogSection)


_SECTIONS: dict[str, type[Any]] = {
    "daemon": DaemonSection,
    "slurm": SlurmSection,
    "policy": PolicySection,
    "plan": PlanSection,
    "metrics": MetricsSection,
    "socket": SocketSection,
    "log": LogSection,
}


def config_from_dict(data: dict[str, Any], source: str = "<config>") -> Config:
    unknown = sorted(set(data) - set(_SECTIONS))
    if unknown:
        raise ConfigError(
            f"{source}: unknown section(s) {', '.join(unknown)}; "
            f"valid sections: {', '.join(_SECTIONS)}"
        )
    built: dict[str, Any] = {}
    try:
        for name, cls in _SECTIONS.items():
            table = data.get(name, {})
            nested: dict[str, Any] = {}
            if name == "policy" and isinstance(table, dict):
                table = _with_cluster_policy(table, source)
                table = _with_held_twice(table, data.get("daemon", {}))
            if name == "policy" and isinstance(table, dict) and "partitions" in table:
                nested["partitions"] = _str_table(table["partitions"], f"{source} [policy]")
            built[name] = build(cls, table, f"{source} [{name}]", nested=nested)
    except SchemaError as exc:
        raise ConfigError(str(exc)) from exc
    cfg = Config(**built)
    _check(cfg, source)
    return cfg


def _with_cluster_policy(table: dict[str, Any], source: str) -> dict[str, Any]:
    """``[policy]`` with the cluster's own choice (``<models_dir>/<cluster>/policy.toml``,
    mirage.policy.guard.cluster_policy) for the keys it leaves out: the shipped defaults
    chosen on that cluster's tuning month instead of ls6's."""
    from mirage.policy.guard import POLICY_FILE, PolicyFileError, cluster_policy

    cluster = table.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        return table
    models = table.get("models_dir", PolicySection.models_dir)
    folder = Path(str(models)) / cluster
    try:
        values = cluster_policy(folder)
    except PolicyFileError as exc:
        raise ConfigError(f"{source} [policy]: {exc}") from exc
    taken = {k: v for k, v in values.items() if k not in table}
    if taken:
        log.info("[policy] %s from %s", ", ".join(f"{k} = {v!r}" for k, v in taken.items()),
                 folder / POLICY_FILE)  # fmt: skip
    return {**taken, **table}


def _with_held_twice(table: dict[str, Any], daemon: Any) -> dict[str, Any]:
    """``[policy]`` for jobs that cannot hand off (``[daemon] handoff = false``): the keys
    it (and the cluster's own file) leaves out take the choice made under the cost such
    jobs bear (mirage.policy.guard.SHIPPED_HELD_TWICE), not the one for jobs that hand off."""
    from dataclasses import asdict

    from mirage.policy.guard import FILE_KEYS, SHIPPED_HELD_TWICE

    if not isinstance(daemon, dict) or daemon.get("handoff", True) is not False:
        return table
    held = asdict(SHIPPED_HELD_TWICE)
    taken = {k: held[f] for k, f in FILE_KEYS.items() if k not in table and held[f] is not None}
    if taken:
        log.info("[policy] %s: the default for jobs that cannot hand off ([daemon] handoff "
                 "= false)", ", ".join(f"{k} = {v!r}" for k, v in taken.items()))  # fmt: skip
    return {**taken, **table}


def _str_table(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f'{where}: partitions must be a table of partition = "policy"')
    return dict(value)


def _check(cfg: Config, source: str) -> None:
    _check_durations(cfg, source)
    _check_daemon(cfg.daemon, source)
    if not 0 <= cfg.metrics.port <= 65535:
        raise ConfigError(f"{source} [metrics]: port must be 0 (off) to 65535")
    for key in ("timeout_s", "accounting_timeout_s", "submit_timeout_s"):
        if getattr(cfg.slurm, key) < 1:
            raise ConfigError(f"{source} [slurm]: {key} must be at least 1")
    _check_policy(cfg.policy, source)
    if cfg.log.level not in LOG_LEVELS:
        raise ConfigError(
            f"{source} [log]: level {cfg.log.level!r}; valid: {', '.join(LOG_LEVELS)}"
        )


def _check_durations(cfg: Config, source: str) -> None:
    for name in ("daemon", "slurm", "policy"):
        section = getattr(cfg, name)
        for f in fields(section):
            value = getattr(section, f.name)
            if f.name.endswith("_s") and value is not None and abs(value) > MAX_DURATION_S:
                raise ConfigError(f"{source} [{name}]: {f.name} = {value} s is more than a year")


def _check_daemon(d: DaemonSection, source: str) -> None:
    if d.poll_interval_s < 1:
        raise ConfigError(f"{source} [daemon]: poll_interval_s must be at least 1")
    if d.lease_ttl_s < 2 * d.poll_interval_s:
        raise ConfigError(
            f"{source} [daemon]: lease_ttl_s ({d.lease_ttl_s}) must be at least twice "
            f"poll_interval_s ({d.poll_interval_s})"
        )
    if d.backoff_max_s < d.poll_interval_s:
        raise ConfigError(f"{source} [daemon]: backoff_max_s must be >= poll_interval_s")
    if not valid_signal(d.handoff_signal):
        raise ConfigError(
            f"{source} [daemon]: handoff_signal {d.handoff_signal!r} is not a signal "
            "(a name such as USR1 or SIGTERM, or a number)"
        )
    if d.database_url:
        _check_database(d.database_url, f"{source} [daemon]")


def valid_signal(name: str) -> bool:
    """What ``scancel --signal`` takes: a name with or without SIG, or a number."""
    from mirage.slurm.syntax import digits

    if digits(name):
        return 0 < int(name) < signal.NSIG
    return f"SIG{name.upper().removeprefix('SIG')}" in signal.Signals.__members__


def _check_database(url: str, where: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"{where}: database_url {url!r} is not a database URL") from exc
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() not in DATABASES:
        raise ConfigError(
            f"{where}: database_url {shown}: use sqlite:///PATH or postgresql://… "
            f"(supported: {', '.join(DATABASES)})"
        )
    try:
        parsed.get_dialect().import_dbapi()
    except (ImportError, NoSuchModuleError) as exc:
        hint = (
            " (pip install 'mirage-provisioner[postgres]' and use postgresql+psycopg://…)"
            if parsed.get_backend_name() == "postgresql"
            else ""
        )
        raise ConfigError(
            f"{where}: database_url {shown}: its driver is missing ({exc}){hint}"
        ) from exc


def _check_constants(p: PolicySection, source: str) -> None:
    if p.guard not in GUARDS:
        raise ConfigError(
            f"{source} [policy]: guard must be one of {', '.join(GUARDS)}, got {p.guard!r}"
        )
    if not 0.0 < p.qbets_quantile < 1.0:
        raise ConfigError(f"{source} [policy]: qbets_quantile must lie strictly between 0 and 1")
    if p.average_factor <= 0:
        raise ConfigError(f"{source} [policy]: average_factor must be positive")
    if not -1.0 <= p.guard_margin_fraction <= MAX_MARGIN_FRACTION:
        raise ConfigError(
            f"{source} [policy]: guard_margin_fraction must lie between -1 and "
            f"{MAX_MARGIN_FRACTION:g} (a share of the successor's time limit), "
            f"got {p.guard_margin_fraction:g}"
        )


def _check_policy(p: PolicySection, source: str) -> None:
    from mirage.extras import MissingExtra, missing
    from mirage.learn.artifacts import AGENTS
    from mirage.learn.artifacts import POLICIES as LEARNED
    from mirage.policy.lookahead import MAX_DRAWS, check_stat
    from mirage.policy.simple import FALLBACK_NAMES, POLICY_NAMES, PROFILE_POLICIES

    try:
        check_stat(p.lookahead_runtime)
    except ValueError as exc:
        raise ConfigError(f"{source} [policy]: lookahead_runtime: {exc}") from exc
    if not 1 <= p.lookahead_draws <= MAX_DRAWS:
        raise ConfigError(f"{source} [policy]: lookahead_draws must be 1 to {MAX_DRAWS}")
    if p.coverage_window < 1:
        raise ConfigError(f"{source} [policy]: coverage_window must be at least 1")
    if not 0.0 <= p.coverage_min <= 1.0:
        raise ConfigError(f"{source} [policy]: coverage_min must be 0 (never) to 1")
    if p.max_presubmitted_per_user < 0:
        raise ConfigError(
            f"{source} [policy]: max_presubmitted_per_user must be 0 (no cap) or more"
        )
    _check_constants(p, source)
    valid = (*POLICY_NAMES, *LEARNED)
    for name in [p.default, p.fallback, *p.partitions.values()]:
        if name not in valid:
            raise ConfigError(
                f"{source} [policy]: unknown policy {name!r}; valid: {', '.join(valid)}"
            )
        if name in AGENTS and (module := missing("rl")) is not None:
            raise ConfigError(f"{source} [policy]: {MissingExtra('rl', module, repr(name))}")
        if name in (*LEARNED, *PROFILE_POLICIES) and not (p.models_dir and p.cluster):
            raise ConfigError(
                f"{source} [policy]: {name!r} needs models_dir and cluster (the cluster "
                "profile: <models_dir>/<cluster>/profile.toml)"
            )
        if name != "reactive" and p.guard in LOOKAHEAD_GUARDS and not (p.models_dir and p.cluster):
            raise ConfigError(
                f"{source} [policy]: guard {p.guard!r} needs models_dir and cluster (the "
                "cluster profile its look-ahead simulates: <models_dir>/<cluster>/profile.toml)"
            )
    if p.fallback not in FALLBACK_NAMES:
        raise ConfigError(f"{source} [policy]: fallback must be one of {', '.join(FALLBACK_NAMES)}")


def load_config(path: str | Path | None = None) -> Config:
    """Read and validate the configuration (``path``, else ``$MIRAGE_CONFIG``, else the
    default path); a missing default file gives the defaults."""
    if path is None and os.environ.get(CONFIG_ENV):
        path = os.environ[CONFIG_ENV]
    target = Path(path) if path is not None else Path(DEFAULT_CONFIG_PATH)
    if path is None and not target.exists():
        return Config()
    try:
        data = read_toml(target, "configuration")
    except SchemaError as exc:
        raise ConfigError(str(exc)) from exc
    return config_from_dict(data, str(target))
