"""``mirage plan``: the command on a replayed trace, the daemon's plan op and socket."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.daemon.api import Api, ApiServer
from mirage.daemon.config import Config, DaemonSection
from mirage.daemon.core import Daemon
from mirage.sim.scenario import toy_profile
from mirage.slurm.types import SubmitRequest
from tests.unit.daemon_support import make_config, make_sim, make_store

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
    assert bad == {"ok": False, "error": "cannot read the size '4tpu': use e.g. 4gpu or 2node"}


@pytest.fixture
def planning_socket(tmp_path: Path) -> Iterator[Path]:
    sockdir = Path(tempfile.mkdtemp(prefix="mirage-plan-"))
    sockdir.chmod(0o755)
    daemon = busy_daemon(tmp_path)
    config = Config(daemon=DaemonSection(allow_root_chains=True))
    api = Api(daemon.store, config=config, planner=daemon.planner.answer)
    srv = ApiServer(sockdir / "mirage.sock", api)
    srv.start()
    yield sockdir / "mirage.sock"
    srv.stop()
    sockdir.rmdir()


def test_plan_asks_the_daemon_when_one_runs(tmp_path: Path, planning_socket: Path) -> None:
    cfg = tmp_path / "mirage.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n[socket]\npath = "{planning_socket}"\n')
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
