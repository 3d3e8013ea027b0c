"""A real Prometheus server (Debian's package) scrapes the real ``mirage daemon`` process.

``scripts/prometheus-testbed.sh run`` installs the package when it is missing (never its
service) and runs prometheus in the foreground with a 1 s scrape of the daemon's
exporter. The test reads the series back through Prometheus's query API, so it checks
the names, labels and values as a Grafana dashboard would see them, not the exporter's
text alone.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mirage.slurm.cli_backend import CliSlurmClient
from tests.slurm.conftest import REPO, MirageDaemon, free_port, until

pytestmark = pytest.mark.slurm

SCRIPT = "#!/bin/bash\n#SBATCH --output=slurm-%j.out\nsleep 300\n"
#: every label a mirage_ series may carry (plus Prometheus's own job/instance): no user
#: or job id ever becomes a label (cardinality, and the exporter is readable by anyone)
ALLOWED_LABELS = {"__name__", "job", "instance", "state", "outcome", "kind", "why", "command"}
ALLOWED_LABELS |= {"le", "policy"}  # histogram buckets; mirage_model_info's policy name
ALLOWED_LABELS |= {"step"}  # mirage_chain_errors_total: the cycle's step (bounded, no ids)
ALLOWED_LABELS |= {"reason"}  # mirage_slurm_records_ignored_total: why (bounded, no ids)


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=5) as r:
            return json.loads(r.read().decode()) if path.startswith("/api/") else r.status

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr``: [{"metric": {labels}, "value": [t, "v"]}, ...]."""
        answer = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def value(self, expr: str) -> float | None:
        """The single value of ``expr``, None when it has no sample (yet)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[int], Prometheus]]:
    """Start Prometheus scraping 127.0.0.1:<metrics port>; stopped after the test."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(target_port: int) -> Prometheus:
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        proc = subprocess.Popen(  # the script execs prometheus: this pid is the server
            [str(REPO / "scripts" / "prometheus-testbed.sh"), "run", str(port),
             f"127.0.0.1:{target_port}", str(tmp_path / "prometheus")],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(proc)
        prom = Prometheus(port)

        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                return bool(prom.get("/-/ready") == 200)
            except OSError:
                return False

        until(ready, 120, "prometheus ready (the first run installs the package)")
        return prom

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_prometheus_scrapes_the_daemon(
    mirage_daemons: Callable[..., MirageDaemon], prometheus: Callable[[int], Prometheus]
) -> None:
    d = mirage_daemons("prom")
    work = d.root / "work"
    work.mkdir()
    script = d.root / "seg.sbatch"
    script.write_text(SCRIPT)
    ids = []
    run = secrets.token_hex(3)  # names unique to this run: sacct still has earlier runs
    for n in range(3):  # registered only: the daemon submits each segment 1 itself
        out = d.cli(
            "chain", "submit", str(script), "--segments", "1", "--no-submit", "--name",
            f"prom{n}-{run}", "--", "-p", "gpu", "--gres=gpu:1", "--time=1", f"--chdir={work}",
        )  # fmt: skip
        ids.append(out["chain_id"])
    d.cli("chain", "cancel", ids[2])  # one chain in another state: CANCELLED
    started = time.time()
    d.start()
    prom = prometheus(d.metrics_port)

    def scraped() -> bool:
        return prom.value('mirage_chains{state="ACTIVE"}') == 2 and (
            prom.value('mirage_presubmissions_total{outcome="reactive"}') == 2
        )

    until(scraped, 60, f"the daemon's first cycles, scraped\n{d.tail()}")
    assert prom.value('up{job="mirage"}') == 1
    # the chains-by-state gauge: every registered chain, each in its state
    assert prom.value("sum(mirage_chains)") == len(ids)
    assert prom.value('mirage_chains{state="CANCELLED"}') == 1
    assert prom.value('mirage_chains{state="COMPLETED"}') == 0
    assert prom.value("mirage_slurm_reachable") == 1
    assert prom.value("mirage_lease_held") == 1
    # the two segment-1 jobs are in Slurm, as the daemon's own counter says
    jobs = d.slurm_jobs(CliSlurmClient(timeout=60.0), int(started) - 60)
    assert sorted(j.name.partition(".")[0] for j in jobs) == [f"prom0-{run}", f"prom1-{run}"]
    polls = prom.value("mirage_poll_duration_seconds_count")
    assert polls is not None and polls >= 1
    assert prom.value('mirage_slurm_commands_total{command="sbatch"}') == 2
    assert prom.value("mirage_poll_errors_total") is None  # no error: no series yet
    # stated intervals' outcomes are exported at 0 from the start (fixed lead states none)
    assert prom.value('mirage_predicted_interval_total{outcome="inside"}') == 0
    # the histograms of the issue, with its buckets (a minute to days)
    buckets = {r["metric"]["le"] for r in prom.query("mirage_interruption_seconds_bucket")}
    assert {"60.0", "86400.0", "+Inf"} <= buckets
    info = prom.query("mirage_model_info")
    assert [r["metric"]["policy"] for r in info] == ["fixed-lead"]
    age = prom.value("mirage_model_age_seconds")
    assert age == 0  # a baseline: no trained model
    # every mirage_ series, and none with a label outside the allowed set
    series = prom.query('{__name__=~"mirage_.+"}')
    names = {r["metric"]["__name__"] for r in series}
    assert len(names) >= 15, sorted(names)
    for r in series:
        assert set(r["metric"]) <= ALLOWED_LABELS, r["metric"]
    # the samples are this daemon's: one instance, scraped since it started
    assert {r["metric"]["instance"] for r in series} == {f"127.0.0.1:{d.metrics_port}"}
    earliest = "min_over_time(timestamp(mirage_slurm_reachable)[5m:1s])"
    # the 1 s subquery came back empty in 1 of 4 runs here, around a scrape: ask again
    until(lambda: prom.value(earliest) is not None, 10, "the first scrape's timestamp")
    first = prom.value(earliest)
    assert first is not None and first >= started
