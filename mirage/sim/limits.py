"""QOS and association limits: what makes a job wait besides capacity (Slurm 22.05).

Slurm enforces these with AccountingStorageEnforce=associations,limits,qos; the rules
here follow src/slurmctld/acct_policy.c of slurm-22-05-8-1, function by function:

- Submit (``acct_policy_validate``, called from job_mgr.c ``_job_create``): a job over
  MaxSubmitJobsPerUser (QOS) or MaxSubmitJobs (association) is refused, the job is never
  created (sbatch: "Job violates accounting/QOS policy"); the reason string is Slurm's
  (``QOSMaxSubmitJobPerUserLimit``, ``AssocMaxSubmitJobLimit``). Here: ``SimError`` for a
  job submitted now, or, for a job whose submit time comes later, it is dropped at its
  submit (state CANCELLED, counted in ``Simulation.skipped`` under the reason).
- Before node selection (``acct_policy_job_runnable_pre_select`` and its
  ``_qos_job_runnable_pre_select``): per QOS, GrpJobs, MaxJobsPerUser, MaxWall; then the
  association: GrpJobs, MaxJobs, MaxWall.
- After node selection (``acct_policy_job_runnable_post_select`` and its
  ``_qos_job_runnable_post_select``): per QOS, GrpTRES then MaxTRESPerUser; then the
  association's GrpTRES; TRES in Slurm's order (cpu, node, gres/gpu), each checked as
  ``_validate_tres_usage_limits`` does with safe limits: request + usage > limit holds.

QOS order (``acct_policy_set_qos_order``): the partition QOS first, then the job QOS,
unless the job QOS has Flags=OverPartQOS; a limit the first QOS sets hides the same limit
in the second (the ``qos_out_ptr`` record), and a QOS that sets GrpJobs, MaxJobsPerUser,
MaxWall or a GrpTRES entry hides the association's (pre_select's ``qos_rec`` checks).
Usage counts every running job in each QOS it belongs to (``_qos_adjust_limit_usage``
for both QOS) and in its association (``_adjust_limit_usage``), whatever limit held it.

The reasons are ``job_reason_string`` of src/common/slurm_protocol_defs.c. A held job's
reason is the first rule that fails, in the order above (Slurm stops at the first).

Scheduling (the engine's hooks call ``held``, ``status`` and ``backfill_order``):
Slurm's schedule() (slurmctld/job_scheduler.c) skips a job that fails these checks and
goes on with the next one ("delayed for accounting policy"): it does not block its
partition (unless SchedulerParameters=assoc_limit_stop, not modelled), and a job behind a
blocked partition keeps its limit reason (``_failed_partition`` only overwrites
Resources or no reason with Priority); the simulator's reason is always the limit's.
Backfill (plugins/sched/backfill/backfill.c ``_attempt_backfill``) skips a job failing
``acct_policy_job_runnable_pre_select`` before counting it against bf_max_job_test, and a
job whose selection fails with ESLURM_ACCOUNTING_POLICY (the post_select TRES limits)
after counting it ("Unknown future start time, just skip job"): neither gets a
reservation, so no start estimate. Counts are updated at every start and
end, so a job started earlier in the same pass counts for the next.

Modelling choices: one association per user (a "*" one stands for every user without
their own: each such user is an association of its own, as Slurm creates per-user
associations); no parent (account) associations, no MaxJobsPerAccount, no TRES-minutes,
no GrpWall. Node TRES count each job's nodes (Slurm counts nodes shared by jobs of one
QOS once); a whole-node job's CPUs and GPUs are its nodes' (what it is allocated).
A time limit over MaxWall holds the job for ever (without Flags=DenyOnLimit Slurm accepts
it and it pends with the reason); a job without a time limit gets the smaller of its
partition's MaxTime and MaxWall (``_set_time_limit``).

With no limit configured ``Limits.build`` returns None and the engine does nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from mirage.profile.schema import LIMIT_TRES, Association, ClusterProfile, Qos, limit_tres
from mirage.sim.errors import SimError
from mirage.sim.workload import JobSpec

# Slurm's job_reason_string for each TRES (cpu, node, gres) of a limit kind.
_QOS_GRP = {"cpu": "QOSGrpCpuLimit", "node": "QOSGrpNodeLimit", "gres/gpu": "QOSGrpGRES"}
_QOS_PU = {
    "cpu": "QOSMaxCpuPerUserLimit",
    "node": "QOSMaxNodePerUserLimit",
    "gres/gpu": "QOSMaxGRESPerUser",
}
_ASSOC_GRP = {"cpu": "AssocGrpCpuLimit", "node": "AssocGrpNodeLimit", "gres/gpu": "AssocGrpGRES"}

#: Every reason a limit gives (for telling limit-held jobs from others).
LIMIT_REASONS = frozenset(
    {
        "QOSGrpJobsLimit",
        "QOSMaxJobsPerUserLimit",
        "QOSMaxWallDurationPerJobLimit",
        "QOSMaxSubmitJobPerUserLimit",
        "AssocGrpJobsLimit",
        "AssocMaxJobsLimit",
        "AssocMaxWallDurationPerJobLimit",
        "AssocMaxSubmitJobLimit",
        *_QOS_GRP.values(),
        *_QOS_PU.values(),
        *_ASSOC_GRP.values(),
    }
)

Key = tuple[str, ...]
#: A check: (counter key or None for "never", need, limit, reason).
Rule = tuple[Key | None, int, int, str]
#: What Limits.add derives from a job's spec: pre- and post-select rules, run counters,
#: submit checks, submit counters, default time limit.
_Made = tuple[
    tuple[Rule, ...],
    tuple[Rule, ...],
    tuple[tuple[Key, int], ...],
    tuple[tuple[Key, int, str], ...],
    tuple[Key, ...],
    int | None,
]


#: Prefixes of Slurm's other limit reasons (TRES-minutes, memory, per-account, ...).
_LIMIT_PREFIXES = ("QOSGrp", "QOSMax", "AssocGrp", "AssocMax", "Association", "QOSJobLimit",
                   "QOSResourceLimit", "QOSTimeLimit", "MaxCpuPerAccount", "MaxGRESPerAccount",
                   "MaxNodePerAccount", "MaxMemPerAccount")  # fmt: skip


def is_limit_reason(reason: str) -> bool:
    """Is this pending reason a QOS or association limit (not resources or priority)?"""
    return reason in LIMIT_REASONS or reason.startswith(_LIMIT_PREFIXES)


class Limits:
    """The limit state of one simulation: per-job rules and usage counters.

    Per job (by index, appended by ``add`` in the engine's order): the pre-select and
    post-select rules, the counters its run adds to, and its submit-limit checks.
    ``used`` maps counter keys to running (or, for submit counters, submitted) totals.
    """

    def __init__(self, profile: ClusterProfile) -> None:
        self.qos = {q.name: q for q in profile.qos}
        self.part_qos = {p.name: p.qos for p in profile.partitions if p.qos}
        self.part_shape = {p.name: (p.cpus_per_node, p.gpus_per_node) for p in profile.partitions}
        self.max_time = {p.name: p.max_time_s for p in profile.partitions}
        self.profile = profile
        self.default_qos = "normal" if "normal" in self.qos else ""
        self._tres: dict[str, dict[str, int]] = {}  # limit_tres, cached
        self.used: dict[Key, int] = {}
        # Limits.add's rules by spec key: a pure function of the spec and the profile,
        # so forks share it (not copied)
        self._made: dict[tuple[object, ...], _Made] = {}
        self.pre: list[tuple[Rule, ...]] = []
        self.post: list[tuple[Rule, ...]] = []
        self.runs: list[tuple[tuple[Key, int], ...]] = []  # counters a run adds to
        self.subs: list[tuple[tuple[Key, int, str], ...]] = []  # submit checks
        self.sub_keys: list[tuple[Key, ...]] = []  # submit counters
        self.counted: list[bool] = []  # submit counters hold this job
        self.counting: list[bool] = []  # run counters hold this job
        # Rule tuples interned as groups (jobs of one user and QOS share theirs), so that a
        # pass can test every pending job at once: one check per group (``held``).
        self._group_of: dict[tuple[Rule, ...], int] = {(): 0}
        self.groups: list[tuple[Rule, ...]] = [()]
        self._gpre = np.zeros(64, dtype=np.int64)  # per job: its pre-select rules' group
        self._gpost = np.zeros(64, dtype=np.int64)
        # per group: does it fail now? Kept current lazily: a change of a counter marks
        # the groups whose rules read it (_key_groups) for a recheck at the next ``held``
        self._gfail = np.zeros(64, dtype=bool)
        self._key_groups: dict[Key, tuple[int, ...]] = {}
        self._dirty: set[int] = set()
        # the same as Python lists, for the passes' job-by-job checks (list indexing is
        # several times cheaper than a numpy scalar or a walk over the rules)
        self._gp: list[int] = []  # per job: pre-select group
        self._gq: list[int] = []  # per job: post-select group
        self._gf: list[bool] = [False]  # per group: fails now (current after _refresh)

    @staticmethod
    def build(profile: ClusterProfile) -> Limits | None:
        """The limit state, or None when the profile sets no limit (no cost then)."""
        if not any(q.has_limits for q in profile.qos) and not any(
            a.has_limits for a in profile.associations
        ):
            return None
        return Limits(profile)

    def copy(self) -> Limits:
        """For ``Simulation.fork``: C-level copies of every mutable container."""
        clone = object.__new__(Limits)
        clone.__dict__.update(self.__dict__)
        for name in ("used", "pre", "post", "runs", "subs", "sub_keys", "counted", "counting",
                     "_group_of", "groups", "_gpre", "_gpost", "_gfail", "_key_groups",
                     "_dirty", "_gp", "_gq", "_gf"):  # fmt: skip
            setattr(clone, name, getattr(self, name).copy())
        return clone

    # ---- adding jobs ---------------------------------------------------------------

    def job_qos(self, spec: JobSpec) -> tuple[Qos | None, Qos | None]:
        """(first, second) QOS as ``acct_policy_set_qos_order`` ranks them."""
        name = spec.qos
        if not name:
            assoc = self.profile.association(spec.user)
            name = (assoc.default_qos if assoc else "") or self.default_qos
        job = self.qos.get(name) if name else None
        if name and job is None:
            raise SimError(f"invalid QOS {name!r} (Invalid qos specification)", "invalid qos")
        part_name = self.part_qos.get(spec.partition, "")
        part = self.qos.get(part_name) if part_name else None
        if job is None or part is None:
            return (part or job), None
        if job.name == part.name:
            return part, None
        return (job, part) if job.over_part_qos else (part, job)

    def add(self, spec: JobSpec, now: int) -> int | None:
        """Record job number ``len(self.pre)``'s rules; may refuse it (``SimError``).

        Returns the time limit to use when the job has none and a MaxWall applies
        (``_set_time_limit``), else None.
        """

        made = (spec.user, spec.qos, spec.partition, spec.time_limit, spec.nodes,
                spec.whole_nodes, spec.per_node())  # fmt: skip
        got = self._made.get(made)
        if got is None:  # jobs of one user and shape share their rules: built once
            got = self._made[made] = self._make(spec)
        pre, post, runs, subs, sub_keys, new_limit = got
        counted = False
        if spec.submit <= now:  # submitted now: refused now (acct_policy_validate)
            why = self._over_submit(subs)
            if why:
                raise SimError(f"job violates accounting/QOS policy ({why})", why)
            counted = True
            for key in sub_keys:
                self.used[key] = self.used.get(key, 0) + 1
            self._touched(sub_keys)
        i = len(self.pre)
        self.pre.append(pre)
        self.post.append(post)
        if i == len(self._gpre):
            self._gpre = np.concatenate([self._gpre, np.zeros_like(self._gpre)])
            self._gpost = np.concatenate([self._gpost, np.zeros_like(self._gpost)])
        self._gpre[i] = gp = self._group(self.pre[i])
        self._gpost[i] = gq = self._group(self.post[i])
        self._gp.append(gp)
        self._gq.append(gq)
        self.runs.append(runs)
        self.subs.append(subs)
        self.sub_keys.append(sub_keys)
        self.counted.append(counted)
        self.counting.append(False)
        return new_limit

    def _make(self, spec: JobSpec) -> _Made:
        """A job's rules (Limits.add), in Slurm's order, and its default time limit."""
        q1, q2 = self.job_qos(spec)
        assoc = self.profile.association(spec.user)
        new_limit = self._default_limit(spec, q1, q2, assoc)
        limit = spec.time_limit if new_limit is None else new_limit
        if limit is None:
            limit = self.max_time[spec.partition]
        r = _Rules(spec.user, limit)
        for q in (q1, q2):  # _qos_job_runnable_pre_select, for each QOS in order
            if q is not None:
                r.qos_pre(q)
        if assoc is not None:  # acct_policy_job_runnable_pre_select: then the association
            r.assoc_pre(assoc)
        need = self._need(spec)
        for q in (q1, q2):  # _qos_job_runnable_post_select: GrpTRES, then MaxTRESPerUser
            if q is not None:
                r.qos_post(q, need, self._parsed(q.grp_tres), self._parsed(q.max_tres_per_user))
        if assoc is not None:  # acct_policy_job_runnable_post_select: association GrpTRES
            r.assoc_post(need, self._parsed(assoc.grp_tres))
        return (tuple(r.pre), tuple(r.post), tuple(r.runs), tuple(r.subs), tuple(r.sub_keys),
                new_limit)  # fmt: skip

    def _group(self, rules: tuple[Rule, ...]) -> int:
        g = self._group_of.get(rules)
        if g is None:
            g = self._group_of[rules] = len(self.groups)
            self.groups.append(rules)
            if g == len(self._gfail):
                self._gfail = np.concatenate([self._gfail, np.zeros_like(self._gfail)])
            for key, _, _, _ in rules:
                if key is not None:
                    self._key_groups[key] = (*self._key_groups.get(key, ()), g)
            self._gf.append(False)
            self._dirty.add(g)
        return g

    def _refresh(self) -> None:
        """Check again the groups whose counters changed since the last check."""
        groups, check, fails, flags = self.groups, self._fails, self._gfail, self._gf
        for g in self._dirty:
            flags[g] = fails[g] = bool(check(groups[g]))
        self._dirty.clear()

    def rule_pairs(self, jobs: Iterable[int]) -> frozenset[tuple[int, int]]:
        """The distinct (pre-select, post-select) rule groups of these jobs."""
        gp, gq = self._gp, self._gq
        return frozenset((gp[i], gq[i]) for i in jobs)

    def all_fail(self, pairs: frozenset[tuple[int, int]]) -> bool:
        """Is every job with one of these rule-group pairs held by a limit now?"""
        if self._dirty:
            self._refresh()
        gf = self._gf
        return all(gf[a] or gf[b] for a, b in pairs)

    def _touched(self, keys: Iterator[Key] | Sequence[Key]) -> None:
        """Counters changed: the groups whose rules read them are checked again."""
        kg = self._key_groups
        for key in keys:
            got = kg.get(key)
            if got:
                self._dirty.update(got)

    def _need(self, spec: JobSpec) -> dict[str, int]:
        """The job's TRES: a whole-node job's CPUs and GPUs are its nodes'."""
        count = spec.nodes
        if spec.whole_nodes:
            cpus_pn, gpus_pn = self.part_shape[spec.partition]
            return {"cpu": count * cpus_pn, "node": count, "gres/gpu": count * gpus_pn}
        g, c = spec.per_node()
        return {"cpu": count * c, "node": count, "gres/gpu": count * g}

    def _default_limit(
        self, spec: JobSpec, q1: Qos | None, q2: Qos | None, assoc: Association | None
    ) -> int | None:
        """_set_time_limit: a job without a time limit gets MIN(partition MaxTime, MaxWall)
        (the first QOS's MaxWall, else the second's, else the association's)."""
        if spec.time_limit is not None:
            return None
        walls = [q.max_wall_s for q in (q1, q2) if q is not None and q.max_wall_s is not None]
        if assoc is not None and assoc.max_wall_s is not None:
            walls.append(assoc.max_wall_s)
        if not walls:
            return None
        part_max = self.max_time[spec.partition]
        return walls[0] if part_max is None else min(part_max, walls[0])

    def _parsed(self, text: str) -> dict[str, int]:
        got = self._tres.get(text)
        if got is None:
            got = self._tres[text] = limit_tres(text)
        return got

    def _over_submit(self, subs: Sequence[tuple[Key, int, str]]) -> str:
        used = self.used
        for key, limit, why in subs:
            if used.get(key, 0) + 1 > limit:
                return why
        return ""

    # ---- events ----------------------------------------------------------------------

    def submit(self, i: int) -> str:
        """At job ``i``'s submit: "" if accepted (counted), else the refusal's reason."""
        if self.counted[i]:
            return ""
        why = self._over_submit(self.subs[i])
        if why:
            return why
        self.counted[i] = True
        used = self.used
        for key in self.sub_keys[i]:
            used[key] = used.get(key, 0) + 1
        self._touched(self.sub_keys[i])
        return ""

    def started(self, i: int) -> None:
        used = self.used
        for key, amount in self.runs[i]:
            used[key] = used.get(key, 0) + amount
        self._touched([key for key, _ in self.runs[i]])
        self.counting[i] = True

    def left(self, i: int) -> None:
        """Job ``i`` ended or was cancelled (running or not): release what it counted."""
        used = self.used
        if self.counting[i]:
            self.counting[i] = False
            for key, amount in self.runs[i]:
                used[key] -= amount
            self._touched([key for key, _ in self.runs[i]])
        if self.counted[i]:
            self.counted[i] = False
            for key in self.sub_keys[i]:
                used[key] -= 1
            self._touched(self.sub_keys[i])

    # ---- checks ----------------------------------------------------------------------

    def _fails(self, rules: tuple[Rule, ...]) -> str:
        used = self.used
        for key, need, limit, why in rules:
            if key is None or used.get(key, 0) + need > limit:
                return why
        return ""

    def reason(self, i: int) -> str:
        """The limit holding pending job ``i`` now ("" if none): Slurm's reason string."""
        return self._fails(self.pre[i]) or self._fails(self.post[i])

    def held(self, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``jobs`` a limit holds now: (by a pre-select rule, by a post-select
        rule only), as boolean masks. One check per rule group, however many jobs.

        A pass may drop the jobs held at its start: it only starts jobs, so usage only
        grows while it runs and a job held at the start is held when the pass reaches it
        (jobs that become held during the pass are still checked one by one).
        """
        if self._dirty:
            self._refresh()
        fails = self._gfail
        pre = fails[self._gpre[jobs]]
        return pre, fails[self._gpost[jobs]] & ~pre

    def status(self, i: int) -> int:
        """Job ``i`` now: 0 no limit holds it, 1 a pre-select rule, 2 a post-select one."""
        if self._dirty:
            self._refresh()
        gf = self._gf
        return 1 if gf[self._gp[i]] else 2 if gf[self._gq[i]] else 0

    def pre_held(self, jobs: np.ndarray) -> int:
        """How many of ``jobs`` a pre-select rule holds now."""
        if not len(jobs):
            return 0
        if self._dirty:
            self._refresh()
        return int(self._gfail[self._gpre[jobs]].sum())

    def backfill_order(
        self, order: Iterator[int], cap: int, estimate: list[int | None]
    ) -> Iterator[int]:
        """Backfill's walk (_attempt_backfill): a job failing a pre-select rule is skipped
        before bf_max_job_test (``cap``) counts it, one failing a post-select rule after;
        either loses its estimate (no reservation). One generator for the three steps."""
        gp, gq, gf = self._gp, self._gq, self._gf
        if cap <= 0:
            return
        tested = 0
        for i in order:
            if self._dirty:  # the pass started a job since the last check
                self._refresh()
            if gf[gp[i]]:
                estimate[i] = None
                continue
            if gf[gq[i]]:
                estimate[i] = None
            else:
                yield i
            tested += 1
            if tested == cap:
                return  # no job after the cap-th is looked at


class _Rules:
    """One job's rules as ``Limits.add`` builds them, in Slurm's order.

    ``seen``: the limits a QOS already set (``qos_out_ptr`` / ``qos_rec``): the same limit
    of a later QOS, or the association's counterpart, is not checked. Every QOS counts the
    job's usage (``runs``) whatever limit holds it.
    """

    def __init__(self, user: str, limit: int | None) -> None:
        self.user = user
        self.limit = limit
        self.pre: list[Rule] = []
        self.post: list[Rule] = []
        self.runs: list[tuple[Key, int]] = []
        self.subs: list[tuple[Key, int, str]] = []
        self.sub_keys: list[Key] = []
        self.seen: set[str] = set()

    def _first(self, name: str) -> bool:
        if name in self.seen:
            return False
        self.seen.add(name)
        return True

    def _over_wall(self, wall: int) -> bool:
        return self.limit is not None and self.limit > wall

    def qos_pre(self, q: Qos) -> None:
        """GrpJobs, MaxJobsPerUser, MaxWall (and MaxSubmitJobsPerUser, checked at submit)."""
        user = self.user
        if q.grp_jobs is not None:
            self.runs.append((("qj", q.name), 1))
            if self._first("grp_jobs"):
                self.pre.append((("qj", q.name), 1, q.grp_jobs, "QOSGrpJobsLimit"))
        if q.max_jobs_per_user is not None:
            key = ("qu", q.name, user)
            self.runs.append((key, 1))
            if self._first("max_jobs_pu"):
                self.pre.append((key, 1, q.max_jobs_per_user, "QOSMaxJobsPerUserLimit"))
        if q.max_wall_s is not None and self._first("max_wall") and self._over_wall(q.max_wall_s):
            self.pre.append((None, 0, 0, "QOSMaxWallDurationPerJobLimit"))
        if q.max_submit_jobs_per_user is not None:
            key = ("qs", q.name, user)
            self.sub_keys.append(key)
            if self._first("max_submit_pu"):
                self.subs.append((key, q.max_submit_jobs_per_user, "QOSMaxSubmitJobPerUserLimit"))

    def assoc_pre(self, a: Association) -> None:
        """GrpJobs, MaxJobs, MaxWall (MaxSubmitJobs at submit), unless a QOS set them."""
        key = ("aj", self.user)
        if a.grp_jobs is not None or a.max_jobs is not None:
            self.runs.append((key, 1))
        if a.grp_jobs is not None and "grp_jobs" not in self.seen:
            self.pre.append((key, 1, a.grp_jobs, "AssocGrpJobsLimit"))
        if a.max_jobs is not None and "max_jobs_pu" not in self.seen:
            self.pre.append((key, 1, a.max_jobs, "AssocMaxJobsLimit"))
        wall = a.max_wall_s
        if wall is not None and "max_wall" not in self.seen and self._over_wall(wall):
            self.pre.append((None, 0, 0, "AssocMaxWallDurationPerJobLimit"))
        if a.max_submit_jobs is not None:
            skey = ("as", self.user)
            self.sub_keys.append(skey)
            if "max_submit_pu" not in self.seen:
                self.subs.append((skey, a.max_submit_jobs, "AssocMaxSubmitJobLimit"))

    def qos_post(
        self, q: Qos, need: dict[str, int], grp: dict[str, int], pu: dict[str, int]
    ) -> None:
        """GrpTRES, then MaxTRESPerUser, TRES in Slurm's order (request + usage > limit)."""
        for t in LIMIT_TRES:
            if t in grp:
                key: Key = ("qt", q.name, t)
                self.runs.append((key, need[t]))
                if self._first("grp_tres " + t) and need[t]:
                    self.post.append((key, need[t], grp[t], _QOS_GRP[t]))
        for t in LIMIT_TRES:
            if t in pu:
                key = ("qut", q.name, self.user, t)
                self.runs.append((key, need[t]))
                if self._first("max_tres_pu " + t) and need[t]:
                    self.post.append((key, need[t], pu[t], _QOS_PU[t]))

    def assoc_post(self, need: dict[str, int], grp: dict[str, int]) -> None:
        """The association's GrpTRES, where no QOS set the same TRES's GrpTRES."""
        for t in LIMIT_TRES:
            if t in grp:
                key = ("at", self.user, t)
                self.runs.append((key, need[t]))
                if "grp_tres " + t not in self.seen and need[t]:
                    self.post.append((key, need[t], grp[t], _ASSOC_GRP[t]))
