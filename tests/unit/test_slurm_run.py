"""The subprocess chokepoint, with real subprocesses (small /bin/sh scripts in tmp_path)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirage.slurm.run import (
    CommandResult,
    SubprocessRunner,
    WorkdirError,
    check_result,
    clean_environment,
    is_unreachable,
    run,
)
from mirage.slurm.types import (
    SlurmError,
    SlurmTimeoutError,
    SlurmUnreachableError,
    SubmitError,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_stdout_stderr_exit_code(tmp_path: Path) -> None:
    prog = script(tmp_path, "talk", 'echo out "$1"; echo err >&2; exit 3\n')
    result = SubprocessRunner()([prog, "a b; rm -rf /"])
    assert result.returncode == 3
    assert result.stdout == "out a b; rm -rf /\n"  # one argv element, no shell
    assert result.stderr == "err\n"
    assert result.argv == (prog, "a b; rm -rf /")
    assert result.duration >= 0


def test_stdin_bytes(tmp_path: Path) -> None:
    prog = script(tmp_path, "cat", "exec cat\n")
    assert SubprocessRunner()([prog], stdin=b"#!/bin/bash\necho hi\n").stdout == (
        "#!/bin/bash\necho hi\n"
    )
    # without stdin the child reads /dev/null, it never blocks on ours
    assert SubprocessRunner()([prog]).stdout == ""


def test_timeout(tmp_path: Path) -> None:
    prog = script(tmp_path, "slow", "exec sleep 30\n")
    with pytest.raises(SlurmTimeoutError) as info:
        SubprocessRunner(timeout=0.3)([prog])
    assert info.value.argv == [prog]
    assert info.value.returncode is None
    with pytest.raises(SlurmTimeoutError):
        SubprocessRunner(timeout=30)([prog], timeout=0.3)


def test_missing_binary_is_unreachable(tmp_path: Path) -> None:
    with pytest.raises(SlurmUnreachableError):
        SubprocessRunner()([str(tmp_path / "no-such-squeue")])


def test_environment_is_cleaned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "SQUEUE_FORMAT": "%i",
        "SQUEUE_FORMAT2": "jobid",
        "SQUEUE_SORT": "-t",
        "SQUEUE_USERS": "alice",
        "SACCT_FORMAT": "jobid",
        "SINFO_FORMAT": "%N",
        "SLURM_TIME_FORMAT": "relative",
        "SLURM_CLUSTERS": "other",
        "SLURM_JOB_ID": "42",
        "SBATCH_PARTITION": "wrong",
        "SBATCH_TIMELIMIT": "1",
        "SCANCEL_USER": "bob",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "MIRAGE_KEEP_ME": "yes",
        "TZ": "America/Chicago",
    }.items():
        monkeypatch.setenv(name, value)
    prog = script(tmp_path, "env", "exec env\n")
    lines = set(SubprocessRunner()([prog]).stdout.splitlines())
    names = {line.split("=", 1)[0] for line in lines}
    for gone in ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SQUEUE_SORT", "SQUEUE_USERS"):
        assert gone not in names
    for gone in ("SACCT_FORMAT", "SINFO_FORMAT", "SLURM_TIME_FORMAT", "SLURM_CLUSTERS"):
        assert gone not in names
    for gone in ("SLURM_JOB_ID", "SBATCH_PARTITION", "SBATCH_TIMELIMIT", "SCANCEL_USER"):
        assert gone not in names
    assert "SLURM_CONF=/etc/slurm/slurm.conf" in lines
    assert "MIRAGE_KEEP_ME=yes" in lines
    assert "TZ=UTC" in lines and "LC_ALL=C" in lines
    dropped = SubprocessRunner(keep_slurm_conf=False)([prog]).stdout
    assert "SLURM_CONF=" not in dropped


def test_clean_environment_pure() -> None:
    env = clean_environment({"PATH": "/bin", "SLURM_CONF": "x", "SBATCH_EXPORT": "NONE"}, tz=None)
    assert env == {"PATH": "/bin", "SLURM_CONF": "x", "LC_ALL": "C", "LANG": "C"}


def test_debug_log_with_duration(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    prog = script(tmp_path, "ok", "exit 0\n")
    with caplog.at_level(logging.DEBUG, logger="mirage.slurm.run"):
        SubprocessRunner()([prog, "--json"])
    assert "--json" in caplog.text and "rc=0" in caplog.text


@pytest.mark.parametrize(
    ("name", "unreachable"),
    [
        ("squeue-start-slurmctld-down.stderr", True),
        ("sbatch-slurmctld-down.stderr", True),
        ("sacct-slurmdbd-down.stderr", True),
        ("sbatch-refused.stderr", False),
        ("sbatch-test-only-refused.stderr", False),
    ],
)
def test_recorded_failures_classified(name: str, unreachable: bool) -> None:
    stderr = (DATA / name).read_text()
    assert is_unreachable(stderr) is unreachable
    result = CommandResult(("x",), 1, "", stderr)
    with pytest.raises(SlurmError) as info:
        check_result(result, SubmitError)
    assert isinstance(info.value, SlurmUnreachableError) is unreachable
    assert isinstance(info.value, SubmitError) is not unreachable
    assert info.value.returncode == 1 and info.value.stderr == stderr


@pytest.mark.parametrize(
    "stderr",
    [
        "squeue: error: Socket timed out on send/recv operation\n",
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
        "sacct: error: Problem talking to the database: Connection refused\n",
        "scontrol: error: slurm_load_partitions error: Socket timed out\n",
    ],
)
def test_unreachable_patterns(stderr: str) -> None:
    assert is_unreachable(stderr)


def test_invalid_job_id_is_not_unreachable() -> None:
    assert not is_unreachable("slurm_load_jobs error: Invalid job id specified\n")


def test_run_checks(tmp_path: Path) -> None:
    ok = script(tmp_path, "ok", "echo fine\n")
    assert run([ok]).stdout == "fine\n"
    bad = script(tmp_path, "bad", "echo 'sbatch: error: Invalid account' >&2; exit 1\n")
    with pytest.raises(SubmitError) as info:
        run([bad], error=SubmitError)
    assert "Invalid account" in str(info.value)


# ------------------------------------------------- what proves a refusal, what does not


@pytest.mark.parametrize(("returncode", "signum"), [(-9, 9), (-15, 15), (137, 9), (143, 15)])
def test_killed_by_signal_is_not_a_refusal(returncode: int, signum: int) -> None:
    """sbatch killed mid-call may have submitted: a plain SlurmError (outcome unknown),
    never the SubmitError that the daemon records as REJECTED and resubmits."""
    result = CommandResult(("sbatch", "--parsable"), returncode, "", "partial\n")
    with pytest.raises(SlurmError) as info:
        check_result(result, SubmitError)
    assert type(info.value) is SlurmError
    assert f"killed by signal {signum}" in str(info.value)
    assert info.value.argv == ["sbatch", "--parsable"]
    assert info.value.returncode == returncode and info.value.stderr == "partial\n"


@pytest.mark.parametrize("returncode", [1, 2, 128, 255])
def test_ordinary_exit_codes_keep_the_error_class(returncode: int) -> None:
    # 128 is no signal, and no signal number reaches 127 (255 - 128)
    with pytest.raises(SubmitError):
        check_result(CommandResult(("sbatch",), returncode, "", "x\n"), SubmitError)


def test_real_child_killed_by_signal(tmp_path: Path) -> None:
    prog = script(tmp_path, "die", "kill -9 $$\n")
    result = SubprocessRunner()([prog])
    assert result.returncode == -9
    with pytest.raises(SlurmError, match="killed by signal 9") as info:
        check_result(result, SubmitError)
    assert not isinstance(info.value, SubmitError)


# The part after "Batch job submission failed: " is Slurm's slurm_strerror() text
# (src/common/slurm_errno.c) or libc's strerror(); sbatch prints it with "%m".
NOT_A_REFUSAL = [
    "sbatch: error: slurm_receive_msg: Connection reset by peer",
    "sbatch: error: Batch job submission failed: Connection reset by peer",
    "sbatch: error: Batch job submission failed: Broken pipe",
    "sbatch: error: Batch job submission failed: Unexpected message received",
    "sbatch: error: Batch job submission failed: Transport endpoint is not connected",
    "sbatch: error: Batch job submission failed: Network is unreachable",
    "sbatch: error: Batch job submission failed: Protocol authentication error",
    "sbatch: error: Munge decode failed: Expired credential",
    "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
    "sbatch: error: Batch job submission failed: Slurm backup controller in standby mode",
    "sbatch: error: Batch job submission failed: Interrupted system call",
    "sbatch: error: Batch job submission failed: Rate limit exceeded, please retry momentarily",
    "SBATCH: ERROR: BATCH JOB SUBMISSION FAILED: CONNECTION RESET BY PEER",  # any case
]
REFUSALS = [
    "sbatch: error: Batch job submission failed: Invalid account or account/partition "
    "combination specified",
    "sbatch: error: Batch job submission failed: Requested node configuration is not available",
    "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job "
    "submit limit, user's size and/or time limits)",
    "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or "
    "exceeds some limit)",
    "sbatch: error: Batch job submission failed: Invalid partition name specified",
    "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification",
    "sbatch: error: Batch job submission failed: Invalid qos specification",
]


@pytest.mark.parametrize("stderr", NOT_A_REFUSAL)
def test_transient_sbatch_failures_are_unreachable(stderr: str) -> None:
    with pytest.raises(SlurmUnreachableError):
        check_result(CommandResult(("sbatch",), 1, "", stderr + "\n"), SubmitError)


@pytest.mark.parametrize("stderr", REFUSALS)
def test_genuine_refusals_stay_submit_errors(stderr: str) -> None:
    assert not is_unreachable(stderr)
    with pytest.raises(SubmitError):
        check_result(CommandResult(("sbatch",), 1, "", stderr + "\n"), SubmitError)


def test_bounded_runner_answers_like_the_plain_one(tmp_path: Path) -> None:
    """The runner of users' commands keeps at most ``max_output`` bytes; under it, the
    same answers: exit code and streams, stdin past a pipe's buffer, timeouts."""
    talk = script(tmp_path, "talk", 'echo out "$1"; echo err >&2; exit 3\n')
    cat = script(tmp_path, "cat", "exec cat\n")
    slow = script(tmp_path, "slow", "exec sleep 30\n")
    big = bytes(range(256)) * 4096  # 1 MiB: more than a pipe holds
    for runner in (SubprocessRunner(), SubprocessRunner(max_output=2 << 20)):
        got = runner([talk, "a b"])
        assert (got.returncode, got.stdout, got.stderr) == (3, "out a b\n", "err\n")
        assert runner([cat], stdin=big).stdout == big.decode("utf-8", errors="replace")
        assert runner([cat]).stdout == ""
        with pytest.raises(SlurmTimeoutError):
            runner([slow], timeout=0.3)


@pytest.mark.parametrize("stream", ["", ">&2"])
def test_output_past_the_bound_kills_the_command(tmp_path: Path, stream: str) -> None:
    flood = script(tmp_path, "flood", f"exec yes {stream}\n")  # prints without end
    with pytest.raises(SlurmError, match="printed more than 100000 bytes on std") as info:
        SubprocessRunner(max_output=100_000, timeout=30)([flood])
    # its outcome is unknown (an sbatch may have submitted): neither a refusal nor a timeout
    assert not isinstance(info.value, SubmitError | SlurmTimeoutError)


# ---- the working directory (sbatch runs in the chain's directory: SLURM_SUBMIT_DIR) -----


@pytest.mark.parametrize("bounded", [None, 1 << 20])
def test_command_runs_in_cwd(tmp_path: Path, bounded: int | None) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = SubprocessRunner(max_output=bounded)(["/bin/pwd", "-P"], cwd=str(work))
    assert result.stdout.strip() == str(work.resolve())
    assert result.argv == ("/bin/pwd", "-P")


@pytest.mark.parametrize("bounded", [None, 1 << 20])
def test_unusable_cwd_is_a_workdir_error_not_an_outage(tmp_path: Path, bounded: int | None) -> None:
    plain = tmp_path / "file"
    plain.write_text("")
    for bad in (tmp_path / "gone", plain):
        with pytest.raises(WorkdirError) as info:
            SubprocessRunner(max_output=bounded)(["/bin/true"], cwd=str(bad))
        assert isinstance(info.value, SubmitError)  # refused: nothing was submitted
        assert f"cannot run /bin/true in {bad}" in str(info.value)
    # a missing binary is still "no Slurm client here", even with a good cwd
    with pytest.raises(SlurmUnreachableError):
        SubprocessRunner()([str(tmp_path / "no-such-sbatch")], cwd=str(tmp_path))


@pytest.fixture
def nobody_dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a directory nobody may enter, one only root may enter)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: runs commands as nobody")
    top = Path(tempfile.mkdtemp(prefix="mirage-cwd-", dir="/tmp"))
    try:
        top.chmod(0o755)
        (top / "open").mkdir(mode=0o755)
        (top / "closed").mkdir(mode=0o700)  # root's: root could enter it, nobody cannot
        yield top / "open", top / "closed"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_owner_runner_enters_cwd_as_the_owner(nobody_dirs: tuple[Path, Path]) -> None:
    from mirage.daemon.identity import OwnerRunner

    open_dir, closed = nobody_dirs
    runner = OwnerRunner(65534, 65534, [], base_env={"PATH": "/usr/bin:/bin"})
    ran = runner(["/bin/sh", "-c", 'pwd -P; id -u; echo "$0" >&2'], cwd=str(open_dir))
    assert ran.stdout.split() == [str(open_dir), "65534"]
    assert ran.argv == ("/bin/sh", "-c", 'pwd -P; id -u; echo "$0" >&2')  # not env's
    # root may enter it, the owner may not: the owner's submission error, never root's cd
    for bad in (closed, open_dir / "gone"):
        with pytest.raises(WorkdirError) as info:
            runner(["/bin/true"], cwd=str(bad))
        assert f"cannot run /bin/true in {bad}" in str(info.value)
    with pytest.raises(SlurmUnreachableError):
        runner([str(open_dir / "no-such-sbatch")], cwd=str(open_dir))
    # the command's own failure stays the command's (here: exit 125 of its own)
    own = runner(["/bin/sh", "-c", "echo 'sbatch: error: no' >&2; exit 125"], cwd=str(open_dir))
    assert own.returncode == 125
    # without cwd, as before: "/" (never a directory the owner cannot enter)
    assert runner(["/bin/pwd"]).stdout.strip() == "/"
