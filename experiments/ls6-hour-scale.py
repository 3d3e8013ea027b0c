"""Hour-scale waits on ls6: the whole trace replayed at the real and calibrated sizes.

    .venv/bin/python experiments/ls6-hour-scale.py [--nodes 88,79,76] [--profile PATH]

Replays the whole ls6 trace (dependency holds as mirage.sim.calibrate makes them) on each
node count, with the profile's QOS/association limits and without them, and prints the
mean and median wait from eligible time and the KS distance to the real waits, over every
measured job, over those submitted before March 2023 (what anything fitted may see) and
over March 2023 (held out). Also prints what the trace itself shows of the capacity the
real cluster had: the most nodes its jobs ever held at once, per month (a queue that waits
for hours while fewer nodes than the partition's are busy had nodes it could not use:
drained, reserved, or serving other partitions).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mirage.profile.schema import ClusterProfile, load_profile
from mirage.sim.prepare import FLOOR_S, Prepared, ks_distance, prepare_trace, replay, sim_waits
from mirage.trace.readers import load_trace

REPO = Path(__file__).resolve().parents[1]
LS6 = REPO.parent / "shared" / "traces" / "tacc_ls6_a100" / "ls6-a100.log.gz"
MARCH = (1677650400, 1680328800)  # 2023-03-01 and 2023-04-01, 00:00 US Central (UTC-6)


def busy_nodes_by_month(df: pd.DataFrame) -> pd.Series:
    """The most nodes the trace's jobs held at once, per month of the trace."""
    ran = df.dropna(subset=["start", "end"])
    ran = ran[ran["end"] > ran["start"]]
    ev = pd.concat(
        [
            pd.DataFrame({"t": ran["start"], "d": ran["nodes"]}),
            pd.DataFrame({"t": ran["end"], "d": -ran["nodes"]}),
        ]
    ).sort_values(["t", "d"])  # ends before starts at one instant
    ev["busy"] = ev["d"].cumsum()
    month = pd.to_datetime(ev["t"].astype("int64"), unit="s").dt.to_period("M")
    return ev.groupby(month)["busy"].max()


def without_limits(profile: ClusterProfile) -> ClusterProfile:
    """The profile with its QOS/association limits removed (if it has any)."""
    if not profile.qos and not profile.associations:
        return profile
    parts = tuple(dataclasses.replace(p, qos="") for p in profile.partitions)
    return dataclasses.replace(profile, partitions=parts, qos=(), associations=())


def stats(sim_w: np.ndarray, real_w: np.ndarray) -> str:
    started = ~np.isnan(sim_w)
    s_ks = np.where(started, sim_w, np.inf)
    s_ks = np.where(s_ks < FLOOR_S, 0.0, s_ks)
    r_ks = np.where(real_w < FLOOR_S, 0.0, real_w)
    ks = ks_distance(s_ks, r_ks)
    s = sim_w[started]
    return (
        f"{len(real_w):6d} {s.mean() / 3600:7.2f} h {real_w.mean() / 3600:7.2f} h "
        f"{np.median(s) / 60:7.1f} m {np.median(real_w) / 60:7.1f} m {ks:6.3f}"
    )


def report(prep: Prepared, profile: ClusterProfile, nodes: int, label: str) -> None:
    t = time.perf_counter()
    run = replay(prep, profile, nodes)
    wall = time.perf_counter() - t
    sim_w = sim_waits(prep, run.sim)
    real_w = prep.real_waits
    submit = np.array([j.submit for j in prep.jobs])
    parts = {
        "all": prep.measured,
        "pre-March": prep.measured & (submit < MARCH[0]),
        "March": prep.measured & (submit >= MARCH[0]) & (submit < MARCH[1]),
    }
    for name, mask in parts.items():
        row = stats(sim_w[mask], real_w[mask])
        print(f"{nodes:5d} {label:<9} {name:<10} {row}  ({wall:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(LS6))
    ap.add_argument("--profile", default=str(REPO / "models" / "ls6" / "profile.toml"))
    ap.add_argument("--nodes", default="88,79,76")
    args = ap.parse_args()
    df = load_trace(Path(args.trace)).jobs
    print("most nodes busy at once, per month (the trace's own jobs):")
    print(busy_nodes_by_month(df).to_string())
    profile = load_profile(args.profile)
    prep = prepare_trace(df, profile)
    variants = {"limits": profile, "no limits": without_limits(profile)}
    if variants["limits"] is variants["no limits"]:
        variants = {"no limits": profile}
    print(f"\n{'nodes':>5} {'':<9} {'jobs':<10} {'n':>6} {'sim mean':>9} {'real mean':>9} "
          f"{'sim med':>9} {'real med':>9} {'KS':>6}")  # fmt: skip
    for nodes in (int(n) for n in args.nodes.split(",")):
        for label, prof in variants.items():
            report(prep, prof, nodes, label)


if __name__ == "__main__":
    main()
