#!/usr/bin/env python3
"""The whole-chain check (mirage.demo.wholechain) on a known cluster's test month.

Chains of ``--segments`` segments' worth of training, one registered every ``--every-h``
hours from the split's start, run by the real daemon on the replay at each load, with
the shipped default and with reactive submission (``--policies``: any the daemon runs,
and ``pending-N``: no daemon, N successors kept pending from a chain's first start);
prints, per load and policy, what the chains bore against what the per-transition cost
forecast, and writes the JSON.

    .venv/bin/python scripts/whole_chain_check.py --cluster ls6 --load 1 --load 1.05 \\
        --load 1.13 --chains 20 --jobs 2 --out out/whole-chain.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HOUR = 3600
ROOT = Path(__file__).resolve().parents[1]


def one_load(args: argparse.Namespace, load: float) -> dict[str, Any]:
    from mirage.demo.run import load_jobs
    from mirage.demo.wholechain import CheckSpec, run_check
    from mirage.evaluate.inputs import default_test_setting
    from mirage.sim.calibrate import with_settings

    split = default_test_setting(args.cluster, load, 24.0, args.split)
    setting = split.setting
    profile = with_settings(split.profile, setting.nodes)
    begin = setting.split.start
    # the whole trace, as `mirage evaluate` replays it: the chains outlive the split
    jobs = load_jobs(setting.trace, None, profile)
    starts = tuple(begin + round(k * args.every_h * HOUR) for k in range(args.chains))
    spec = CheckSpec(profile=profile, jobs=jobs, starts=starts, segments=args.segments,
                     time_limit_s=round(args.time_limit_h * HOUR), poll_interval_s=args.poll_s,
                     models_dir=str(ROOT / "models"), model_cluster=args.cluster)  # fmt: skip
    out = run_check(spec, args.policies.split(","),
                    progress=lambda m: print(f"load {load:g}: {m}", file=sys.stderr))  # fmt: skip
    out.update(load=load, nodes=setting.nodes, cluster=args.cluster, split=args.split,
               first_registration=starts[0], every_h=args.every_h, jobs=len(jobs))  # fmt: skip
    return out


def _h(s: float) -> str:
    return f"{s / HOUR:.2f}"


def table(results: list[dict[str, Any]]) -> str:
    head = ("| load | policy | chains done | segments | handoffs | revoked | idle h/transition "
            "| J h, first n0-1 (I: their idle) | first wait h | D - first wait h "
            "| forecast h | error | node-h beyond the training |")  # fmt: skip
    lines = [head, "|" + "---|" * 13]
    for r in results:
        for name, s in r["policies"].items():
            lines.append(
                f"| {r['load']:g} | {name} | {s['finished']}/{s['chains']} | {s['segments']:.2f} "
                f"| {s['handoffs']} | {s['revoked']} | {_h(s['mean_idle_s'])} "
                f"| {_h(s['mean_J_s'])} "
                f"| {_h(s['mean_first_wait_s'])} | {_h(s['actual_s'])} | {_h(s['forecast_s'])} "
                f"| {s['error']:+.1%} | {_h(s['mean_beyond_s'])} |"
            )
    lines += ["", "| load | policy | gain over reactive h (chains) | forecast h | error |",
              "|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        for name, s in r["policies"].items():
            g = s.get("against_reactive")
            if g:
                lines.append(f"| {r['load']:g} | {name} | {_h(g['gain_s'])} "
                             f"| {_h(g['forecast_gain_s'])} | {g['error']:+.1%} |")  # fmt: skip
    lines += ["", "| load | policy | other jobs | their mean wait h | p90 wait h | utilisation |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        for name, s in r["policies"].items():
            o = s["others"]
            lines.append(f"| {r['load']:g} | {name} | {o['jobs']} | {_h(o['mean_wait_s'])} "
                         f"| {_h(o['p90_wait_s'])} | {o['utilisation']:.1%} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="ls6")
    ap.add_argument("--split", default="test")
    ap.add_argument("--load", type=float, action="append")
    ap.add_argument("--chains", type=int, default=20)
    ap.add_argument("--every-h", type=float, default=24.0)
    ap.add_argument("--segments", type=int, default=3)
    ap.add_argument("--time-limit-h", type=float, default=48.0)
    ap.add_argument("--poll-s", type=int, default=300)
    ap.add_argument("--policies", default="shipped,reactive")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    loads = args.load or [1.0]
    if args.jobs > 1:
        from joblib import Parallel, delayed

        results = Parallel(n_jobs=args.jobs)(delayed(one_load)(args, x) for x in loads)
    else:
        results = [one_load(args, x) for x in loads]
    print(table(results))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
