"""The simulator behind the ``SlurmClient`` interface, so the daemon and policies run on it.

Time moves only when the caller says so: ``advance_to(t)`` / ``advance(seconds)``, or,
with an injected ``clock``, to ``clock()`` at the start of every call. Submitted jobs need
a run time the real cluster would discover by running them: ``runtime(request)`` gives
it (default: the job runs exactly to its time limit, as chained training segments do).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from mirage.sim.engine import Simulation
from mirage.sim.errors import SimError
from mirage.sim.views import JobView
from mirage.sim.workload import INFINITE, JobSpec
from mirage.slurm.client import SlurmClient
from mirage.slurm.syntax import digits, format_duration, gres_gpus
from mirage.slurm.types import (
    JobState,
    QueueSnapshot,
    SlurmJob,
    StartEstimate,
    SubmitError,
    SubmitRequest,
)

Runtime = Callable[[SubmitRequest], int | None]


def qos_request(args: Sequence[str]) -> str:
    """The job QOS from sbatch options in ``extra_args`` (--qos=NAME, --qos NAME, -q NAME);
    "" when not given (the job gets its default, mirage.sim.limits)."""
    items = iter(args)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name in ("--qos", "-q"):
            return value if eq else next(items, "")
        if name.startswith("-q") and not name.startswith("--") and len(name) > 2:
            return name[2:]
    return ""


def cpu_request(args: Sequence[str]) -> tuple[int, bool]:
    """(CPUs per node, --exclusive) from sbatch options in ``extra_args``.

    CPUs per node = --cpus-per-task (-c) x --ntasks-per-node; 0 when neither is given.
    """
    per_task = tasks = 0
    exclusive = False
    items = iter(args)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name == "--exclusive":
            exclusive = True
            continue
        if name.startswith("-c") and not name.startswith("--") and len(name) > 2:
            name, value, eq = "-c", name[2:], "="
        if name not in ("--cpus-per-task", "-c", "--ntasks-per-node"):
            continue
        if not eq:
            value = next(items, "")
        if not digits(value) or int(value) < 1:
            raise SubmitError(["sbatch"], 1, f"invalid {name} value {value!r}")
        if name == "--ntasks-per-node":
            tasks = int(value)
        else:
            per_task = int(value)
    if not (per_task or tasks):
        return 0, exclusive
    return max(1, per_task) * max(1, tasks), exclusive


class SimSlurmClient(SlurmClient):
    """A SlurmClient whose cluster is a ``Simulation``."""

    def __init__(
        self,
        sim: Simulation,
        user: str = "mirage",
        account: str = "",
        runtime: Runtime | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.sim = sim
        self.user = user
        self.account = account
        self.runtime = runtime
        self.clock = clock
        self.signals: list[tuple[str, str]] = []  # (job id, signal) sent, for tests

    # ---- time ------------------------------------------------------------------------

    def now(self) -> int:
        self._sync()
        return self.sim.now

    def advance_to(self, t: int) -> None:
        self.sim.run_until(t)

    def advance(self, seconds: int) -> None:
        self.sim.run_until(self.sim.now + seconds)

    def _sync(self) -> None:
        if self.clock is not None:
            self.sim.run_until(self.clock())

    # ---- reads -----------------------------------------------------------------------

    def queue(self) -> QueueSnapshot:
        self._sync()
        sim = self.sim
        jobs = [self._record(v) for v in sim.pending_jobs() + sim.running_jobs()]
        jobs.sort(key=lambda j: int(j.job_id))
        return QueueSnapshot(taken_at=sim.now, jobs=tuple(jobs), slurm_version="sim")

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        """Jobs submitted by ``end`` that had not finished before ``start`` (as sacct -S -E;
        held or not: the simulator's answer is always ``every_state``'s).

        The window is chosen before any job's view is built: a replay holds months of
        finished jobs, and viewing each one every poll was most of a replay's time."""
        self._sync()
        sim = self.sim
        upto = sim.now if end is None else end
        inside = [
            i
            for i, (spec, state, ended) in enumerate(
                zip(sim.specs, sim.state, sim.end, strict=True)
            )
            if state is not None
            and spec.submit <= upto
            and not (state.is_finished and ended is not None and ended < start)
        ]
        return [self._record(v) for v in sim.views_of(inside)]

    def start_estimates(self) -> dict[str, StartEstimate]:
        self._sync()
        return {
            v.job_id: StartEstimate(v.job_id, v.estimate, partition=v.spec.partition)
            for v in self.sim.pending_jobs()
        }

    def _record(self, v: JobView) -> SlurmJob:
        s = v.spec
        st = v.state or JobState.PENDING
        start = v.start if st is not JobState.PENDING else v.estimate
        exit_code = {JobState.COMPLETED: 0, JobState.FAILED: 1}.get(st)
        return SlurmJob(
            job_id=v.job_id,
            name=s.name,
            user=s.user,
            account=self.account,
            partition=s.partition,
            state=st,
            reason=v.reason,
            submit=s.submit,
            eligible=v.eligible,
            start=start,
            end=v.end,
            time_limit=v.time_limit,
            nodes=s.nodes,
            cpus=s.cpus or s.nodes * self._partition_cpus(s.partition),
            gpus=s.gpus,
            priority=v.priority,
            dependency=s.dependency,
            comment=s.comment,
            exit_code=exit_code,
            raw_state=st.value,
            node_list=v.nodes,
        )

    def _partition_cpus(self, name: str) -> int:
        return self.sim.profile.partition(name).cpus_per_node

    # ---- actions ---------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> str:
        self._sync()
        spec = self._spec(request)
        try:
            job_id = self.sim.add_job(spec)
        except SimError as exc:
            raise SubmitError(["sbatch"], 1, str(exc)) from exc
        self.sim.run_until(self.sim.now)  # handle the submit now, as slurmctld does
        return job_id

    def _spec(self, request: SubmitRequest) -> JobSpec:
        profile = self.sim.profile
        try:
            part = profile.partition(request.partition)
        except ValueError as exc:
            raise SubmitError(["sbatch"], 1, str(exc)) from exc
        gpus = gres_gpus(request.gres) or 0  # per node, as sbatch --gres means it
        cpus, exclusive = cpu_request(request.extra_args)
        nodes = request.nodes or 1
        if (
            nodes > self.sim.capacity[part.name]
            or gpus > part.gpus_per_node
            or cpus > part.cpus_per_node
        ):
            raise SubmitError(["sbatch"], 1, "Requested node configuration is not available")
        # Neither GPUs nor CPUs asked for: whole nodes, as the simulator's traces do (real
        # cons_tres would give such a job one CPU per node and share the rest).
        whole = exclusive or (gpus == 0 and cpus == 0)
        if whole:
            gpus, cpus = part.gpus_per_node, part.cpus_per_node
        limit = request.time_limit if request.time_limit is not None else part.max_time_s
        if limit is not None and part.max_time_s is not None and limit > part.max_time_s:
            raise SubmitError(["sbatch"], 1, "Requested time limit is invalid")
        run = self.runtime(request) if self.runtime is not None else None
        if run is None:
            run = INFINITE if limit is None else limit
        return JobSpec(
            submit=self.sim.now,
            run=run,
            time_limit=limit,
            nodes=nodes,
            partition=part.name,
            gpus=nodes * gpus,
            cpus=nodes * max(1, cpus),
            exclusive=whole,
            user=self.user,
            name=request.job_name or "",
            dependency=request.dependency or "",
            hold=request.hold,
            comment=request.comment or "",
            qos=qos_request(request.extra_args),
        )

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        self._sync()
        for job_id in job_ids:
            try:
                if pending_only and self.sim.view(job_id).state not in (None, JobState.PENDING):
                    continue
                self.sim.cancel(job_id)
            except SimError:
                continue  # unknown ids are not an error (scancel's behaviour)

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        self.signals.append((job_id, signal))

    def hold(self, job_ids: Sequence[str]) -> None:
        """Hold pending jobs (a running one is left alone, and it is no error: Slurm
        22.05's scontrol accepts it too)."""
        self._sync()
        for job_id in job_ids:
            self.sim.set_hold(job_id, True)
        self.sim.run_until(self.sim.now)

    def release(self, job_ids: Sequence[str]) -> None:
        self._sync()
        for job_id in job_ids:
            self.sim.set_hold(job_id, False)
        self.sim.run_until(self.sim.now)

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        self._sync()
        self.sim.update_time_limit(job_id, seconds)
        self.sim.run_until(self.sim.now)

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        """Slurm's will-run answer (:meth:`Simulation.test_only`: running jobs' ends plus
        the area of the pending jobs ahead); the simulation is untouched."""
        self._sync()
        spec = self._spec(request)
        start = self.sim.test_only(spec)
        if start is None:
            raise SubmitError(["sbatch", "--test-only"], 1, "Requested node configuration "
                              "is not available")  # fmt: skip
        return StartEstimate(None, start, partition=spec.partition)

    def show(self, kind: str) -> list[Mapping[str, str]]:
        """``scontrol show partition|node|config`` records derived from the profile."""
        if kind == "partition":
            return [self._show_partition(p.name) for p in self.sim.profile.partitions]
        if kind == "node":
            return self._show_nodes()
        if kind == "config":
            return [self._show_config()]
        raise SimError(f"show {kind!r}: only partition, node and config are simulated")

    def _show_partition(self, name: str) -> Mapping[str, str]:
        p = self.sim.profile.partition(name)
        members = self.sim.part_nodes[name]
        return {
            "PartitionName": name,
            "TotalNodes": str(len(members)),
            "TotalCPUs": str(sum(self.sim.node_cpus[n] for n in members)),
            "MaxTime": format_duration(p.max_time_s),
            "Default": "YES" if p.default else "NO",
            "State": "UP",
        }

    def _show_nodes(self) -> list[Mapping[str, str]]:
        sim = self.sim
        out: list[Mapping[str, str]] = []
        for n, name in enumerate(sim.node_names):
            p = self.sim.profile.partition(sim.node_parts[n][0])
            gpus = sim.node_gpus[n]
            gres = "(null)"
            if gpus:
                gres = f"gpu:{p.gpu_type}:{gpus}" if p.gpu_type else f"gpu:{gpus}"
            if sim.nrun[n] == 0:
                state = "IDLE"
            elif sim.cfree[n] == 0 and sim.gfree[n] == 0:
                state = "ALLOCATED"
            else:
                state = "MIXED"
            out.append(
                {
                    "NodeName": name,
                    "CPUTot": str(sim.node_cpus[n]),
                    "CPUAlloc": str(sim.node_cpus[n] - sim.cfree[n]),
                    "RealMemory": str(p.memory_mb_per_node),
                    "Gres": gres,
                    "Partitions": ",".join(sim.node_parts[n]),
                    "State": state,
                }
            )
        return out

    def _show_config(self) -> Mapping[str, str]:
        s = self.sim.sched
        params = (
            f"bf_interval={s.bf_interval_s},bf_window={s.bf_window_s // 60},"
            f"bf_resolution={s.bf_resolution_s},bf_max_job_test={s.bf_max_job_test},"
            f"sched_interval={s.sched_interval_s}"
        )
        return {
            "ClusterName": f"sim-{self.sim.profile.name}",
            "SchedulerType": "sched/backfill",
            "SchedulerParameters": params,
            "PriorityType": "priority/multifactor",
            "PriorityWeightAge": str(s.priority_weight_age),
            "PriorityWeightJobSize": str(s.priority_weight_job_size),
            "PriorityWeightFairShare": str(s.priority_weight_fairshare),
            "PriorityWeightPartition": str(s.priority_weight_partition),
            "PriorityMaxAge": format_duration(s.priority_max_age_s),
            "PriorityFavorSmall": "Yes" if s.priority_favor_small else "No",
        }
