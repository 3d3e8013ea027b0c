"""Bad input to the commands: one clear error each (exit 1 or 2), never a traceback.

Each case is what an adversarial review of the commands found crashing, hanging or
accepted when it should not be; the message each must now give is asserted.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner, Result

from mirage.cli import main
from mirage.daemon.config import ConfigError, config_from_dict, load_config, valid_signal
from mirage.evaluate.inputs import InputError, parse_split
from mirage.evaluate.protocol import Protocol, Split
from tests.fakes import cli_setup

REPO = Path(__file__).resolve().parents[2]
SLICE = str(REPO / "traces" / "ls6-a100-slice.log.gz")
SCRIPT = "#!/bin/bash\n#SBATCH --time=01:00:00\nsrun x\n"


def clean_error(res: Result, *needles: str) -> None:
    """A click error (SystemExit 1 or 2) whose message holds every needle."""
    assert isinstance(res.exception, SystemExit), res.output
    assert res.exit_code in {1, 2}, res.output
    assert "Traceback" not in res.output
    for needle in needles:
        assert needle in res.output, res.output


@pytest.fixture
def env(tmp_path: Path) -> tuple[Path, Path]:
    return cli_setup(tmp_path, SCRIPT)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


# ---- configuration ----------------------------------------------------------------------


def test_config_values_checked_beyond_their_types(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[daemon]\ncluster = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"daemon": {"database_url": "foo://x/y"}}, "supported: sqlite, postgresql"),
        ({"daemon": {"database_url": "not a url"}}, "is not a database URL"),
        ({"metrics": {"port": 99999}}, "port must be 0 (off) to 65535"),
        ({"daemon": {"handoff_signal": "NOTASIG"}}, "is not a signal"),
        ({"slurm": {"timeout_s": 0}}, "timeout_s must be at least 1"),
        ({"daemon": {"poll_interval_s": 10**20}}, "out of range"),
        ({"daemon": {"unknown_timeout_s": 10**9}}, "more than a year"),
        ({"policy": {"lead_s": -60}}, "must not be negative"),
    ]
    for data, message in cases:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            config_from_dict(data)
    # a tuned look-ahead margin may be negative (Theta's is -4 h): submit later
    assert config_from_dict({"policy": {"lookahead_margin_s": -14400}}).policy.lookahead_margin_s
    assert config_from_dict({"daemon": {"database_url": "postgresql://u:p@h/db"}})
    assert all(valid_signal(s) for s in ("USR1", "SIGTERM", "usr2", "10"))
    assert not any(valid_signal(s) for s in ("NOTASIG", "0", "999", "¹"))


def test_an_unusable_database_is_named_not_a_traceback(tmp_path: Path) -> None:
    cfg = tmp_path / "mirage.toml"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for state_dir in (blocker / "sub", tmp_path / "dir-db"):
        (tmp_path / "dir-db" / "mirage.sqlite").mkdir(parents=True, exist_ok=True)
        cfg.write_text(f'[daemon]\nstate_dir = "{state_dir}"\n[socket]\npath = "/nonexistent"\n')
        for args in (["status"], ["chain", "list"]):
            clean_error(invoke(*args, "--config", str(cfg)), "cannot open the database sqlite:")
    cfg.write_text('[daemon]\ndatabase_url = "postgresql://mirage:secret@127.0.0.1:1/mirage"\n')
    res = invoke("status", "--config", str(cfg))
    clean_error(res, "cannot open the database postgresql://mirage:***@127.0.0.1:1/mirage")
    assert "secret" not in res.output


# ---- mirage chain submit ------------------------------------------------------------------


def test_chain_requests_out_of_bounds_are_refused(env: tuple[Path, Path]) -> None:
    cfg, script = env
    cases = [
        (["--segments", str(10**23)], "--segments must be 1 to 100000"),
        (["--segments", "2", "--", f"--time={10**23}"], "at most 366 days"),
        (["--segments", "2", "--", "-t", "10", "-N", str(10**23)], "a fixed node count"),
        (["--segments", "2", "--", "-t", "10", "-N", "0"], "a fixed node count"),
        (["--segments", "2", "--", "--time=²"], "invalid time limit"),  # ² isdigit, not int
        (["--segments", "2", "--", "-t", "1-²"], "invalid time limit"),
        (["--segments", "2", "--", "-t", "10", "--gres=gpu:100000"], "GPUs per node"),
        (["--until-file", ""], "--until-file needs a path"),
        (["--until-file", "  "], "--until-file needs a path"),
    ]
    for extra, message in cases:
        res = invoke("chain", "submit", str(script), "--no-submit", "--config", str(cfg), *extra)
        clean_error(res, message)
    listed = invoke("chain", "list", "--json", "--config", str(cfg))
    assert json.loads(listed.output) == []  # nothing was registered


def test_unreadable_script(env: tuple[Path, Path]) -> None:
    cfg, _ = env
    if not Path("/proc/self/mem").exists():
        pytest.skip("needs Linux /proc")
    res = invoke("chain", "submit", "/proc/self/mem", "--segments", "2", "--config", str(cfg))
    clean_error(res, "cannot read the script /proc/self/mem")


@pytest.fixture
def mute_socket(tmp_path: Path) -> Iterator[Path]:
    """A Unix socket that takes the request and hangs up without an answer."""
    path = tmp_path / "mute.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)

    threading.Thread(target=serve, daemon=True).start()
    yield path
    server.close()


def test_a_daemon_that_hangs_up_gives_an_error(tmp_path: Path, mute_socket: Path) -> None:
    cfg = tmp_path / "mirage.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n[socket]\npath = "{mute_socket}"\n')
    clean_error(invoke("chain", "list", "--config", str(cfg)), "gave no valid answer")


# ---- mirage daemon ------------------------------------------------------------------------


def test_daemon_options_and_profiles_checked(env: tuple[Path, Path]) -> None:
    cfg, _ = env
    res = invoke("daemon", "--config", str(cfg), "--trace", SLICE, "--cycles", "1")
    clean_error(res, "--trace needs --backend sim")
    assert not (cfg.parent / "state").exists()  # refused before the database was opened
    sim = ["daemon", "--config", str(cfg), "--backend", "sim", "--cycles", "1"]
    clean_error(invoke(*sim, "--speed", "0"), "--speed")
    clean_error(invoke(*sim, "--speed", "-5"), "--speed")
    clean_error(invoke(*sim, "--profile", "nosuch"), "nosuch")
    clean_error(invoke(*sim, "--nodes", "0"), "--nodes")
    bad = cfg.parent / "bad.log"
    bad.write_bytes(b"\x00\x01binary")
    res = invoke(*sim, "--trace", str(bad), "--profile", "ls6", "--nodes", "4")
    clean_error(res, "not a recognised job trace")
    assert res.output.count(str(bad)) == 1  # the path once, not twice


def test_daemon_with_its_metrics_port_taken_runs_on_without_metrics(tmp_path: Path) -> None:
    """Another process (perhaps another user's) holds the port: the daemon says so and
    keeps provisioning. Run as a process, stopped once it has said it (or after 60 s)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = tmp_path / "mirage.toml"
        cfg.write_text(
            f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n[socket]\npath = '
            f'"{tmp_path / "d.sock"}"\n[metrics]\nport = {port}\n[slurm]\nbin_dir = "{tmp_path}"\n'
        )
        code = "from mirage.cli import main; main()"
        argv = [sys.executable, "-c", code, "daemon", "--config", str(cfg)]
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        timer = threading.Timer(60, proc.terminate)
        timer.start()
        lines = []
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if "running without metrics" in line:
                    break
            running = proc.poll() is None
        finally:
            timer.cancel()
            proc.terminate()
            proc.wait(timeout=30)
    said = "".join(lines)
    assert f"cannot serve metrics on 127.0.0.1:{port}" in said and running, said
    assert "Traceback" not in said


# ---- mirage evaluate and mirage train -----------------------------------------------------


def test_evaluate_and_train_refuse_bad_arguments_before_work() -> None:
    ev = ["evaluate", "--cluster", "ls6", "--trace", SLICE, "--out", "/nonexistent/out"]
    clean_error(invoke(*ev, "--profile", "nosuch"), "nosuch")
    clean_error(invoke("evaluate", "--cluster", "x", "--trace", SLICE), "built-in profile 'x'")
    clean_error(invoke("evaluate", "--cluster", "ls6", "--trace", "/nonexistent.swf"), "nonexist")
    for load in ("0", "-1", "nan", "inf"):
        clean_error(invoke(*ev, "--load", load), "a load must be a positive number")
    clean_error(invoke(*ev, "--every-h", "0"), "sample spacing must be positive")
    clean_error(invoke(*ev, "--every-h", "0.0001"), "sample spacing must be positive")
    clean_error(invoke(*ev, "--step-min", "0"), "decision step must be positive")
    clean_error(invoke(*ev, "--tune-split", "x:y"), "--tune-split", "expected START:END")
    clean_error(invoke(*ev, "--tune-split", "2023-13-45:2023-03-01"), "not an ISO date")
    tr = ["train", "--cluster", "ls6", "--trace", SLICE, "--models", "/nonexistent/models"]
    for spec in ("0", "nan", "inf", "1:0.0001", "1:12:0"):
        clean_error(invoke(*tr, "--load", spec), "expected positive LOAD")
    clean_error(invoke(*tr, "--every-h", "0"), "at least one second")
    clean_error(invoke(*tr, "--train-split", "2022-11-01"), "expected START:END")


def test_splits_with_times_of_day_and_protocol_bounds() -> None:
    default = Split("tune", 0, 1)
    split = parse_split("2023-02-01T12:00:2023-03-01", "tune", "UTC", default)
    assert (split.start, split.end) == (1675252800, 1677628800)
    assert parse_split("2023-02-01:2023-03-01", "tune", "UTC", default).start == 1675209600
    with pytest.raises(InputError, match="ends before it starts"):
        parse_split("2023-03-01:2023-02-01", "tune", "UTC", default)
    bad: dict[str, int]
    for bad in ({"every_s": 0}, {"step_s": 0}, {"nodes": 0}, {"gpus": -1}):
        with pytest.raises(ValueError, match="must"):
            Protocol(**bad)  # type: ignore[arg-type]


def test_evaluate_and_train_need_jobs_that_can_be_replayed(tmp_path: Path) -> None:
    head = "; UnixStartTime: 1000000000\n"
    no_start = tmp_path / "nostart.swf"  # like the NASA iPSC trace: every wait unknown
    no_start.write_text(head + "1 0 -1 100 4 -1 -1 4 3600 -1 1 3 1 -1 -1 -1 -1 -1\n")
    no_submit = tmp_path / "nosubmit.parquet"
    from mirage.trace.load import TraceLoad
    from mirage.trace.parquet import write_parquet
    from mirage.trace.schema import conform

    jobs = conform(pd.DataFrame({"job_id": ["1"], "start": [1000], "end": [2000]}))
    write_parquet(TraceLoad(jobs=jobs, source="x", format="ls6"), no_submit)
    for cmd, out in (("evaluate", "--out"), ("train", "--models")):
        base = [cmd, "--cluster", "ls6", out, str(tmp_path / "out")]
        clean_error(invoke(*base, "--trace", str(no_start)), "no job in this trace has a known")
        clean_error(invoke(*base, "--trace", str(no_submit)), "no job in this trace has a submit")
