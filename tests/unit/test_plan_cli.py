"""``mirage plan``: the command on a replayed trace, the daemon's plan op and socket."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from mirage.cli import main
from mirage.daemon.api import Api, ApiServer
from mirage.daemon.config import Config, DaemonSection, PlanSection
from mirage.daemon.core import Daemon
from mirage.daemon.planning import Planner
from mirage.daemon.status import list_chains
from mirage.daemon.store import Chain, Event
from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.sim.scenario import toy_profile
from mirage.slurm.types import SubmitRequest
from tests.unit.daemon_support import (
    chain_state,
    make_chain,
    make_config,
    make_sim,
    make_store,
    run_cycles,
)

H = 3600
SLICE = ["--backend", "sim", "--trace", "traces/ls6-a100-slice.log.gz",
         "--profile", "models/ls6/profile.toml", "--nodes", "60"]  # fmt: skip
REQUEST = {"work": "16h@4gpu", "limits": ["4h", "8h"], "sizes": [4], "draws": 0}


def busy_daemon(tmp_path: Path) -> Daemon:
    """A daemon that has polled a 4-node cluster with every node busy for 6 hours."""
    client = make_sim(4)
    for _ in range(5):
        client.submit(SubmitRequest(time_limit=6 * H, nodes=1, gres="gpu:4"))
    client.advance_to(60)
    daemon = Daemon(make_store(tmp_path), client, config=make_config(), profile=toy_profile(4))
    daemon.cycle(60)
    return daemon


def test_plan_on_a_replayed_trace_prints_the_ranked_table() -> None:
    args = [*SLICE, "--work", "96h@4gpu", "--limit", "6h", "--limit", "48h", "--size", "6"]
    result = CliRunner().invoke(main, ["plan", *args, "--draws", "0"])
    assert result.exit_code == 0, result.output
    assert "recommended: gpu-a100, 6 gpu (2x3), --time=2-00:00:00: 2 segment(s)" in result.output
    assert "habitual (its own size" in result.output


CERIT = Path(__file__).resolve().parents[3] / "shared/traces/cerit_wagap_2013/wagap-2013.swf.gz"


@pytest.mark.skipif(not CERIT.exists(), reason="needs ../shared/traces (CERIT's log)")
def test_cpu_plan_on_cerit_as_the_docs_run_it() -> None:
    """docs/users/plan.md's CPU example: CERIT's busiest hour, 32 CPUs' work."""
    args = ["--backend", "sim", "--trace", str(CERIT), "--profile", "models/cerit/profile.toml",
            "--work", "200h@32cpu", "--top", "5"]  # fmt: skip
    result = CliRunner().invoke(main, ["plan", *args])
    assert result.exit_code == 0, result.output
    assert "recommended: default, 64 cpu (1x64), --time=7-00:00:00: 1 segment(s)" in result.output
    assert "32 cpu (1x32)" in result.output and "cpu-h" in result.output


def test_plan_json_has_the_ranking_and_the_habitual_shape() -> None:
    args = [*SLICE, "--work", "96h@4gpu", "--limit", "12h", "--size", "3", "--size", "6"]
    result = CliRunner().invoke(main, ["plan", *args, "--draws", "2", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output[result.output.index("{") :])
    ranked = [c["completion"] for c in plan["candidates"]]
    assert ranked == sorted(ranked) and len(ranked) == 2
    assert plan["recommended"] == plan["candidates"][0]
    assert plan["habitual"]["time_limit_s"] == 48 * H
    lo, hi = plan["recommended"]["interval"]
    assert lo <= plan["recommended"]["completion"] <= hi


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--work", "96x@4gpu"], "cannot read the duration"),
        (["--work", "96h@4gpu", "--point", "2node=1h"], "in nodes"),
        (["--work", "96h@4gpu", "--limit", "soon"], "cannot read the duration"),
        ([], "--work TIME@SIZE is needed"),
    ],
)
def test_bad_options_are_one_line_before_any_queue_is_read(args: list[str], says: str) -> None:
    result = CliRunner().invoke(main, ["plan", "--backend", "sim", *args])
    assert result.exit_code == 2
    assert says in result.output
    assert "Traceback" not in result.output


def test_daemon_plans_on_its_last_poll(tmp_path: Path) -> None:
    client = make_sim(4)
    daemon = Daemon(make_store(tmp_path), client, config=make_config(), profile=toy_profile(4))
    assert "not polled" in daemon.planner.answer(REQUEST, "alice")["error"]
    daemon = busy_daemon(tmp_path)
    answer = daemon.planner.answer(REQUEST, "alice")
    assert answer["ok"], answer
    best = answer["plan"]["recommended"]
    # one node frees after 6 h (the fifth job then takes it): the request waits for the
    # other nodes' end at 6 h, and 8-hour segments need 2 waits instead of 4
    assert (best["time_limit_s"], best["segments"]) == (8 * H, 2)
    assert best["first_wait_s"] == 6 * H - 60
    bad = daemon.planner.answer({**REQUEST, "work": "16h@4tpu"}, "alice")
    assert bad == {
        "ok": False,
        "error": "cannot read the size '4tpu': use e.g. 4gpu, 32cpu or 2node",
    }
    slow = daemon.planner.answer({**REQUEST, "method": "simulate"}, "alice")
    assert "--backend cli" in slow["error"]
    assert "at most 8" in daemon.planner.answer({**REQUEST, "draws": 64}, "alice")["error"]


@pytest.fixture
def planning_daemon(tmp_path: Path) -> Iterator[tuple[Path, Daemon]]:
    """A busy daemon's socket (its configuration file, the daemon)."""
    sockdir = Path(tempfile.mkdtemp(prefix="mirage-plan-"))
    sockdir.chmod(0o755)
    daemon = busy_daemon(tmp_path)
    config = Config(daemon=DaemonSection(allow_root_chains=True))
    api = Api(daemon.store, config=config, planner=daemon.planner.answer)
    srv = ApiServer(sockdir / "mirage.sock", api)
    srv.start()
    cfg = tmp_path / "mirage.toml"
    sock = sockdir / "mirage.sock"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n[socket]\npath = "{sock}"\n')
    yield cfg, daemon
    srv.stop()
    sockdir.rmdir()


def test_plan_asks_the_daemon_when_one_runs(planning_daemon: tuple[Path, Daemon]) -> None:
    cfg, _ = planning_daemon
    args = ["--work", "16h@4gpu", "--limit", "4h", "--limit", "8h", "--size", "4", "--json"]
    result = CliRunner().invoke(main, ["plan", "--config", str(cfg), *args])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["recommended"]["time_limit_s"] == 8 * H
    assert plan["now"] == 60  # the daemon's poll, not this command's clock


def test_a_daemon_without_a_planner_says_so(tmp_path: Path) -> None:
    api = Api(make_store(tmp_path))
    assert api.handle({"op": "plan", **REQUEST}, 1000, 1000) == {
        "ok": False,
        "error": "this daemon does not plan chains",
    }


PLAN_ARGS = ["--plan", "--work", "16h@4gpu", "--limit", "4h", "--limit", "8h", "--size", "4",
             "--draws", "0", "--overhead", "0"]  # fmt: skip


def test_chain_submit_plan_registers_the_recommended_shape(
    tmp_path: Path, planning_daemon: tuple[Path, Daemon]
) -> None:
    cfg, daemon = planning_daemon
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\npython train.py --resume\n")
    args = ["chain", "submit", str(script), *PLAN_ARGS, "--config", str(cfg)]
    result = CliRunner().invoke(main, [*args, "--", "--time=1:00:00", "--gres=gpu:1"])
    assert result.exit_code == 0, result.output
    assert "plan: gpu, 1 node(s) x 4 GPUs, --time=0-08:00:00, 2 segment(s)" in result.output
    (row,) = list_chains(daemon.store, None)
    # the plan's options win over the sbatch options given; its count is --segments'
    assert (row["time_limit_s"], row["nodes"], row["gpus_per_node"]) == (8 * H, 1, 4)
    assert (row["partition"], row["segments"]) == ("gpu", 2)
    assert row["plan"]["work"] == "16h@4gpu"
    assert row["plan"]["completion"] == 60 + 6 * H - 60 + 16 * H + (6 * H - 60)
    show = CliRunner().invoke(main, ["chain", "show", row["id"], "--config", str(cfg)])
    assert "shape: gpu, 1 node(s) x 4 GPUs, 8h00m" in show.output
    assert "plan: whole chain done" in show.output


def test_plan_options_need_plan() -> None:
    result = CliRunner().invoke(main, ["chain", "submit", __file__, "--work", "16h@4gpu"])
    assert result.exit_code == 2
    assert "--work and the other plan options need --plan" in result.output


def test_replan_gives_the_next_segment_the_shape_planned_then(tmp_path: Path) -> None:
    client = make_sim(4)
    config = dataclasses.replace(make_config(), plan=PlanSection(replan=True))
    daemon = Daemon(make_store(tmp_path), client, config=config, profile=toy_profile(4))
    chain = make_chain(daemon.store, limit=H, segments=5)
    request = {"work": "16h@4gpu", "limits": ["8h"], "sizes": [4], "draws": 0}
    with daemon.store.sessions() as s:
        c = s.get(Chain, chain.id)
        assert c is not None
        c.plan = {"request": request, "overhead_s": 0, "for_segment": 0, "replans": 0}
        s.commit()
    run_cycles([daemon], client, 0, 300)  # segment 1 (1 h) runs: 2 h or less left
    c = chain_state(daemon.store, chain.id)
    # 15 h left after the running hour: two 8-hour segments after it
    assert (c.time_limit_s, c.segments_target, c.gres) == (8 * H, 3, "gpu:4")
    assert c.plan is not None and (c.plan["for_segment"], c.plan["replans"]) == (1, 1)
    with daemon.store.sessions() as s:
        kinds = [e.kind for e in s.scalars(select(Event).where(Event.chain_id == chain.id))]
    assert kinds.count("chain.replan") == 1  # once per segment


def test_replan_keeps_the_shape_when_the_gain_is_under_the_margin(tmp_path: Path) -> None:
    """[plan] replan_min_gain_s: the 8-hour shape finishes sooner than the chain's 1-hour
    one (10 minutes lost at each of fewer restarts), so it is taken without a margin; not by
    100 h: with that margin the shape stays, no event, and the record takes the present
    shape's fresh prediction."""
    request = {"work": "16h@4gpu", "limits": ["1h", "8h"], "sizes": [4], "draws": 0,
               "overhead": "10m"}  # fmt: skip

    def replanned(folder: Path, margin: int) -> tuple[Daemon, Chain]:
        client = make_sim(4)
        config = dataclasses.replace(make_config(), plan=PlanSection(True, margin))
        daemon = Daemon(make_store(folder), client, config=config, profile=toy_profile(4))
        chain = make_chain(daemon.store, limit=H, segments=5)
        with daemon.store.sessions() as s:
            c = s.get(Chain, chain.id)
            assert c is not None
            c.plan = {"request": request, "overhead_s": 600, "for_segment": 0, "replans": 0,
                      "completion": 0}  # fmt: skip
            s.commit()
        run_cycles([daemon], client, 0, 300)
        return daemon, chain_state(daemon.store, chain.id)

    (tmp_path / "any").mkdir()
    _, moved = replanned(tmp_path / "any", 0)
    assert moved.time_limit_s == 8 * H  # without a margin the 8-hour shape is taken
    daemon, c = replanned(tmp_path, 100 * H)
    assert (c.time_limit_s, c.segments_target) == (H, 5)
    assert c.plan is not None and (c.plan["for_segment"], c.plan["replans"]) == (1, 0)
    assert c.plan["completion"] > 15 * H  # the 1-hour shape's, planned on the poll
    with daemon.store.sessions() as s:
        kinds = [e.kind for e in s.scalars(select(Event).where(Event.chain_id == c.id))]
    assert "chain.replan" not in kinds


def test_without_replan_the_shape_stays(tmp_path: Path) -> None:
    client = make_sim(4)
    daemon = Daemon(make_store(tmp_path), client, config=make_config(), profile=toy_profile(4))
    chain = make_chain(daemon.store, limit=H, segments=5)
    with daemon.store.sessions() as s:
        c = s.get(Chain, chain.id)
        assert c is not None
        c.plan = {"request": {"work": "16h@4gpu"}, "overhead_s": 0, "for_segment": 0}
        s.commit()
    run_cycles([daemon], client, 0, 300)
    c = chain_state(daemon.store, chain.id)
    assert (c.time_limit_s, c.segments_target) == (H, 5)


class StatedWaits(Policy):
    """A forecaster stand-in: every successor waits 1 h, 90% interval 0 .. 3 h."""

    name = "stated"

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        return [Decision(False, ctx.now + H, (ctx.now, ctx.now + 3 * H)) for _ in pending]


class Broken(StatedWaits):
    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        raise KeyError("gpu")


def test_the_daemon_s_forecaster_gives_later_waits_and_the_interval(tmp_path: Path) -> None:
    daemon = busy_daemon(tmp_path)
    planner = Planner(daemon.client, lambda: toy_profile(4), StatedWaits)
    planner.observe(60, daemon.client.queue(), [])
    best = planner.answer(REQUEST, "alice")["plan"]["recommended"]
    assert (best["source"], best["later_wait_s"]) == ("forecast", H)
    assert best["first_wait_s"] == 6 * H - 60  # the first wait is still the queue's
    broken = Planner(daemon.client, lambda: toy_profile(4), Broken)
    broken.observe(60, daemon.client.queue(), [])
    answer = broken.answer(REQUEST, "alice")
    assert answer["ok"] and answer["plan"]["recommended"]["source"] == "lookahead"


def test_a_planned_shape_keeps_the_gpu_type_of_the_sbatch_options() -> None:
    from mirage.daemon.plancli import shape_args

    best = {"time_limit_s": 12 * 3600, "partition": "gpu", "nodes": 2, "gpus_per_node": 2}
    args = shape_args(best, ["--gres=gpu:a100:4", "--account=ml"])
    assert args == ["--time=0-12:00:00", "--partition=gpu", "--nodes=2", "--gres=gpu:a100:2"]
    assert shape_args(best)[-1] == "--gres=gpu:2"


def test_a_cpu_shape_is_one_task_per_node_replacing_the_task_options() -> None:
    from mirage.daemon.plancli import planned_args

    best = {"time_limit_s": 6 * H, "partition": "cpu", "nodes": 2, "gpus_per_node": 0,
            "cpus_per_node": 16}  # fmt: skip
    given = ["-n", "4", "-c8", "--account=ml", "--ntasks-per-node=2", "--cpus-per-task", "3"]
    assert planned_args(best, given) == (
        "--account=ml", "--time=0-06:00:00", "--partition=cpu", "--nodes=2",
        "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=16",
    )  # fmt: skip
    gpu = {**best, "gpus_per_node": 2, "cpus_per_node": 0}
    assert planned_args(gpu, given)[: len(given)] == tuple(given)  # a GPU shape keeps them


def test_replan_of_a_cpu_chain_resizes_its_cpus(tmp_path: Path) -> None:
    """A chain of 4-CPU segments on a CPU-only cluster, re-planned with 8 CPUs as the only
    size: the next segment is submitted with 8 CPUs and the chain's task options say so."""
    from mirage.sim import Simulation
    from tests.unit.daemon_support import FaultySim

    profile = toy_profile(2, gpus_per_node=0)
    client = FaultySim(Simulation(profile))
    config = dataclasses.replace(make_config(), plan=PlanSection(replan=True))
    daemon = Daemon(make_store(tmp_path), client, config=config, profile=profile)
    chain = make_chain(daemon.store, limit=H, segments=5)
    request = {"work": "16h@4cpu", "limits": ["8h"], "sizes": [8], "draws": 0}
    shape = {"partition": "gpu", "nodes": 1, "gpus_per_node": 0, "cpus_per_node": 4}
    with daemon.store.sessions() as s:
        c = s.get(Chain, chain.id)
        assert c is not None
        c.gpus_per_node, c.gres, c.sbatch_args = 0, None, ["--cpus-per-task=4"]
        c.plan = {"request": request, "overhead_s": 0, "for_segment": 0, "replans": 0,
                  "shape": shape}  # fmt: skip
        s.commit()
    run_cycles([daemon], client, 0, 300)  # segment 1 (1 h at 4 CPUs) runs
    assert client.sim.specs[0].cpus == 4
    c = chain_state(daemon.store, chain.id)
    # 15 h at 4 CPUs left after the running hour: 7.5 h at 8 CPUs, one 8-hour segment
    assert (c.time_limit_s, c.segments_target) == (8 * H, 2)
    assert c.sbatch_args == ["--ntasks=1", "--ntasks-per-node=1", "--cpus-per-task=8"]
    assert c.plan is not None and c.plan["shape"]["cpus_per_node"] == 8
    run_cycles([daemon], client, 360, 2 * H)
    assert [s.cpus for s in client.sim.specs] == [4, 8]
    with daemon.store.sessions() as s:
        (event,) = s.scalars(select(Event).where(Event.kind == "chain.replan"))
    assert "1 x 4 CPUs" in event.reason and "1 x 8 CPUs" in event.reason
    (row,) = list_chains(daemon.store, None)
    assert row["cpus_per_node"] == 8
