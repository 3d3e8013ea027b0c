"""CliSlurmClient against scripted conversations: a fake runner asserts each expected argv
(and stdin) in order and answers with recorded output, batchspawner-style."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from mirage.slurm.cli_backend import ACCOUNTED_STATES, CliSlurmClient, sbatch_options
from mirage.slurm.run import CommandResult, SubprocessRunner
from mirage.slurm.syntax import format_slurm_time
from mirage.slurm.types import (
    JobState,
    SlurmError,
    SlurmParseError,
    SlurmTimeoutError,
    SlurmUnreachableError,
    SubmitError,
    SubmitRequest,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
NOW = 1_795_649_100
#: sacct over every job up to NOW, as the client asks it.
SACCT_ALL = [
    "sacct",
    "--json",
    "-a",
    "-X",
    "-S",
    format_slurm_time(0),
    "-E",
    format_slurm_time(NOW),
]


def recorded(name: str) -> str:
    return (DATA / name).read_text()


@dataclass
class Step:
    argv: list[str]
    stdout: str = ""
    stderr: str = ""
    returncode: int = 0
    stdin: bytes | None = None
    raises: Exception | None = None
    cwd: str | None = None


class Conversation:
    """A Runner that plays back expected calls in order and fails on anything else."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.timeouts: list[float | None] = []

    def __call__(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        assert self.steps, f"unexpected call {list(argv)}"
        step = self.steps.pop(0)
        assert list(argv) == step.argv
        assert stdin == step.stdin
        assert cwd == step.cwd, f"{list(argv)} run in {cwd}, not {step.cwd}"
        self.timeouts.append(timeout)
        if step.raises is not None:
            raise step.raises
        return CommandResult(tuple(argv), step.returncode, step.stdout, step.stderr)

    def done(self) -> None:
        assert not self.steps, f"calls never made: {[s.argv for s in self.steps]}"


def client(conv: Conversation, **kw: object) -> CliSlurmClient:
    return CliSlurmClient(runner=conv, clock=lambda: NOW, **kw)  # type: ignore[arg-type]


def test_queue_is_one_squeue_json_call() -> None:
    conv = Conversation(Step(["squeue", "--json"], stdout=recorded("squeue.json")))
    snap = client(conv).queue()
    conv.done()
    assert snap.taken_at == NOW
    assert snap.by_id()["8"].gpus == 4
    assert len(snap.jobs) == 17


def test_queue_controller_down_exit_0() -> None:
    conv = Conversation(Step(["squeue", "--json"], stdout=recorded("squeue-slurmctld-down.json")))
    with pytest.raises(SlurmUnreachableError):
        client(conv).queue()


def test_queue_timeout_propagates() -> None:
    conv = Conversation(
        Step(["squeue", "--json"], raises=SlurmTimeoutError(["squeue", "--json"], None, ""))
    )
    with pytest.raises(SlurmTimeoutError):
        client(conv, timeout=5.0).queue()
    assert conv.timeouts == [5.0]


def test_accounting_window_and_flags() -> None:
    start = 1_795_648_964
    argv = ["sacct", "--json", "-a", "-X", "-S", "2026-11-25T23:22:44", "-E"]
    conv = Conversation(
        Step([*argv, format_slurm_time(NOW)], stdout=recorded("sacct-X.json")),
        Step([*argv, "2026-11-25T23:24:17"], stdout=recorded("sacct-v0.0.41-synthetic.json")),
        # the daemon's poll: by every accounted state, so that a job that was never
        # eligible (held, then cancelled while pending) is not missed
        Step(
            [*argv, format_slurm_time(NOW), "-s", ACCOUNTED_STATES], stdout=recorded("sacct-X.json")
        ),
    )
    c = client(conv, accounting_timeout=99.0)
    jobs = {j.job_id: j for j in c.accounting(start)}
    assert jobs["1"].state is JobState.TIMEOUT
    jobs = {j.job_id: j for j in c.accounting(start, 1_795_649_057)}
    assert jobs["3"].exit_code == 3
    assert c.accounting(start, every_state=True)
    conv.done()
    assert conv.timeouts == [99.0, 99.0, 99.0]


def test_accounting_slurmdbd_down() -> None:
    conv = Conversation(
        Step(
            SACCT_ALL,
            returncode=1,
            stderr=recorded("sacct-slurmdbd-down.stderr"),
        )
    )
    with pytest.raises(SlurmUnreachableError) as info:
        client(conv).accounting(0)
    assert info.value.returncode == 1
    assert info.value.argv[0] == "sacct"


def test_submit_script_on_stdin_with_every_option() -> None:
    request = SubmitRequest(
        script=b"#!/bin/bash\nsrun train.py\n",
        job_name="mirage-c2-s2",
        time_limit=86400 + 3600 + 61,
        nodes=2,
        gres="gpu:a100:4",
        partition="gpu",
        account="mirage",
        dependency="afterok:8",
        comment="mirage chain=c2 step=2",
        signal="B:USR1@300",
        chdir="/work",
        hold=True,
        extra_args=("--exclusive",),
    )
    conv = Conversation(
        Step(
            [
                "/opt/slurm/bin/sbatch",
                "--parsable",
                "--job-name=mirage-c2-s2",
                "--time=1-01:01:01",
                "--nodes=2",
                "--gres=gpu:a100:4",
                "--partition=gpu",
                "--account=mirage",
                "--dependency=afterok:8",
                "--comment=mirage chain=c2 step=2",
                "--signal=B:USR1@300",
                "--chdir=/work",
                "--hold",
                "--exclusive",
            ],
            stdin=b"#!/bin/bash\nsrun train.py\n",
            stdout="13;mirage\n",
            cwd="/work",  # sbatch runs there: the job's SLURM_SUBMIT_DIR
        )
    )
    assert client(conv, bin_dir="/opt/slurm/bin/").submit(request) == "13"
    conv.done()


def test_submit_runs_sbatch_in_the_request_chdir_and_nothing_else_there() -> None:
    """sbatch (not --test-only, not scancel) runs in chdir; without chdir, no cwd at all."""
    conv = Conversation(
        Step(
            ["sbatch", "--parsable", "--chdir=/home/a/run", "job.sh"],
            stdout="7\n",
            cwd="/home/a/run",
        ),
        Step(["sbatch", "--parsable", "job.sh"], stdout="8\n"),
        Step(
            ["sbatch", "--test-only", "--chdir=/home/a/run", "job.sh"],
            stderr=recorded("sbatch-test-only-free.stderr"),
        ),
        Step(["scancel", "7"]),
    )
    c = client(conv)
    assert c.submit(SubmitRequest(script_path="job.sh", chdir="/home/a/run")) == "7"
    assert c.submit(SubmitRequest(script_path="job.sh")) == "8"
    c.test_only(SubmitRequest(script_path="job.sh", chdir="/home/a/run"))
    c.cancel(["7"])
    conv.done()


def test_submit_works_with_a_runner_that_knows_no_cwd() -> None:
    """A runner written before cwd existed still serves every request without chdir."""

    def old(
        argv: Sequence[str], *, stdin: bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        return CommandResult(tuple(argv), 0, "9\n", "")

    assert CliSlurmClient(runner=old).submit(SubmitRequest(script_path="j.sh")) == "9"  # type: ignore[arg-type]


def test_submit_script_path_and_refusal() -> None:
    conv = Conversation(
        Step(["sbatch", "--parsable", "job.sh"], stdout="21\n"),
        Step(["sbatch", "--parsable", "./-odd.sh"], stdout="22\n"),
        Step(
            ["sbatch", "--parsable", "--gres=gpu:8", "job.sh"],
            returncode=1,
            stderr=recorded("sbatch-refused.stderr"),
        ),
        Step(
            ["sbatch", "--parsable", "job.sh"],
            returncode=1,
            stderr=recorded("sbatch-slurmctld-down.stderr"),
        ),
        Step(["sbatch", "--parsable", "job.sh"], stdout="Submitted batch job 5\n"),
    )
    c = client(conv)
    assert c.submit(SubmitRequest(script_path="job.sh")) == "21"
    assert c.submit(SubmitRequest(script_path="-odd.sh")) == "22"
    with pytest.raises(SubmitError) as refused:
        c.submit(SubmitRequest(script_path="job.sh", gres="gpu:8"))
    assert "Requested node configuration is not available" in str(refused.value)
    with pytest.raises(SlurmUnreachableError):
        c.submit(SubmitRequest(script_path="job.sh"))
    with pytest.raises(SlurmParseError):
        c.submit(SubmitRequest(script_path="job.sh"))
    conv.done()


def test_submit_needs_exactly_one_script() -> None:
    c = client(Conversation())
    with pytest.raises(ValueError, match="exactly one"):
        c.submit(SubmitRequest())
    with pytest.raises(ValueError, match="exactly one"):
        c.submit(SubmitRequest(script=b"x", script_path="y"))


def test_test_only() -> None:
    conv = Conversation(
        Step(
            ["sbatch", "--test-only", "--time=0-01:00:00", "--gres=gpu:4"],
            stdin=b"#!/bin/sh\n",
            stderr=recorded("sbatch-test-only-busy.stderr"),
        ),
        Step(
            ["sbatch", "--test-only", "--gres=gpu:8"],
            stdin=b"#!/bin/sh\n",
            returncode=1,
            stderr=recorded("sbatch-test-only-refused.stderr"),
        ),
    )
    c = client(conv)
    est = c.test_only(SubmitRequest(script=b"#!/bin/sh\n", time_limit=3600, gres="gpu:4"))
    assert (est.job_id, est.partition, est.nodes) == ("18", "gpu", "gpu1")
    with pytest.raises(SubmitError):
        c.test_only(SubmitRequest(script=b"#!/bin/sh\n", gres="gpu:8"))
    conv.done()


def test_start_estimates() -> None:
    conv = Conversation(
        Step(
            ["squeue", "--start", "-h", "-o", "%i|%S|%N|%P|%r"], stdout=recorded("squeue-start.txt")
        )
    )
    est = client(conv).start_estimates()
    assert est["13"].start is None and est["14"].start is not None


def test_cancel_signal_hold_release_update() -> None:
    conv = Conversation(
        Step(["scancel", "8", "9_2"]),
        Step(
            ["scancel", "999"],
            returncode=1,
            stderr="scancel: error: Kill job error on job id 999: Invalid job id specified\n",
        ),
        Step(
            ["scancel", "7"],
            returncode=1,
            stderr="scancel: error: Unable to contact slurm controller (connect failure)\n",
        ),
        # a revocation's cancel: scancel filters on the state, says so when none match
        Step(
            ["scancel", "--state=PENDING", "8"],
            stderr="scancel: error: No active jobs match ALL job filters, including: "
            "state=PENDING \n",
        ),
        Step(["scancel", "--signal=USR1", "--batch", "8"]),
        Step(["scancel", "--signal=TERM", "8"]),
        Step(["scontrol", "hold", "13,14"]),
        Step(["scontrol", "release", "13"]),
        Step(["scontrol", "update", "JobId=13", "TimeLimit=0-02:00:00"]),
        Step(
            ["scontrol", "update", "JobId=8", "TimeLimit=0-00:01:00"],
            returncode=1,
            stderr="slurm_update error: Access/permission denied\n",
        ),
    )
    c = client(conv)
    c.cancel([])
    c.cancel(["8", "9_2"])
    c.cancel(["999"])  # unknown / finished: not an error
    with pytest.raises(SlurmUnreachableError):
        c.cancel(["7"])
    c.cancel(["8"], pending_only=True)
    c.signal("8", "USR1")
    c.signal("8", "TERM", batch_only=False)
    c.hold(["13", "14"])
    c.release(["13"])
    c.hold([])
    c.update_time_limit("13", 7200)
    with pytest.raises(SlurmError) as denied:
        c.update_time_limit("8", 60)
    assert not isinstance(denied.value, SlurmUnreachableError)
    conv.done()


def test_show() -> None:
    conv = Conversation(
        Step(
            ["scontrol", "-o", "show", "partition"], stdout=recorded("scontrol-show-partition.txt")
        ),
        Step(["scontrol", "-o", "show", "node"], stdout=recorded("scontrol-show-node.txt")),
        Step(["scontrol", "show", "config"], stdout=recorded("scontrol-show-config.txt")),
    )
    c = client(conv)
    assert [p["PartitionName"] for p in c.show("partition")] == ["gpu", "debug"]
    assert len(c.show("node")) == 4
    (config,) = c.show("config")
    assert config["ClusterName"] == "mirage"
    with pytest.raises(ValueError, match="kind"):
        c.show("jobs; rm -rf /")
    conv.done()


def test_sbatch_time_limit() -> None:
    request = SubmitRequest(script=b"#!/bin/sh\n", time_limit=2 * 86400)
    assert sbatch_options(request) == ["--time=2-00:00:00"]
    with pytest.raises(ValueError, match="positive"):  # --time=0 would mean no limit
        sbatch_options(SubmitRequest(script=b"#!/bin/sh\n", time_limit=0))


# ------------------------------------------------ errors name the command that failed


def test_parse_errors_carry_the_command() -> None:
    """Parsers know no command; the client re-raises with the real argv, rc and stderr."""
    conv = Conversation(
        Step(["sbatch", "--parsable", "job.sh"], stdout="garbage\n", stderr="sbatch: note\n"),
        Step(SACCT_ALL, stdout="{truncated", stderr="sacct: warning: slow\n"),
        Step(["squeue", "--json"], stdout=recorded("squeue-slurmctld-down.json")),
        Step(["scontrol", "-o", "show", "partition"], stdout="not Key=value\n"),
        Step(["sbatch", "--test-only", "job.sh"], stderr="sbatch: odd\n"),
    )
    c = client(conv)
    with pytest.raises(SlurmParseError) as submit:
        c.submit(SubmitRequest(script_path="job.sh"))
    assert submit.value.argv == ["sbatch", "--parsable", "job.sh"]
    assert submit.value.returncode == 0 and submit.value.stderr == "sbatch: note\n"
    assert "not a job id" in str(submit.value)
    assert isinstance(submit.value.__cause__, SlurmParseError)
    assert submit.value.__cause__.argv == []
    with pytest.raises(SlurmParseError) as acct:
        c.accounting(0)
    assert acct.value.argv == SACCT_ALL and acct.value.stderr == "sacct: warning: slow\n"
    assert "not JSON" in str(acct.value)
    with pytest.raises(SlurmUnreachableError) as down:  # exit 0, "errors" in the JSON
        c.queue()
    assert down.value.argv == ["squeue", "--json"] and down.value.returncode == 0
    with pytest.raises(SlurmParseError) as show:
        c.show("partition")
    assert show.value.argv == ["scontrol", "-o", "show", "partition"]
    with pytest.raises(SlurmParseError) as test_only:
        c.test_only(SubmitRequest(script_path="job.sh"))
    assert test_only.value.argv == ["sbatch", "--test-only", "job.sh"]
    assert test_only.value.stderr == "sbatch: odd\n"
    conv.done()


def test_show_nothing_in_the_system() -> None:
    conv = Conversation(
        Step(["scontrol", "-o", "show", "job"], stdout="No jobs in the system\n"),
        Step(["scontrol", "-o", "show", "reservation"], stdout="No reservations in the system\n"),
    )
    c = client(conv)
    assert c.show("job") == []
    assert c.show("reservation") == []
    conv.done()


def test_submit_killed_by_signal_is_outcome_unknown() -> None:
    conv = Conversation(
        Step(["sbatch", "--parsable", "job.sh"], returncode=-9),
        Step(
            ["sbatch", "--parsable", "job.sh"],
            returncode=1,
            stderr="sbatch: error: Batch job submission failed: Connection reset by peer\n",
        ),
    )
    c = client(conv)
    with pytest.raises(SlurmError, match="killed by signal 9") as killed:
        c.submit(SubmitRequest(script_path="job.sh"))
    assert not isinstance(killed.value, SubmitError)
    with pytest.raises(SlurmUnreachableError):
        c.submit(SubmitRequest(script_path="job.sh"))
    conv.done()


def test_submit_from_a_directory_that_is_gone_is_refused_before_sbatch(tmp_path: Path) -> None:
    """The chain's directory was removed: a SubmitError (the daemon records a rejection
    for that chain), and sbatch never ran."""
    calls = tmp_path / "calls"
    sbatch = tmp_path / "sbatch"
    sbatch.write_text(f'#!/bin/sh\necho "$PWD" >> {calls}\necho 5\n')
    sbatch.chmod(0o755)
    c = CliSlurmClient(runner=SubprocessRunner(), binaries={"sbatch": str(sbatch)})
    work = tmp_path / "work"
    work.mkdir()
    assert c.submit(SubmitRequest(script=b"#!/bin/sh\n", chdir=str(work))) == "5"
    assert calls.read_text() == f"{work}\n"  # run there: the job's SLURM_SUBMIT_DIR
    work.rmdir()
    with pytest.raises(SubmitError, match=f"cannot run {sbatch} in {work}"):
        c.submit(SubmitRequest(script=b"#!/bin/sh\n", chdir=str(work)))
    assert calls.read_text() == f"{work}\n"
