"""The table of experiments/synth-vs-real.sh: the same policies trained on the real trace and on
a synthetic one, evaluated on the real test split (mean J in hours, bootstrap 95% interval),
per load and load level with n >= 30, with the baselines beside them.

    .venv/bin/python experiments/synth-vs-real-table.py OUT SYNTH_NAME
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LEARNED = ("rf", "xgb", "dqn", "pg")
BASELINES = ("reactive", "fixed-lead", "slurm-estimate", "running-average", "qbets")


def cell(row: dict[str, dict[str, float]]) -> str:
    m = row["mean_J_h"]
    return f"{m['value']:.2f} [{m['lo']:.2f}, {m['hi']:.2f}]"


def entry(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    (only,) = data["loads"].values()
    result: dict[str, object] = only
    return result


def main() -> None:
    out, synth = Path(sys.argv[1]), sys.argv[2]
    loads = sorted({p.name.rsplit("-", 1)[1][:-5] for p in out.glob("eval-ls6-*.json")})
    print(f"| load | level (n) | trained on | {' | '.join(LEARNED)} | best baseline |")
    print("|---|---|---|" + "---|" * len(LEARNED) + "---|")
    for load in sorted(loads, key=float):
        real_p, syn_p = out / f"eval-ls6-{load}.json", out / f"eval-{synth}-{load}.json"
        if not (real_p.is_file() and syn_p.is_file()):
            continue
        real, syn = entry(real_p), entry(syn_p)
        levels: dict[str, int] = real["levels"]  # type: ignore[assignment]
        counted = [lv for lv, n in levels.items() if n >= 30] + ["all"]
        for level in counted:
            n = sum(levels.values()) if level == "all" else levels[level]
            table_r: dict[str, dict[str, dict[str, dict[str, float]]]] = real["table"]  # type: ignore[assignment]
            base = min(BASELINES, key=lambda b: table_r[b][level]["mean_J_h"]["value"])
            best = f"{base} {cell(table_r[base][level])}; oracle {cell(table_r['oracle'][level])}"
            for name, res in (("real", real), (synth, syn)):
                table: dict[str, dict[str, dict[str, dict[str, float]]]] = res["table"]  # type: ignore[assignment]
                cells = " | ".join(cell(table[k][level]) for k in LEARNED)
                print(f"| {load} | {level} ({n}) | {name} | {cells} | {best} |")


if __name__ == "__main__":
    main()
