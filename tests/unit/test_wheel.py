"""The wheel, installed without extras into a clean virtual environment, runs the demo
with the shipped XGBoost model and `mirage status` (issue: a lean base install).

Slow (a minute or two: pip installs the base dependencies, from the local wheel cache or
the package index); it is what a login node's admin gets from `pip install`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTRA_ONLY = ("torch", "stable_baselines3", "gymnasium", "matplotlib", "sdv")


def run(argv: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"  # a copy: setuptools writes build/ and *.egg-info beside the sources
    shutil.copytree(REPO / "mirage", src / "mirage", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src)
    built = run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "-w", str(root / "dist")],
        cwd=root,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    # no setuptools warnings (package data outside packages, ...) on a build
    assert "Warning" not in built.stdout + built.stderr, built.stdout + built.stderr
    (wheel,) = (root / "dist").glob("mirage_provisioner-*.whl")
    made = run([sys.executable, "-m", "venv", str(root / "venv")], cwd=root)
    assert made.returncode == 0, made.stderr
    pip = run([str(root / "venv" / "bin" / "pip"), "install", "--quiet", str(wheel)], cwd=root)
    if pip.returncode != 0 and "No matching distribution" in pip.stderr:
        pytest.skip(f"the package index is out of reach: {pip.stderr.strip()[-300:]}")
    assert pip.returncode == 0, pip.stderr
    return root


def test_base_install_has_no_extra(base_venv: Path) -> None:
    probe = f"import importlib.util as u; print([m for m in {EXTRA_ONLY!r} if u.find_spec(m)])"
    got = run([str(base_venv / "venv" / "bin" / "python"), "-c", probe], cwd=base_venv)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "[]"


def test_installed_demo_runs_the_shipped_xgboost_model(base_venv: Path) -> None:
    work = base_venv / "work"  # not the checkout: models and trace copied in
    (work / "models" / "ls6").mkdir(parents=True)
    shutil.copytree(REPO / "models" / "ls6" / "xgb", work / "models" / "ls6" / "xgb")
    shutil.copy(REPO / "models" / "ls6" / "profile.toml", work / "models" / "ls6")
    shutil.copy(REPO / "traces" / "ls6-a100-slice.log.gz", work)
    got = run(
        [str(base_venv / "venv" / "bin" / "mirage"), "demo", "--trace", "ls6-a100-slice.log.gz",
         "--profile", "models/ls6/profile.toml", "--nodes", "70", "--chains", "1",
         "--segments", "2", "--policy", "xgb", "--json"],
        cwd=work,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["setup"]["policy"] == "xgb"
    assert out["transitions"] and all(t["policy"] for t in out["transitions"])


def test_installed_status_json(base_venv: Path) -> None:
    cfg = base_venv / "mirage.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{base_venv / "state"}"\n', encoding="utf-8")
    got = run(
        [str(base_venv / "venv" / "bin" / "mirage"), "status", "--config", str(cfg), "--json"],
        cwd=base_venv,
    )
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["chains"] == [] and out["daemon"]["live"] is False
