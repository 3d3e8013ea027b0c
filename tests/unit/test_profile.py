"""Cluster profiles: schema validation, built-ins, round trip and capture."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.profile.capture import (
    capture_profile,
    gpus_in_gres,
    scheduler_from_config,
)
from mirage.profile.schema import (
    ProfileError,
    builtin_names,
    load_profile,
    profile_from_dict,
    profile_to_toml,
)
from tests.fakes import NullSlurmClient

MINIMAL = """
name = "lab"
timezone = "Europe/Berlin"
[[partitions]]
name = "gpu"
nodes = 4
cpus_per_node = 16
memory_mb_per_node = 128000
gpus_per_node = 4
"""


def test_builtins_load_and_round_trip() -> None:
    assert {"ls6", "pitzer"} <= set(builtin_names())
    for name in builtin_names():
        prof = load_profile(name)
        assert profile_from_dict(tomllib.loads(profile_to_toml(prof))) == prof


def test_ls6_leaves_node_count_to_calibration() -> None:
    ls6 = load_profile("ls6")
    part = ls6.partition()
    assert part.name == "gpu-a100"
    assert part.nodes is None and part.total_gpus is None
    assert part.gpus_per_node == 3
    assert ls6.timezone == "America/Chicago"
    # bf_window must cover the longest time limit, or long jobs are never planned
    assert part.max_time_s is not None
    assert ls6.scheduler.bf_window_s >= part.max_time_s


def test_pitzer_gpu_partitions() -> None:
    pitzer = load_profile("pitzer")
    assert pitzer.partition().name == "gpuserial"
    assert pitzer.partition("gpu-quad").gpus_per_node == 4
    with pytest.raises(ProfileError, match="has: gpuserial"):
        pitzer.partition("nope")


def test_minimal_profile_gets_documented_defaults() -> None:
    prof = profile_from_dict(tomllib.loads(MINIMAL))
    assert prof.scheduler.backfill == "slurm"
    assert prof.scheduler.bf_max_job_test == 500
    assert prof.partition().total_gpus == 16


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ('nmae = "x"\n', r"unknown key\(s\) nmae; valid keys: associations, description, name,"),
        (
            "[scheduler]\nbf_windw_s = 3\n",
            r"unknown key\(s\) bf_windw_s; valid keys: .*bf_window_s",
        ),
        ('[scheduler]\nbackfill = "fifo"\n', r"'fifo' is not one of 'slurm', 'easy'"),
        ('[scheduler]\nbf_interval_s = "30"\n', r"bf_interval_s must be int, got str"),
        ("[scheduler]\nbf_interval_s = -1\n", r"must not be negative"),
    ],
)
def test_schema_errors_name_the_problem(patch: str, message: str) -> None:
    text = (
        patch + MINIMAL
        if not patch.startswith("[")
        else MINIMAL.replace("[[partitions]]", patch + "[[partitions]]")
    )
    with pytest.raises(ProfileError, match=message):
        profile_from_dict(tomllib.loads(text))


def test_partition_errors() -> None:
    doc = tomllib.loads(MINIMAL)
    doc["partitions"][0]["nodes"] = True  # bool is not an int here
    with pytest.raises(ProfileError, match="nodes must be int, got bool"):
        profile_from_dict(doc)
    doc = tomllib.loads(MINIMAL)
    del doc["partitions"][0]["cpus_per_node"]
    with pytest.raises(ProfileError, match="required key 'cpus_per_node'"):
        profile_from_dict(doc)
    doc = tomllib.loads(MINIMAL)
    doc["partitions"].append(dict(doc["partitions"][0]))
    with pytest.raises(ProfileError, match="names repeat"):
        profile_from_dict(doc)
    doc = tomllib.loads(MINIMAL)
    doc["timezone"] = "Mars/Olympus"
    with pytest.raises(ProfileError, match="unknown IANA time zone"):
        profile_from_dict(doc)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="built-in: " + ", ".join(builtin_names()) + "$"):
        load_profile("nosuchcluster")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(bad)


def test_gpus_in_gres() -> None:
    assert gpus_in_gres("gpu:a100:4(S:0-1)") == (4, "a100")
    assert gpus_in_gres("gpu:2,shard:8") == (2, "")
    assert gpus_in_gres("(null)") == (0, "")
    assert gpus_in_gres("gpu:v100:2(S:0),gpu:a100:1(S:1)") == (3, "v100")
    assert gpus_in_gres("gpu:2,gpu:a100:1") == (3, "a100")  # the first type named


def test_scheduler_from_config_converts_units() -> None:
    sched = scheduler_from_config(
        {
            "SchedulerParameters": "bf_interval=1,sched_interval=1,bf_window=2880,bf_resolution=1",
            "PriorityWeightAge": "1000",
            "PriorityWeightJobSize": "100",
            "PriorityMaxAge": "1-00:00:00",
            "KillWait": "2 sec",
        }
    )
    assert sched.kill_wait_s == 2
    assert sched.bf_window_linear == 0  # not set: the window doubles
    assert sched.bf_window_s == 2880 * 60  # minutes in slurm.conf
    assert sched.bf_interval_s == 1
    assert sched.priority_weight_job_size == 100
    assert sched.priority_max_age_s == 86400
    assert sched.bf_max_job_test == 500  # not set: Slurm's default


class ShowOnlyClient(NullSlurmClient):
    """A client that answers only `scontrol show`, from canned records."""

    def __init__(self, records: Mapping[str, Sequence[Mapping[str, str]]]) -> None:
        self.records = records
        self.calls: list[str] = []

    def show(self, kind: str) -> list[Mapping[str, str]]:
        self.calls.append(kind)
        return list(self.records[kind])


def _node(name: str, parts: str, gres: str = "gpu:a100:4(S:0-1)") -> dict[str, str]:
    return {
        "NodeName": name,
        "CPUTot": "16",
        "RealMemory": "128000",
        "Gres": gres,
        "Partitions": parts,
    }


def test_capture_groups_nodes_by_partition() -> None:
    client = ShowOnlyClient(
        {
            "config": [{"ClusterName": "lab", "SchedulerParameters": "bf_window=2880"}],
            "partition": [
                {"PartitionName": "gpu", "MaxTime": "2-00:00:00", "Default": "YES"},
                {"PartitionName": "debug", "MaxTime": "01:00:00", "Default": "NO"},
                {"PartitionName": "empty", "MaxTime": "UNLIMITED"},
            ],
            "node": [_node(f"n{i}", "gpu,debug") for i in range(1, 4)]
            + [_node("n4", "gpu", gres="(null)")],
        }
    )
    prof = capture_profile(client, "lab", "UTC")
    gpu, debug = prof.partitions  # "empty" has no nodes: skipped
    assert (gpu.nodes, gpu.gpus_per_node, gpu.max_time_s, gpu.default) == (4, 4, 172800, True)
    assert (debug.nodes, debug.max_time_s, debug.default) == (3, 3600, False)
    assert prof.scheduler.bf_window_s == 172800


def test_cli_show_and_capture(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["profile", "show", "ls6"])
    assert result.exit_code == 0, result.output
    assert 'name = "gpu-a100"' in result.output
    bad = runner.invoke(main, ["profile", "show", "nosuch"])
    assert bad.exit_code != 0 and "built-in: " + ", ".join(builtin_names()) in bad.output
    client = ShowOnlyClient(
        {
            "config": [{}],
            "partition": [{"PartitionName": "gpu", "MaxTime": "UNLIMITED", "Default": "YES"}],
            "node": [_node("n1", "gpu")],
        }
    )
    out = tmp_path / "lab.toml"
    result = runner.invoke(
        main,
        ["profile", "capture", "--name", "lab", "--out", str(out)],
        obj={"slurm_client": client},
    )
    assert result.exit_code == 0, result.output
    assert load_profile(out).partition().nodes == 1
    # as docs/admin/configuration.md says: into a models folder that does not exist yet
    models = tmp_path / "models" / "lab" / "profile.toml"
    result = runner.invoke(main, ["profile", "capture", "--name", "lab", "--out", str(models)],
                           obj={"slurm_client": client})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert load_profile(models).partition().nodes == 1
    (tmp_path / "file").write_text("")  # a parent that is a file: one clear line, no traceback
    under_file = str(tmp_path / "file" / "p.toml")
    result = runner.invoke(main, ["profile", "capture", "--name", "lab", "--out", under_file],
                           obj={"slurm_client": client})  # fmt: skip
    assert result.exit_code != 0 and "cannot write" in result.output


# ---- QOS and association limits ---------------------------------------------------

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"

LIMITED = (
    MINIMAL
    + """qos = "capped"

[[qos]]
name = "capped"
max_jobs_per_user = 2
max_tres_per_user = "gres/gpu=8,node=2"
max_wall_s = 3600

[[qos]]
name = "normal"

[[associations]]
user = "*"
max_jobs = 8
grp_tres = "cpu=64"
default_qos = "normal"
"""
)


def test_limits_load_and_round_trip() -> None:
    prof = profile_from_dict(tomllib.loads(LIMITED))
    assert prof.partition("gpu").qos == "capped"
    capped, normal = prof.qos
    assert (capped.max_jobs_per_user, capped.max_tres_per_user) == (2, "gres/gpu=8,node=2")
    assert not normal.has_limits
    assert prof.association("bob") == prof.associations[0]  # the "*" one
    assert profile_from_dict(tomllib.loads(profile_to_toml(prof))) == prof


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("max_jobs_per_user = 2", "max_jobs_per_usr = 2"), "valid keys: grp_jobs, grp_tres"),
        (("max_jobs = 8", "maxjobs = 8"), "unknown key(s) maxjobs; valid keys: default_qos"),
        (('qos = "capped"', 'qos = "nope"'), "names QOS 'nope'; [[qos]] defines: capped, normal"),
        (('"gres/gpu=8,node=2"', '"gpu=8"'), "unknown TRES 'gpu'"),
        (('"cpu=64"', '"cpu=lots"'), "is not TRES=count"),
        (('default_qos = "normal"', 'default_qos = "x"'), "names default_qos 'x'"),
        (("max_wall_s = 3600", "max_wall_s = -1"), "must not be negative"),
    ],
)
def test_limits_schema_rejects(change: tuple[str, str], message: str) -> None:
    with pytest.raises(ProfileError, match=None) as err:
        profile_from_dict(tomllib.loads(LIMITED.replace(*change)))
    assert message in str(err.value)


def test_parse_recorded_sacctmgr_and_partition_qos() -> None:
    # real output of the test cluster (Slurm 22.05.8), recorded 2026-11-28
    from mirage.profile.capture import associations_from, partitions_from, qos_from
    from mirage.slurm.parse import parse_sacctmgr_parsable, parse_scontrol_oneliner

    qos_rows = parse_sacctmgr_parsable((DATA / "sacctmgr-show-qos.txt").read_text())
    assert [r["Name"] for r in qos_rows] == ["normal", "capped"]
    normal, capped = qos_from(qos_rows)
    assert capped.max_jobs_per_user == 2 and capped.max_submit_jobs_per_user is None
    assert not normal.has_limits
    assoc_rows = parse_sacctmgr_parsable((DATA / "sacctmgr-show-assoc.txt").read_text())
    assert {r["User"] for r in assoc_rows} >= {"mirage-alice", "mirage-bob", "root"}
    assert associations_from(assoc_rows, ["normal", "capped"]) == ()  # no user limits set
    parts = parse_scontrol_oneliner((DATA / "scontrol-show-partition-qos.txt").read_text())
    nodes = [_node(f"gpu{i}", "gpu,capped" + (",debug" if i == 1 else "")) for i in (1, 2, 3, 4)]
    by_name = {p.name: p for p in partitions_from(parts, nodes)}
    assert by_name["capped"].qos == "capped"
    assert by_name["gpu"].qos == ""  # QoS=N/A


def test_sacctmgr_limits_columns() -> None:
    # synthetic rows (the recorded cluster sets only MaxJobsPU): every modelled column
    from mirage.profile.capture import associations_from, qos_from
    from mirage.slurm.parse import parse_sacctmgr_parsable

    text = (
        "Name|Flags|GrpTRES|GrpJobs|MaxWall|MaxTRESPU|MaxJobsPU|MaxSubmitPU\n"
        "big|OverPartQOS|cpu=512,mem=1T,gres/gpu:a100=32|10|2-00:00:00|gres/gpu=8|4|20\n"
    )
    [q] = qos_from(parse_sacctmgr_parsable(text))
    assert q == q.__class__(
        "big", 4, 20, "gres/gpu=8", "cpu=512,gres/gpu=32", 10, 172800, True
    )  # mem is not modelled: left out
    assoc = (
        "Cluster|Account|User|GrpJobs|GrpTRES|MaxJobs|MaxSubmit|MaxWall|Def QOS\n"
        "c|acct|||||||\n"
        "c|acct|ann||node=4|8|100|12:00:00|big\n"
    )
    [a] = associations_from(parse_sacctmgr_parsable(assoc), ["big"])
    assert (a.user, a.max_jobs, a.max_submit_jobs, a.grp_tres, a.max_wall_s, a.default_qos) == (
        "ann",
        8,
        100,
        "node=4",
        43200,
        "big",
    )


class LimitsClient(ShowOnlyClient):
    def __init__(self, records: Mapping[str, Sequence[Mapping[str, str]]]) -> None:
        super().__init__(records)

    def accounting_limits(self, kind: str) -> list[Mapping[str, str]]:
        from mirage.slurm.parse import parse_sacctmgr_parsable

        name = {"qos": "sacctmgr-show-qos.txt", "assoc": "sacctmgr-show-assoc.txt"}[kind]
        self.calls.append("sacctmgr " + kind)
        return list(parse_sacctmgr_parsable((DATA / name).read_text()))


def test_capture_reads_limits_where_enforced() -> None:
    from mirage.slurm.parse import parse_scontrol_oneliner

    parts = parse_scontrol_oneliner((DATA / "scontrol-show-partition-qos.txt").read_text())
    nodes = [_node(f"gpu{i}", "gpu,capped") for i in (1, 2, 3, 4)]
    records = {"config": [{"AccountingStorageEnforce": "associations,limits,qos"}],
               "partition": parts, "node": nodes}  # fmt: skip
    client = LimitsClient(records)
    prof = capture_profile(client, "lab")
    assert "sacctmgr qos" in client.calls
    assert prof.partition("capped").qos == "capped"
    assert [q.name for q in prof.qos] == ["normal", "capped"]
    assert profile_from_dict(tomllib.loads(profile_to_toml(prof))) == prof
    # without "limits" enforced, Slurm applies none: none captured
    client = LimitsClient({**records, "config": [{"AccountingStorageEnforce": "associations"}]})
    prof = capture_profile(client, "lab")
    assert prof.qos == () and prof.partition("capped").qos == ""
    assert "sacctmgr qos" not in client.calls
