"""docs/users/new-cluster.md followed on the real test cluster (issue 28, item 1).

The test makes a small accounting log of its own: 32 short jobs of different shapes
(1 or 2 nodes, 1 to 4 GPUs, CPU-only), submitted over about 2 minutes onto the 4 GPU
nodes so that a queue forms (waits of up to a minute or two), then waits until every one
of them has ended. It then runs the guide's ``sh test`` blocks in document order, each in
a fresh ``bash -euo pipefail`` after the guide's settings block, in one temporary
directory, with the settings the guide's last section states (``SITE=lab``, the log's
span, the evaluation's time scale in seconds), and checks what each step made:

1. the sacct export holds every job of the test; 2. converted, every one is in the table,
   no row skipped; 3. ``mirage trace import`` reads the same jobs; 4. inspect shows them;
5. the captured profile has the gpu partition's 4 nodes; 6. calibration wrote a profile
   that loads, with a node count in the searched range and a held-out check;
7. simulate replayed every job; 8. the evaluation's JSON has usable test samples and a
   row per method; 9. train wrote models/lab/xgb with metadata naming the calibrated
   profile's SHA-256 and the models it was recalibrated from; 10. the evaluation reports
   xgb beside the baselines; 11. the daemon starts with that model, without falling back.

The output of every step is written to ``steps.log`` in the test's tmp dir (``pytest -s``
prints it too).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import REPO
from tests.slurm.docs_blocks import blocks

pytestmark = pytest.mark.slurm

DOC = REPO / "docs" / "users" / "new-cluster.md"
SITE = "lab"
JOBS = 32
#: the evaluation's time scale for a log of minutes (the guide's last section)
PROTOCOL = {"TIME_LIMIT_H": "0.0083", "STEP_MIN": "0.1", "EVERY_H": "0.0014",
            "WINDOW_H": "0.0167", "WARMUP_H": "0.0028"}  # fmt: skip
#: (partition, nodes, gres): whole GPU nodes most often, so that a queue forms
SHAPES = [("gpu", 1, "gpu:4")] * 4 + [
    ("gpu", 2, "gpu:4"),
    ("gpu", 1, "gpu:2"),
    ("gpu", 1, "gpu:1"),
    ("cpu", 1, ""),
]
CLEAN_ENV = ("SACCT_FORMAT", "SQUEUE_FORMAT", "SLURM_TIME_FORMAT", "SBATCH_TIMELIMIT")


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    # the `mirage` of this interpreter's environment, importing this checkout
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    env.update(extra)
    return env


def _make_log(work: Path, env: dict[str, str], ids: list[str]) -> tuple[float, float]:
    """Submit the test's jobs (their ids into ``ids``); the first and last submit times."""
    rng = random.Random(28)
    first = time.time()
    for i in range(JOBS):
        part, nodes, gres = rng.choice(SHAPES)
        args = ["sbatch", "--parsable", "-p", part, "-N", str(nodes), "--time=1", "-c", "2",
                "-J", f"walk{i}", "-o", "/dev/null", "--chdir", str(work),
                "--wrap", f"sleep {rng.randint(8, 20)}"]  # fmt: skip
        if gres:
            args.append(f"--gres={gres}")
        out = subprocess.run(args, capture_output=True, text=True, env=env, check=True, timeout=30)
        ids.append(out.stdout.strip().split(";")[0])
        time.sleep(rng.uniform(2.0, 5.0))
    return first, time.time()


def _ended(ids: list[str], env: dict[str, str]) -> bool:
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobID,State,End", "-j", ",".join(ids)],
        capture_output=True, text=True, env=env, check=True, timeout=30,
    )  # fmt: skip
    rows = [line.split("|") for line in out.stdout.splitlines() if line]
    done = {r[0] for r in rows if r[2] not in ("", "Unknown") and "RUNNING" not in r[1]}
    return set(ids) <= done


def test_the_new_cluster_walkthrough(tmp_path: Path) -> None:
    t0 = time.monotonic()
    work = tmp_path / "site"
    work.mkdir()
    base = _env({})
    ids: list[str] = []
    try:
        first, last = _make_log(work, base, ids)
        deadline = time.monotonic() + 300
        while not _ended(ids, base):
            assert time.monotonic() < deadline, "the test's jobs did not end within 5 minutes"
            time.sleep(3)
    finally:
        if ids:  # a failure or an interruption leaves none of them queued
            subprocess.run(["scancel", *ids], env=base, check=False, timeout=30)
    to = max(first + 190, last + 5)
    env = _env({
        "SITE": SITE, "PARTITION": "gpu", "SHIPPED": str(REPO / "models" / "ls6"),
        "FROM": _iso(first - 60), "CUTOFF": _iso(first + 90), "TO": _iso(to),
        **PROTOCOL,
    })  # fmt: skip
    log_made = time.monotonic() - t0

    steps = blocks(DOC.read_text(encoding="utf-8"))
    assert len(steps) == 12, f"the guide's test blocks changed: {len(steps)}; update this test"
    settings = steps[0]
    record = tmp_path / "steps.log"
    outputs: list[str] = []
    for n, body in enumerate(steps[1:], start=1):
        started = time.monotonic()
        # one stream, unbuffered: steps.log shows the output in a terminal's order (stdout
        # then stderr put calibrate's progress lines after its table)
        res = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", settings + body],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work,
            env={**env, "PYTHONUNBUFFERED": "1"}, timeout=300, check=False,
        )  # fmt: skip
        text = res.stdout
        with record.open("a", encoding="utf-8") as f:
            f.write(f"===== block {n} ({time.monotonic() - started:.1f} s, rc {res.returncode})"
                    f"\n{body}-----\n{text}\n")  # fmt: skip
        print(f"===== block {n}, rc {res.returncode}\n{body}-----\n{text}")
        assert res.returncode == 0, f"block {n} failed:\n{body}\n{text}"
        outputs.append(text)
        CHECKS[n](work, ids, text)
    print(f"log made in {log_made:.0f} s; whole walkthrough {time.monotonic() - t0:.0f} s")


# ---- what each block must have done (block number -> check)


def _table(path: Path) -> set[str]:
    from mirage.trace.readers import load_trace

    return set(load_trace(str(path)).jobs["job_id"].astype(str))


def _export(work: Path, ids: list[str], out: str) -> None:
    lines = (work / "jobs.txt").read_text().splitlines()
    assert lines[0].startswith("JobID|User|JobName|")
    assert set(ids) <= {line.split("|")[0] for line in lines[1:]}


def _convert(work: Path, ids: list[str], out: str) -> None:
    assert "(0 rows skipped)" in out, out
    assert set(ids) <= _table(work / "jobs.parquet")


def _import(work: Path, ids: list[str], out: str) -> None:
    assert _table(work / "imported.parquet") == _table(work / "jobs.parquet")


def _inspect(work: Path, ids: list[str], out: str) -> None:
    assert "kept of" in out and "chains" in out, out


def _profile(work: Path, ids: list[str], out: str) -> None:
    from mirage.profile.schema import load_profile

    prof = load_profile(work / "profile.toml")
    assert prof.name == SITE and prof.partition("gpu").nodes == 4


def _calibrate(work: Path, ids: list[str], out: str) -> None:
    from mirage.profile.schema import load_profile

    prof = load_profile(work / "models" / SITE / "profile.toml")
    nodes = prof.partition().nodes
    assert nodes is not None and 2 <= nodes <= 8, nodes
    assert f"best: {nodes} nodes" in out and "held out" in out, out


def _simulate(work: Path, ids: list[str], out: str) -> None:
    # every job of the test; others in the span (a job cancelled while pending, left by
    # an earlier test) may not be
    m = re.search(r"(\d+) of (\d+) jobs replayed", out)
    assert m is not None and int(m[1]) >= len(ids), out


def _evaluation(work: Path) -> dict[str, Any]:
    report = json.loads((work / "eval" / f"eval-{SITE}-load1.json").read_text())
    load = report["loads"]["1"]
    assert load["samples"]["test"] > 0 and load["samples"]["tune"] > 0, load["samples"]
    return dict(load)


def _evaluate(work: Path, ids: list[str], out: str) -> None:
    table = _evaluation(work)["table"]
    for method in ("reactive", "fixed-lead", "qbets", "shipped", "oracle"):
        assert method in table and table[method]["all"]["mean_J_h"]["n"] > 0, method


def _train(work: Path, ids: list[str], out: str) -> None:
    meta = json.loads((work / "models" / SITE / "xgb" / "metadata.json").read_text())
    training = meta["training"]
    calibrated = (work / "models" / SITE / "profile.toml").read_bytes()
    assert training["profile_sha256"] == hashlib.sha256(calibrated).hexdigest()
    assert training["recalibrated_from"], training
    assert meta["cluster"] == SITE
    # its last step: the shipped configuration, chosen on the same (few) tuning samples
    assert "shipped configuration: none written (no tuning level has enough samples" in out
    assert not (work / "models" / SITE / "policy.toml").exists()


def _evaluate_xgb(work: Path, ids: list[str], out: str) -> None:
    table = _evaluation(work)["table"]
    assert "xgb" in table and table["xgb"]["all"]["mean_J_h"]["n"] > 0


def _daemon(work: Path, ids: list[str], out: str) -> None:
    assert f"policy xgb [model xgb ({SITE}" in out, out
    assert "fall" not in out.lower(), out  # no fallback warning: the model fits the cluster


CHECKS = {
    1: _export,
    2: _convert,
    3: _import,
    4: _inspect,
    5: _profile,
    6: _calibrate,
    7: _simulate,
    8: _evaluate,
    9: _train,
    10: _evaluate_xgb,
    11: _daemon,
}
