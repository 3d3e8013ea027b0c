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
    parse_slurm_duration,
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
        ('nmae = "x"\n', r"unknown key\(s\) nmae; valid keys: description, name,"),
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


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2-00:00:00", 172800),
        ("01:00:00", 3600),
        ("30", 1800),
        ("5:30", 330),
        ("1-0", 86400),
        ("7-12", 7 * 86400 + 12 * 3600),
        ("1-02:03", 93780),
        ("UNLIMITED", None),
        ("30 sec", 30),
    ],
)
def test_parse_slurm_duration(text: str, seconds: int | None) -> None:
    assert parse_slurm_duration(text) == seconds


def test_gpus_in_gres() -> None:
    assert gpus_in_gres("gpu:a100:4(S:0-1)") == (4, "a100")
    assert gpus_in_gres("gpu:2,shard:8") == (2, "")
    assert gpus_in_gres("(null)") == (0, "")
    assert gpus_in_gres("gpu:v100:2(S:0),gpu:a100:1(S:1)") == (3, "v100")


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
