"""mirage chain submit/list/show/cancel and mirage status, on a database in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.daemon.chains import ChainSpecError, build_chain, parse_time_limit, split_options
from tests.fakes import cli_setup

SCRIPT = "#!/bin/bash\n#SBATCH --time=01:00:00\n#SBATCH -J ignored\n#SBATCH --gres=gpu:4\nsrun x\n"


@pytest.fixture
def env(tmp_path: Path) -> tuple[CliRunner, Path, Path]:
    return CliRunner(), *cli_setup(tmp_path, SCRIPT)


def test_parse_time_limits() -> None:
    assert parse_time_limit("90") == 5400
    assert parse_time_limit("10:30") == 630
    assert parse_time_limit("2:00:00") == 7200
    assert parse_time_limit("2-00:00:00") == 2 * 86400
    assert parse_time_limit("1-12") == 86400 + 12 * 3600
    with pytest.raises(ChainSpecError):
        parse_time_limit("soon")


def test_split_options_refuses_token_carriers() -> None:
    spec = split_options(["-p", "gpu", "--time=60", "--mem", "4G", "--exclusive"])
    assert spec.managed == {"partition": "gpu", "time": "60"}
    assert spec.rest == ["--mem", "4G", "--exclusive"]
    for bad in (["--comment=x"], ["--job-name", "x"], ["-J", "x"], ["-Jx"], ["--dependency=1"]):
        with pytest.raises(ChainSpecError, match="not allowed"):
            split_options(bad)


def test_build_chain_snapshot_uses_directives() -> None:
    c = build_chain(
        "job.sbatch",
        SCRIPT.encode(),
        ["--partition=gpu", "--mem=4G"],
        segments=6,
        until_file=None,
        name=None,
        cwd="/home/a",
        environ={"HOME": "/home/a"},
        uid=0,
        gid=0,
        groups=[],
    )
    assert (c.time_limit_s, c.gres, c.gpus_per_node, c.partition) == (3600, "gpu:4", 4, "gpu")
    assert c.sbatch_args == ["--mem=4G"] and c.chdir == "/home/a" and c.export == "ALL"
    assert c.environment == {"HOME": "/home/a"} and c.segments_target == 6
    assert c.name == "job" and len(c.script_sha256) == 64
    with pytest.raises(ChainSpecError, match="--segments"):
        build_chain(
            "j", b"#!/bin/sh\n", [], segments=None, until_file=None, name=None, cwd="/",
            environ={},
        )  # fmt: skip
    with pytest.raises(ChainSpecError, match="time limit"):
        build_chain(
            "j", b"#!/bin/sh\n", [], segments=2, until_file=None, name=None, cwd="/", environ={}
        )


def test_chain_commands(env: tuple[CliRunner, Path, Path]) -> None:
    runner, cfg, script = env
    res = runner.invoke(
        main,
        ["chain", "submit", str(script), "--segments", "3", "--no-submit", "--config", str(cfg),
         "--json", "--", "-p", "gpu"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    chain_id = json.loads(res.output)["chain_id"]
    res = runner.invoke(main, ["chain", "list", "--json", "--config", str(cfg)])
    assert [r["id"] for r in json.loads(res.output)] == [chain_id]
    res = runner.invoke(main, ["chain", "show", chain_id, "--json", "--config", str(cfg)])
    shown = json.loads(res.output)
    assert shown["segments"] == 3 and shown["time_limit_s"] == 3600
    assert shown["events"][0]["kind"] == "chain.register"
    res = runner.invoke(main, ["status", "--json", "--config", str(cfg)])
    assert json.loads(res.output)["chains"][0]["state"] == "ACTIVE"
    res = runner.invoke(main, ["status", "--config", str(cfg)])
    assert res.exit_code == 0 and chain_id in res.output
    res = runner.invoke(main, ["chain", "cancel", chain_id, "--config", str(cfg)])
    assert "ACTIVE -> CANCELLED" in res.output
    res = runner.invoke(main, ["chain", "show", "nope", "--config", str(cfg)])
    assert res.exit_code != 0 and "no chain" in res.output


def test_chain_submit_refuses_comment(env: tuple[CliRunner, Path, Path]) -> None:
    runner, cfg, script = env
    res = runner.invoke(
        main,
        ["chain", "submit", str(script), "--segments", "2", "--config", str(cfg), "--",
         "--comment=mine"],
    )  # fmt: skip
    assert res.exit_code != 0
    assert "--comment" in res.output and "token" in res.output


def test_bad_config_names_valid_keys(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[daemon]\npoll_every = 5\n")
    res = CliRunner().invoke(main, ["status", "--config", str(cfg)])
    assert res.exit_code != 0 and "poll_interval_s" in res.output


def test_daemon_sim_backend_runs_cycles(env: tuple[CliRunner, Path, Path]) -> None:
    runner, cfg, script = env
    res = runner.invoke(
        main,
        ["chain", "submit", str(script), "--segments", "2", "--no-submit", "--config",
         str(cfg), "--json", "--", "-p", "gpu"],
    )  # fmt: skip
    chain_id = json.loads(res.output)["chain_id"]
    res = runner.invoke(
        main,
        ["daemon", "--config", str(cfg), "--backend", "sim", "--cycles", "3", "--speed", "1e9"],
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["chain", "show", chain_id, "--json", "--config", str(cfg)])
    segs = json.loads(res.output)["segments_run"]
    assert [g["state"] for g in segs] == ["RUNNING"]


def test_watchdog_fed_only_after_timely_cycles() -> None:
    from mirage.daemon.service import Notifier, Watchdog

    sent: list[str] = []

    class Fake(Notifier):
        def notify(self, state: str) -> None:
            sent.append(state)

    clock = iter([0.0, 60.0, 120.0, 500.0, 560.0])
    w = Watchdog(60, Fake(), lambda: next(clock))
    results = [w.cycle_finished() for _ in range(5)]
    assert results == [True, True, True, False, True]  # 380 s > 3 intervals: not fed
    assert sent == ["WATCHDOG=1"] * 4


def _fake_sbatch(tmp_path: Path, body: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    sbatch = bindir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\n{body}\n")
    sbatch.chmod(0o755)
    return bindir


def test_chain_submit_runs_sbatch_with_token_and_snapshot(
    env: tuple[CliRunner, Path, Path], tmp_path: Path
) -> None:
    runner, cfg, script = env
    log = tmp_path / "argv.txt"
    bindir = _fake_sbatch(
        tmp_path, f'printf "%s\\n" "$@" > {log}; cat > {log}.stdin; env > {log}.env; echo 4242'
    )
    cfg.write_text(cfg.read_text() + f'[slurm]\nbin_dir = "{bindir}"\n')
    res = runner.invoke(
        main,
        ["chain", "submit", str(script), "--segments", "2", "--name", "bert", "--config",
         str(cfg), "--json", "--", "-p", "gpu", "--mem=8G"],
        env={"MY_VAR": "kept", "SLURM_JOB_ID": "99"},
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert (out["first_segment"], out["job_id"]) == ("submitted", "4242")
    argv = log.read_text().splitlines()
    comment = next(a for a in argv if a.startswith("--comment=mirage:mg"))
    token = comment.removeprefix("--comment=mirage:")
    assert f"--job-name=bert.{token}" in argv
    assert "--time=0-01:00:00" in argv and "--partition=gpu" in argv and "--mem=8G" in argv
    # segment 1 is told its number (and has no predecessor)
    export = f"--export=ALL,MIRAGE_CHAIN_ID={out['chain_id']},MIRAGE_SEGMENT=1"
    assert export in argv and any(a.startswith("--chdir=") for a in argv)
    assert (tmp_path / "argv.txt.stdin").read_bytes() == script.read_bytes()  # on stdin
    child_env = (tmp_path / "argv.txt.env").read_text()
    assert "MY_VAR=kept" in child_env  # the registering shell's environment (export ALL)
    assert "SLURM_JOB_ID" not in child_env  # never Slurm's own variables
    # a later edit of the script changes nothing: the snapshot is in the database
    script.write_text("#!/bin/bash\necho edited\n")
    shown = json.loads(
        runner.invoke(
            main, ["chain", "show", out["chain_id"], "--json", "--config", str(cfg)]
        ).output
    )
    assert shown["segments_run"][0]["job_id"] == "4242"
    assert shown["submissions"][0]["state"] == "SUBMITTED"


def test_chain_submit_refused_by_sbatch_fails_the_chain(
    env: tuple[CliRunner, Path, Path], tmp_path: Path
) -> None:
    runner, cfg, script = env
    bindir = _fake_sbatch(
        tmp_path,
        'echo "sbatch: error: Batch job submission failed: Requested node configuration '
        'is not available" >&2; exit 1',
    )
    cfg.write_text(cfg.read_text() + f'[slurm]\nbin_dir = "{bindir}"\n')
    res = runner.invoke(
        main, ["chain", "submit", str(script), "--segments", "2", "--config", str(cfg)]
    )
    assert res.exit_code != 0 and "Requested node configuration" in res.output
    listed = json.loads(
        runner.invoke(main, ["chain", "list", "--all", "--json", "--config", str(cfg)]).output
    )
    assert listed[0]["state"] == "FAILED"
