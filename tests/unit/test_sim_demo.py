"""The demo: the daemon on the simulated backend against reactive submission (``mirage demo``)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from mirage.cli import main
from mirage.daemon.config import Config, ConfigError, PolicySection
from mirage.demo.run import (
    SHIPPED_POLICY,
    DemoSpec,
    daemon_config,
    load_jobs,
    render,
    replay_to,
    run_demo,
)
from mirage.policy.cost import DEFAULT_COST
from mirage.profile.schema import load_profile
from mirage.sim.backend import SimSlurmClient
from mirage.sim.calibrate import with_settings

REPO = Path(__file__).resolve().parents[2]
TRACE = str(REPO / "traces" / "ls6-a100-slice.log.gz")
PROFILE = str(REPO / "models" / "ls6" / "profile.toml")
CHAINS, SEGMENTS = 2, 3


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """One small demo through the CLI, on the busy replay: (its JSON, its progress lines)."""
    cfg = tmp_path_factory.mktemp("demo") / "mirage.toml"
    # the demo uses its own database; a fixed lead behind the shipped estimate guard
    cfg.write_text('[daemon]\nstate_dir = "/nonexistent"\n[policy]\ndefault = "fixed-lead"\n')
    res = CliRunner().invoke(
        main,
        ["demo", "--config", str(cfg), "--trace", TRACE,
         "--profile", PROFILE, "--nodes", "70", "--chains", str(CHAINS),
         "--segments", str(SEGMENTS), "--time-limit", "1:00:00", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr


def check_demo(out: dict[str, Any], chains: int, segments: int) -> None:
    """What must hold for any demo: chains done, exactly once, reactive never overlaps."""
    for side in ("policy", "reactive"):
        run = out["runs"][side]
        assert run["finished"]
        assert run["max_jobs_per_segment"] == 1  # no segment submitted twice
        assert run["max_slurm_reads_per_cycle"] <= 2
        assert len(run["chains"]) == chains
        for c in run["chains"].values():
            assert c["state"] == "COMPLETED", c["reason"]
            assert c["segments_run"] == c["segments"]  # --segments N: N jobs
        # one row per transition the run had: segments run - 1 per chain
        has = [r for r in out["transitions"] if r[side] is not None]
        assert len(has) == sum(c["segments_run"] - 1 for c in run["chains"].values())
        assert out["mean"][side]["transitions"] == len(has)
        assert out["mean"][side]["cost"] == pytest.approx(
            sum(r[side]["cost"] for r in has) / len(has)
        )
    reactive = [r["reactive"] for r in out["transitions"] if r["reactive"] is not None]
    assert len(reactive) == chains * (segments - 1)  # reactive never cuts a segment short
    assert all(r["gap"] >= 0 and r["overlap"] == 0 for r in reactive)
    assert all(not r["presubmitted"] for r in reactive)
    keys = [(r["chain"], r["transition"]) for r in out["transitions"]]
    assert len(keys) == len(set(keys))
    for r in out["transitions"]:
        for v in (r["policy"], r["reactive"]):
            if v is not None:
                limit = out["setup"]["time_limit_s"]
                want = DEFAULT_COST.of(v["interruption"], v["overlap"], limit)
                assert v["cost"] == pytest.approx(want)
    for c in out["chains"]:  # the per-chain table: both runs, every chain
        for side in ("policy", "reactive"):
            v = c[side]
            assert v["segments"] == out["runs"][side]["chains"][c["chain"]]["segments_run"]
            assert v["completion_s"] > 0 and v["beyond_gpu_h"] >= 0


def test_cli_demo_on_busy_replay(cli_run: tuple[dict[str, Any], str]) -> None:
    out, progress = cli_run
    check_demo(out, CHAINS, SEGMENTS)
    setup = out["setup"]
    assert setup["nodes"] == 70 and setup["policy"] == "fixed-lead"
    assert out["runs"]["policy"]["stated_intervals"] == {}  # a fixed lead states none
    # the chosen start leaves the queue empty, and a queue builds before the transitions
    assert setup["queue_at_start"]["pending"] <= 5
    assert max(r["reactive"]["interruption"] for r in out["transitions"]) > 3600
    # not a terminal: plain progress lines for both runs, on stderr (stdout is the JSON)
    assert "fixed-lead (lead 15m), guard estimate 1/6 of the limit: simulated" in progress
    assert "reactive: simulated" in progress and "COMPLETED" in progress


def test_rendered_table_has_a_row_per_transition(cli_run: tuple[dict[str, Any], str]) -> None:
    out, _ = cli_run
    buf = io.StringIO()
    render(out, Console(file=buf, width=140))
    text = buf.getvalue()
    rows = [line for line in text.splitlines() if "demo-" in line and "->" in line]
    assert len(rows) == len(out["transitions"])
    assert "mean" in text and "mean J per transition" in text


def idle_spec() -> DemoSpec:
    profile = with_settings(load_profile(PROFILE), 70)
    jobs = load_jobs(TRACE, None, profile)
    start = jobs[0].submit + 3790 * 3600  # after the busy days: nothing pending
    return DemoSpec(profile=profile, jobs=jobs, chains=1, segments=2, time_limit_s=3600,
                    start=start, lead_s=900, policy="fixed-lead")  # fmt: skip


def test_idle_replay_presubmits_hands_off_and_says_so() -> None:
    """Without the estimate guard, on an idle cluster fixed-lead's successor starts early:
    overlap and a handoff; the chain still runs its 2 segments (--segments counts jobs),
    as reactive submission does."""
    spec = idle_spec()
    unguarded = Config(policy=PolicySection(guard="none"))
    out = run_demo(spec, unguarded, Console(file=io.StringIO()))
    check_demo(out, 1, 2)
    first = out["transitions"][0]
    assert first["policy"]["presubmitted"] and first["policy"]["overlap"] >= 840
    assert first["reactive"]["interruption"] <= 60  # at most one poll late
    for side in ("policy", "reactive"):
        assert out["runs"][side]["chains"]["demo-1"]["segments_run"] == 2
    assert len(out["transitions"]) == 1 and out["transitions"][0]["reactive"] is not None
    assert out["mean"]["policy"]["cost"] > out["mean"]["reactive"]["cost"]  # shown as is


def test_idle_replay_with_the_shipped_guard_waits_for_the_end() -> None:
    """The same idle replay with the default configuration: the guard asks Slurm, which
    would start the successor at once, so it goes in at the end, as reactive's does."""
    out = run_demo(idle_spec(), Config(), Console(file=io.StringIO()))
    check_demo(out, 1, 2)
    first = out["transitions"][0]
    assert not first["policy"]["presubmitted"] and first["policy"]["overlap"] == 0
    assert first["policy"]["interruption"] <= 60


def test_replay_accounting_is_sacct_window() -> None:
    """SimSlurmClient.accounting, which the demo polls, chooses its window before it views
    a job: the jobs of sacct -S -E (submitted by the end, not finished before the start),
    each as squeue shows it while it is live."""
    profile = with_settings(load_profile(PROFILE), 70)
    spec = DemoSpec(profile=profile, jobs=load_jobs(TRACE, None, profile))
    sim = replay_to(spec, spec.jobs[0].submit + 3700 * 3600)
    client = SimSlurmClient(sim)
    live = client.queue().by_id()

    def window(start: int, end: int) -> list[str]:
        return [
            v.job_id
            for v in sim.all_jobs()
            if v.state is not None
            and v.spec.submit <= end
            and not (v.state.is_finished and v.end is not None and v.end < start)
        ]

    for start, end in ((0, sim.now), (sim.now - 86400, sim.now), (sim.now - 3600, sim.now - 1800)):
        got = client.accounting(start, end)
        assert [j.job_id for j in got] == window(start, end)
        assert all(j == live[j.job_id] for j in got if j.job_id in live)
    assert live and len(client.accounting(0)) > len(live)  # finished jobs counted too


def test_demo_needs_a_trace_and_the_daemon_has_no_demo_options() -> None:
    res = CliRunner().invoke(main, ["demo", "--chains", "2"])
    assert res.exit_code == 2
    assert "Missing option '--trace'" in res.output
    res = CliRunner().invoke(main, ["daemon", "--demo-chains", "2"])
    assert res.exit_code == 2
    assert "No such option '--demo-chains'" in res.output


def test_cli_demo_with_a_trained_policy(tmp_path: Path) -> None:
    """The daemon runs the committed ls6 xgb model on the simulated cluster, unchanged."""

    def config(name: str, models: Path) -> Path:
        # the shipped 24 h guard margin holds back every pre-submission of these 1-hour
        # segments; 8 h lets some through, whose stated intervals are checked below
        path = tmp_path / name
        path.write_text(f'[daemon]\nstate_dir = "/x"\n[policy]\nmodels_dir = "{models}"\n'
                        "guard_margin_s = 28800\n")  # fmt: skip
        return path

    cfg = config("mirage.toml", REPO / "models")
    args = ["demo", "--config", str(cfg), "--trace", TRACE,
            "--profile", PROFILE, "--nodes", "70", "--chains", str(CHAINS),
            "--segments", str(SEGMENTS), "--time-limit", "1:00:00"]  # fmt: skip
    res = CliRunner().invoke(main, [*args, "--policy", "xgb", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    check_demo(out, CHAINS, SEGMENTS)
    assert out["setup"]["policy"] == "xgb" and out["runs"]["policy"]["revoked"] >= 0
    pre = [r for r in out["transitions"] if r["policy"] and r["policy"]["presubmitted"]]
    assert pre
    # every pre-submission carried xgb's stated interval, checked against its start
    stated = out["runs"]["policy"]["stated_intervals"]
    assert set(stated) <= {"inside", "early", "late"} and sum(stated.values()) == len(pre)
    empty = config("empty.toml", tmp_path)
    at = args.index("--config") + 1
    missing = CliRunner().invoke(main, [*args[:at], str(empty), *args[at + 1 :], "--policy", "dqn"])
    assert missing.exit_code == 1 and "metadata.json" in missing.output  # a clear error


def test_the_demos_daemon_configuration_keeps_every_other_policy_key() -> None:
    """The trial: the demo rebuilt [policy] field by field and dropped
    guard_lookahead_margin_s, coverage_window, coverage_min and partitions. Every key the
    demo does not set itself is now the user's, through the daemon's own loader."""
    import dataclasses

    demo_sets = {"default", "lead_s", "fallback", "models_dir", "cluster"}
    changed = {
        "guard": "estimate+lookahead", "guard_margin_s": 7200, "guard_margin_fraction": 0.25,
        "guard_lookahead_margin_s": 1800,
        "qbets_quantile": 0.8, "average_factor": 1.5, "lookahead_margin_s": 600,
        "lookahead_runtime": "mean", "lookahead_draws": 2, "coverage_window": 7,
        "coverage_min": 0.3, "partitions": {"gpu-a100": "reactive"},
        "max_presubmitted_per_user": 3, "presubmit_only_limit_bound": False,
    }  # fmt: skip
    keys = {f.name for f in dataclasses.fields(PolicySection)}
    assert keys == demo_sets | set(changed), "a new [policy] key: add it here"
    base = Config(policy=PolicySection(**changed))  # type: ignore[arg-type]
    spec = dataclasses.replace(idle_spec(), models_dir=str(REPO / "models"), model_cluster="ls6")
    for policy in ("fixed-lead", "qbets"):
        got = daemon_config(base, spec, policy).policy
        for key, value in changed.items():
            assert getattr(got, key) == value, key
    assert daemon_config(base, spec, "xgb").policy.default == "xgb"
    shipped = daemon_config(base, spec, SHIPPED_POLICY).policy  # what ships, not the user's
    assert (shipped.default, shipped.guard) == (PolicySection().default, PolicySection().guard)
    assert shipped.max_presubmitted_per_user == 3  # the admin's fairness cap, not a constant
    assert shipped.presubmit_only_limit_bound is False  # the admin's rule too
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        daemon_config(base, spec, "nope")


def test_demo_policy_names_what_the_daemon_accepts(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["demo", "--trace", TRACE, "--profile", PROFILE,
                                    "--nodes", "70", "--policy", "nope"])  # fmt: skip
    assert res.exit_code == 2 and "unknown policy 'nope'; valid: reactive" in res.output
