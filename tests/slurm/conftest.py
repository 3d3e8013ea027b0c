"""Shared setup for the tests that run against the real Slurm test cluster.

Start it with ``scripts/slurm-testbed/start.sh``. When ``scontrol ping`` fails, every test
in this directory is skipped with the reason, unless ``MIRAGE_REQUIRE_SLURM=1``, in which
case they fail loudly.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import pytest

from mirage.daemon.store import Store
from mirage.policy.cost import Transition
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.client import SlurmClient
from mirage.slurm.run import SubprocessRunner
from mirage.slurm.types import JobState, SlurmError, SlurmJob, SubmitRequest

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


_C = TypeVar("_C", bound=SlurmClient)

# ---- the backends (``[slurm] backend``): one contract, tested on both

#: Every SlurmClient backend of a real cluster; the contract tests run once per backend.
BACKENDS = ("cli", "pyslurm")
#: The daemon's process tests per backend: pyslurm's runs (the end-to-end chain test under
#: load, kill -9, the controller outage: ~6 min) are ``slurm_slow``, run by ``make
#: slurm-slow``, so that ``make test`` stays under 35 minutes; the contract tests run both
#: backends in ``make test``.
SLOW_PYSLURM = ["cli", pytest.param("pyslurm", marks=pytest.mark.slurm_slow)]
#: How long a test waits for ``make test``'s background pyslurm build (run-tests.sh).
PYSLURM_BUILD_WAIT_S = 1500.0


@cache
def _pyslurm_missing() -> str | None:
    """Why the pyslurm backend cannot run here (None: it can). ``make test`` builds it from
    the vendored source beside the Slurm tests and names, in ``MIRAGE_PYSLURM_BUILD``, the
    file it writes the build's exit status to: wait for that first."""
    import importlib

    from mirage.slurm.pyslurm_backend import PyslurmUnavailableError, check_pyslurm, load_pyslurm

    marker = os.environ.get("MIRAGE_PYSLURM_BUILD")
    if marker:
        deadline = time.monotonic() + PYSLURM_BUILD_WAIT_S
        while not Path(marker).exists() and time.monotonic() < deadline:
            time.sleep(2)
        rc = Path(marker).read_text().strip() if Path(marker).exists() else "still running"
        if rc != "0":
            log = Path(marker).with_suffix(".log")
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            return f"the pyslurm build (scripts/build-pyslurm.sh) ended: {rc}\n{tail}"
    importlib.invalidate_caches()  # installed after this process started
    try:
        check_pyslurm(load_pyslurm(), CliSlurmClient(timeout=60.0))
    except PyslurmUnavailableError as exc:
        return str(exc)
    return None


def make_client(backend: str) -> SlurmClient:
    """A client of ``backend`` on the test cluster. pyslurm missing: the test is skipped
    with the reason, or fails under ``MIRAGE_REQUIRE_PYSLURM=1`` (``make test`` sets it
    where the vendored source is there to build)."""
    if backend == "cli":
        return CliSlurmClient(timeout=60.0)
    from mirage.slurm.pyslurm_backend import open_pyslurm_client

    reason = _pyslurm_missing()
    if reason is not None:
        if os.environ.get("MIRAGE_REQUIRE_PYSLURM") == "1":
            pytest.fail(f"MIRAGE_REQUIRE_PYSLURM=1 but {reason}", pytrace=False)
        pytest.skip(f"pyslurm backend: {reason}")
    return open_pyslurm_client(CliSlurmClient(timeout=60.0))  # as the daemon runs it


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[SlurmClient]:
    """A client of each backend in turn; jobs recorded in ``client.mine`` are cancelled
    after the test."""
    yield from _cancelling_after(make_client(request.param))


@pytest.fixture
def slurm() -> Iterator[CliSlurmClient]:
    """A client; jobs recorded in ``client.mine`` are cancelled after the test."""
    yield from _cancelling_after(CliSlurmClient(timeout=60.0))


def _cancelling_after(client: _C) -> Iterator[_C]:
    """``client`` with a ``mine`` list; the jobs recorded there are cancelled after."""
    mine: list[str] = []
    client.mine = mine  # type: ignore[attr-defined]
    yield client
    if mine:
        with contextlib.suppress(SlurmError):
            client.cancel(mine)


def wait_for(
    client: SlurmClient,
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

    def __init__(self, root: Path, name: str, backend: str = "cli", **daemon: int | str) -> None:
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
        # the mechanics under test need the fixed lead to act on the idle test cluster: no
        # estimate guard (its own test: test_daemon_cluster.py)
        lines += ["[policy]", 'default = "fixed-lead"', 'guard = "none"', f"lead_s = {self.lead_s}"]
        lines += ["[slurm]", f'backend = "{backend}"']  # the daemon's reads ([slurm] backend)
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

    def make(name: str, backend: str = "cli", **daemon: int | str) -> MirageDaemon:
        if backend != "cli":
            make_client(backend)  # skips (or fails) here when that backend cannot run
        root = tmp_path / name
        root.mkdir()
        d = MirageDaemon(root, name, backend, **daemon)
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


def set_policy(d: MirageDaemon, name: str) -> None:
    """Switch a :class:`MirageDaemon`'s ``[policy] default`` (before it starts)."""
    lines = d.config.read_text().splitlines()
    out = [f'default = "{name}"' if line.startswith("default = ") else line for line in lines]
    d.config.write_text("\n".join(out) + "\n")


# ---- a background workload and transitions read back from sacct
# (tests/slurm/test_daemon_e2e.py, scripts/bench/daemon_cluster.py)


@dataclass(frozen=True)
class BgJob:
    """One ordinary (non-Mirage) job of the background workload."""

    limit_s: int  # whole minutes, 1-3
    run_s: int  # what its script sleeps: most end before their limit
    gpus: int  # on one node


def background_jobs(seed: int, n: int = 500) -> list[BgJob]:
    """A seeded sequence of 1-node jobs: 1-3 minute limits, 1-4 GPUs, run 50-95% of it."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        limit = rng.choice((60, 120, 180))
        run = rng.randint(limit // 2, limit - 5)
        out.append(BgJob(limit_s=limit, run_s=run, gpus=rng.randint(1, 4)))
    return out


#: every job on the cluster (chains and background) asks for this many CPUs, so that
#: multifactor priority's job-size term is the same for all and the queue is first come,
#: first served (with backfill)
CPUS_PER_JOB = 4


class BackgroundLoad:
    """Ordinary sbatch jobs keeping the GPU nodes busy and the queue never empty.

    A feeder thread polls squeue every ``every`` seconds and submits the next jobs of a
    seeded sequence (:func:`background_jobs`) while fewer than ``pending`` of its jobs
    wait: the nodes stay full and a job submitted at any moment queues behind about
    ``pending`` others. The same seed gives the same jobs in the same order. ``samples``
    holds, per poll, (time, pending background jobs, GPUs allocated to running jobs).
    """

    def __init__(
        self,
        client: CliSlurmClient,
        workdir: Path,
        *,
        prefix: str,
        seed: int,
        pending: int = 4,
        every: float = 2.0,
    ) -> None:
        import threading

        self.client = client
        self.workdir = workdir
        self.prefix = prefix
        self.jobs = background_jobs(seed)
        self.pending = pending
        self.every = every
        self.submitted: list[str] = []
        self.samples: list[tuple[int, int, int]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bg-load", daemon=True)

    def request(self, i: int) -> SubmitRequest:
        job = self.jobs[i % len(self.jobs)]
        return SubmitRequest(
            script=f"#!/bin/sh\nsleep {job.run_s}\n".encode(),
            job_name=f"{self.prefix}-{i}",
            time_limit=job.limit_s,
            nodes=1,
            gres=f"gpu:{job.gpus}",
            partition="gpu",
            chdir=str(self.workdir),
            extra_args=("--output=/dev/null", "--ntasks=1", f"--cpus-per-task={CPUS_PER_JOB}"),
        )

    def tick(self) -> None:
        """One poll: record a sample, then top the queue up to ``pending`` waiting jobs."""
        jobs = self.client.queue().jobs
        mine = [j for j in jobs if j.name.startswith(f"{self.prefix}-")]
        waiting = sum(1 for j in mine if j.state is JobState.PENDING)
        busy = sum(j.gpus for j in jobs if j.state is JobState.RUNNING)
        self.samples.append((int(time.time()), waiting, busy))
        for _ in range(self.pending - waiting):
            self.submitted.append(self.client.submit(self.request(len(self.submitted))))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except SlurmError as exc:  # one failed poll or sbatch: the next tick retries
                self.errors.append(str(exc))
            self._stop.wait(self.every)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop feeding and cancel every background job still pending or running."""
        self._stop.set()
        self._thread.join(60)
        if self.submitted:
            with contextlib.suppress(SlurmError):
                self.client.cancel(self.submitted)

    def busy_share(self, start: int, end: int, gpus: int = 16) -> float:
        """Share of samples in [start, end] with a waiting background job and all GPUs
        but at most one node's allocated (the queue non-empty, the nodes busy)."""
        inside = [(w, b) for t, w, b in self.samples if start <= t <= end]
        if not inside:
            return 0.0
        return sum(1 for w, b in inside if w > 0 and b >= gpus - 4) / len(inside)


@dataclass(frozen=True)
class TransitionRecord:
    """One k -> k+1 transition of a chain, as sacct reports its two jobs."""

    chain: str  # the chain's name
    index: int  # k+1, the successor's segment index
    pred_job: str
    succ_job: str
    presubmitted: bool  # the successor was submitted before its predecessor ended
    times: Transition
    recorded_gap: int | None  # the daemon's own "transition" event, if it has one

    @property
    def gap(self) -> int:
        return self.times.gap

    @property
    def interruption(self) -> int:
        return self.times.interruption

    @property
    def overlap(self) -> int:
        return self.times.overlap

    @property
    def cost(self) -> float:
        return self.times.cost()


def jobs_by_token(
    d: MirageDaemon, client: CliSlurmClient, since: int, *, queue: bool = True
) -> dict[str, list[SlurmJob]]:
    """This daemon's Slurm jobs by their token: sacct's records, one per job id, updated
    by squeue's (``queue``, the controller is current) or not (sacct alone)."""
    from mirage.daemon.ledger import find_token

    prefixes = tuple(f"{n}." for n in d.chain_names())
    jobs = {j.job_id: j for j in client.accounting(since)}
    if queue:
        jobs.update((j.job_id, j) for j in client.queue().jobs)
    out: dict[str, list[SlurmJob]] = {}
    for j in jobs.values():
        if not prefixes or not j.name.startswith(prefixes):
            continue
        token = find_token(j)  # the comment, else the name (sacct may lag on the comment)
        assert token is not None, (j.job_id, j.name)
        out.setdefault(token, []).append(j)
    return out


def sacct_transitions(
    d: MirageDaemon, client: CliSlurmClient, since: int
) -> list[TransitionRecord]:
    """Every transition of the daemon's chains, its times read back from sacct.

    The segments (index, token) come from the daemon's database; each token's job from
    sacct (an assertion if a token is on no job or on several); the cost's definitions are
    :class:`mirage.policy.cost.Transition`'s. Transitions whose successor never started
    (cancelled while pending) are left out.
    """
    from sqlalchemy import select

    from mirage.daemon.store import Chain, Event, Segment

    by_token = {
        t: jobs
        for t, jobs in jobs_by_token(d, client, since, queue=False).items()
        if len(jobs) == 1
    }
    with d.store.sessions() as s:
        names = {c.id: c.name for c in s.scalars(select(Chain))}
        segs = list(s.scalars(select(Segment).order_by(Segment.chain_id, Segment.index)))
        events = {
            (e.chain_id, e.data.get("index")): e.data.get("gap")
            for e in s.scalars(select(Event).where(Event.kind == "transition"))
        }
    out: list[TransitionRecord] = []
    for pred, succ in itertools.pairwise(segs):
        if pred.chain_id != succ.chain_id:
            continue
        assert succ.index == pred.index + 1, (pred.index, succ.index)
        assert pred.token in by_token and succ.token in by_token, (pred.token, succ.token)
        p, n = by_token[pred.token][0], by_token[succ.token][0]
        if n.start is None or n.state is JobState.PENDING:
            continue  # never started (squeue's start of a pending job is an estimate)
        if n.state is JobState.CANCELLED and n.end is not None and n.end <= n.start:
            continue  # cancelled while pending: sacct shows start = end
        assert p.start is not None and p.end is not None and p.time_limit is not None, p
        gap = events.get((succ.chain_id, succ.index))
        out.append(
            TransitionRecord(
                chain=names[succ.chain_id],
                index=succ.index,
                pred_job=p.job_id,
                succ_job=n.job_id,
                presubmitted=succ.presubmitted,
                times=Transition(p.start, p.time_limit, p.end, n.start),
                recorded_gap=None if gap is None else int(gap),
            )
        )
    return out


#: a chain segment: trains (sleeps) until 3 s before its limit, or checkpoints and exits 0
#: at once on USR1 (the daemon's handoff signal)
CHAIN_SCRIPT = """#!/bin/bash
#SBATCH --output=slurm-%j.out
trap 'echo "USR1: checkpoint and exit"; exit 0' USR1
sleep {run_s} &
wait
"""


@dataclass
class LoadRun:
    """What :func:`run_under_load` saw: the chains' ids, their transitions, the load."""

    chain_ids: list[str]
    transitions: list[TransitionRecord]
    load: BackgroundLoad
    started: int
    ended: int
    since: int


def run_under_load(
    d: MirageDaemon,
    client: CliSlurmClient,
    *,
    chains: int = 2,
    segments: int = 3,
    limit_min: int = 1,
    seed: int = 7,
    pending: int = 4,
    timeout: float = 330.0,
) -> LoadRun:
    """Register ``chains`` chains of ``segments`` segments (4 GPUs, ``limit_min`` minutes
    each), start the background workload and the daemon, wait until every chain ended, stop
    the workload, and read every transition back from sacct. The caller stops the daemon.
    """
    from sqlalchemy import select

    from mirage.daemon.store import Chain, ChainState, Segment

    since = int(time.time()) - 60
    work = d.root / "work"
    work.mkdir()
    script = d.root / "segment.sbatch"
    script.write_text(CHAIN_SCRIPT.replace("{run_s}", str(limit_min * 60 - 3)))
    ids = []
    run_id = secrets.token_hex(3)  # job names of their own: another run's cleanup skips them
    for i in range(chains):
        out = d.cli(
            "chain", "submit", str(script), "--segments", str(segments),
            "--name", f"{d.name}-{run_id}-c{i + 1}",
            "--", "-p", "gpu", "--gres=gpu:4", f"--cpus-per-task={CPUS_PER_JOB}",
            f"--time={limit_min}", f"--chdir={work}",
        )  # fmt: skip
        assert out["first_segment"] == "submitted", out
        ids.append(str(out["chain_id"]))
    load = BackgroundLoad(
        client, work, prefix=f"bg-{d.name}-{os.getpid()}", seed=seed, pending=pending
    )
    started = int(time.time())
    load.start()
    d.start()

    def active() -> int:
        with d.store.sessions() as s:
            return sum(1 for c in ids if (x := s.get(Chain, c)) and x.state is ChainState.ACTIVE)

    try:
        until(lambda: active() == 0, timeout, f"{d.name}: the chains to end\n{d.tail()}", every=2)
    finally:
        load.stop()
    ended = int(time.time())
    with d.store.sessions() as s:
        tokens = set(s.scalars(select(Segment.token)))

    def accounted() -> bool:
        jobs = jobs_by_token(d, client, since, queue=False)
        return all(
            t in jobs and all(j.state.is_finished and j.comment == f"mirage:{t}" for j in jobs[t])
            for t in tokens
        )

    until(accounted, 60, f"{d.name}: every segment finished in sacct", every=2)
    return LoadRun(ids, sacct_transitions(d, client, since), load, started, ended, since)


def transition_table(runs: dict[str, list[TransitionRecord]]) -> str:
    """Per transition (chain, k -> k+1) its gap, interruption and overlap under each run
    side by side, then per run the means and J (mirage.policy.cost, the default cost)."""
    import statistics

    keys = sorted({(t.chain.rpartition("-")[2], t.index) for ts in runs.values() for t in ts})
    head = f"{'transition':<14}" + "".join(f"{n + ' gap/int/ovl (s)':>30}" for n in runs)
    lines = [head]
    for chain, index in keys:
        row = f"{chain} {index}->{index + 1:<8}"
        for ts in runs.values():
            t = next((x for x in ts if x.chain.endswith(chain) and x.index == index), None)
            cell = "-" if t is None else f"{t.gap:+d} / {t.interruption} / {t.overlap}"
            row += f"{cell:>30}"
        lines.append(row)
    lines.append("")
    lines.append(
        f"{'run':<20}{'n':>4}{'mean gap':>10}{'mean int':>10}{'mean ovl':>10}{'mean J':>10}"
        f"{'presub':>8}"
    )
    for name, ts in runs.items():
        if not ts:
            lines.append(f"{name:<20}{0:>4}")
            continue
        lines.append(
            f"{name:<20}{len(ts):>4}"
            f"{statistics.fmean(t.gap for t in ts):>10.1f}"
            f"{statistics.fmean(t.interruption for t in ts):>10.1f}"
            f"{statistics.fmean(t.overlap for t in ts):>10.1f}"
            f"{statistics.fmean(t.cost for t in ts):>10.1f}"
            f"{sum(t.presubmitted for t in ts):>8}"
        )
    return "\n".join(lines)


def log_steps(log: str) -> tuple[int | None, int | None]:
    """The example job's log: (the step it resumed at, the step of its last checkpoint);
    None: it trained nothing."""
    if "starting from step 0" in log:
        resumed: int | None = 0
    else:
        m = re.search(r"resumed at step (\d+)", log)
        resumed = int(m.group(1)) if m else None
    ends = re.findall(r"(?:checkpointed at step|training complete at step) (\d+)", log)
    return resumed, (int(ends[-1]) if ends else None)
