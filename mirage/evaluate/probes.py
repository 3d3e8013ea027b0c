"""Counterfactual probes: a sample's whole outcome curve, from forks of one replay.

For a sample at ``t`` the replay (forked at ``t``) gets the predecessor; it starts at
``s``. At every decision step ``tau_k = s + k * step`` (k = 0..K, ``tau_K`` = the
predecessor's planned end, where the successor is submitted regardless) the base
simulation (predecessor, no successor) is forked twice:

- *estimate*: Slurm's start estimate for "submit now", as ``sbatch --test-only`` gives
  it (:meth:`mirage.sim.engine.Simulation.test_only`; -1: none);
- *outcome*: the successor is submitted and the fork runs until it starts: its start
  if submitted at ``tau_k`` (capped at the end of the sample's window; ``censored``).

Every policy's result on the sample follows from these curves without re-simulating: a
policy picks a step, using only what is visible at that step (the base world before the
successor exists: queue features, Slurm's estimate, the waits of jobs started so far);
the oracle is the step minimising J. These records are also the dataset for learned
policies.

Records are cached per sample (``<cache>/<setting key>/<t>.e<ESTIMATE_VERSION>.npz``), so a
second run reads them back and an interrupted run resumes; generation runs in parallel
with joblib processes, or on a Dask cluster given its address, each task replaying once up
to its first sample and forking forward from there.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from mirage.evaluate.protocol import Protocol, Setting
from mirage.extras import require
from mirage.profile.schema import ClusterProfile, load_profile
from mirage.sim.engine import Simulation
from mirage.sim.workload import JobSpec
from mirage.trace.load import skips_reported

log = logging.getLogger(__name__)

#: Per-step queue features recorded beside the outcome curve (what squeue shows).
QUEUE_FEATURES = (
    "pending_jobs",
    "pending_nodes",
    "running_jobs",
    "running_nodes",
    "free_nodes",
    "pending_ahead_nodes",  # nodes asked by pending jobs of higher priority than a new one
)


@dataclass
class SampleResult:
    """One sample's outcome curve and what a policy could see at each step."""

    t: int  # sample time: the predecessor's submission
    pred_start: int  # -1: the predecessor did not start within the window (unusable)
    time_limit: int
    steps: np.ndarray  # int64 (K+1,): decision times; steps[-1] = planned end
    succ_start: np.ndarray  # int64 (K+1,): successor start if submitted at steps[k]
    censored: np.ndarray  # bool (K+1,): did not start by the window's end (start = cap)
    estimate: np.ndarray  # int64 (K+1,): Slurm's estimate at steps[k], -1 if none
    queue: np.ndarray  # float64 (K+1, len(QUEUE_FEATURES))
    hist_start: np.ndarray  # int64: starts of jobs started in [t - history, planned end]
    hist_wait: np.ndarray  # int64: their waits (start - eligible), sorted by start

    @property
    def ok(self) -> bool:
        return self.pred_start >= 0

    @property
    def planned_end(self) -> int:
        return self.pred_start + self.time_limit

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(
            tmp,
            meta=np.array([self.t, self.pred_start, self.time_limit], dtype=np.int64),
            steps=self.steps,
            succ_start=self.succ_start,
            censored=self.censored,
            estimate=self.estimate,
            queue=self.queue,
            hist_start=self.hist_start,
            hist_wait=self.hist_wait,
        )
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> SampleResult:
        with np.load(path) as z:
            t, s, lim = (int(x) for x in z["meta"])
            return cls(
                t=t,
                pred_start=s,
                time_limit=lim,
                steps=z["steps"],
                succ_start=z["succ_start"],
                censored=z["censored"],
                estimate=z["estimate"],
                queue=z["queue"],
                hist_start=z["hist_start"],
                hist_wait=z["hist_wait"],
            )


@dataclass
class StepRecord:
    """A per-sample record of one array over the decision steps, cached beside the probes
    (``<t><suffix>``): subclasses add that array as their third field, named by ``FIELD``."""

    FIELD: typing.ClassVar[str]
    t: int
    pred_start: int  # -1: the predecessor did not start (as in the probe)

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        meta = np.array([self.t, self.pred_start])
        np.savez_compressed(tmp, meta=meta, **{self.FIELD: getattr(self, self.FIELD)})
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> typing.Self:
        with np.load(path) as z:
            t, s = (int(x) for x in z["meta"])
            return cls(t, s, z[cls.FIELD])  # type: ignore[call-arg]


def _empty(t: int, protocol: Protocol) -> SampleResult:
    z = np.zeros(0, dtype=np.int64)
    return SampleResult(
        t=t,
        pred_start=-1,
        time_limit=protocol.time_limit_s,
        steps=z,
        succ_start=z,
        censored=np.zeros(0, dtype=bool),
        estimate=z,
        queue=np.zeros((0, len(QUEUE_FEATURES))),
        hist_start=z,
        hist_wait=z,
    )


def chain_spec(sim: Simulation, protocol: Protocol, name: str) -> JobSpec:
    part = sim.profile.partition(protocol.partition)
    whole = protocol.gpus <= 0
    return JobSpec(
        submit=sim.now,
        run=protocol.time_limit_s,
        time_limit=protocol.time_limit_s,
        nodes=protocol.nodes,
        partition=part.name,
        gpus=protocol.nodes * part.gpus_per_node if whole else protocol.gpus,
        cpus=protocol.nodes * part.cpus_per_node if whole else 0,
        exclusive=whole,
        user="mirage-eval",
        name=name,
    )


def queue_features(sim: Simulation, partition: str) -> list[float]:
    pend = [v for v in sim.pending_jobs() if v.spec.partition == partition]
    run = [v for v in sim.running_jobs() if v.spec.partition == partition]
    eligible = [v for v in pend if v.eligible is not None and not v.held]
    # A new submission has age 0: every eligible pending job has at least its priority.
    ahead = sum(v.spec.nodes for v in eligible)
    return [
        float(len(pend)),
        float(sum(v.spec.nodes for v in pend)),
        float(len(run)),
        float(sum(v.spec.nodes for v in run)),
        float(sim.free.get(partition, 0)),
        float(ahead),
    ]


def _estimate(base: Simulation, spec: JobSpec) -> int:
    """``sbatch --test-only``'s answer for ``spec`` now (-1: none), as Slurm computes it
    (:mod:`mirage.sim.testonly`)."""
    start = base.test_only(spec)
    return -1 if start is None else int(start)


@dataclass
class BaseWorld:
    """A sample's base world, which every per-sample record replays: the replay forked at
    the sample time with the predecessor added and run until it started (``sim``), the
    predecessor's request (the successor's, renamed and resubmitted), its start, the
    decision steps (the last one its planned end), the end of the sample's window and the
    predecessor's job id."""

    sim: Simulation
    spec: JobSpec
    pred_start: int
    steps: list[int]
    cap: int
    pred_id: str = ""  # the predecessor's job id in ``sim``


def base_world(sim: Simulation, protocol: Protocol) -> BaseWorld | None:
    """The base world of the sample at ``sim.now`` (``sim`` itself is not changed); None
    when the sample is unusable (the predecessor did not start within a window, or the
    window cannot hold its run)."""
    base = sim.fork()
    spec = chain_spec(base, protocol, "pred")
    pred = base.add_job(spec)
    s = base.run_until_started(pred, until=sim.now + protocol.window_s)
    if s is None or protocol.time_limit_s >= protocol.window_s:
        return None
    end = s + protocol.time_limit_s
    steps = [min(end, s + k * protocol.step_s) for k in range(protocol.steps + 1)]
    return BaseWorld(base, spec, s, steps, s + protocol.window_s, pred)


def probe_sample(sim: Simulation, protocol: Protocol) -> SampleResult:
    """The outcome curve of the sample at ``sim.now`` (``sim`` itself is not changed)."""
    t = sim.now
    world = base_world(sim, protocol)
    if world is None:
        return _empty(t, protocol)
    base, spec, s, cap, end = world.sim, world.spec, world.pred_start, world.cap, world.steps[-1]
    k_steps = protocol.steps
    steps = np.array(world.steps, np.int64)
    succ = np.empty(k_steps + 1, dtype=np.int64)
    cens = np.zeros(k_steps + 1, dtype=bool)
    est = np.empty(k_steps + 1, dtype=np.int64)
    queue = np.empty((k_steps + 1, len(QUEUE_FEATURES)))
    part = spec.partition
    for k, tau in enumerate(steps.tolist()):
        base.run_until(tau)
        queue[k] = queue_features(base, part)
        sspec = dataclasses.replace(spec, submit=tau, name="succ")
        est[k] = _estimate(base, sspec)
        fork = base.fork()
        job = fork.add_job(sspec)
        start = fork.run_until_started(job, until=cap)
        cens[k] = start is None
        succ[k] = cap if start is None else start
    starts, waits = [], []
    for v in base.all_jobs():
        if v.start is None or v.start < t - protocol.history_s or v.start > end:
            continue
        starts.append(v.start)
        ready = v.eligible if v.eligible is not None else v.spec.submit
        waits.append(max(0, v.start - ready))
    order = np.argsort(np.array(starts, dtype=np.int64), kind="stable")
    return SampleResult(
        t=t,
        pred_start=int(s),
        time_limit=protocol.time_limit_s,
        steps=steps,
        succ_start=succ,
        censored=cens,
        estimate=est,
        queue=queue,
        hist_start=np.array(starts, dtype=np.int64)[order],
        hist_wait=np.array(waits, dtype=np.int64)[order],
    )


# ---- building the replay a task forks from ------------------------------------------


def load_setting_jobs(setting: Setting) -> tuple[ClusterProfile, list[JobSpec]]:
    """The profile and the prepared jobs of ``setting`` (the trace cut at the split's end)."""
    from mirage.sim.prepare import prepare_trace
    from mirage.trace.readers import load_trace

    profile = load_profile(setting.profile)
    df = load_trace(setting.trace).jobs
    part = profile.partition(setting.protocol.partition)
    sized = dataclasses.replace(part, nodes=setting.nodes)
    profile = dataclasses.replace(
        profile, partitions=tuple(sized if p.name == part.name else p for p in profile.partitions)
    )
    prep = prepare_trace(df, profile, before=setting.split.end)
    return profile, prep.jobs


class Record(typing.Protocol):
    """A per-sample record: its sample time, and how it saves itself."""

    t: int

    def save(self, path: Path) -> None: ...


R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class Recorder(Generic[R]):
    """What is recorded for a sample (``record(sim at t, protocol)``) and how it is cached
    (``<cache>/<setting key>/<t><suffix>``). Module-level functions, so that joblib and
    Dask can ship it to their workers."""

    suffix: str
    record: Callable[[Simulation, Protocol], R]
    load: Callable[[Path], R]


def run_task(
    setting: Setting, times: Sequence[int], cache: str | None, rec: Recorder[R]
) -> list[R]:
    """One task: replay up to each sample time in turn, record it (or read it cached)."""
    out: list[R] = []
    todo = [t for t in times if cache is None or not _path(cache, setting, t, rec).exists()]
    sim: Simulation | None = None
    if todo:
        # The command that started this task read the trace first and reported its skips.
        with skips_reported():
            profile, jobs = load_setting_jobs(setting)
        first = min(j.submit for j in jobs)
        sim = Simulation(profile, start_time=min(first, *todo), track_estimates=False)
        sim.add_jobs_skipping_invalid(jobs)
    for t in times:
        path = _path(cache, setting, t, rec) if cache is not None else None
        if path is not None and path.exists():
            out.append(rec.load(path))
            continue
        assert sim is not None
        sim.run_until(t)
        res = rec.record(sim, setting.protocol)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            res.save(path)
        out.append(res)
    return out


def _path(cache: str, setting: Setting, t: int, rec: Recorder[R]) -> Path:
    return Path(cache) / setting.key() / f"{t}{rec.suffix}"


def is_cached(cache: str, setting: Setting, t: int, rec: Recorder[R]) -> bool:
    """Is the record of ``rec`` at ``t`` in ``cache``?"""
    return _path(cache, setting, t, rec).exists()


def chunks(times: Sequence[int], n: int) -> list[list[int]]:
    """Contiguous chunks (each task replays once to its first sample)."""
    n = max(1, min(n, len(times)))
    size = -(-len(times) // n) if times else 0
    return [list(times[i : i + size]) for i in range(0, len(times), size)] if times else []


Progress = Callable[[int, int], None]


def _probe(sim: Simulation, protocol: Protocol) -> SampleResult:
    return probe_sample(sim, protocol)  # looked up at call time (tests patch it)


#: Bumped when the recorded estimate changes meaning, so that older probes are recorded
#: again: 2, ``sbatch --test-only`` as Slurm computes it (before: the backfill plan's
#: start, none beyond ``bf_window``).
ESTIMATE_VERSION = 2
PROBES: Recorder[SampleResult] = Recorder(f".e{ESTIMATE_VERSION}.npz", _probe, SampleResult.load)


def generate(
    setting: Setting,
    times: Sequence[int],
    *,
    cache: str | None = None,
    n_jobs: int = 1,
    tasks: int | None = None,
    dask_address: str | None = None,
    progress: Progress | None = None,
) -> list[SampleResult]:
    """Every sample's outcome curve (in order), probing in parallel the ones not cached."""
    return record_all(
        setting,
        times,
        PROBES,
        cache=cache,
        n_jobs=n_jobs,
        tasks=tasks,
        dask_address=dask_address,
        progress=progress,
    )


def record_all(
    setting: Setting,
    times: Sequence[int],
    rec: Recorder[R],
    *,
    cache: str | None = None,
    n_jobs: int = 1,
    tasks: int | None = None,
    dask_address: str | None = None,
    progress: Progress | None = None,
) -> list[R]:
    """Every sample's record (in order), recording in parallel the ones not cached."""
    times = sorted(times)
    results: dict[int, R] = {}
    for t in times:
        if cache is not None and is_cached(cache, setting, t, rec):
            results[t] = rec.load(_path(cache, setting, t, rec))
    todo = [t for t in times if t not in results]
    done = len(results)
    if progress is not None:
        progress(done, len(times))
    parts = chunks(todo, tasks or max(1, n_jobs) * 2)
    t0 = time.perf_counter()
    for batch in _execute(setting, parts, cache, n_jobs, dask_address, rec):
        for r in batch:
            results[r.t] = r
        done += len(batch)
        if progress is not None:
            progress(done, len(times))
    if todo:
        log.info("recorded %d samples in %.1f s", len(todo), time.perf_counter() - t0)
    return [results[t] for t in times]


def _execute(  # noqa: PLR0917 - private, one call site
    setting: Setting,
    parts: list[list[int]],
    cache: str | None,
    n_jobs: int,
    dask_address: str | None,
    rec: Recorder[R],
) -> Iterable[list[R]]:
    if not parts:
        return
    if dask_address:
        require("dask", "--dask-address")
        from distributed import Client, as_completed

        with Client(dask_address) as client:  # type: ignore[no-untyped-call]
            futures = [client.submit(run_task, setting, p, cache, rec, pure=False) for p in parts]
            for fut in as_completed(futures):  # type: ignore[no-untyped-call]
                yield fut.result()
        return
    if n_jobs <= 1:
        for p in parts:
            yield run_task(setting, p, cache, rec)
        return
    from joblib import Parallel, delayed

    par = Parallel(n_jobs=n_jobs, return_as="generator_unordered")
    yield from par(delayed(run_task)(setting, p, cache, rec) for p in parts)


def summary(results: Sequence[SampleResult]) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    return {"samples": len(results), "usable": len(ok)}
