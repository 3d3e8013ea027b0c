"""Parsers on real recorded Slurm 22.05 output (tests/data/slurm/), the 23.02+ shape
(one real slurmrestd v0.0.40 sample, and synthetic v0.0.41 rewrites of the recordings),
and broken input."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from mirage.slurm import parse
from mirage.slurm.parse import (
    detect_shape,
    map_state,
    parse_sacct_json,
    parse_sbatch_parsable,
    parse_scontrol_config,
    parse_scontrol_oneliner,
    parse_squeue_json,
    parse_start_estimates,
    parse_test_only,
    slurm_version,
)
from mirage.slurm.types import (
    JobState,
    SlurmJob,
    SlurmParseError,
    SlurmUnreachableError,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"


def read(name: str) -> str:
    return (DATA / name).read_text()


def load(name: str) -> dict[str, Any]:
    doc = json.loads(read(name))
    assert isinstance(doc, dict)
    return doc


def by_id(jobs: tuple[SlurmJob, ...] | list[SlurmJob]) -> dict[str, SlurmJob]:
    return {j.job_id: j for j in jobs}


# ------------------------------------------------------------------------ squeue 22.05


@pytest.fixture(scope="module")
def queue() -> dict[str, SlurmJob]:
    snap = parse_squeue_json(read("squeue.json"), taken_at=1_795_649_000)
    assert snap.slurm_version == "22.05.8"
    assert snap.taken_at == 1_795_649_000
    return snap.by_id()


def test_squeue_running_gpu_job(queue: dict[str, SlurmJob]) -> None:
    job = queue["8"]
    assert job.state is JobState.RUNNING
    assert job.name == "mirage-train"
    assert job.user == "root"
    assert job.account == "mirage"
    assert job.partition == "gpu"
    assert job.gpus == 4
    assert job.nodes == 1
    assert job.comment == "mirage chain=c2 step=1"
    assert job.time_limit == 86400  # 1-00:00:00, JSON gives minutes
    assert job.start is not None and job.end == job.start + 86400
    assert job.exit_code is None  # not finished
    assert job.raw_state == "RUNNING"
    assert job.node_list == ("gpu1",)  # where it runs: the look-ahead places it there


def test_squeue_node_list_only_while_a_job_holds_nodes(
    queue: dict[str, SlurmJob], caplog: pytest.LogCaptureFixture
) -> None:
    assert queue["2"].node_list == () and queue["13"].node_list == ()  # finished, pending
    doc = load("squeue.json")
    running = next(j for j in doc["jobs"] if j["job_id"] == 8)
    for nodes, want in (("gpu[1-2],cpu1", ("gpu1", "gpu2", "cpu1")), ("gpu[2-", ())):
        doc["jobs"] = [{**running, "nodes": nodes}]
        (parsed,) = parse_squeue_json(json.dumps(doc)).jobs
        assert parsed.node_list == want
    assert "cannot read the node list 'gpu[2-'" in caplog.text


def test_squeue_dependency_pending(queue: dict[str, SlurmJob]) -> None:
    job = queue["13"]
    assert job.state is JobState.PENDING
    assert job.reason == "Dependency"
    assert job.dependency == "afterok:8(unfulfilled)"
    assert job.start is None and job.end is None  # 0 = unset
    assert job.comment == "mirage chain=c2 step=2"


def test_squeue_pending_with_and_without_estimate(queue: dict[str, SlurmJob]) -> None:
    big = queue["14"]
    assert (big.state, big.reason) == (JobState.PENDING, "Resources")
    assert big.start is not None and big.nodes == 4 and big.gpus == 16
    small = queue["15"]
    assert (small.reason, small.gpus) == ("Priority", 1)
    assert small.start is not None
    # array remainder waits beyond bf_window: no estimate at all
    rest = queue["9_[3-5]"]
    assert (rest.state, rest.reason, rest.start) == (JobState.PENDING, "Priority", None)


def test_squeue_held_job(queue: dict[str, SlurmJob]) -> None:
    held = queue["16"]
    assert (held.state, held.reason) == (JobState.PENDING, "JobHeldUser")
    assert held.priority == 0
    assert held.start is None
    assert held.gpus == 2


def test_squeue_array_tasks(queue: dict[str, SlurmJob]) -> None:
    running = [queue[f"9_{i}"] for i in range(3)]
    assert all(j.state is JobState.RUNNING for j in running)
    assert {j.array_job_id for j in running} == {"9"}
    assert [j.array_task_id for j in running] == ["0", "1", "2"]
    assert all(j.gpus == 4 and j.time_limit == 36 * 3600 for j in running)
    rest = queue["9_[3-5]"]
    assert (rest.array_job_id, rest.array_task_id) == ("9", "3-5")
    done = [queue[f"4_{i}"] for i in (1, 2, 3)]
    assert all(j.state is JobState.COMPLETED and j.exit_code == 0 for j in done)


def test_squeue_keeps_finished_jobs(queue: dict[str, SlurmJob]) -> None:
    # 22.05's squeue --json returns what slurmctld still holds, finished jobs included
    assert queue["2"].state is JobState.COMPLETED
    assert queue["3"].state is JobState.FAILED
    assert queue["3"].exit_code == 3  # raw wait status 768
    assert queue["5"].state is JobState.CANCELLED
    assert queue["5"].exit_code == 128 + 15  # killed by SIGTERM
    assert queue["1"].state is JobState.RUNNING  # the TIMEOUT job, still running then


# ------------------------------------------------------------------------- sacct 22.05


@pytest.fixture(scope="module")
def acct() -> dict[str, SlurmJob]:
    return by_id(parse_sacct_json(read("sacct-X.json")))


def test_sacct_terminal_states(acct: dict[str, SlurmJob]) -> None:
    assert acct["1"].state is JobState.TIMEOUT
    assert acct["1"].time_limit == 60
    assert acct["1"].elapsed is not None and acct["1"].elapsed >= 60
    assert acct["2"].state is JobState.COMPLETED
    assert acct["2"].exit_code == 0
    assert acct["2"].gpus == 1
    assert acct["3"].state is JobState.FAILED
    # 22.05's JSON says return_code 0 for this job (plain sacct: 3:0): unknown, not 0
    assert acct["3"].exit_code is None
    assert acct["5"].state is JobState.CANCELLED
    assert acct["8"].state is JobState.CANCELLED
    assert acct["8"].gpus == 4


def test_sacct_comment_and_name(acct: dict[str, SlurmJob]) -> None:
    assert acct["1"].comment == "mirage: expect TIMEOUT"
    assert acct["2"].comment == "mirage chain=c1 step=1"
    assert acct["2"].name == "mirage-ok"
    assert acct["3"].comment == ""


def test_sacct_array_records(acct: dict[str, SlurmJob]) -> None:
    assert {"4_1", "4_2", "4_3"} <= acct.keys()
    assert acct["4_3"].array_job_id == "4"
    # never-started remainder: sacct 22.05 gives a hex task bitmap (0x38 = 3,4,5)
    rest = acct["9_[3-5]"]
    assert rest.state is JobState.CANCELLED and rest.array_task_id == "3-5"
    assert rest.start is None


def test_sacct_with_steps_gives_job_level_records_only() -> None:
    with_steps = parse_sacct_json(read("sacct.json"))
    without = parse_sacct_json(read("sacct-X.json"))
    assert [j.job_id for j in with_steps] == [j.job_id for j in without]


# ------------------------------------------------------------------- 23.02+ shape


def test_real_v0040_sample() -> None:
    """A real Slurm 23.11.1 slurmrestd v0.0.40 job list (provenance in the data README)."""
    snap = parse_squeue_json(read("slurmrestd-v0.0.40-jobs-zocalo.json"))
    assert snap.slurm_version == "23.11.1"
    assert snap.taken_at == 1711536388  # last_update
    (job,) = snap.jobs
    assert job.job_id == "6077609_41"
    assert (job.array_job_id, job.array_task_id) == ("6077609", "41")
    assert job.state is JobState.RUNNING
    assert job.time_limit == 11520 * 60
    assert job.start == 1711534808 and job.submit == 1711533827
    assert job.priority == 1 and job.cpus == 1 and job.nodes == 1 and job.gpus == 0


def test_synthetic_v0041_matches_recorded_squeue() -> None:
    old = parse_squeue_json(read("squeue.json"), taken_at=1)
    new = parse_squeue_json(read("squeue-v0.0.41-synthetic.json"), taken_at=1)
    assert new.slurm_version == "24.11.0"
    assert old.jobs == new.jobs


def test_synthetic_v0041_sacct() -> None:
    old = by_id(parse_sacct_json(read("sacct-X.json")))
    new = by_id(parse_sacct_json(read("sacct-v0.0.41-synthetic.json")))
    assert old.keys() == new.keys()
    assert new["3"].exit_code == 3  # the shape carries a real return code
    for job_id, job in old.items():
        if job_id != "3":
            assert new[job_id] == job


def test_v0041_infinite_and_unset_numbers() -> None:
    doc = load("squeue-v0.0.41-synthetic.json")
    job = doc["jobs"][0]
    job["time_limit"] = {"set": True, "infinite": True, "number": 0}
    job["priority"] = {"set": False, "infinite": False, "number": 0}
    job["job_state"] = ["RUNNING", "COMPLETING"]
    (parsed, *_) = parse_squeue_json(json.dumps(doc)).jobs
    assert parsed.time_limit is None
    assert parsed.priority is None
    assert parsed.state is JobState.COMPLETING
    assert parsed.raw_state == "RUNNING,COMPLETING"


def test_legacy_sentinels_mean_none() -> None:
    doc = load("squeue.json")
    doc["jobs"][0]["time_limit"] = 4294967295  # INFINITE
    doc["jobs"][0]["priority"] = 4294967294  # NO_VAL
    (parsed, *_) = parse_squeue_json(json.dumps(doc)).jobs
    assert parsed.time_limit is None and parsed.priority is None


def test_tres_string_forms() -> None:
    doc = load("squeue-v0.0.41-synthetic.json")
    job = doc["jobs"][0]
    for alloc, per_node, nodes, want in (
        ("cpu=1,gres/gpu:a100=4", "", 1, 4),
        ("cpu=1,gres/gpu=4,gres/gpu:a100=4", "", 1, 4),
        ("", "gres/gpu:a100:2", 3, 6),
        ("", "gpu:a100:4", 1, 4),
        ("", "gres:gpu:4", 2, 8),
    ):
        job.update(tres_alloc_str=alloc, tres_req_str="", tres_per_node=per_node)
        job["node_count"] = {"set": True, "infinite": False, "number": nodes}
        (parsed, *_) = parse_squeue_json(json.dumps(doc)).jobs
        assert parsed.gpus == want, (alloc, per_node)


# --------------------------------------------------------------------- states


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("RUNNING", JobState.RUNNING),
        ("CANCELLED by 0", JobState.CANCELLED),
        (["PENDING", "REQUEUED"], JobState.REQUEUED),
        (["COMPLETED"], JobState.COMPLETED),
        ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY),
        (["RUNNING", "CONFIGURING"], JobState.RUNNING),
        ("NODE_FAIL", JobState.NODE_FAIL),
    ],
)
def test_map_state(raw: str | list[str], want: JobState) -> None:
    assert map_state(raw)[0] is want


def test_unknown_state_warns(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parse, "_WARNED_STATES", set())  # once per process: start afresh
    doc = load("squeue.json")
    doc["jobs"][0]["job_state"] = "TELEPORTED"
    with caplog.at_level(logging.WARNING, logger="mirage.slurm.parse"):
        (parsed, *_) = parse_squeue_json(json.dumps(doc)).jobs
    assert parsed.state is JobState.UNKNOWN
    assert parsed.raw_state == "TELEPORTED"
    assert "TELEPORTED" in caplog.text


def test_unknown_state_warns_once_per_process(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parse, "_WARNED_STATES", set())
    doc = load("squeue.json")
    for job in doc["jobs"][:3]:
        job["job_state"] = "TELEPORTED"
    doc["jobs"][3]["job_state"] = "DEMATERIALISED"
    text = json.dumps(doc)
    with caplog.at_level(logging.WARNING, logger="mirage.slurm.parse"):
        for _ in range(3):  # three polls
            snap = parse_squeue_json(text)
            assert [j.state for j in snap.jobs[:4]] == [JobState.UNKNOWN] * 4
        map_state("TELEPORTED by 1000")  # same state, other trailing text
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert sum("TELEPORTED" in w for w in warnings) == 1
    assert sum("DEMATERIALISED" in w for w in warnings) == 1


# ---------------------------------------------------------------- shapes / garbage


def test_detect_shape() -> None:
    assert detect_shape(load("squeue.json")["meta"]) == "legacy"
    assert detect_shape(load("sacct.json")["meta"]) == "legacy"  # openapi/dbv0.0.38
    assert detect_shape(load("squeue-v0.0.41-synthetic.json")["meta"]) == "data_parser"
    assert detect_shape({"slurm": {"release": "24.11.1"}}) == "data_parser"
    assert detect_shape({"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}}}) == ("legacy")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[1, 2]",
        '{"jobs": []}',
        '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.99"}}, "jobs": []}',
        '{"meta": {"plugin": {"type": "openapi/v0.0.12"}}, "jobs": []}',
        '{"meta": {"Slurm": {"release": "22.05.8"}}, "jobs": {}}',
        '{"meta": {"Slurm": {"release": "22.05.8"}}, "jobs": [{"name": "no id"}]}',
    ],
)
def test_garbage_json_raises(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_squeue_json(text)
    with pytest.raises(SlurmParseError):
        parse_sacct_json(text)


@pytest.mark.parametrize("minor", ["05-rc1", None, {"a": 1}, -1, "\u0665"])
def test_non_numeric_meta_version_is_a_parse_error(minor: Any) -> None:
    doc = load("squeue.json")  # plugin.type still names the shape: only the version is odd
    doc["meta"]["Slurm"] = {"version": {"major": 22, "minor": minor, "micro": 8}}
    with pytest.raises(SlurmParseError, match="minor"):
        parse_squeue_json(json.dumps(doc))
    with pytest.raises(SlurmParseError):
        slurm_version({"Slurm": {"version": {"major": None, "minor": 5}}})
    assert slurm_version({"Slurm": {"version": {"major": 23, "minor": "2"}}}) == "23.02.0"


def test_squeue_controller_down_document() -> None:
    """22.05 exits 0 with an errors list and no jobs when slurmctld is down (recorded)."""
    with pytest.raises(SlurmUnreachableError):
        parse_squeue_json(read("squeue-slurmctld-down.json"))


def test_errors_with_jobs_only_warn(caplog: pytest.LogCaptureFixture) -> None:
    doc = load("squeue.json")
    doc["errors"] = [{"error": "something odd", "error_number": 1}]
    with caplog.at_level(logging.WARNING, logger="mirage.slurm.parse"):
        snap = parse_squeue_json(json.dumps(doc))
    assert len(snap.jobs) == len(doc["jobs"])
    assert "something odd" in caplog.text


def test_errors_without_jobs_raise() -> None:
    doc = copy.deepcopy(load("squeue.json"))
    doc["jobs"] = []
    doc["errors"] = [{"error": "Invalid user", "error_number": 2}]
    with pytest.raises(SlurmParseError):
        parse_squeue_json(json.dumps(doc))


# ---------------------------------------------------------------- text outputs


def test_start_estimates() -> None:
    est = parse_start_estimates(read("squeue-start.txt"))
    assert est["14"].start is not None and est["14"].partition == "gpu"
    assert est["17"].partition == "debug" and est["17"].start is not None
    for no_estimate in ("9_[3-5]", "13", "16"):
        assert est[no_estimate].start is None
    # agrees with squeue --json's start_time for the same moment
    queue = parse_squeue_json(read("squeue.json")).by_id()
    for job_id in ("14", "15", "17"):
        assert est[job_id].start == queue[job_id].start


def test_start_estimates_garbage() -> None:
    with pytest.raises(SlurmParseError):
        parse_start_estimates("JOBID PARTITION NAME\n")
    with pytest.raises(SlurmParseError):
        parse_start_estimates("12|yesterday||gpu|Priority\n")
    assert parse_start_estimates("\n") == {}


def test_test_only() -> None:
    busy = parse_test_only(read("sbatch-test-only-busy.stderr"))
    free = parse_test_only(read("sbatch-test-only-free.stderr"))
    assert busy.job_id == "18" and busy.partition == "gpu" and busy.nodes == "gpu1"
    assert free.start is not None and busy.start is not None and busy.start > free.start + 3600
    with pytest.raises(SlurmParseError):
        parse_test_only(read("sbatch-test-only-refused.stderr"))
    odd = parse_test_only(
        "sbatch: Job 7 to start at 2024-03-01T10:00:00 using 64 processors on nodes c[1-4]\n"
    )
    assert (odd.job_id, odd.start, odd.nodes, odd.partition) == ("7", 1709287200, "c[1-4]", "")


def test_sbatch_parsable() -> None:
    assert parse_sbatch_parsable(read("sbatch-parsable.txt")) == "8"
    assert parse_sbatch_parsable("123;cluster\n") == "123"
    assert parse_sbatch_parsable("sbatch: warning: x\n456\n") == "456"
    assert parse_sbatch_parsable("123\r\n") == "123"
    for bad in ("", "Submitted batch job 12\n", "abc;cluster"):
        with pytest.raises(SlurmParseError):
            parse_sbatch_parsable(bad)


@pytest.mark.parametrize(
    "stdout",
    [
        "123\n456\n",  # two ids: which one is ours?
        "123\nsbatch: warning: x\n456;cluster\n",
        "123\nsite message\n",  # the id must be the last line
        "0\n",  # Slurm job ids are > 0
        "00123\n",  # never printed by sbatch (%u): refused, not normalised
        "\u0661\u0662\u0663\n",  # Arabic-Indic digits: str.isdigit() but not an id
        "123;\n",
        "123;a b\n",
        "123_4\n",
        "123+0\n",
        "-5\n",
    ],
)
def test_sbatch_parsable_refuses(stdout: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_sbatch_parsable(stdout)


def test_scontrol_oneliners() -> None:
    parts = parse_scontrol_oneliner(read("scontrol-show-partition.txt"))
    assert [p["PartitionName"] for p in parts] == ["gpu", "debug"]
    assert parts[0]["MaxTime"] == "2-00:00:00" and parts[1]["MaxTime"] == "01:00:00"
    assert parts[0]["TRES"].endswith("gres/gpu=16")
    nodes = parse_scontrol_oneliner(read("scontrol-show-node.txt"))
    assert [n["NodeName"] for n in nodes] == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert nodes[0]["OS"].startswith("Linux ") and " #1 SMP" in nodes[0]["OS"]
    assert nodes[0]["Gres"] == "gpu:a100:4"
    (job,) = parse_scontrol_oneliner(read("scontrol-show-job.txt"))
    # a value with spaces and lower-case key=value words in it
    assert job["Comment"] == "mirage chain=c2 step=1"
    assert job["AllocNode:Sid"].startswith("localhost:")
    assert job["CPUs/Task"] == "1"
    assert job["TresPerNode"] == "gres:gpu:4"
    with pytest.raises(SlurmParseError):
        parse_scontrol_oneliner("no key here\n")


@pytest.mark.parametrize(
    "text",
    [
        "No jobs in the system\n",
        "No partitions in the system\n",
        "No reservations in the system\r\n",
        "\nNo nodes in the system\n",
    ],
)
def test_scontrol_nothing_in_the_system(text: str) -> None:
    # what scontrol prints, with exit status 0, when there is nothing to show
    assert parse_scontrol_oneliner(text) == []


def test_scontrol_config() -> None:
    conf = parse_scontrol_config(read("scontrol-show-config.txt"))
    assert conf["AccountingStoreFlags"] == "job_comment"
    assert "bf_window=2880" in conf["SchedulerParameters"]
    assert conf["PriorityType"] == "priority/multifactor"
    with pytest.raises(SlurmParseError):
        parse_scontrol_config("garbage\n")


def test_sacct_empty_window_is_no_jobs() -> None:
    # Recorded by the daemon work on the test cluster (22.05.8): `sacct --json -a -X -S
    # now-1minutes -E now-1minutes` answers an empty window with error 9003, exit 0.
    text = (DATA / "sacct-empty-window.json").read_text()
    assert parse_sacct_json(text) == []


# -------------------------------------------------------- numbers Slurm never prints


def _with_number(doc: dict[str, Any], field: str, value: str) -> str:
    """The document as JSON with ``field`` of its first job set to the literal ``value``."""
    doc["jobs"][0][field] = "@@"
    return json.dumps(doc).replace('"@@"', value)


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_non_finite_numbers_are_unset(literal: str) -> None:
    """Python's json reads these as inf/nan, which int() refuses (OverflowError/ValueError).
    Optional fields treat them as unset, the same as any other non-integer."""
    legacy = load("squeue.json")
    legacy["jobs"][0]["job_state"] = "COMPLETED"
    legacy["jobs"][0]["exit_code"] = "@@"
    text = json.dumps(legacy).replace('"@@"', literal)
    (job, *_) = parse_squeue_json(text).jobs
    assert job.exit_code is None
    for field, attr, unset in (
        ("priority", "priority", None),
        ("cpus", "cpus", 0),
        ("time_limit", "time_limit", None),
        ("start_time", "start", None),
    ):
        (job, *_) = parse_squeue_json(_with_number(load("squeue.json"), field, literal)).jobs
        assert getattr(job, attr) == unset, field
    wrapped = load("squeue-v0.0.41-synthetic.json")
    wrapped["jobs"][0]["time_limit"] = {"set": True, "infinite": False, "number": "@@"}
    (job, *_) = parse_squeue_json(json.dumps(wrapped).replace('"@@"', literal)).jobs
    assert job.time_limit is None
    acct = load("sacct-v0.0.41-synthetic.json")
    acct["jobs"][0]["exit_code"]["return_code"] = {"set": True, "infinite": False, "number": "@@"}
    (job, *_) = parse_sacct_json(json.dumps(acct).replace('"@@"', literal))
    assert job.exit_code is None


@pytest.mark.parametrize("literal", ["Infinity", "NaN", "1e400", "12.7", "0", "-5"])
def test_bad_job_id_fails_the_document(literal: str) -> None:
    """Like a missing job_id (a record we cannot name fails the whole poll), not a
    truncated 12 or a job 0."""
    with pytest.raises(SlurmParseError):
        parse_squeue_json(_with_number(load("squeue.json"), "job_id", literal))
    with pytest.raises(SlurmParseError):
        parse_sacct_json(_with_number(load("sacct-X.json"), "job_id", literal))
    wrapped = load("squeue-v0.0.41-synthetic.json")
    wrapped["jobs"][0]["job_id"] = {"set": True, "infinite": False, "number": "@@"}
    with pytest.raises(SlurmParseError):
        parse_squeue_json(json.dumps(wrapped).replace('"@@"', literal))


def test_negative_time_limit_is_unset() -> None:
    # uint32 in Slurm: a negative value is a sentinel printed as signed, not -60 s
    legacy = load("squeue.json")
    legacy["jobs"][0]["time_limit"] = -1
    wrapped = load("squeue-v0.0.41-synthetic.json")
    wrapped["jobs"][0]["time_limit"] = {"set": True, "infinite": False, "number": -1}
    acct = load("sacct-X.json")
    acct["jobs"][0]["time"]["limit"] = -1
    assert parse_squeue_json(json.dumps(legacy)).jobs[0].time_limit is None
    assert parse_squeue_json(json.dumps(wrapped)).jobs[0].time_limit is None
    assert parse_sacct_json(json.dumps(acct))[0].time_limit is None


def _gres(name: str, count: int) -> dict[str, Any]:
    return {"type": "gres", "name": name, "id": 1001, "count": count}


@pytest.mark.parametrize(
    ("gres", "want"),
    [
        ([_gres("gpu", 4), _gres("gpu:a100", 4)], 4),  # Slurm accounts a typed GPU twice
        ([_gres("gpu:a100", 4), _gres("gpu", 4)], 4),  # in either order
        ([_gres("gpu:a100", 2), _gres("gpu:v100", 2)], 4),  # typed only: summed
        ([_gres("gpu", 3)], 3),
        ([], 0),
    ],
)
def test_sacct_gpus_typed_and_untyped(gres: list[dict[str, Any]], want: int) -> None:
    doc = load("sacct-X.json")
    doc["jobs"][0]["tres"]["allocated"] = [
        {"type": "cpu", "name": None, "id": 1, "count": 16},
        *gres,
    ]
    assert parse_sacct_json(json.dumps(doc))[0].gpus == want
