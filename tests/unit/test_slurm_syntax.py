"""mirage.slurm.syntax: the one reader and writer of Slurm's durations, GRES/TRES and times,
on the forms the recorded Slurm outputs (tests/data/slurm) hold and the edge cases of its
callers (sbatch --time, scontrol's configuration, sacct exports, node Gres)."""

from __future__ import annotations

import json
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from mirage.slurm.parse import parse_scontrol_config, parse_scontrol_oneliner
from mirage.slurm.syntax import (
    Gres,
    SlurmSyntaxError,
    format_duration,
    format_slurm_time,
    gres_gpus,
    parse_duration,
    parse_gres,
    parse_limit,
    parse_slurm_time,
    parse_tres,
    parse_when,
    tres_count,
    tres_gpus,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"

# ----------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 5400),  # a bare number: minutes, as sbatch --time reads it
        ("10:30", 630),  # MM:SS
        ("2:00:00", 7200),  # HH:MM:SS
        ("01:00:00", 3600),
        ("1-0", 86400),  # D-HH
        ("1-12", 86400 + 12 * 3600),
        ("7-12", 7 * 86400 + 12 * 3600),
        ("1-02:03", 93780),  # D-HH:MM
        ("2-00:00:00", 172800),  # D-HH:MM:SS
        (" 5:30 ", 330),
    ],
)
def test_parse_duration_takes_every_slurm_form(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_a_bare_number_counts_in_the_callers_unit() -> None:
    assert parse_duration("42", bare_unit_s=1) == 42  # sacct's Elapsed in seconds
    assert parse_duration("1:00", bare_unit_s=1) == 60  # the other forms do not change


@pytest.mark.parametrize(
    "text",
    ["", "soon", "UNLIMITED", "1-", "-5", "1-2-3", "1:2:3:4", "1-1:2:3:4", "x-01:00", "²"],
)
def test_parse_duration_refuses_what_slurm_would(text: str) -> None:
    with pytest.raises(SlurmSyntaxError, match="not a Slurm duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("Partition_Limit", None),
        ("NONE", None),
        ("N/A", None),
        ("", None),
        ("30 sec", 30),  # scontrol show config: "BatchStartTimeout = 10 sec"
        ("5 min", 300),
        ("2-00:00:00", 172800),
        ("30", 1800),
    ],
)
def test_parse_limit(text: str, seconds: int | None) -> None:
    assert parse_limit(text) == seconds


def test_parse_limit_refuses_junk() -> None:
    with pytest.raises(SlurmSyntaxError):
        parse_limit("a while")


def test_recorded_partition_and_config_durations() -> None:
    (part, *_) = parse_scontrol_oneliner((DATA / "scontrol-show-partition.txt").read_text())
    assert parse_limit(part["MaxTime"]) in (3600, 2 * 86400)
    config = parse_scontrol_config((DATA / "scontrol-show-config.txt").read_text())
    assert parse_limit(config["PriorityMaxAge"]) == 86400
    assert parse_limit(config["PriorityCalcPeriod"]) == 300
    assert parse_limit(config["PriorityDecayHalfLife"]) == 7 * 86400


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (60, "0-00:01:00"),
        (2 * 86400, "2-00:00:00"),
        (93784, "1-02:03:04"),
        (0, "0-00:00:00"),
        (None, "UNLIMITED"),
    ],
)
def test_format_duration(seconds: int | None, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_limit(text) == seconds or seconds == 0


def test_format_duration_refuses_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_duration(-1)


# ----------------------------------------------------------------------------- GRES, TRES


@pytest.mark.parametrize(
    ("spec", "gpus"),
    [
        (None, None),
        ("", None),
        ("(null)", None),
        ("shard:8", None),
        ("gpu", 1),
        ("gpu:4", 4),
        ("gpu:a100", 1),  # typed, no count: one
        ("gpu:a100:3", 3),
        ("gres:gpu:4", 4),  # squeue 22.05's tres_per_node
        ("gres/gpu:4", 4),  # squeue 23.02+'s
        ("gres/gpu:a100:2", 2),
        ("gres/gpu=4", 4),
        ("gpu:a100:4(S:0-1)", 4),  # a node's Gres
        ("gpu:2(IDX:0,1)", 2),  # the comma of the indexes is not a separator
        ("gpu:v100:2(S:0),gpu:a100:1(S:1)", 3),
        ("gpu:2,shard:8", 2),
        ("gpu:1g.10gb:7", 7),  # a MIG type
    ],
)
def test_gres_gpus(spec: str | None, gpus: int | None) -> None:
    assert gres_gpus(spec) == gpus


def test_parse_gres_keeps_names_types_and_counts() -> None:
    assert parse_gres("gres/gpu:a100:4(S:0-1),shard:8,gpu") == [
        Gres("gpu", "a100", 4),
        Gres("shard", "", 8),
        Gres("gpu", "", 1),
    ]


def test_recorded_gres_and_tres() -> None:
    nodes = parse_scontrol_oneliner((DATA / "scontrol-show-node.txt").read_text())
    assert {gres_gpus(n["Gres"]) for n in nodes} == {4}
    for name in ("squeue.json", "squeue-v0.0.41-synthetic.json"):
        for job in json.loads((DATA / name).read_text())["jobs"]:
            per_node = gres_gpus(job["tres_per_node"])
            alloc = tres_gpus(parse_tres(job["tres_alloc_str"]))
            assert per_node in (None, 1, 2, 4), job["tres_per_node"]
            if per_node is not None and alloc is not None:  # one node each: the same GPUs
                assert alloc == per_node, (job["tres_per_node"], job["tres_alloc_str"])


def test_parse_tres() -> None:
    tres = parse_tres("cpu=4,mem=16G,node=1,billing=4,gres/gpu=2")
    assert tres == {"cpu": "4", "mem": "16G", "node": "1", "billing": "4", "gres/gpu": "2"}
    assert (tres_count(tres, "cpu"), tres_count(tres, "mem"), tres_count(tres, "x")) == (
        4,
        None,
        None,
    )
    assert parse_tres("cpu=1, ,junk,=3") == {"cpu": "1"}


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("cpu=1,gres/gpu=4", 4),
        ("cpu=1,gres/gpu:a100=4", 4),  # typed only: summed
        ("gres/gpu:a100=2,gres/gpu:v100=1", 3),
        ("cpu=1,gres/gpu=4,gres/gpu:a100=4", 4),  # Slurm accounts a typed GPU twice
        ("cpu=1,mem=1000M,node=1,billing=1", None),
        ("gres/gpu=lots", None),
    ],
)
def test_tres_gpus(tres: str, gpus: int | None) -> None:
    assert tres_gpus(parse_tres(tres)) == gpus


# ---------------------------------------------------------------------------------- times


def test_parse_slurm_time_recorded_forms() -> None:
    start = (DATA / "squeue-start.txt").read_text().splitlines()[0].split("|")[1]
    assert parse_slurm_time(start) == 1795735366  # 2026-11-26T23:22:46Z
    assert format_slurm_time(1795735366) == "2026-11-26T23:22:46"
    for unknown in ("N/A", "Unknown", "None", "(null)", "NONE", "", " N/A "):
        assert parse_slurm_time(unknown) is None


def test_parse_slurm_time_in_a_zone() -> None:
    chicago = ZoneInfo("America/Chicago")
    assert parse_slurm_time("2023-03-01T00:00:00", chicago) == 1677650400  # CST, -6 h
    # 01:30 occurs twice on 2023-11-05: the first (CDT, -5 h), as zoneinfo's fold=0
    assert parse_slurm_time("2023-11-05T01:30:00", chicago) == 1699165800


@pytest.mark.parametrize(
    "text", ["2026-11-26 23:21:03", "2026-1-5T1:2:3", "2026-13-01T00:00:00", "yesterday"]
)
def test_parse_slurm_time_refuses_other_forms(text: str) -> None:
    with pytest.raises(SlurmSyntaxError, match="not a Slurm time"):
        parse_slurm_time(text)


def test_parse_when() -> None:
    assert parse_when("2022-11-06", "UTC") == 1667692800
    assert parse_when("2023-03-01", "America/Chicago") == 1677650400
    assert parse_when("2023-03-01T06:00:00+00:00", "America/Chicago") == 1677650400
    for bad in ("soon", "NaT", ""):
        with pytest.raises(ValueError, match="not an ISO date or time"):
            parse_when(bad, "UTC")


def test_gpu_gres_keeps_the_type_a_job_asked_for() -> None:
    from mirage.slurm.syntax import gpu_gres, sbatch_gres

    assert gpu_gres(2, "gpu:a100:4") == "gpu:a100:2"
    assert gpu_gres(2, "gpu:4") == "gpu:2"
    assert gpu_gres(3, None) == "gpu:3"
    assert gpu_gres(1, "shard:8,gpu:h100:4") == "gpu:h100:1"
    assert sbatch_gres(["--time=1:00:00", "--gres=gpu:a100:4"]) == "gpu:a100:4"
    assert sbatch_gres(["--gres", "gpu:1", "--gres=gpu:v100:2"]) == "gpu:v100:2"  # the last
    assert sbatch_gres(["--gpus=4"]) is None
