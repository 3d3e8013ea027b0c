"""Choose the shipped configuration on a cluster's tuning split (mirage.evaluate.shipping).

    .venv/bin/python scripts/select_shipped.py --cluster ls6 \
        --profile models/ls6/profile.toml --load 1 --load 1.05 --load 1.13 [--jobs 2]
        [--step-min 10] [--every-h 4] [--cached-only] [--measure-test] [--write FOLDER]
        [--no-lookahead] [--learned models/ls6]

Records (or reads from the probe cache, as `mirage evaluate` does) the tuning split's
samples and their look-ahead curves at each load, walks every candidate of the grid,
prints each one's mean J per load and whether it harms any level, and the choice: the safe
candidate of least summed mean J. The test split is never read. ``--learned FOLDER``
adds the trained policies found there (FOLDER/rf, xgb, dqn, pg) as candidates, each behind
every guard; the queue features they read are recorded on the same samples. ``--json FILE`` writes
every candidate's figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, cast

from mirage.evaluate.features import FEATURES
from mirage.evaluate.harness import (
    HOUR,
    LEARNED,
    BatchedPolicy,
    Walker,
    factory,
    guarded,
    learned_plans,
)
from mirage.evaluate.inputs import default_profile, default_trace
from mirage.evaluate.lookahead import LOOKAHEAD_CURVES
from mirage.evaluate.probes import PROBES, Recorder, is_cached, record_all
from mirage.evaluate.protocol import Protocol, Setting, default_splits, sample_times, scaled_nodes
from mirage.evaluate.shipping import (
    SAFE_BOUND_H,
    Candidate,
    inner_submits,
    policy_toml,
    select,
)
from mirage.evaluate.stats import gains
from mirage.learn.artifacts import ModelError, load_policy
from mirage.policy.guard import POLICY_FILE
from mirage.profile.schema import load_profile
from mirage.trace.readers import load_trace


def tuning_walker(
    cluster: str, profile_name: str, load: float, args: argparse.Namespace, split_name: str = "tune"
) -> Walker:
    trace = args.trace or default_trace(cluster)
    if trace is None:
        sys.exit(f"no {cluster} trace found: pass --trace")
    profile = load_profile(profile_name)
    df = load_trace(trace).jobs
    first, last = int(df["submit"].min()), int(df["submit"].max())
    split = default_splits(cluster, profile.timezone, first, last)[split_name]
    protocol = dataclasses.replace(
        Protocol(), step_s=round(args.step_min * 60), every_s=round(args.every_h * HOUR)
    )
    part = profile.partition(None)
    if part.nodes is None:
        sys.exit(f"profile {profile_name} has no node count: calibrate it first")
    setting = Setting(trace, profile_name, scaled_nodes(part.nodes, load), load, split, protocol)
    times = sample_times(split, protocol, first)
    recs: list[Recorder[Any]] = [PROBES] if args.no_lookahead else [PROBES, LOOKAHEAD_CURVES]
    if args.learned:
        recs.append(FEATURES)
    if args.cached_only:  # what a long run has recorded so far (mirage evaluate's option)
        times = [t for t in times if all(is_cached(args.cache, setting, t, r) for r in recs)]
        print(f"{split_name} split, load {load:g}: {len(times)} cached samples (--cached-only)")
    samples = record_all(setting, times, PROBES, cache=args.cache, n_jobs=args.jobs)
    queue = None
    if args.learned:
        rows = record_all(setting, times, FEATURES, cache=args.cache, n_jobs=args.jobs)
        queue = [r.queue for r in rows]
    ahead = None
    if not args.no_lookahead:
        curves = record_all(setting, times, LOOKAHEAD_CURVES, cache=args.cache, n_jobs=args.jobs)
        ahead = [c.start for c in curves]
    return Walker(samples, protocol, profile, part.name, queue, lookahead=ahead)


def load_learned(folder: str | None) -> dict[str, BatchedPolicy]:
    """The trained policies in ``folder`` (its rf, xgb, dqn, pg that exist)."""
    if folder is None:
        return {}
    out: dict[str, BatchedPolicy] = {}
    for name in LEARNED:
        path = Path(folder) / name
        if path.is_dir():
            try:
                policy, _ = load_policy(path)
                out[name] = cast(BatchedPolicy, policy)  # every trained policy plans batched
            except ModelError as exc:
                sys.exit(str(exc))
    if not out:
        sys.exit(f"--learned {folder}: no trained policy there (rf, xgb, dqn, pg)")
    print(f"trained candidates from {folder}: {', '.join(out)}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--load", type=float, action="append", required=True)
    ap.add_argument("--cache", default="out/probe-cache")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--step-min",
        type=float,
        default=Protocol().step_s / 60,
        help="decision step, as mirage evaluate's (CERIT's runs: 30)",
    )
    ap.add_argument(
        "--every-h",
        type=float,
        default=Protocol().every_s / HOUR,
        help="sample spacing, as mirage evaluate's (CERIT's runs: 12)",
    )
    ap.add_argument(
        "--write",
        default=None,
        metavar="FOLDER",
        help="write the choice as FOLDER/policy.toml (a cluster's models folder: the daemon "
        "and mirage evaluate take it as that cluster's defaults)",
    )
    ap.add_argument(
        "--cached-only", action="store_true", help="only the samples already in the probe cache"
    )
    ap.add_argument(
        "--no-lookahead",
        action="store_true",
        help="leave the look-ahead veto's candidates out (no look-ahead curves recorded)",
    )
    ap.add_argument(
        "--learned",
        default=None,
        metavar="FOLDER",
        help="a cluster's models folder (e.g. models/ls6): its trained policies are also "
        "candidates",
    )
    ap.add_argument(
        "--measure-test",
        action="store_true",
        help="after the choice, walk the test split with it and print its no-harm "
        "and gain figures per level (the test split is read only then)",
    )
    args = ap.parse_args()
    profile_name = args.profile or default_profile(args.cluster)
    learned = load_learned(args.learned)
    walkers = {ld: tuning_walker(args.cluster, profile_name, ld, args) for ld in args.load}
    choice = select(walkers, Protocol().cost, boot=args.boot, learned=learned)
    cands = choice.candidates
    loads = " ".join(f"{ld:g}" for ld in walkers)
    print(f"tuning split, mean J (h) at loads {loads}; harm: a level whose paired 95% "
          f"interval of (candidate - reactive) ends above {SAFE_BOUND_H:+g} h")  # fmt: skip
    for c in cands:
        js = " ".join(f"{c.mean_j_h[ld]:6.2f}" for ld in walkers)
        harmed = [f"{ld:g} {lv}" for ld, per in c.levels.items() for lv, g in per.items()
                  if lv != "all" and not g.harm.hi <= SAFE_BOUND_H]  # fmt: skip
        print(
            f"  {c.label():52s}  J {js}  "
            f"sum {c.total_j_h:6.2f}  {'safe' if c.safe else 'harms ' + ', '.join(harmed)}"
        )
    best = choice.chosen
    if not choice.judged:
        print("no level has enough samples to judge harm (30): no choice can be made here")
    else:
        announce(best)
        if args.write:  # as mirage train writes it (mirage.learn.ship), reactive included
            path = Path(args.write) / POLICY_FILE
            path.write_text(provenance(args, best) + policy_toml(best) + "\n", encoding="utf-8")
            print(f"wrote {path}")
        if args.measure_test and best is not None:
            for ld in args.load:
                test = tuning_walker(args.cluster, profile_name, ld, args, "test")
                measure(best, test, ld, args.boot, learned)
    if args.json:
        Path(args.json).write_text(json.dumps([c.as_dict() for c in cands], indent=1))


def announce(best: Candidate | None) -> None:
    if best is None:
        print("no candidate is safe at every level: ship reactive")
        return
    print(f"choice: {best.label()}; summed mean J {best.total_j_h:.2f} h")
    print("as the daemon's configuration:\n" + policy_toml(best))


def provenance(args: argparse.Namespace, c: Candidate | None) -> str:
    """The comment that says how the choice was made (None: no candidate was safe)."""
    loads = ", ".join(f"{ld:g}" for ld in args.load)
    cached = " (cached samples only)" if args.cached_only else ""
    what = (
        "no candidate of the grid was safe at every\n# level: reactive submission"
        if c is None
        else f"the safe candidate of least\n# summed mean J ({c.total_j_h:.2f} h)"
    )
    return (
        f"# Chosen by scripts/select_shipped.py on {args.cluster}'s tuning split{cached}, loads "
        f"{loads},\n# decision step {args.step_min:g} min, samples every {args.every_h:g} h: "
        f"{what}. The daemon configured with this cluster (and\n# mirage evaluate --cluster) "
        "takes these [policy] values where its configuration\n# leaves them out.\n"
    )


def measure(
    c: Candidate, walker: Walker, load: float, boot: int, learned: dict[str, BatchedPolicy]
) -> None:
    """The choice on the test split, per level: reactive's and the oracle's mean J, the
    choice's, its share of the oracle gain and its no-harm interval."""
    cost_model = Protocol().cost
    if c.method in learned:
        submits, revokes = learned_plans(walker, learned[c.method])
    else:
        submits, revokes = inner_submits(walker, c.method, c.constant), None
    res = {
        "reactive": walker.run(factory("reactive", None)),
        "oracle": walker.oracle(cost_model),
        "choice": guarded(
            walker,
            submits,
            None,
            None if c.lookahead_h is None else c.lookahead_h * HOUR,
            margin_fraction=c.margin,
            revokes=revokes,
        ),
    }
    print(f"test split, load {load:g}: {len(walker.samples)} samples")
    for level, g in gains(res, cost_model, boot=boot).items():
        x, og = g.methods["choice"], g.oracle_gain
        h = x.harm
        print(f"  {level:6s} oracle gain {og.value:6.2f} h  choice takes {x.share:4.0%}  "
              f"choice - reactive {h.value:+.2f} [{h.lo:+.2f}, {h.hi:+.2f}] h  "
              f"{'no harm' if x.no_harm else 'HARM'}")  # fmt: skip


if __name__ == "__main__":
    main()
