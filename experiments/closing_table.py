#!/usr/bin/env python3
"""The closing note's table from `mirage evaluate --json` output: per load and level, n,
reactive, oracle, shipped (J, share of the gain, shipped - reactive with its interval),
interruption removed, zero-interruption share, GPU-hours (node-hours) beyond the training.

    .venv/bin/python experiments/closing_table.py LABEL out/eval.json [LABEL FILE ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(label: str, path: str) -> list[str]:
    d = json.loads(Path(path).read_text())
    out = []
    for load, ld in d["loads"].items():
        for level in ("all", "low", "medium", "heavy"):
            s = ld["shipped"].get(level)
            t = ld["table"]
            if not s or s["n"] == 0:
                continue
            sh, re = t["shipped"][level], t["reactive"][level]
            d_ = s["minus_reactive_J_h"]
            share = s["share_of_oracle_gain"]
            out.append(
                f"| {label} {load} | {level} | {s['n']} | {s['reactive_J_h']:.2f} | "
                f"{s['oracle_J_h']:.2f} | {s['shipped_J_h']:.2f} | "
                f"{'' if share is None else f'{share:.0%}'} | "
                f"{d_['value']:+.2f} [{d_['lo']:+.2f}, {d_['hi']:+.2f}] | "
                f"{sh['interruption_removed']['value']:.0%} | "
                f"{sh['zero_interruption']['value']:.0%} "
                f"({re['zero_interruption']['value']:.0%}) | "
                f"{sh['beyond_training_h']['value']:.2f} ({re['beyond_training_h']['value']:.2f}) |"
            )
    return out


def main() -> None:
    args = sys.argv[1:]
    print(
        "| cluster, load | level | n | reactive J h | oracle J h | shipped J h | share of the "
        "gain | shipped - reactive h [95%] | interruption removed | zero interruption "
        "(reactive) | node-h beyond training (reactive) |"
    )
    print("|" + "---|" * 11)
    for label, path in zip(args[::2], args[1::2], strict=True):
        print("\n".join(rows(label, path)))


if __name__ == "__main__":
    main()
