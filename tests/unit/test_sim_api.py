"""``mirage.sim.replay``: ``mirage simulate`` as a Python call, on the bundled HPC2N slice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.sim import ReplayError, Simulation, replay

REPO = Path(__file__).resolve().parents[2]
HPC2N_SLICE = str(REPO / "traces" / "hpc2n-head300.swf.gz")
#: Wall-clock measures: they differ from one run to the next.
TIMINGS = ("load_s", "wall_s", "jobs_per_s")


def _steady(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in TIMINGS}


def test_replay_returns_what_simulate_json_prints() -> None:
    said: list[str] = []
    got = replay(HPC2N_SLICE, "pitzer", procs_per_node="profile", arrival_scale=2.0,
                 warn=said.append)  # fmt: skip
    res = CliRunner().invoke(main, ["simulate", "--trace", HPC2N_SLICE, "--profile", "pitzer",
                                    "--procs-per-node", "profile", "--arrival-scale", "2",
                                    "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout)
    assert set(got.as_dict()) == set(printed)
    assert _steady(json.loads(json.dumps(got.as_dict()))) == _steady(printed)
    assert got.summary["trace_use"]["used"] == 294 and got.warning is None and not said
    # the simulation itself, for a closer look: every replayed job, started
    assert isinstance(got.simulation, Simulation)
    jobs = got.simulation.all_jobs()
    assert len(jobs) == got.summary["jobs"] == len(got.prepared.jobs)
    assert sum(j.start is not None for j in jobs) == got.summary["started"]


def test_replay_warns_and_refuses_like_the_command() -> None:
    said: list[str] = []
    got = replay(HPC2N_SLICE, "pitzer", warn=said.append)
    assert got.warning == said[0] and "only 284 of the trace's 300 jobs" in said[0]
    with pytest.raises(ReplayError, match="--strict"):
        replay(HPC2N_SLICE, "pitzer", strict=True)
    with pytest.raises(ReplayError, match="not an ISO date") as bad:
        replay(HPC2N_SLICE, "pitzer", before="soon")
    assert bad.value.option == "--before"
    with pytest.raises(ReplayError, match="at least 1") as bad:
        replay(HPC2N_SLICE, "pitzer", procs_per_node=0)
    assert bad.value.option == "--procs-per-node"
    with pytest.raises(ReplayError, match="nosuch"):
        replay(HPC2N_SLICE, "nosuch")
    with pytest.raises(ReplayError, match="cannot read"):
        replay("/nonexistent/trace.swf", "pitzer")
