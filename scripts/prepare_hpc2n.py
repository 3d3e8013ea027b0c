"""Prepare HPC2N Seth's log as the held-out cluster of docs/evaluation.md.

    .venv/bin/python scripts/prepare_hpc2n.py [--out out/shipped]
        [--trace ../shared/traces/hpc2n_seth_head/hpc2n.swf.gz]

Writes two files into ``--out``:

- ``hpc2n-nodes.parquet``: the canonical table of the log with a node count per job.
  Seth's nodes have 2 CPUs (``hpc2n.swf.machines``) and the SWF records CPUs only, so a
  job asks ceil(CPUs / 2) nodes, as the simulator suite reads it (mirage.sim.suite).
- ``hpc2n-base.toml``: a profile to calibrate from: one partition of 120 nodes x 2 CPUs,
  the zone of Umea, and the scheduler settings of the other replayed (non-Slurm) logs
  (age-only priority, Slurm's backfill), which are CERIT's profile's.

Then calibrate the node count on the whole log (about a minute)::

    mirage calibrate --trace out/shipped/hpc2n-nodes.parquet \\
        --profile out/shipped/hpc2n-base.toml --before 2002-09-24T00:00 \\
        --nodes-min 60 --nodes-max 120 --out out/shipped/hpc2n-cal.toml
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mirage.trace.parquet import write_parquet
from mirage.trace.readers import load_trace

CPUS_PER_NODE = 2
PROFILE = """\
# HPC2N Seth as SWF records it: 120 nodes x 2 CPUs (hpc2n.swf.machines). A base to
# calibrate the node count from (mirage calibrate); scheduler settings as CERIT's profile.
name = "hpc2n"
description = "HPC2N Seth (120 nodes x 2 CPUs), Maui log replayed under Slurm-style scheduling"
timezone = "Europe/Stockholm"

[scheduler]
priority_weight_age = 1000
priority_weight_job_size = 0
priority_weight_fairshare = 0
priority_weight_partition = 0
priority_max_age_s = 604800
priority_favor_small = false
backfill = "slurm"
bf_interval_s = 30
bf_window_s = 604800
bf_resolution_s = 60
bf_max_job_test = 500
sched_interval_s = 60
priority_size_cpus = false
node_choice = "lowest"
bf_reserve_whole_nodes = false
fairshare = "none"
priority_decay_half_life_s = 604800
fairshare_usage = "cpus"

[[partitions]]
name = "default"
cpus_per_node = 2
memory_mb_per_node = 1024
nodes = 120
gpus_per_node = 0
gpu_type = ""
default = true
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default="../shared/traces/hpc2n_seth_head/hpc2n.swf.gz")
    ap.add_argument("--out", default="out/shipped")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load = load_trace(args.trace)
    jobs = load.jobs
    jobs["nodes"] = (jobs["cpus"] + CPUS_PER_NODE - 1) // CPUS_PER_NODE
    write_parquet(load, out / "hpc2n-nodes.parquet")
    (out / "hpc2n-base.toml").write_text(PROFILE, encoding="utf-8")
    print(f"{out / 'hpc2n-nodes.parquet'}: {len(jobs)} jobs; {out / 'hpc2n-base.toml'}")


if __name__ == "__main__":
    main()
