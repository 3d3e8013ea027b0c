#!/usr/bin/env python3
"""Make SYNTHETIC Slurm 24.11 (data_parser/v0.0.41) JSON from the recorded 22.05 files.

Nothing here was produced by Slurm 24.11: the recorded 22.05 documents are rewritten into
the documented 23.02+ shape (numbers as {"set", "infinite", "number"}, job_state /
state.current / exit_code.status as lists, meta.plugin.data_parser, meta.slurm.version),
so that the parser's second shape is exercised on the same jobs. Output files carry
"synthetic" in their names; tests/data/slurm/README.md says the same.

    python3 scripts/slurm-testbed/synthesize-v0041.py [DATADIR]   (default tests/data/slurm)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

NO_VAL = {0xFFFFFFFE, 0xFFFFFFFF, 0xFFFE, 0xFFFF}


def num(value: Any, *, zero_unset: bool = False) -> dict[str, Any]:
    if value is None or value in NO_VAL or (zero_unset and value == 0):
        return {"set": False, "infinite": value == 0xFFFFFFFF, "number": 0}
    return {"set": True, "infinite": False, "number": value}


def meta(command: list[str]) -> dict[str, Any]:
    return {
        "plugin": {
            "type": "",
            "name": "",
            "data_parser": "data_parser/v0.0.41",
            "accounting_storage": "accounting_storage/slurmdbd",
        },
        "client": {"source": "/dev/pts/0", "user": "root", "group": "root"},
        "command": command,
        "slurm": {
            "version": {"major": "24", "micro": "0", "minor": "11"},
            "release": "24.11.0",
            "cluster": "mirage",
        },
    }


def exit_code(code: Any) -> dict[str, Any]:
    if isinstance(code, dict):  # sacct 22.05 {"status": "SUCCESS", "return_code": 0}
        rc, status = code.get("return_code"), code.get("status", "SUCCESS")
        sig = (code.get("signal") or {}).get("signal_id")
    else:  # squeue 22.05: raw wait status
        rc, status, sig = (code >> 8) & 0xFF, "SUCCESS" if code == 0 else "ERROR", None
        if code & 0x7F:
            rc, status, sig = None, "SIGNALED", code & 0x7F
    return {
        "status": [status],
        "return_code": num(rc),
        "signal": {"id": num(sig), "name": ""},
    }


SQUEUE_NUMBERS = {
    "array_job_id",
    "array_task_id",
    "array_max_tasks",
    "cpus",
    "node_count",
    "priority",
    "time_limit",
    "tasks",
    "het_job_id",
    "het_job_offset",
    "max_cpus",
    "max_nodes",
    "memory_per_cpu",
    "memory_per_node",
    "minimum_cpus_per_node",
    "cpus_per_task",
}
SQUEUE_TIMES = {
    "accrue_time",
    "deadline",
    "eligible_time",
    "end_time",
    "last_sched_evaluation",
    "preempt_time",
    "pre_sus_time",
    "resize_time",
    "start_time",
    "submit_time",
    "suspend_time",
}


def squeue(doc: dict[str, Any]) -> dict[str, Any]:
    jobs = []
    for job in doc["jobs"]:
        new = dict(job)
        for key in SQUEUE_NUMBERS & job.keys():
            new[key] = num(job[key])
        for key in SQUEUE_TIMES & job.keys():
            new[key] = num(job[key])
        new["job_state"] = [job["job_state"]]
        new["exit_code"] = exit_code(job["exit_code"])
        new["derived_exit_code"] = exit_code(job["derived_exit_code"])
        # 23.02+ prints tres_per_node as gres/gpu:4 rather than gres:gpu:4
        new["tres_per_node"] = job["tres_per_node"].replace("gres:", "gres/")
        jobs.append(new)
    return {
        "jobs": jobs,
        "last_backfill": num(0),
        "last_update": num(0),
        "meta": meta(["squeue", "--json"]),
        "errors": [],
        "warnings": [],
    }


def plain_exit_codes(path: Path) -> dict[str, int]:
    """JobID -> exit code from the recorded plain `sacct -P` (22.05's JSON loses it)."""
    codes: dict[str, int] = {}
    if path.exists():
        lines = path.read_text().splitlines()
        header = lines[0].split("|")
        for line in lines[1:]:
            row = dict(zip(header, line.split("|"), strict=False))
            codes[row["JobID"]] = int(row["ExitCode"].split(":")[0])
    return codes


def sacct(doc: dict[str, Any], plain: dict[str, int]) -> dict[str, Any]:
    jobs = []
    for recorded in doc["jobs"]:
        job = dict(recorded)
        if job["state"]["current"] == "FAILED" and str(job["job_id"]) in plain:
            job["exit_code"] = {"status": "ERROR", "return_code": plain[str(job["job_id"])]}
        new = dict(job)
        array = dict(job["array"])
        array["task_id"] = num(array.get("task_id"))
        new["array"] = array
        new["state"] = {"current": [job["state"]["current"]], "reason": job["state"]["reason"]}
        new["exit_code"] = exit_code(job["exit_code"])
        new["derived_exit_code"] = exit_code(job["derived_exit_code"])
        times = dict(job["time"])
        times["limit"] = num(times["limit"])
        new["time"] = times
        new["priority"] = num(job["priority"])
        new["steps"] = []
        jobs.append(new)
    return {
        "jobs": jobs,
        "meta": meta(["sacct", "--json", "-a", "-X"]),
        "errors": [],
        "warnings": [],
    }


def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/slurm")
    plain = plain_exit_codes(data / "sacct-plain.txt")
    pairs = (
        ("squeue.json", "squeue-v0.0.41-synthetic.json", squeue),
        ("sacct-X.json", "sacct-v0.0.41-synthetic.json", lambda d: sacct(d, plain)),
    )
    for src, dst, fn in pairs:
        out = fn(json.loads((data / src).read_text()))
        (data / dst).write_text(json.dumps(out, indent=2) + "\n")
        print(f"{data / dst}: {len(out['jobs'])} jobs (SYNTHETIC, from {src})")


if __name__ == "__main__":
    main()
