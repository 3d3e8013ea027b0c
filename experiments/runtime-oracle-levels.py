"""The runtime oracle at its most generous: its margin picked per load level on the test
split itself (not on the tuning split as `mirage evaluate` does), with the harness's
bootstrap intervals. How much of reactive's J could a policy remove that knew every
present job's run time but nothing of later arrivals?

    .venv/bin/python experiments/runtime-oracle-levels.py [LOAD[:EVERY_H] ...]
    (ls6; default 1 1.05; the README's 1.13 figures are for 1.13:12, one sample every 12 h)

Reads the probe cache (out/probe-cache) and records the no-arrival curves it lacks (about
2 minutes per load at 1 and 1.05 on 2 cores; about 20 minutes at 1.13:12).
"""

from __future__ import annotations

import sys

import numpy as np

from mirage.evaluate.harness import GRIDS, ORACLE, RUNTIME_ORACLE, Outcomes, Walker, evaluate
from mirage.evaluate.inputs import default_test_setting
from mirage.evaluate.probes import generate, record_all
from mirage.evaluate.stats import MIN_N, load_levels, table
from mirage.evaluate.whatif import NO_ARRIVALS
from mirage.policy.cost import HELD_TWICE

CACHE = "out/probe-cache"


def walker(load: float, every_h: float) -> Walker:
    test = default_test_setting("ls6", load, every_h)
    setting, times = test.setting, test.times
    probes = generate(setting, times, cache=CACHE, n_jobs=2)
    curves = record_all(setting, times, NO_ARRIVALS, cache=CACHE, n_jobs=2)
    return Walker(probes, setting.protocol, test.profile, test.partition,
                  no_arrivals=[c.start for c in curves])  # fmt: skip


def best_margin(w: Walker, mask: np.ndarray) -> tuple[float, Outcomes]:
    runs = {g: w.runtime_oracle(g) for g in GRIDS[RUNTIME_ORACLE]}
    g = min(runs, key=lambda m: float(runs[m].cost()[mask].mean()))
    return g, runs[g]


def main() -> None:
    for arg in sys.argv[1:] or ["1", "1.05"]:
        load_s, _, every_s = arg.partition(":")
        load = float(load_s)
        w = walker(load, float(every_s or 4))
        ref = evaluate(w, ["reactive", ORACLE], {}, HELD_TWICE)
        levels = load_levels(ref["reactive"].gap)
        for level in ("low", "medium", "heavy", "all"):
            mask = np.ones(levels.size, bool) if level == "all" else levels == level
            if level != "all" and mask.sum() < MIN_N:
                continue
            g, ro = best_margin(w, mask)
            tab = table({**ref, RUNTIME_ORACLE: ro}, HELD_TWICE, boot=2000)
            j, cut = tab[RUNTIME_ORACLE][level]["mean_J_h"], tab[RUNTIME_ORACLE][level]["removed"]
            orc = tab[ORACLE][level]["removed"]
            print(
                f"load {load:g} {level:6s} n={int(mask.sum()):3d} margin {g / 3600:+.1f} h: "
                f"J {j.value:.2f} [{j.lo:.2f}, {j.hi:.2f}] h, removed {cut.value:.0%} "
                f"[{cut.lo:.0%}, {cut.hi:.0%}]; oracle removes {orc.value:.0%} "
                f"[{orc.lo:.0%}, {orc.hi:.0%}]"
            )


if __name__ == "__main__":
    main()
