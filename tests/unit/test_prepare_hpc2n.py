"""scripts/prepare_hpc2n.py: HPC2N's held-out inputs (docs/evaluation.md), on the bundled head."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mirage.profile.schema import load_profile
from mirage.trace.readers import load_trace

REPO = Path(__file__).resolve().parents[2]
HEAD = REPO / "traces" / "hpc2n-head300.swf.gz"


def test_nodes_are_cpus_over_two_and_the_base_profile_loads(tmp_path: Path) -> None:
    argv = [sys.executable, str(REPO / "scripts" / "prepare_hpc2n.py"), "--trace", str(HEAD),
            "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    raw = load_trace(str(HEAD)).jobs
    table = load_trace(str(tmp_path / "hpc2n-nodes.parquet")).jobs
    assert len(table) == len(raw) > 0
    assert raw["nodes"].isna().all()  # Seth's log records CPUs only
    # a 1-CPU job asks one node, a 3-CPU job two: ceil(CPUs / 2)
    assert table["nodes"].notna().all()  # (pandas' all() would skip missing values)
    assert (table["nodes"] == (raw["cpus"] + 1) // 2).all()
    assert {1, 2} <= set(table.loc[raw["cpus"].isin([1, 3, 4]), "nodes"])
    profile = load_profile(str(tmp_path / "hpc2n-base.toml"))
    part = profile.partition(None)
    assert (part.nodes, part.cpus_per_node, profile.timezone) == (120, 2, "Europe/Stockholm")
