"""The base install (no extras) runs what it promises, and asking for what needs a missing
extra gives one line naming it (mirage/extras.py).

The base install is simulated in a subprocess whose imports of every extra's modules fail
(an import hook), as they would where the extra is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirage.extras import EXTRAS, MissingExtra, missing, require

REPO = Path(__file__).resolve().parents[2]
SLICE = REPO / "traces" / "ls6-a100-slice.log.gz"

# Runs `mirage ARGS` with every extra's modules made unimportable; prints, on the last
# line, which of them anything tried to import.
BASE_INSTALL = r"""
import importlib.abc, json, sys
blocked = set(sys.argv[1].split(","))
tried = set()
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in blocked:
            tried.add(top)
            raise ImportError(f"No module named {name!r} (base install)")
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["mirage", *sys.argv[2:]]
from mirage.cli import main
try:
    main(standalone_mode=True)
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("\nTRIED " + json.dumps(sorted(tried)))
sys.exit(code)
"""

ALL_EXTRA_MODULES = sorted({m for mods in EXTRAS.values() for m in mods} | {"sdv"})


def base_install(*args: str, cwd: Path = REPO) -> tuple[int, str, list[str]]:
    """(exit code, output, extra modules something tried to import) of `mirage ARGS`."""
    proc = subprocess.run(
        [sys.executable, "-c", BASE_INSTALL, ",".join(ALL_EXTRA_MODULES), *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("TRIED ")]
    return proc.returncode, out, json.loads(last[-1][6:]) if last else []


def test_require_names_the_extra_and_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "fake", ("json", "no_such_module_for_mirage"))
    assert missing("fake") == "no_such_module_for_mirage"
    with pytest.raises(MissingExtra) as err:
        require("fake", "--frobnicate")
    assert str(err.value) == (
        "--frobnicate needs Mirage's 'fake' extra (no_such_module_for_mirage is not "
        "installed): pip install 'mirage-provisioner[fake]'"
    )
    monkeypatch.setitem(EXTRAS, "fake", ("json",))
    assert missing("fake") is None
    require("fake", "--frobnicate")  # installed: no error


DEMO = ("demo", "--trace", str(SLICE), "--profile",
        str(REPO / "models" / "ls6" / "profile.toml"), "--nodes", "70", "--chains", "1",
        "--segments", "2", "--time-limit", "2:00:00")  # fmt: skip


def test_base_install_runs_the_demo_with_the_shipped_xgboost_model() -> None:
    code, out, tried = base_install(*DEMO, "--policy", "xgb")
    assert code == 0, out
    assert "Traceback" not in out
    assert "mean J per transition: xgb" in out
    # the bundled slice's one malformed row is counted in the summary, not warned about
    assert "(1 malformed row skipped)" in out and "WARNING" not in out, out
    # nothing on this path even tried an extra's module (torch, matplotlib, ...)
    assert not set(tried) & {"torch", "stable_baselines3", "gymnasium", "matplotlib"}, tried


def test_base_install_asked_for_an_agent_names_the_rl_extra() -> None:
    code, out, _ = base_install(*DEMO, "--policy", "dqn")
    assert code == 2, out  # refused with the option, before any replay
    assert "Traceback" not in out
    assert (
        "Invalid value for --policy: 'dqn' needs Mirage's 'rl' extra (torch is not installed): "
        "pip install 'mirage-provisioner[rl]'" in out
    ), out


def test_base_install_config_with_an_agent_default_names_the_rl_extra(tmp_path: Path) -> None:
    cfg = tmp_path / "mirage.toml"
    cfg.write_text(
        '[policy]\ndefault = "dqn"\nmodels_dir = "models"\ncluster = "ls6"\n', encoding="utf-8"
    )
    code, out, _ = base_install("status", "--config", str(cfg), "--json")
    assert code != 0, out
    assert "Traceback" not in out
    assert "[policy]: 'dqn' needs Mirage's 'rl' extra (torch is not installed)" in out, out


def test_base_install_evaluates_without_plots_and_says_so(tmp_path: Path) -> None:
    code, out, _ = base_install(
        "evaluate", "--cluster", "ls6", "--trace", str(SLICE), "--max-samples", "2",
        "--boot", "50", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    assert code == 0, out
    assert "PNG plots skipped: plotting needs Mirage's 'plots' extra" in out
    (report,) = (tmp_path / "out").glob("eval-ls6-load*.json")
    assert json.loads(report.read_text())["loads"]["1"]["plots"] == []
    assert not list((tmp_path / "out").glob("*.png"))
