"""Install size and time: the base install against the base with the ``rl`` extra.

    .venv/bin/python scripts/bench/install_size.py [--torch-pin 2.13.0]

Builds the wheel once (from a copy of the sources), then for each side, in turn and in a
fresh virtual environment: ``pip install WHEEL`` (base) and ``pip install WHEEL[rl]``
with torch pinned (``--torch-pin``: the version whose CPU build pip takes from the local
wheel cache; an unpinned torch from the public index is the multi-GB CUDA build, which is
what the ``rl`` extra's users must avoid with PyTorch's CPU index). Prints wall time and
size on disk of each environment, and the ratio. pip's own cache is shared by both sides
(as on a login node that installs twice): the times are install times, not downloads.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def build_wheel(into: Path) -> Path:
    src = into / "src"
    shutil.copytree(REPO / "mirage", src / "mirage", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src)
    subprocess.run(  # noqa: S603 - this interpreter, fixed argv
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(into / "dist")],
        check=True,
    )  # fmt: skip
    (wheel,) = (into / "dist").glob("mirage_provisioner-*.whl")
    return wheel


def install(venv: Path, requirement: list[str]) -> float:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # noqa: S603
    t0 = time.perf_counter()
    subprocess.run(  # noqa: S603 - the new environment's pip, fixed argv
        [str(venv / "bin" / "pip"), "install", "--quiet", *requirement], check=True
    )
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--torch-pin", default="2.13.0", help="torch version for the rl side")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mirage-install-") as tmp:
        root = Path(tmp)
        wheel = build_wheel(root)
        sides = {
            "base": [str(wheel)],
            "base + [rl]": [f"{wheel}[rl]", f"torch=={args.torch_pin}"],
        }
        rows = {}
        for label, req in sides.items():
            venv = root / label.replace(" ", "").replace("+", "-").strip("[]")
            secs = install(venv, req)
            rows[label] = (secs, du(venv))
            print(f"{label:<12} {secs:7.1f} s  {rows[label][1] / 2**20:8.0f} MiB", flush=True)
    (bt, bs), (rt, rs) = rows["base"], rows["base + [rl]"]
    print(
        f"\n[rl] against base: install time x{rt / bt:.2f}, size x{rs / bs:.2f} "
        f"({(rs - bs) / 2**20:.0f} MiB more: torch, stable-baselines3, gymnasium)"
    )


if __name__ == "__main__":
    main()
