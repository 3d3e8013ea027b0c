#!/usr/bin/env python3
"""The rest of the cluster (mirage.demo.cluster): a known cluster's own chains of its test
month run by the real daemon, with the shipped default and with reactive submission, and
what every other job saw.

The chains ``find_chains`` detects in the trace whose first segment was submitted in the
split are taken out of the recorded jobs and registered with the daemon as their owners'
chains, of their recorded shape and training; every other job is replayed as recorded.
Prints, per load and policy, what the chains bore, the other jobs' mean and 90th-percentile
wait and the utilisation, and what the difference is made of; writes the JSON.

    .venv/bin/python scripts/cluster_replay.py --cluster ls6 --load 1 --load 1.05 \\
        --jobs 2 --out out/cluster-replay.json
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
    from mirage.daemon.config import Config, PolicySection
    from mirage.demo.cluster import ClusterSpec, run_cluster, split_chains
    from mirage.evaluate.inputs import default_test_setting
    from mirage.sim.calibrate import with_settings
    from mirage.sim.prepare import prepare_trace
    from mirage.trace.readers import load_trace

    split = default_test_setting(args.cluster, load, 24.0, args.split)
    setting = split.setting
    profile = with_settings(split.profile, setting.nodes)
    table = load_trace(setting.trace, None).jobs
    jobs = prepare_trace(table, profile, max_nodes=setting.nodes).jobs
    window = (setting.split.start, setting.split.end)
    if args.days:
        window = (window[0], window[0] + round(args.days * 86400))
    workload = split_chains(table, jobs, window, bound_only=args.limit_bound)
    spec = ClusterSpec(profile=profile, workload=workload, poll_interval_s=args.poll_s,
                       models_dir=str(ROOT / "models"), model_cluster=args.cluster)  # fmt: skip
    rules = PolicySection(max_presubmitted_per_user=args.cap,
                          presubmit_only_limit_bound=not args.every_chain)  # fmt: skip
    base = Config(policy=rules)
    out = run_cluster(spec, args.policies.split(","), base=base,
                      progress=lambda m: print(f"load {load:g}: {m}", file=sys.stderr))  # fmt: skip
    out.update(load=load, nodes=setting.nodes, cluster=args.cluster, split=args.split,
               limit_bound=args.limit_bound, cap=args.cap,
               early_end_rule=not args.every_chain)  # fmt: skip
    return out


def _load(r: dict[str, Any]) -> str:
    return f"{r['load']:g}" + (" (limit-bound chains only)" if r.get("limit_bound") else "")


def _h(s: float) -> str:
    return f"{s / HOUR:.2f}"


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| load | policy | chains | done | segments (recorded) | handoffs "
             "| idle h a chain | idle h a transition | zero-idle share "
             "| completion delay h a chain |", "|" + "---|" * 10]  # fmt: skip
    for r in results:
        for name, p in r["policies"].items():
            for label, key in (("all", "chains"), ("limit-bound", "bound_chains"),
                               ("others", "other_chains")):  # fmt: skip
                c = p.get(key)
                if not c or not c["chains"]:
                    continue
                lines.append(
                    f"| {_load(r)} | {name} | {label} {c['chains']} | {c['finished']} "
                    f"| {c['segments']} ({c['recorded_segments']}) "
                    f"| {p['made_of']['handoffs'] if key == 'chains' else ''} "
                    f"| {_h(c['idle_s'] / max(1, c['chains']))} | {_h(c['mean_idle_s'])} "
                    f"| {c['zero_idle_share']:.0%} | {_h(c['mean_delay_s'])} |"
                )
    lines += ["", "| load | policy | other jobs | their mean wait h | p90 wait h | utilisation "
              "| chains ran node-h | pending ahead node-h | freed by handoffs node-h |",
              "|" + "---|" * 9]  # fmt: skip
    for r in results:
        for name, p in r["policies"].items():
            o, m = p["others"], p["made_of"]
            lines.append(f"| {_load(r)} | {name} | {o['jobs']} | {_h(o['mean_wait_s'])} "
                         f"| {_h(o['p90_wait_s'])} | {o['utilisation']:.1%} "
                         f"| {m['ran_node_h']:.0f} | {m['pending_ahead_node_h']:.0f} "
                         f"| {m['freed_node_h']:.0f} |")  # fmt: skip
    lines.append("")
    for r in results:
        pol = r["policies"]
        if "reactive" in pol:
            base = pol["reactive"]["others"]["mean_wait_s"]
            for name, p in pol.items():
                if name != "reactive" and base:
                    change = p["others"]["mean_wait_s"] / base - 1
                    lines.append(f"load {_load(r)}: the other jobs' mean wait with {name} "
                                 f"is {change:+.1%} of reactive's")  # fmt: skip
        lines.append(f"load {_load(r)}: {r['chains']} chains managed, "
                     f"{r['unmodelled_chains']} left as recorded (limit within R), "
                     f"{r['other_jobs']} other jobs replayed")  # fmt: skip
    return "\n".join(lines)


def merged(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Runs of the same loads (a policy each) as one result per load."""
    by_load: dict[tuple[float, bool], dict[str, Any]] = {}
    for run in runs:
        for r in run:
            key = (r["load"], r.get("limit_bound", False))
            named = {_name(n, r): p for n, p in r["policies"].items()}
            if key in by_load:
                by_load[key]["policies"].update(named)
            else:
                by_load[key] = {**r, "policies": named}
    return [by_load[k] for k in sorted(by_load)]


def _name(policy: str, result: dict[str, Any]) -> str:
    if policy == "reactive":
        return policy
    cap = result.get("cap", 0)
    name = f"{policy}, cap {cap}" if cap else policy
    # a result without the key is of code without the rule
    return name if result.get("early_end_rule", False) else f"{name}, every chain"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="ls6")
    ap.add_argument("--split", default="test")
    ap.add_argument("--load", type=float, action="append")
    ap.add_argument("--days", type=float, default=0.0, help="window length (0: the split)")
    ap.add_argument("--poll-s", type=int, default=300)
    ap.add_argument("--cap", type=int, default=0,
                    help="[policy] max_presubmitted_per_user (0: no cap)")  # fmt: skip
    ap.add_argument("--limit-bound", action="store_true",
                    help="manage only the chains whose segments ran to their limits")  # fmt: skip
    ap.add_argument("--every-chain", action="store_true",
                    help="[policy] presubmit_only_limit_bound = false: pre-submit for chains "
                         "whose segments end early too")  # fmt: skip
    ap.add_argument("--policies", default="shipped,reactive")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="print the table of earlier runs' JSON (one policy each, say)",
    )
    args = ap.parse_args()
    if args.merge:
        print(table(merged([json.loads(p.read_text()) for p in args.merge])))
        return
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
