"""Build a cluster profile from a live cluster (``scontrol show partition|node|config``)."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping, Sequence

from mirage.profile.schema import (
    LIMIT_TRES,
    Association,
    ClusterProfile,
    Partition,
    ProfileError,
    Qos,
    SchedulerSettings,
)
from mirage.slurm.client import SlurmClient
from mirage.slurm.hostlist import compress as compress_hostlist
from mirage.slurm.syntax import NO_LIMIT, parse_gres, parse_limit

log = logging.getLogger(__name__)

#: slurmctld checks time limits every PERIODIC_TIMEOUT (30 s, src/slurmctld/controller.c).
PERIODIC_TIMEOUT_S = 30


def gpus_in_gres(gres: str) -> tuple[int, str]:
    """A node's GPUs and the first GPU type its Gres names: ``gpu:a100:4(S:0-1),shard:8``
    -> (4, "a100")."""
    gpus = [g for g in parse_gres(gres) if g.name == "gpu"]
    return sum(g.count for g in gpus), next((g.kind for g in gpus if g.kind), "")


def _merge(records: Sequence[Mapping[str, str]]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for rec in records:
        merged.update(rec)
    return merged


def _seconds(text: str, default: int) -> int:
    """``scontrol show config``'s "2 sec" (KillWait) as 2."""
    head, _, _ = text.strip().partition(" ")
    return int(head) if head.isdigit() else default


def scheduler_from_config(config: Mapping[str, str]) -> SchedulerSettings:
    """Priority weights and backfill parameters from ``scontrol show config``."""
    params: dict[str, str] = {}
    for item in config.get("SchedulerParameters", "").split(","):
        key, _, value = item.partition("=")
        if key and key != "(null)":
            params[key] = value
    defaults = SchedulerSettings()

    def num(key: str, default: int) -> int:
        value = config.get(key, "")
        return int(value) if value.isdigit() else default

    def param(key: str, default: int, unit: int = 1) -> int:
        value = params.get(key, "")
        return int(value) * unit if value.isdigit() else default

    max_age = parse_limit(config.get("PriorityMaxAge", "7-00:00:00"))
    try:  # PriorityCalcPeriod: minutes when bare (slurm.conf); scontrol prints "00:05:00"
        calc_period = parse_limit(config.get("PriorityCalcPeriod", "00:05:00")) or 300
    except ValueError:
        calc_period = 300
    # Fair-share: the simulator models Slurm's classic algorithm (PriorityFlags=
    # NO_FAIR_TREE; on a Fair Tree cluster, Slurm >= 19.05's default, an approximation).
    # It is switched on where jobs must carry an association (AccountingStorageEnforce
    # with associations, or limits/qos/safe, which imply them) and the weight is set;
    # without enforcement (the test cluster), sprio shows no fair-share term.
    # PriorityDecayHalfLife: "7-00:00:00" (Slurm's default); "00:00:00" or NONE: no decay.
    enforce = {e.strip().lower() for e in config.get("AccountingStorageEnforce", "").split(",")}
    assoc = bool(enforce & {"associations", "limits", "qos", "safe"})
    fs_weight = num("PriorityWeightFairShare", 0)
    try:
        half_life = parse_limit(config.get("PriorityDecayHalfLife", "7-00:00:00"))
    except ValueError:
        half_life = defaults.priority_decay_half_life_s
    # A captured cluster runs Slurm's own code: the engine's Slurm details are on.
    settings = SchedulerSettings(
        priority_weight_age=num("PriorityWeightAge", 0),
        priority_weight_job_size=num("PriorityWeightJobSize", 0),
        priority_weight_fairshare=fs_weight,
        priority_weight_partition=num("PriorityWeightPartition", 0),
        priority_max_age_s=defaults.priority_max_age_s if max_age is None else max_age,
        priority_decay_half_life_s=0 if half_life is None else half_life,
        priority_favor_small=config.get("PriorityFavorSmall", "No").lower() in ("yes", "1"),
        backfill="slurm",
        bf_interval_s=param("bf_interval", defaults.bf_interval_s),
        bf_window_s=param("bf_window", defaults.bf_window_s, 60),  # minutes in slurm.conf
        bf_resolution_s=param("bf_resolution", defaults.bf_resolution_s),
        bf_max_job_test=param("bf_max_job_test", defaults.bf_max_job_test),
        sched_interval_s=param("sched_interval", defaults.sched_interval_s),
        bf_window_linear=param("bf_window_linear", defaults.bf_window_linear),
        kill_wait_s=_seconds(config.get("KillWait", ""), defaults.kill_wait_s),
        fairshare="classic" if assoc and fs_weight > 0 else "none",
    )
    return slurm_details(settings, calc_period)


def slurm_details(sched: SchedulerSettings, calc_period_s: int = 300) -> SchedulerSettings:
    """The settings with the engine's optional Slurm 22.05 details switched on
    (mirage.sim.engine's docstring): the job size factor over nodes and CPUs
    (priority/multifactor), priorities set at PriorityCalcPeriod, limits enforced on
    slurmctld's 30 s PERIODIC_TIMEOUT, cons_tres's node choice, and backfill reservations
    on whole nodes (sched/backfill's node bitmaps) where _will_run_test's batches of end
    times put them."""
    return dataclasses.replace(
        sched,
        priority_size_cpus=True,
        priority_calc_period_s=calc_period_s,
        limit_check_interval_s=PERIODIC_TIMEOUT_S,
        node_choice="cons_tres",
        bf_reserve_whole_nodes=True,
        bf_will_run_batches=True,
    )


def partitions_from(
    partitions: Sequence[Mapping[str, str]], nodes: Sequence[Mapping[str, str]]
) -> tuple[Partition, ...]:
    """One profile partition per Slurm partition, with its nodes' most common shape."""
    members: dict[str, list[Mapping[str, str]]] = {}
    for node in nodes:
        for part_name in node.get("Partitions", "").split(","):
            if part_name:
                members.setdefault(part_name, []).append(node)
    out = []
    for part in partitions:
        name = part.get("PartitionName", "")
        its = members.get(name, [])
        if not name or not its:
            log.warning("partition %r has no nodes in `scontrol show node`; skipped", name)
            continue
        shapes = Counter(
            (
                int(n.get("CPUTot", "0") or 0),
                int(n.get("RealMemory", "0") or 0),
                gpus_in_gres(n.get("Gres", "")),
            )
            for n in its
        )
        (cpus, mem, (gpus, kind)), _ = shapes.most_common(1)[0]
        if len(shapes) > 1:
            log.warning(
                "partition %s mixes %d node shapes; profile uses the most common", name, len(shapes)
            )
        out.append(
            Partition(
                name=name,
                nodes=len(its),
                cpus_per_node=cpus,
                memory_mb_per_node=mem,
                gpus_per_node=gpus,
                gpu_type=kind,
                max_time_s=parse_limit(part.get("MaxTime", "UNLIMITED")),
                default=part.get("Default", "NO").upper() == "YES",
                qos=_none_if_na(part.get("QoS", part.get("QOS", ""))),
                node_list=compress_hostlist(n.get("NodeName", "") for n in its),
            )
        )
    return tuple(out)


def _none_if_na(text: str) -> str:
    return "" if text.strip().upper() in NO_LIMIT else text.strip()


def limit_tres(text: str, where: str) -> str:
    """A sacctmgr TRES list ("cpu=64,gres/gpu=8,mem=100G") with only the TRES the
    simulator models (cpu, node, gres/gpu; "gres/gpu:a100" counts as gres/gpu)."""
    kept = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, _, value = item.partition("=")
        if key.startswith("gres/gpu:"):
            key = "gres/gpu"
        if key in LIMIT_TRES and value.isdigit():
            kept.append(f"{key}={value}")
        else:
            log.warning("%s: TRES limit %r not modelled; left out", where, item)
    return ",".join(kept)


def _count(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def qos_from(rows: Sequence[Mapping[str, str]]) -> tuple[Qos, ...]:
    """``sacctmgr -P show qos`` rows -> profile QOS (the limits the simulator models).

    Columns: MaxJobsPU, MaxSubmitPU, MaxTRESPU, GrpTRES, GrpJobs, MaxWall, Flags
    (OverPartQOS). Limits not modelled (GrpSubmit, GrpWall, MaxTRES per job, per-account
    limits, TRES-minutes) are logged and left out.
    """
    out = []
    for row in rows:
        name = row.get("Name", "").strip()
        if not name:
            continue
        for col in ("GrpSubmit", "GrpWall", "MaxTRES", "MaxTRESPerNode", "MaxTRESMins",
                    "GrpTRESMins", "GrpTRESRunMins", "MaxTRESPA", "MaxJobsPA", "MaxSubmitPA",
                    "MinTRES"):  # fmt: skip
            if row.get(col, "").strip():
                log.warning("QOS %s: %s=%s not modelled; left out", name, col, row[col])
        out.append(
            Qos(
                name=name,
                max_jobs_per_user=_count(row.get("MaxJobsPU", "")),
                max_submit_jobs_per_user=_count(row.get("MaxSubmitPU", "")),
                max_tres_per_user=limit_tres(row.get("MaxTRESPU", ""), f"QOS {name} MaxTRESPU"),
                grp_tres=limit_tres(row.get("GrpTRES", ""), f"QOS {name} GrpTRES"),
                grp_jobs=_count(row.get("GrpJobs", "")),
                max_wall_s=parse_limit(row.get("MaxWall", "")),
                over_part_qos="overpartqos" in row.get("Flags", "").lower(),
            )
        )
    return tuple(out)


def associations_from(
    rows: Sequence[Mapping[str, str]], qos: Sequence[str]
) -> tuple[Association, ...]:
    """``sacctmgr -P show assoc`` rows -> per-user associations (rows with a User).

    Account rows (no User) are left out (the simulator has no account hierarchy); a
    user with several associations keeps the first (logged). A default QOS that is not
    among ``qos`` is dropped. Users with no limit and no default QOS are not listed.
    """
    out: dict[str, Association] = {}
    for row in rows:
        user = row.get("User", "").strip()
        if not user:
            continue
        dq = row.get("Def QOS", "").strip()
        a = Association(
            user=user,
            max_jobs=_count(row.get("MaxJobs", "")),
            max_submit_jobs=_count(row.get("MaxSubmit", "")),
            grp_tres=limit_tres(row.get("GrpTRES", ""), f"association {user} GrpTRES"),
            grp_jobs=_count(row.get("GrpJobs", "")),
            max_wall_s=parse_limit(row.get("MaxWall", "")),
            default_qos=dq if dq in qos else "",
        )
        if not a.has_limits and not a.default_qos:
            continue
        if user in out:
            if out[user] != a:
                log.warning("user %s has several associations; the first is kept", user)
            continue
        out[user] = a
    return tuple(out.values())


def limits_enforced(config: Mapping[str, str]) -> bool:
    """AccountingStorageEnforce with limits (or safe, which implies them)."""
    enforce = {e.strip().lower() for e in config.get("AccountingStorageEnforce", "").split(",")}
    return bool(enforce & {"limits", "safe"})


def capture_profile(client: SlurmClient, name: str, timezone: str = "UTC") -> ClusterProfile:
    """Read partitions, nodes, scheduler configuration and (where enforced) QOS and
    association limits (``sacctmgr -P show qos|assoc``) through the Slurm client."""
    config = _merge(client.show("config"))
    parts = partitions_from(client.show("partition"), client.show("node"))
    if not parts:
        raise ProfileError("the cluster reports no partition with nodes")
    qos: tuple[Qos, ...] = ()
    assocs: tuple[Association, ...] = ()
    if limits_enforced(config):
        qos = qos_from(client.accounting_limits("qos"))
        assocs = associations_from(client.accounting_limits("assoc"), [q.name for q in qos])
    else:
        # debug: the daemon reads the profile hourly (each simulated hour in the demo)
        log.debug("AccountingStorageEnforce has no limits: QOS and association limits not read")
    known = {q.name for q in qos}
    for p in parts:
        if p.qos and p.qos not in known:
            log.warning("partition %s: QOS %s not captured; left out", p.name, p.qos)
    parts = tuple(p if p.qos in known else dataclasses.replace(p, qos="") for p in parts)
    return ClusterProfile(
        name=name,
        description=f"captured from cluster {config.get('ClusterName', '?')}",
        timezone=timezone,
        partitions=parts,
        scheduler=scheduler_from_config(config),
        qos=qos,
        associations=assocs,
    )
