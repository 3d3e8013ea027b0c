"""Shared setup for the tests that run against the real Slurm test cluster.

Start it with ``scripts/slurm-testbed/start.sh``. When ``scontrol ping`` fails, every test
in this directory is skipped with the reason, unless ``MIRAGE_REQUIRE_SLURM=1``, in which
case they fail loudly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from mirage.daemon.store import Store
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.run import SubprocessRunner
from mirage.slurm.types import SlurmError, SlurmJob

REPO = Path(__file__).resolve().parents[2]
START_SCRIPT = REPO / "scripts" / "slurm-testbed" / "start.sh"
LAB = Path(os.environ.get("MIRAGE_SLURM_LAB", "/tmp/mirage-slurm"))


@cache
def _slurm_down_reason() -> str | None:
    try:
        result = SubprocessRunner(timeout=15)(["scontrol", "ping"])
    except SlurmError as exc:
        return f"Slurm test cluster not reachable ({exc}); start scripts/slurm-testbed/start.sh"
    if result.returncode != 0 or "UP" not in result.stdout:
        text = (result.stdout + result.stderr).strip().splitlines()
        return (
            f"Slurm test cluster not up (scontrol ping: {text[0] if text else result.returncode});"
            " start it with scripts/slurm-testbed/start.sh"
        )
    return None


@pytest.fixture(scope="session", autouse=True)
def _require_slurm() -> None:
    reason = _slurm_down_reason()
    if reason is None:
        return
    if os.environ.get("MIRAGE_REQUIRE_SLURM") == "1":
        pytest.fail(f"MIRAGE_REQUIRE_SLURM=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def jobdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Working directory for test jobs, so that slurm-<id>.out never lands in the repo."""
    return tmp_path_factory.mktemp("slurm-jobs")


@pytest.fixture
def slurm() -> Iterator[CliSlurmClient]:
    """A client; jobs recorded in ``client.mine`` are cancelled after the test."""
    client = CliSlurmClient(timeout=60.0)
    mine: list[str] = []
    client.mine = mine  # type: ignore[attr-defined]
    yield client
    if mine:
        with contextlib.suppress(SlurmError):
            client.cancel(mine)


def wait_for(
    client: CliSlurmClient,
    job_id: str,
    predicate: Callable[[SlurmJob], bool],
    timeout: float = 60.0,
    what: str = "",
) -> SlurmJob:
    """Poll squeue (about once a second) until ``predicate`` holds for the job."""
    deadline = time.monotonic() + timeout
    last: SlurmJob | None = None
    while time.monotonic() < deadline:
        last = client.queue().by_id().get(job_id)
        if last is not None and predicate(last):
            return last
        time.sleep(1.0)
    raise AssertionError(f"job {job_id}: {what or 'condition'} not met in {timeout}s; last={last}")


@pytest.fixture(autouse=True)
def _run_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # sbatch writes slurm-<id>.out into the submitting directory: keep it out of the checkout
    monkeypatch.chdir(tmp_path)


# ---- the real `mirage daemon` process (tests/slurm/test_daemon_process.py, test_prometheus.py)


def free_port() -> int:
    """A TCP port free on loopback right now (the daemon binds it a moment later)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.5) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(every)


class MirageDaemon:
    """``mirage daemon`` run as a subprocess (the real CLI) with its own config and state.

    Each has its own SQLite database, lease, Unix socket and metrics port, so several can
    run side by side on the one cluster without seeing each other's chains. ``start``,
    ``kill`` (SIGKILL) and ``stop`` (SIGTERM) can be repeated: a restart keeps the state.
    """

    def __init__(self, root: Path, name: str, **daemon: int | str) -> None:
        import tempfile

        self.root = root
        self.name = name
        self.metrics_port = free_port()
        # sun_path holds 108 bytes: pytest's tmp paths can be longer
        self.sock_dir = Path(tempfile.mkdtemp(prefix="mg-sock-", dir="/tmp"))
        settings: dict[str, int | str] = {
            "cluster": name,
            "state_dir": str(root / "state"),
            "poll_interval_s": 2,
            "lease_ttl_s": 4,
            "backoff_max_s": 4,
            "unknown_timeout_s": 10,
            "sacct_overlap_s": 120,
            "run_as_owner": "never",
        }
        settings.update(daemon)
        lines = ["[daemon]"]
        lines += [
            f"{k} = {v!r}" if isinstance(v, int) else f'{k} = "{v}"' for k, v in settings.items()
        ]
        self.lead_s = 60
        lines += ["[policy]", 'default = "fixed-lead"', f"lead_s = {self.lead_s}"]
        lines += ["[metrics]", 'address = "127.0.0.1"', f"port = {self.metrics_port}"]
        lines += ["[socket]", f'path = "{self.sock_dir / "mirage.sock"}"']
        self.config = root / "mirage.toml"
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._store: Store | None = None

    def set_lead(self, lead_s: int) -> None:
        text = self.config.read_text().replace(f"lead_s = {self.lead_s}", f"lead_s = {lead_s}")
        self.config.write_text(text)
        self.lead_s = lead_s

    @property
    def log(self) -> Path:
        return self.root / f"daemon-{self.starts}.log"

    def start(self, fault: str = "") -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = {k: v for k, v in os.environ.items() if k != "MIRAGE_FAULT"}
        if fault:
            env["MIRAGE_FAULT"] = fault
        self.starts += 1
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    str(REPO / ".venv" / "bin" / "mirage"),
                    "-v",
                    "daemon",
                    "--config",
                    str(self.config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
            )

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name}: still running after {timeout}s\n{self.tail()}"
            ) from None

    def stop(self) -> None:
        """SIGTERM (a clean stop releases the lease); SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return "(no log)"

    @property
    def store(self) -> Store:
        if self._store is None:
            from mirage.daemon.config import load_config
            from mirage.daemon.service import open_store

            self._store = open_store(load_config(self.config))
        return self._store

    def cli(self, *args: str) -> Any:
        """``mirage ARGS --config … --json`` in a subprocess (the socket path when it runs)."""
        import json

        res = subprocess.run(
            [str(REPO / ".venv" / "bin" / "mirage"), *args[:2], "--config", str(self.config),
             "--json", *args[2:]],
            capture_output=True, text=True, timeout=60, check=False, cwd=self.root,
        )  # fmt: skip
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        return json.loads(res.stdout)

    def metrics(self) -> dict[str, float]:
        """The exporter's samples, ``name{labels}`` -> value (comments left out)."""
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def chain_names(self) -> set[str]:
        from sqlalchemy import select

        from mirage.daemon.store import Chain

        with self.store.sessions() as s:
            return set(s.scalars(select(Chain.name)))

    def slurm_jobs(self, client: CliSlurmClient, since: int) -> list[SlurmJob]:
        """This daemon's jobs in squeue and sacct (one record per job id), by job name:
        a segment's name is ``<chain name>.<token>``, whether or not the database knows it.
        """
        prefixes = tuple(f"{n}." for n in self.chain_names())
        if not prefixes:
            return []
        jobs = {j.job_id: j for j in client.accounting(since)}
        jobs.update((j.job_id, j) for j in client.queue().jobs)  # the controller is current
        return [j for j in jobs.values() if j.name.startswith(prefixes)]


@pytest.fixture
def mirage_daemons(tmp_path: Path) -> Iterator[Callable[..., MirageDaemon]]:
    """A factory of :class:`MirageDaemon`; all are stopped and their jobs cancelled after."""
    made: list[MirageDaemon] = []

    def make(name: str, **daemon: int | str) -> MirageDaemon:
        root = tmp_path / name
        root.mkdir()
        d = MirageDaemon(root, name, **daemon)
        made.append(d)
        return d

    yield make
    client = CliSlurmClient(timeout=60.0)
    for d in made:
        d.stop()
        shutil.rmtree(d.sock_dir, ignore_errors=True)
        with contextlib.suppress(SlurmError):
            live = [
                j.job_id for j in d.slurm_jobs(client, int(time.time())) if not j.state.is_finished
            ]
            if live:
                client.cancel(live)
