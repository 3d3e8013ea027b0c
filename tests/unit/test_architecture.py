"""The layer and cycle contracts (``.importlinter``, run by ``make lint``) hold, and a new
import against them fails with the contract's name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter not installed")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT), "--config", str(REPO / ".importlinter"), "--no-cache"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_contracts_hold() -> None:
    res = lint(REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 kept, 0 broken" in res.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # the Slurm layer reaching up into the simulator
        ("slurm/types.py", "import mirage.sim.engine", "Mirage's layers"),
        # the simulator's engine imported by the limits it applies: a cycle
        ("sim/limits.py", "import mirage.sim.engine", "No import cycles"),
        # the daemon and the synthetic traces are independent of each other
        ("daemon/store.py", "import mirage.synth.model", "Mirage's layers"),
        # the judge must not know how the models it judges are built
        ("evaluate/stats.py", "import mirage.learn.train", "Mirage's layers"),
        # a step of the daemon's cycle reaching back to the daemon that orchestrates it
        ("daemon/ledger.py", "import mirage.daemon.core", "No import cycles"),
    ],
)
def test_a_new_import_against_a_contract_fails_with_its_name(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    shutil.copytree(REPO / "mirage", tmp_path / "mirage",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    target = tmp_path / "mirage" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    res = lint(tmp_path)
    assert res.returncode != 0
    assert f"{contract}" in res.stdout and "BROKEN" in res.stdout, res.stdout
