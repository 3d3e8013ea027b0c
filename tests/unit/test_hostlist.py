"""Slurm hostlist expressions, and captured profiles that name their nodes."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirage.profile.capture import capture_profile
from mirage.profile.schema import ClusterProfile, ProfileError, profile_from_dict, profile_to_toml
from mirage.sim.engine import Simulation
from mirage.sim.workload import JobSpec
from mirage.slurm.hostlist import HostlistError, compress, expand
from mirage.slurm.parse import parse_scontrol_oneliner
from tests.unit.test_profile import ShowOnlyClient

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu[1-4]", ["gpu1", "gpu2", "gpu3", "gpu4"]),
        ("gpu[1-2],cpu[01-02],login1", ["gpu1", "gpu2", "cpu01", "cpu02", "login1"]),
        ("c[1,3,5-6]", ["c1", "c3", "c5", "c6"]),
        ("n[8-10]x", ["n8x", "n9x", "n10x"]),
        ("solo", ["solo"]),
    ],
)
def test_expand_reads_slurms_syntax(text: str, names: list[str]) -> None:
    assert expand(text) == names
    assert expand(compress(names)) == names


@pytest.mark.parametrize("bad", ["gpu[1-", "gpu1]", "gpu[a-b]", "gpu[4-1]"])
def test_malformed_hostlists_are_named(bad: str) -> None:
    with pytest.raises(HostlistError, match="gpu"):
        expand(bad)


@given(st.lists(st.sampled_from(["gpu", "cpu", "n0", "login"]).flatmap(
    lambda p: st.integers(0, 120).map(lambda k: f"{p}{k}")), unique=True, max_size=30))  # fmt: skip
def test_compress_round_trips(names: list[str]) -> None:
    assert expand(compress(names)) == names


def _captured_testbed() -> ClusterProfile:
    parts = parse_scontrol_oneliner((DATA / "scontrol-show-partition.txt").read_text())
    nodes = parse_scontrol_oneliner((DATA / "scontrol-show-node.txt").read_text())
    client = ShowOnlyClient({"config": [{}], "partition": parts, "node": nodes})
    return capture_profile(client, "testbed")


def test_a_captured_profile_names_its_nodes_and_the_simulator_shares_them() -> None:
    prof = _captured_testbed()
    by_name = {p.name: p for p in prof.partitions}
    assert by_name["gpu"].node_list == "gpu[1-4]"
    assert by_name["debug"].node_list == "gpu1"
    assert profile_from_dict(tomllib.loads(profile_to_toml(prof))) == prof
    sim = Simulation(prof)
    assert sim.total_nodes == 4  # debug's gpu1 is gpu's gpu1, not a fifth node
    # a whole-node job on debug holds gpu1 away from the gpu partition too
    sim.add_job(JobSpec(submit=0, run=600, time_limit=900, nodes=1, partition="debug",
                        gpus=4, cpus=16))  # fmt: skip
    big = sim.add_job(JobSpec(submit=1, run=60, time_limit=600, nodes=4, partition="gpu",
                              gpus=16, cpus=64))  # fmt: skip
    sim.run_until(100)
    assert sim.view(big).start is None
    sim.run()
    assert sim.view(big).start == 600


def test_a_node_list_that_disagrees_with_nodes_is_refused() -> None:
    prof = _captured_testbed()
    text = profile_to_toml(prof).replace('node_list = "gpu[1-4]"', 'node_list = "gpu[1-3]"')
    with pytest.raises(ProfileError, match="names 3 nodes, nodes = 4"):
        profile_from_dict(tomllib.loads(text))
    with pytest.raises(ProfileError, match="node_list"):
        profile_from_dict(tomllib.loads(text.replace('"gpu[1-3]"', '"gpu[1-"')))
