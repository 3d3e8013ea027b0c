"""The daemon's unit of work: one serial ``cycle(now)``: poll, reconcile, decide, act.

Nothing here reads the wall clock or sleeps: production calls ``cycle(int(time.time()))``
from one APScheduler interval job (``mirage.daemon.service``); tests and the simulated
backend call it with simulated time. The Slurm client, the clock-free store, the policy
and the owner-identity client factory are injected.

Per cycle, whatever the number of chains: one ``client.queue()`` and one
``client.accounting(since)`` (the window starts ``sacct_overlap_s`` before the last good
poll, widened back to the oldest submission or job that is still unaccounted for), plus
the actions themselves (sbatch, scancel) and at most ``test_only_per_cycle`` estimates.

Exactly once: a submission's row (a fresh token, state INTENT) is committed before sbatch
runs; sbatch carries the token in ``--comment`` and in the job name. A timeout or a lost
connection during sbatch makes it UNKNOWN; reconciliation adopts any INTENT/UNKNOWN
whose token appears in squeue or sacct, and declares it LOST only after
``unknown_timeout_s`` with successful polls whose sacct window covered it. A chain with an
unresolved submission gets no new one. One daemon per cluster acts: the lease.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from mirage.daemon import health, revoke
from mirage.daemon.chains import script_directives
from mirage.daemon.config import Config
from mirage.daemon.metrics import FALLBACK_WHYS, DaemonMetrics, interval_outcome
from mirage.daemon.policies import (
    LoadedPolicy,
    build_policies,
    learned_profile,
    model_key,
    profile_path,
    shape_mismatch,
    tuned_elsewhere,
)
from mirage.daemon.states import Action, segment_action
from mirage.daemon.store import (
    Chain,
    ChainState,
    Event,
    Segment,
    Store,
    Submission,
    SubmissionState,
    event_row,
    new_token,
)
from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.policy.cost import Transition
from mirage.profile.schema import ClusterProfile, Partition, ProfileError
from mirage.slurm.client import SlurmClient
from mirage.slurm.syntax import digits
from mirage.slurm.types import (
    JobState,
    QueueSnapshot,
    SlurmError,
    SlurmJob,
    SlurmTimeoutError,
    SlurmUnreachableError,
    StartEstimate,
    SubmitError,
    SubmitRequest,
)

log = logging.getLogger(__name__)

TOKEN_RE = re.compile(r"(?<![0-9A-Za-z])(mg[0-9a-f]{16})(?![0-9A-Za-z])")
CURSOR_KEY = "accounting_cursor"
#: The script of a policy's ``sbatch --test-only`` request (never run).
TEST_ONLY_SCRIPT = b"#!/bin/sh\ntrue\n"
#: The event committed before a handoff signal is sent (the "handoff" event follows it).
HANDOFF_INTENT = "handoff.intent"

#: chain -> the client its jobs are submitted, cancelled and signalled with (the owner's)
ActionClients = Callable[[Chain], SlurmClient]
#: chain -> does its completion marker exist (None: could not check)
MarkerCheck = Callable[[Chain], bool | None]

#: Test hook (tests/slurm/test_daemon_process.py): ``MIRAGE_FAULT=<point>`` in the daemon's
#: environment makes the process SIGKILL itself the first time it reaches that point, so
#: that crash recovery is tested on the real process and cluster. Read once per Daemon;
#: unset or empty, it is inert; an unknown point is refused (a typo must not pass silently).
FAULT_POINTS = frozenset({"after-intent", "after-sbatch", "during-handoff"})


def _fault_from_env() -> str:
    point = os.environ.get("MIRAGE_FAULT", "")
    if point and point not in FAULT_POINTS:
        raise ValueError(f"MIRAGE_FAULT={point!r}: valid points are {sorted(FAULT_POINTS)}")
    if point:
        log.warning("test hook armed: SIGKILL at %s (MIRAGE_FAULT)", point)
    return point


def find_token(job: SlurmJob) -> str | None:
    """The Mirage token in a job's comment, else in its name."""
    for text in (job.comment, job.name):
        m = TOKEN_RE.search(text or "")
        if m:
            return m.group(1)
    return None


def merge_records(
    queue: Sequence[SlurmJob], accounting: Sequence[SlurmJob]
) -> tuple[dict[str, SlurmJob], dict[str, int]]:
    """One record per job id, squeue's over sacct's (the controller is current), and the
    records left out, counted by why:

    * ``duplicate``: squeue listed one id twice with different states. The active record
      is kept: a finished copy must not end a running segment.

    A record from sacct alone stays (a job that left the queue), even PENDING, for token
    adoption; :meth:`Daemon._own_record` decides whether a segment may read it.
    """
    ignored: dict[str, int] = defaultdict(int)
    current: dict[str, SlurmJob] = {}
    for job in queue:
        seen = current.get(job.job_id)
        if seen is not None and seen.state is not job.state:
            ignored["duplicate"] += 1
            log.warning(
                "squeue lists job %s twice (%s, %s)", job.job_id, seen.state.value, job.state.value
            )
            if not seen.state.is_finished:
                continue
        current[job.job_id] = job
    records: dict[str, SlurmJob] = {}
    for job in accounting:
        if job.job_id not in current:
            records[job.job_id] = job
    records.update(current)
    return records, dict(ignored)


def index_tokens(
    records: Iterable[SlurmJob],
) -> tuple[dict[str, SlurmJob], dict[str, list[SlurmJob]]]:
    """token -> its job, and token -> every job carrying it where there are several (one
    submission that Slurm created twice). Of several, the lowest id (the first created)
    is the token's job, so that adoption picks the same one every cycle."""
    jobs: dict[str, list[SlurmJob]] = defaultdict(list)
    for job in records:
        tok = find_token(job)
        if tok is not None:
            jobs[tok].append(job)
    first = {tok: min(js, key=_id_order) for tok, js in jobs.items()}
    extras = {tok: js for tok, js in jobs.items() if len(js) > 1}
    return first, extras


def _id_order(job: SlurmJob) -> tuple[int, str]:
    head = job.job_id.split("_")[0].split("+")[0]
    return (int(head), job.job_id) if digits(head) else (2**63, job.job_id)


def job_name(chain_name: str, token: str) -> str:
    return f"{chain_name[:64]}.{token}"


def local_marker_check(chain: Chain) -> bool | None:
    """The marker with the daemon's own rights (a per-user daemon)."""
    if not chain.until_file:
        return None
    path = Path(chain.chdir) / chain.until_file  # an absolute until_file stays itself
    try:
        path.stat()
    except FileNotFoundError:
        return False
    except OSError:
        return None
    return True


@dataclass
class CycleReport:
    now: int
    acted: bool = False
    skipped: str = ""  # "lease", "backoff", "unreachable", "error"
    slurm_reads: int = 0
    submitted: list[str] = field(default_factory=list)  # job ids
    unknown: list[str] = field(default_factory=list)  # tokens
    adopted: list[str] = field(default_factory=list)  # tokens
    lost: list[str] = field(default_factory=list)  # tokens
    rejected: list[str] = field(default_factory=list)  # tokens
    signalled: list[str] = field(default_factory=list)  # job ids
    cancelled: list[str] = field(default_factory=list)  # job ids
    revoked: list[str] = field(default_factory=list)  # job ids (pending pre-submissions)
    ended: list[str] = field(default_factory=list)  # chain ids
    decisions: int = 0
    error: str = ""
    duration_s: float = 0.0
    submit_stalled: bool = False  # an sbatch timed out or lost the controller
    failed: bool = False  # the cycle failed as a whole (error says why)
    chain_errors: list[str] = field(default_factory=list)  # chains whose own step failed


@dataclass(frozen=True)
class PolicyChoice:
    """The policy deciding one chain, and why it is not the configured one (``note``;
    ``why`` is its kind: one of metrics.FALLBACK_WHYS, "" when the configured one runs)."""

    label: str
    policy: Policy
    note: str = ""
    why: str = ""


#: How often the live cluster's partitions are read again (`scontrol show partition|node`).
LIVE_REFRESH_S = 3600


@dataclass
class _Want:
    """A successor to submit in this cycle's act step."""

    chain: Chain
    index: int
    time_limit: int
    presubmit: bool
    decision: Decision | None = None
    pending: PendingTransition | None = None


class Daemon:
    def __init__(
        self,
        store: Store,
        client: SlurmClient,
        *,
        config: Config | None = None,
        profile: ClusterProfile | None = None,
        policies: Mapping[str, Policy] | None = None,
        holder: str | None = None,
        metrics: DaemonMetrics | None = None,
        action_clients: ActionClients | None = None,
        marker_check: MarkerCheck | None = None,
        refuse_root_chains: bool = False,
    ) -> None:
        self.store = store
        self.client = client
        self.config = config if config is not None else Config()
        self.cfg = self.config.daemon
        self.profile = profile
        pcfg = self.config.policy
        # trained models are loaded (and version-checked) once, at start: a model that does
        # not fit this code stops the daemon with its reason instead of deciding wrongly
        loaded = build_policies(pcfg)
        if self.profile is None and any(lp.kind != "baseline" for lp in loaded.values()):
            self.profile = learned_profile(pcfg)
        self.policies: dict[str, Policy] = {n: lp.policy for n, lp in loaded.items()}
        self.policies.update(policies or {})
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{new_token()[2:10]}"
        self.metrics = metrics if metrics is not None else DaemonMetrics()
        used = loaded[pcfg.default]
        self.metrics.model.info(
            {"policy": pcfg.default, "kind": used.kind, "created": used.created}
        )
        if used.created_at:
            created = used.created_at
            self.metrics.model_age.set_function(lambda: max(0.0, time.time() - created))
        else:
            self.metrics.model_age.set(0)  # a baseline has no trained model
        self._used = used
        for name, lp in loaded.items():  # for `mirage status`: each model's age
            self.store.set_value(model_key(name), str(int(lp.created_at)) if lp.created_at else "")
        self.action_clients = action_clients or (lambda _chain: client)
        self.marker_check = marker_check or local_marker_check
        # A chain of uid 0 would have its jobs run as root by a daemon that submits as each
        # owner: one registered as root, or a row written into the database by anyone who
        # can (its password may be in a configuration users read). Refused unless the
        # configuration allows it ([daemon] allow_root_chains).
        self.refuse_root_chains = refuse_root_chains
        self._failures = 0
        self._next_poll = 0
        cursor = store.get_value(CURSOR_KEY)
        self._last_ok_poll: int | None = int(cursor) if cursor else None
        self._test_only_left = 0
        self._warmed = False  # the policies' accounting history read (see _warmup)
        self.last_report: CycleReport | None = None
        self._fault = _fault_from_env()
        self._loaded: dict[str, LoadedPolicy] = loaded
        # A trained model whose profile is not the one its constants were tuned on (ls6's
        # model beside a profile captured from this cluster) is set aside from the start.
        self._tuned_note = {
            name: note
            for name, lp in loaded.items()
            if lp.kind == "learned" and (note := tuned_elsewhere(lp, profile_path(pcfg)))
        }
        self._live: tuple[Partition, ...] | None = None  # the cluster's partitions, as read
        self._live_at: int | None = None
        self._coverage_note: dict[str, str] = {}  # policy name -> why set aside (this cycle)
        self._warned: set[str] = set()
        self.cycle_failures = 0
        self._slurm_fact: tuple[bool, str] | None = None

    def policy_summary(self) -> dict[str, Any]:
        """The configured default policy as the start line and ``mirage status`` show it:
        ``policy``, ``model`` (a trained model: name, cluster, creation time; "" for a
        baseline), ``model_created_at`` (epoch seconds or None) and ``fallback`` (why the
        daemon does not use it as is, "" when it does)."""
        pcfg = self.config.policy
        used = self._used
        model = ""
        if used.kind == "learned":
            model = f"{pcfg.default} ({pcfg.cluster}, trained {used.created})"
        return {
            "policy": pcfg.default,
            "model": model,
            "model_created_at": int(used.created_at) if used.created_at else None,
            # as far as known now (the live partitions once read: Daemon.partitions)
            "fallback": self._set_aside(pcfg.default, self.resolve_partition(None))[0],
        }

    def _fault_point(self, point: str) -> None:
        """kill -9 here when MIRAGE_FAULT names this point (see FAULT_POINTS)."""
        if self._fault == point:
            os.kill(os.getpid(), signal.SIGKILL)

    # ---- the cycle -----------------------------------------------------------------

    def cycle(self, now: int) -> CycleReport:
        """One cycle. A failure inside one chain's step is that chain's (recorded on it,
        counted, the cycle goes on); a failure outside every chain's step fails the cycle
        as a whole: counted (``mirage_cycle_failures_total``), recorded for ``mirage
        status``, and the report says so (``failed``). Only when even that record cannot
        be written (the database is gone) does the error propagate: then the service
        skips the watchdog, and systemd restarts a daemon that can make no progress."""
        started = time.perf_counter()
        report = CycleReport(now=now)
        try:
            self._cycle(now, report)
        except Exception as exc:  # any error outside a chain's step: the cycle's, counted
            report.failed = True
            report.error = f"{type(exc).__name__}: {exc}"
            self.cycle_failures += 1
            self.metrics.cycle_failures.inc()
            log.exception("cycle failed as a whole")
        finally:
            report.duration_s = time.perf_counter() - started
            self.metrics.cycle_duration.observe(report.duration_s)
            self.last_report = report
        self._record_cycle(report)
        return report

    def _record_cycle(self, report: CycleReport) -> None:
        """The cycle's facts for ``mirage status`` (raises if the database is gone)."""
        info = health.CycleInfo(
            at=report.now,
            finished=not report.failed,
            skipped=report.skipped,
            error=report.error[:2000],
            failures_total=self.cycle_failures,
            chain_errors=len(report.chain_errors),
        )
        health.write(self.store, health.CYCLE_KEY, info)
        if report.skipped in ("lease", "backoff"):
            return  # nothing was asked of Slurm
        fact = (not report.skipped, report.error[:500] if report.skipped else "")
        if fact != self._slurm_fact:
            reachable, error = fact
            health.write(
                self.store, health.SLURM_KEY, health.SlurmInfo(reachable, error, report.now)
            )
            self._slurm_fact = fact

    def _cycle(self, now: int, report: CycleReport) -> None:
        if not self.store.acquire_lease(self.cfg.cluster, self.holder, now, self.cfg.lease_ttl_s):
            self.metrics.lease_held.set(0)
            self.metrics.cycles_skipped.labels("lease").inc()
            report.skipped = "lease"
            return
        self.metrics.lease_held.set(1)
        if now < self._next_poll:
            self.metrics.cycles_skipped.labels("backoff").inc()
            report.skipped = "backoff"
            return
        polled = self._poll(now, report)
        if polled is None:
            return
        snapshot, records, accounting = polled
        report.acted = True
        self._observe(now, snapshot, accounting)
        self._refresh_live(now)
        with self.store.sessions() as s:
            self._coverage_note = self._coverage(s)
            queued = frozenset(j.job_id for j in snapshot.jobs)
            wants, revocable = self._reconcile(s, now, records, report, queued)
            s.commit()
            # one budget of estimates per cycle, for decisions and revocations alike
            self._test_only_left = self.cfg.test_only_per_cycle
            chosen = self._decide(s, now, snapshot, [w for w in wants if w.presubmit], report)
            s.commit()
            wants = [w for w in wants if not w.presubmit] + chosen
            # a slow cycle may have lost the lease: renew before acting, or act on nothing
            if not self.store.acquire_lease(
                self.cfg.cluster, self.holder, now, self.cfg.lease_ttl_s
            ):
                report.skipped = "lease"
                return
            self._act(s, now, wants, report)
            s.commit()
            revoke.act(self, s, now=now, snapshot=snapshot, candidates=revocable, report=report)
            s.commit()
            self._clear_errors(s, report)
            self._chain_gauges(s)

    # ---- one chain's failure is that chain's ----------------------------------------

    def chain_failed(
        self,
        s: Session,
        chain_id: str,
        step: str,
        exc: Exception,
        *,
        now: int,
        report: CycleReport,
    ) -> None:
        """Record an error of one chain's step on that chain (its uncommitted work is
        rolled back; what other chains did this cycle is already committed), count it and
        go on. Nothing else of the chain changes: it is retried next cycle."""
        s.rollback()
        text = f"{step}: {type(exc).__name__}: {exc}"[:2000]
        log.error("chain %s: %s", chain_id, text, exc_info=exc)
        self.metrics.chain_errors.labels(step).inc()
        report.chain_errors.append(chain_id)
        chain = s.get(Chain, chain_id)
        if chain is None:
            return
        chain.error, chain.error_at, chain.errors = text, now, chain.errors + 1
        s.add(event_row(now, "chain.error", chain_id, text, step=step))
        s.commit()

    def _clear_errors(self, s: Session, report: CycleReport) -> None:
        """A chain whose every step went through this cycle has no current error (its
        count and time stay, for ``mirage status``)."""
        q = select(Chain).where(Chain.state == ChainState.ACTIVE, Chain.error != "")
        for chain in s.scalars(q):
            if chain.id not in report.chain_errors:
                chain.error = ""
        s.commit()

    # ---- poll --------------------------------------------------------------------------

    def _since(self, now: int) -> int:
        base = (self._last_ok_poll if self._last_ok_poll is not None else now) - (
            self.cfg.sacct_overlap_s
        )
        with self.store.sessions() as s:
            oldest_sub = s.scalar(
                select(func.min(Submission.created_at)).where(
                    Submission.state.in_([SubmissionState.INTENT, SubmissionState.UNKNOWN])
                )
            )
            oldest_missing = s.scalar(
                select(func.min(Segment.submitted_at)).where(
                    Segment.finished.is_(False), Segment.missing_since.is_not(None)
                )
            )
        for t in (oldest_sub, oldest_missing):
            if t is not None:
                base = min(base, int(t) - self.cfg.sacct_overlap_s)
        return max(0, base)

    def _poll(
        self, now: int, report: CycleReport
    ) -> tuple[QueueSnapshot, dict[str, SlurmJob], list[SlurmJob]] | None:
        since = self._since(now)
        t0 = time.perf_counter()
        try:
            report.slurm_reads += 1
            self.metrics.slurm_commands.labels("squeue").inc()
            snapshot = self.client.queue()
            report.slurm_reads += 1
            self.metrics.slurm_commands.labels("sacct").inc()
            accounting = self.client.accounting(since, every_state=True)
        except SlurmError as exc:
            kind = (
                "unreachable"
                if isinstance(exc, SlurmUnreachableError)
                else "timeout"
                if isinstance(exc, SlurmTimeoutError)
                else "error"
            )
            self._failures += 1
            delay = min(self.cfg.backoff_max_s, self.cfg.poll_interval_s * 2**self._failures)
            self._next_poll = now + delay
            self.metrics.poll_errors.labels(kind).inc()
            self.metrics.slurm_reachable.set(0)
            report.skipped = "unreachable" if kind == "unreachable" else "error"
            report.error = str(exc)
            log.warning("poll failed (%s), next poll in %ds: %s", kind, delay, exc)
            if self._failures == 1:
                with self.store.session() as s:
                    s.add(event_row(now, "poll.failed", None, str(exc), error_kind=kind))
            return None
        self.metrics.poll_duration.observe(time.perf_counter() - t0)
        self.metrics.slurm_reachable.set(1)
        if self._failures:
            with self.store.session() as s:
                s.add(event_row(now, "poll.recovered", None, f"after {self._failures} failures"))
        self._failures = 0
        self._next_poll = 0
        self._last_ok_poll = now
        self.store.set_value(CURSOR_KEY, str(now))
        records, ignored = merge_records(snapshot.jobs, accounting)
        for why, n in ignored.items():
            self.metrics.records_ignored.labels(why).inc(n)
        return snapshot, records, accounting

    # ---- reconcile ---------------------------------------------------------------------

    def _reconcile(
        self,
        s: Session,
        now: int,
        records: dict[str, SlurmJob],
        report: CycleReport,
        queued: frozenset[str],
    ) -> tuple[list[_Want], list[revoke.Revocable]]:
        """Adopt or lose unresolved submissions, update segments from Slurm's records
        (``queued``: the ids squeue listed), advance chains. Returns what to submit and
        which pending pre-submissions a policy may revoke."""
        by_token, extras = index_tokens(records.values())
        chains = {c.id: c for c in s.scalars(select(Chain).where(Chain.state == ChainState.ACTIVE))}
        unresolved = self._resolve_submissions(s, now, by_token, chains, report)
        s.flush()

        live: dict[str, list[Segment]] = defaultdict(list)
        for seg in s.scalars(select(Segment).where(Segment.finished.is_(False))):
            self._update_segment(seg, self._own_record(seg, records, queued), now)
            if seg.revoke_at is not None and revoke.settle(self, s, seg, now):
                continue  # cancelled by a revocation: no longer the chain's
            live[seg.chain_id].append(seg)
        self._transitions(s, now, records)
        self._cancel_extras(s, now, extras, report)
        s.commit()  # what holds for every chain is kept whatever one chain does next

        wants: list[_Want] = []
        revocable: list[revoke.Revocable] = []
        for chain_id in list(chains):
            try:
                want, cand = self._reconcile_chain(
                    s,
                    chains[chain_id],
                    live.get(chain_id, []),
                    has_unresolved=bool(unresolved.get(chain_id)),
                    now=now,
                    report=report,
                )
                s.commit()
            except Exception as exc:  # whatever it is, it is this chain's alone
                self.chain_failed(s, chain_id, "reconcile", exc, now=now, report=report)
                continue
            if want is not None:
                wants.append(want)
            if cand is not None:
                revocable.append(cand)
        # segments of chains that ended elsewhere (cancel by the user): clean up
        for chain_id, segs in live.items():
            if chain_id not in chains:
                ended = s.get(Chain, chain_id)
                if ended is not None:
                    self._stop_segments(s, ended, [g for g in segs if not g.finished], now, report)
        return wants, revocable

    def _reconcile_chain(
        self,
        s: Session,
        chain: Chain,
        live: list[Segment],
        *,
        has_unresolved: bool,
        now: int,
        report: CycleReport,
    ) -> tuple[_Want | None, revoke.Revocable | None]:
        """One chain's bookkeeping: advance it, and its revocable successor if any."""
        segs = sorted(live, key=lambda g: g.index)
        want = self._advance_chain(
            s, chain, segs, has_unresolved=has_unresolved, now=now, report=report
        )
        if chain.state is not ChainState.ACTIVE:
            return want, None
        return want, self._revocable(s, chain, [g for g in segs if not g.finished], now)

    def _own_record(
        self, seg: Segment, records: Mapping[str, SlurmJob], queued: frozenset[str]
    ) -> SlurmJob | None:
        """The segment's job's record, only when it is the segment's job: a record under its
        id that carries another token (or none) is another job, after the controller reused
        the id (a state reset, or MaxJobId wrapping); applying it would end the chain on a
        stranger's state. The segment then reads as missing (WAIT), and the anomaly is
        counted. A record with the same token under another id is never taken for it
        either: it is a second job of one submission (:meth:`_cancel_extras`)."""
        job = records.get(seg.job_id)
        if job is None:
            return None
        if job.state is JobState.PENDING and seg.start is not None and job.job_id not in queued:
            # A started job PENDING again is a requeue, which the controller shows: from
            # sacct alone it is slurmdbd lagging behind (or a partial squeue list), and
            # read as a requeue it would make Mirage cancel a running predecessor.
            self.metrics.records_ignored.labels("stale_pending").inc()
            return None
        if find_token(job) != seg.token:
            log.warning(
                "job %s no longer carries token %s (id reused?): segment %d of chain %s "
                "reads as missing",
                seg.job_id,
                seg.token,
                seg.index,
                seg.chain_id,
            )
            self.metrics.records_ignored.labels("id_reused").inc()
            return None
        return job

    def _cancel_extras(
        self, s: Session, now: int, extras: Mapping[str, list[SlurmJob]], report: CycleReport
    ) -> None:
        """Cancel the extra jobs of a submission that Slurm created twice (sbatch retried a
        request whose reply was lost): two live jobs with one token would train the same
        segment twice, checkpointing into one place. Only jobs of the chain's owner that
        carry a token Mirage tracks, under an id other than the tracked one, and that have
        not finished."""
        for token, jobs in extras.items():
            seg = s.scalars(select(Segment).where(Segment.token == token)).first()
            chain = None if seg is None else s.get(Chain, seg.chain_id)
            if seg is None or chain is None:
                continue
            ids = [
                j.job_id
                for j in jobs
                if j.job_id != seg.job_id and not j.state.is_finished and j.user == chain.owner
            ]
            if not ids:
                continue
            self.metrics.records_ignored.labels("extra_job").inc(len(ids))
            try:
                self.action_clients(chain).cancel(ids)
            except SlurmError as exc:
                s.add(event_row(now, "cancel.failed", chain.id, str(exc), job_ids=ids))
                continue
            report.cancelled.extend(ids)
            why = f"second job(s) of one submission: segment {seg.index} is {seg.job_id}"
            s.add(event_row(now, "cancel.extra", chain.id, why, job_ids=ids, token=token))
            log.warning("cancelled %s: %s", ids, why)

    def _resolve_submissions(
        self,
        s: Session,
        now: int,
        by_token: dict[str, SlurmJob],
        chains: dict[str, Chain],
        report: CycleReport,
    ) -> dict[str, list[Submission]]:
        """Adopt INTENT/UNKNOWN submissions whose token Slurm shows, declare LOST those
        unseen for too long; the rest, per chain, are still unresolved."""
        unresolved: dict[str, list[Submission]] = defaultdict(list)
        for sub in s.scalars(
            select(Submission).where(
                Submission.state.in_([SubmissionState.INTENT, SubmissionState.UNKNOWN])
            )
        ):
            found = by_token.get(sub.token)
            chain = chains.get(sub.chain_id) or s.get(Chain, sub.chain_id)
            if found is not None and chain is not None:
                sub.state = SubmissionState.ADOPTED
                sub.job_id = found.job_id
                sub.resolved_at = now
                self._new_segment(s, chain, sub, now)
                report.adopted.append(sub.token)
                self.metrics.presubmissions.labels("adopted").inc()
                s.add(
                    event_row(
                        now,
                        "submission.adopted",
                        sub.chain_id,
                        "token found in Slurm",
                        token=sub.token,
                        job_id=found.job_id,
                    )
                )
            elif now - sub.created_at >= self.cfg.unknown_timeout_s:
                sub.state = SubmissionState.LOST
                sub.resolved_at = now
                report.lost.append(sub.token)
                self.metrics.presubmissions.labels("lost").inc()
                s.add(
                    event_row(
                        now,
                        "submission.lost",
                        sub.chain_id,
                        f"token in neither squeue nor sacct for {now - sub.created_at}s",
                        token=sub.token,
                    )
                )
            else:
                unresolved[sub.chain_id].append(sub)
        return unresolved

    def _revocable(
        self, s: Session, chain: Chain, segs: list[Segment], now: int
    ) -> revoke.Revocable | None:
        """The chain's pre-submitted successor, if it pends while its predecessor runs (a
        policy may revoke it). A successor marked for revocation whose predecessor ended
        first is kept (:func:`mirage.daemon.revoke.keep`)."""
        pending = JobState.PENDING.value
        if (
            len(segs) == 2
            and segs[0].job_state == JobState.RUNNING.value
            and segs[0].start is not None
            and segs[0].missing_since is None
            and segs[1].job_state == pending
            and segs[1].missing_since is None
            and segs[1].presubmitted
            and not segs[1].requeued
        ):
            limit = segs[1].time_limit_s or chain.time_limit_s
            move = self._transition(chain, segs[0], limit, self.resolve_partition(chain))
            return revoke.Revocable(chain, segs[1], move)
        for g in segs:
            if g.revoke_at is not None and g.job_state == pending and g is segs[0]:
                revoke.keep(self, s, chain, g, now)
        return None

    @staticmethod
    def _new_segment(s: Session, chain: Chain, sub: Submission, now: int) -> Segment:
        assert sub.job_id is not None
        seg = Segment(
            chain_id=chain.id,
            index=sub.index,
            token=sub.token,
            job_id=sub.job_id,
            submitted_at=sub.created_at,
            presubmitted=sub.presubmitted,
            predicted_start=chain.predicted_start if sub.presubmitted else None,
            predicted_low=chain.predicted_low if sub.presubmitted else None,
            predicted_high=chain.predicted_high if sub.presubmitted else None,
            time_limit_s=sub.time_limit_s,
            job_state="PENDING",
            finished=False,
            cancelled_by_mirage=False,
            requeued=False,
            transition_recorded=False,
        )
        s.add(seg)
        chain.next_index = max(chain.next_index, sub.index + 1)
        chain.updated_at = now
        return seg

    @staticmethod
    def _update_segment(seg: Segment, job: SlurmJob | None, now: int) -> None:
        if job is None:
            if seg.missing_since is None:
                seg.missing_since = now
            return
        seg.missing_since = None
        if seg.job_state != job.state.value:
            seg.job_state = job.state.value
        if seg.reason != job.reason:
            seg.reason = job.reason[:128]
        if job.state is JobState.UNKNOWN:
            return  # a state Mirage cannot read says nothing of start or end (a pending
            # job's start time is only Slurm's estimate): keep what is known
        if job.time_limit is not None and seg.time_limit_s != job.time_limit:
            seg.time_limit_s = job.time_limit
        if job.state is JobState.PENDING:
            if seg.start is not None:  # requeued under the same id: it will start again
                seg.start = None
                seg.end = None
                seg.requeued = True
            if seg.slurm_estimate != job.start:
                seg.slurm_estimate = job.start
            return
        if job.start is not None and seg.start != job.start:
            seg.start = job.start
        if job.state.is_finished and job.end is not None and seg.end != job.end:
            seg.end = job.end

    def _advance_chain(
        self,
        s: Session,
        chain: Chain,
        segs: list[Segment],
        *,
        has_unresolved: bool,
        now: int,
        report: CycleReport,
    ) -> _Want | None:
        """Apply the state table to the chain's oldest live segment(s); what to submit."""
        while segs:
            cur = segs[0]
            state = JobState(cur.job_state) if cur.missing_since is None else None
            marker = None
            if chain.until_file and state is JobState.COMPLETED:
                marker = self.marker_check(chain)
            verdict = segment_action(
                state,
                cur.reason,
                until_file=bool(chain.until_file),
                marker=marker,
                by_mirage=(
                    cur.signalled_at is not None
                    or cur.cancelled_by_mirage
                    # a crash may have cut the handoff after its durable intent: the
                    # job may have had the signal, so its end is the handoff's
                    or (
                        state in (JobState.CANCELLED, JobState.FAILED)
                        and self._handoff_intent(s, cur) is not None
                    )
                ),
            )
            if verdict.action is Action.WAIT:
                self._maybe_handoff(s, chain, segs, now, report)
                break
            cur.finished = True
            cur.outcome = verdict.action.value
            if cur.start is not None and cur.end is not None:
                chain.trained_s += max(0, cur.end - cur.start)
            chain.updated_at = now
            s.add(
                event_row(
                    now,
                    "segment.end",
                    chain.id,
                    verdict.reason,
                    job_id=cur.job_id,
                    index=cur.index,
                    state=cur.job_state,
                    action=verdict.action.value,
                    trained_s=chain.trained_s,
                )
            )
            segs = segs[1:]
            if verdict.action is Action.STOP:
                final = ChainState.COMPLETED if verdict.completed else ChainState.STOPPED
                self._end_chain(
                    s, chain, final, reason=verdict.reason, rest=segs, now=now, report=report
                )
                return None
            if not segs and segments_done(chain):
                reason = f"ran its {chain.segments_target} segments"
                self._end_chain(
                    s, chain, ChainState.COMPLETED, reason=reason, rest=[], now=now, report=report
                )
                return None
        if has_unresolved:
            self._note(chain, "a submission's outcome is not known yet: no new one until then")
            return None  # never a new submission while one may exist
        return self._next_want(chain, segs, now)

    @staticmethod
    def _note(chain: Chain, text: str) -> None:
        if chain.note != text:
            chain.note = text

    def _next_want(self, chain: Chain, segs: list[Segment], now: int) -> _Want | None:
        """No live segment: submit now. One running: ask the policy. Else nothing.

        ``--segments N`` is N jobs: the N-th segment gets no successor. Every segment gets
        the chain's time limit.
        """
        limit = chain.time_limit_s
        if not segs:
            self._note(chain, self.policy_for(chain).note)
            return _Want(chain, chain.next_index, limit, presubmit=False)
        pred = segs[0]
        if (
            len(segs) > 1
            or pred.job_state != JobState.RUNNING.value
            or pred.start is None
            or pred.missing_since is not None  # unseen this poll: its state is a memory
        ):
            if len(segs) == 1 and pred.job_state == JobState.PENDING.value:
                self._note(chain, self.policy_for(chain).note)
            return None
        if segments_done(chain):
            self._note(
                chain,
                f"segment {pred.index + 1} of {chain.segments_target} is the last: "
                "no successor to pre-submit",
            )
            return None
        pending = self._transition(chain, pred, limit, self.resolve_partition(chain))
        return _Want(chain, chain.next_index, limit, presubmit=True, pending=pending)

    @staticmethod
    def _transition(
        chain: Chain, pred: Segment, limit: int, partition: str | None
    ) -> PendingTransition:
        """The transition from the running segment ``pred`` to a successor of ``limit``."""
        assert pred.start is not None
        return PendingTransition(
            chain_id=chain.id,
            pred_job_id=pred.job_id,
            pred_start=pred.start,
            pred_time_limit=pred.time_limit_s or chain.time_limit_s,
            succ_nodes=chain.nodes,
            succ_gpus=chain.nodes * chain.gpus_per_node,
            succ_time_limit=limit,
            partition=partition or "",
            user=chain.owner,
            segment_index=pred.index,
        )

    def _maybe_handoff(
        self, s: Session, chain: Chain, segs: list[Segment], now: int, report: CycleReport
    ) -> None:
        if len(segs) < 2 or any(g.missing_since is not None for g in segs[:2]):
            return  # act only on what this poll saw
        pred, succ = segs[0], segs[1]
        running = JobState.RUNNING.value
        if pred.requeued and pred.job_state == JobState.PENDING.value and succ.job_state == running:
            # Slurm requeued the predecessor (node failure, preemption) and the successor
            # already resumes from its checkpoint: running the predecessor again would train
            # the same steps twice. Cancel it (by Mirage: the chain continues).
            self._cancel_requeued(s, chain, pred, succ, now=now, report=report)
            return
        if (
            not self.cfg.handoff
            or pred.job_state != running
            or succ.job_state != running
            or pred.signalled_at
        ):
            return
        # The intent is committed before the signal: a crash between the two must not
        # leave a signalled job that Mirage has no record of (its non-zero exit would
        # then stop the chain). An intent without a recorded signal is sent again while
        # the predecessor runs: at least once, since "checkpoint and exit" is idempotent
        # and a lost signal would keep the successor waiting on the predecessor's limit.
        if self._handoff_intent(s, pred) is None:
            s.add(
                event_row(
                    now,
                    HANDOFF_INTENT,
                    chain.id,
                    f"successor {succ.job_id} started while {pred.job_id} runs",
                    job_id=pred.job_id,
                    succ_job_id=succ.job_id,
                    signal=self.cfg.handoff_signal,
                )
            )
            s.commit()
        try:
            self.action_clients(chain).signal(pred.job_id, self.cfg.handoff_signal, True)
        except SlurmError as exc:
            log.warning("handoff signal to %s failed: %s", pred.job_id, exc)
            s.add(event_row(now, "handoff.failed", chain.id, str(exc), job_id=pred.job_id))
            return
        self._fault_point("during-handoff")  # signal sent, not yet recorded
        pred.signalled_at = now
        report.signalled.append(pred.job_id)
        self.metrics.handoffs.inc()
        s.add(
            event_row(
                now,
                "handoff",
                chain.id,
                f"successor {succ.job_id} started while {pred.job_id} runs",
                pred_job_id=pred.job_id,
                succ_job_id=succ.job_id,
                signal=self.cfg.handoff_signal,
            )
        )

    @staticmethod
    def _handoff_intent(s: Session, seg: Segment) -> Event | None:
        """The recorded handoff intent for this segment's job, if any.

        Looked up only for a segment not yet marked signalled (a crash cut its handoff,
        or it is about to start), among its chain's few intents (events are indexed by
        chain; their JSON data is not, portably, so the job id is matched here).
        """
        rows = s.scalars(
            select(Event).where(Event.chain_id == seg.chain_id, Event.kind == HANDOFF_INTENT)
        )
        return next((e for e in rows if e.data.get("job_id") == seg.job_id), None)

    def _cancel_requeued(
        self,
        s: Session,
        chain: Chain,
        pred: Segment,
        succ: Segment,
        *,
        now: int,
        report: CycleReport,
    ) -> None:
        try:
            self.action_clients(chain).cancel([pred.job_id])
        except SlurmError as exc:
            s.add(event_row(now, "cancel.failed", chain.id, str(exc), job_ids=[pred.job_id]))
            return
        pred.cancelled_by_mirage = True
        report.cancelled.append(pred.job_id)
        s.add(
            event_row(
                now,
                "cancel.requeued",
                chain.id,
                f"{pred.job_id} was requeued after {succ.job_id} started",
                job_id=pred.job_id,
            )
        )

    def _end_chain(
        self,
        s: Session,
        chain: Chain,
        state: ChainState,
        *,
        reason: str,
        rest: list[Segment],
        now: int,
        report: CycleReport,
    ) -> None:
        chain.state = state
        chain.reason = reason
        chain.updated_at = now
        report.ended.append(chain.id)
        s.add(event_row(now, "chain.end", chain.id, reason, state=state.value))
        self._stop_segments(s, chain, rest, now, report)
        # The environment snapshot may hold secrets and is needed only to submit: an ended
        # chain submits nothing more (a cancel runs with the minimal environment).
        chain.environment = {}

    def _stop_segments(
        self, s: Session, chain: Chain, segs: list[Segment], now: int, report: CycleReport
    ) -> None:
        ids = [g.job_id for g in segs if not g.finished]
        if not ids:
            return
        try:
            self.action_clients(chain).cancel(ids)
        except SlurmError as exc:
            log.warning("cancel %s failed: %s", ids, exc)
            s.add(event_row(now, "cancel.failed", chain.id, str(exc), job_ids=ids))
            return  # live segments stay unfinished: retried next cycle
        for g in segs:
            g.cancelled_by_mirage = True
            g.finished = True
            g.outcome = "CANCELLED"
        report.cancelled.extend(ids)
        s.add(event_row(now, "cancel", chain.id, "chain ended", job_ids=ids))

    def _transitions(self, s: Session, now: int, records: dict[str, SlurmJob]) -> None:
        """Observe interruption/overlap for successors that started after an ended segment."""
        started = s.scalars(
            select(Segment).where(
                Segment.transition_recorded.is_(False),
                Segment.index > 0,
                Segment.start.is_not(None),
                Segment.job_state != JobState.PENDING.value,
            )
        ).all()
        for seg in started:
            pred = s.scalars(
                select(Segment).where(
                    Segment.chain_id == seg.chain_id,
                    Segment.index == seg.index - 1,
                    Segment.end.is_not(None),
                    or_(Segment.outcome.is_(None), Segment.outcome != revoke.REVOKED),
                )
            ).first()
            if pred is None or pred.start is None or pred.end is None or seg.start is None:
                continue
            t = Transition(pred.start, pred.time_limit_s or 0, pred.end, seg.start)
            self.metrics.interruption.observe(t.interruption)
            self.metrics.overlap.observe(t.overlap)
            error = None
            if seg.predicted_start is not None:
                error = abs(seg.predicted_start - seg.start)
                self.metrics.prediction_error.observe(error)
            where = interval_outcome(seg.start, seg.predicted_low, seg.predicted_high)
            if where is not None:
                self.metrics.predicted_interval.labels(where).inc()
            seg.transition_recorded = True
            s.add(
                event_row(
                    now,
                    "transition",
                    seg.chain_id,
                    f"{pred.job_id} -> {seg.job_id}",
                    index=seg.index,
                    interruption=t.interruption,
                    overlap=t.overlap,
                    gap=t.gap,
                    cost=t.cost(),
                    prediction_error=error,
                    interval=where,
                    presubmitted=seg.presubmitted,
                )
            )

    # ---- decide ------------------------------------------------------------------------

    def _warmup(self, now: int, policies: list[Policy]) -> list[SlurmJob]:
        """Once, at the first good poll: the accounting history the policies ask for
        (``warmup_s``), in one extra ``sacct``; a failure is logged and tried again."""
        span = max((int(getattr(p, "warmup_s", 0)) for p in policies), default=0)
        if span <= 0:
            self._warmed = True
            return []
        self.metrics.slurm_commands.labels("sacct").inc()
        try:
            history = self.client.accounting(now - span, every_state=True)
        except SlurmError as exc:
            log.warning("reading %d days of accounting for the policy failed: %s",
                        span // 86400, exc)  # fmt: skip
            return []
        self._warmed = True
        log.info("policy warm-up: %d accounting records since %d", len(history), now - span)
        return history

    def _observe(self, now: int, snapshot: QueueSnapshot, accounting: list[SlurmJob]) -> None:
        """Every policy sees every cycle's poll, chains or not (``lookahead`` learns run
        times from the accounting records)."""
        policies = list({id(p): p for p in self.policies.values()}.values())
        if not self._warmed:
            accounting = [*self._warmup(now, policies), *accounting]
        ctx = DecisionContext(
            now=now,
            snapshot=snapshot,
            profile=self.profile,  # type: ignore[arg-type]
            accounting=accounting,
        )
        for policy in policies:
            policy.observe(ctx)

    # ---- which policy decides a chain -------------------------------------------

    def _refresh_live(self, now: int) -> None:
        """The cluster's partitions (default, node counts, GPUs per node, MaxTime), read
        at the first good poll and hourly: a chain without ``-p`` goes to the default
        partition, as sbatch sends it, and a trained model is used only on partitions of
        the shape it was tuned for. A failure keeps what was known (logged)."""
        if self._live_at is not None and now - self._live_at < LIVE_REFRESH_S:
            return
        from mirage.profile.capture import capture_profile

        self._live_at = now
        try:
            self._live = capture_profile(self.client, "live").partitions
        except Exception as exc:  # optional knowledge: never a reason to stop a cycle
            log.warning("cannot read the cluster's partitions (scontrol show): %s", exc)

    def partitions(self, now: int) -> tuple[Partition, ...]:
        """The cluster's partitions as last read (read now if never yet): () if unknown."""
        if self._live is None:
            self._live_at = None
            self._refresh_live(now)
        return self._live or ()

    def live_partition(self, name: str | None) -> Partition | None:
        """The live partition ``name`` (None: the default one), if known."""
        parts = self._live or ()
        if name is None:
            return next((p for p in parts if p.default), None)
        return next((p for p in parts if p.name == name), None)

    def resolve_partition(self, chain: Chain | None) -> str | None:
        """The partition a chain's jobs run in: its ``-p``, else the cluster's default
        (from the live cluster, else from the profile); None when nothing says."""
        if chain is not None and chain.partition:
            return chain.partition.split(",")[0]  # sbatch -p a,b: the first, for policies
        live = self.live_partition(None)
        if live is not None:
            return live.name
        if self.profile is not None and self.profile.partitions:
            return self.profile.partition(None).name
        return None

    def _coverage(self, s: Session) -> dict[str, str]:
        """Trained forecasters whose stated 90% intervals stopped covering: fewer than
        ``coverage_min`` of the last ``coverage_window`` stated intervals (transitions
        recorded since the model was written) held the successor's start."""
        pcfg = self.config.policy
        if pcfg.coverage_min <= 0:
            return {}
        out: dict[str, str] = {}
        for name, lp in self._loaded.items():
            if lp.kind != "learned":
                continue
            q = (
                select(Event.data)
                .where(Event.kind == "transition", Event.at >= int(lp.created_at))
                .order_by(Event.id.desc())
                .limit(20 * pcfg.coverage_window)
            )
            held = [d.get("interval") for d in s.scalars(q) if d and d.get("interval")]
            last = held[: pcfg.coverage_window]
            if len(last) < pcfg.coverage_window:
                continue
            inside = sum(1 for h in last if h == "inside")
            if inside < pcfg.coverage_min * len(last):
                out[name] = (
                    f"{name}'s stated 90% intervals held {inside} of the last {len(last)} "
                    f"starts (under {pcfg.coverage_min:.0%}): recalibrate it "
                    "(mirage train --recalibrate)"
                )
        return out

    def _set_aside(self, name: str, partition: str | None) -> tuple[str, str]:
        """Why the trained model ``name`` must not decide this chain, and the kind of why
        (metrics.FALLBACK_WHYS); ("", "") when it may."""
        lp = self._loaded.get(name)
        if lp is None or lp.kind != "learned":
            return "", ""
        if name in self._tuned_note:
            return f"{name}: {self._tuned_note[name]}", "cluster"
        profile = self.profile
        try:
            if profile is None or partition is None:
                raise ProfileError("no partition is known (no -p, no default partition)")
            model_part = profile.partition(partition)
        except ProfileError as exc:
            return f"{name}: {exc}", "partition"
        if self._live is None:
            return f"{name}: this cluster's partitions are not known yet", "cluster"
        live = self.live_partition(partition)
        if live is None:
            return f"{name}: partition {partition!r} is not on this cluster", "partition"
        if mismatch := shape_mismatch(model_part, live):
            where = lp.meta.cluster if lp.meta else "?"
            scale = (
                f"; a reactive successor waited {lp.wait_scale_h:.1f} h on average there"
                if lp.wait_scale_h is not None
                else ""
            )
            return (
                f"{name} ({where}): {mismatch}{scale}: recalibrate it for this cluster "
                "(mirage train --recalibrate)",
                "cluster",
            )
        if name in self._coverage_note:
            return self._coverage_note[name], "coverage"
        return "", ""

    def policy_for(self, chain: Chain) -> PolicyChoice:
        """The policy deciding ``chain``: the one configured for its partition, or the
        fallback (``[policy] fallback``) with the reason."""
        pcfg = self.config.policy
        partition = self.resolve_partition(chain)
        name = pcfg.partitions.get(partition or "", pcfg.default)
        policy = self.policies[name]
        fb = pcfg.fallback
        if not self.cfg.sees_all_jobs and getattr(policy, "needs_queue", True):
            note = f"{name} needs the whole queue (sees_all_jobs = false)"
            return PolicyChoice(f"{fb} (fallback: {name})", self.policies[fb], note, "queue")
        note, why = self._set_aside(name, partition)
        if note:
            self._warn_once(note)
            return PolicyChoice(f"{fb} (fallback: {name})", self.policies[fb], note, why)
        return PolicyChoice(name, policy)

    def _warn_once(self, note: str) -> None:
        if note not in self._warned:
            self._warned.add(note)
            log.warning("using [policy] fallback for some chains: %s", note)

    def estimate(self, request: SubmitRequest, chain: Chain | None = None) -> StartEstimate:
        """Slurm's start estimate for ``request`` (``sbatch --test-only``), within what is
        left of this cycle's ``test_only_per_cycle``; none once it is spent.

        A chain's own request (its script and options) runs as the chain's owner, like its
        submission: as root, the user's options and ``#SBATCH`` lines would be read with
        root's rights. A policy's request (Mirage's own fields only) runs as the daemon,
        with a stub script: ``--test-only`` never runs it, but sbatch needs one."""
        if self._test_only_left <= 0:
            return StartEstimate(None, None)
        self._test_only_left -= 1
        self.metrics.test_only.inc()
        self.metrics.slurm_commands.labels("sbatch_test_only").inc()
        if request.script is None and request.script_path is None:
            request = replace(request, script=TEST_ONLY_SCRIPT)
        client = self.client if chain is None else self.action_clients(chain)
        try:
            return client.test_only(request)
        except (SlurmError, ValueError, OSError) as exc:
            log.info("sbatch --test-only failed: %s", exc)
            return StartEstimate(None, None)

    def _decide(
        self,
        s: Session,
        now: int,
        snapshot: QueueSnapshot,
        wants: list[_Want],
        report: CycleReport,
    ) -> list[_Want]:
        """One batched ``decide`` per policy in use; the wants whose answer is "submit".

        A batch that raises is asked again one chain at a time, so that a chain whose
        decision fails (its error recorded on it) is not pre-submitted this cycle (its
        successor goes in when its predecessor ends, as reactive submission would) and
        every other chain is decided as usual."""
        if not wants:
            return []
        groups: dict[str, tuple[Policy, list[_Want]]] = {}
        for w in wants:
            choice = self.policy_for(w.chain)
            self._note(w.chain, choice.note)
            groups.setdefault(choice.label, (choice.policy, []))[1].append(w)
        out: list[_Want] = []
        for label, (policy, group) in groups.items():
            for w, d in self._decide_group(
                s, now=now, snapshot=snapshot, policy=policy, group=group, report=report
            ):
                self._apply_decision(w.chain, label, d, now)
                if d.submit:
                    w.decision = d
                    out.append(w)
        self._slurm_estimates([w for w in wants if w.decision is None])
        return out

    def _decide_group(
        self,
        s: Session,
        *,
        now: int,
        snapshot: QueueSnapshot,
        policy: Policy,
        group: list[_Want],
        report: CycleReport,
    ) -> list[tuple[_Want, Decision]]:
        ctx = DecisionContext(
            now=now,
            snapshot=snapshot,
            profile=self.profile,  # type: ignore[arg-type]
            estimate_start=self.estimate,
        )
        try:
            decisions = policy.decide(ctx, [w.pending for w in group if w.pending is not None])
            report.decisions += len(decisions)
            return list(zip(group, decisions, strict=True))
        except Exception:  # some chain's: ask again one at a time to find which
            if len(group) == 1:
                return self._decide_one(
                    s, now=now, ctx=ctx, policy=policy, w=group[0], report=report
                )
        out: list[tuple[_Want, Decision]] = []
        for w in group:
            out.extend(self._decide_one(s, now=now, ctx=ctx, policy=policy, w=w, report=report))
        return out

    def _decide_one(
        self,
        s: Session,
        *,
        now: int,
        ctx: DecisionContext,
        policy: Policy,
        w: _Want,
        report: CycleReport,
    ) -> list[tuple[_Want, Decision]]:
        assert w.pending is not None
        try:
            (d,) = policy.decide(ctx, [w.pending])
        except Exception as exc:  # this chain's decision, and only its own, failed
            s.commit()  # the other chains' decisions so far stay
            self.chain_failed(s, w.chain.id, "decide", exc, now=now, report=report)
            note = "its policy failed (see error): submitted when its predecessor ends"
            chain = s.get(Chain, w.chain.id)
            if chain is not None:
                self._note(chain, note)
                s.commit()
            return []
        report.decisions += 1
        return [(w, d)]

    @staticmethod
    def _apply_decision(c: Chain, label: str, d: Decision, now: int) -> None:
        lo, hi = d.interval if d.interval is not None else (None, None)
        if c.policy != label[:64]:
            c.policy = label[:64]
        if (c.predicted_start, c.predicted_low, c.predicted_high) != (d.predicted_start, lo, hi):
            c.predicted_start, c.predicted_low, c.predicted_high = d.predicted_start, lo, hi
        c.decided_at = now

    def _slurm_estimates(self, waiting: list[_Want]) -> None:
        """Slurm's own estimate for successors not yet submitted, for ``mirage status``.

        Each costs an ``sbatch --test-only`` (and a job id on the controller): whatever is
        left of ``test_only_per_cycle`` after the policies goes to the chains whose
        predecessor ends soonest, each at most once per segment.
        """
        if self._test_only_left <= 0:
            return
        due = sorted(
            (w for w in waiting if w.pending is not None),
            key=lambda w: w.pending.planned_end if w.pending is not None else 0,
        )
        for w in due:
            if self._test_only_left <= 0:
                break
            if w.chain.slurm_estimate_for == w.index:
                continue
            est = self.estimate(build_request(w.chain, "mg" + "0" * 16, w.time_limit), w.chain)
            w.chain.slurm_estimate = est.start
            w.chain.slurm_estimate_for = w.index

    # ---- act ---------------------------------------------------------------------------

    def _act(self, s: Session, now: int, wants: list[_Want], report: CycleReport) -> None:
        budget = self.cfg.max_submits_per_cycle
        for w in wants:
            if budget <= 0:
                self.metrics.cycles_skipped.labels("submit_limit").inc()
                break
            budget -= 1
            if w.chain.uid == 0 and self.refuse_root_chains:
                why = "chains of uid 0 are refused ([daemon] allow_root_chains = false)"
                self._end_chain(
                    s, w.chain, ChainState.FAILED, reason=why, rest=[], now=now, report=report
                )
                continue
            chain_id = w.chain.id
            try:
                self.submit(
                    s,
                    w.chain,
                    index=w.index,
                    time_limit=w.time_limit,
                    now=now,
                    report=report,
                    presubmit=w.presubmit,
                    decision=w.decision,
                    pending=w.pending,
                )
            except Exception as exc:  # this chain's submission, and only its own, failed
                # A committed intent whose sbatch never ran is resolved by its token (LOST
                # after unknown_timeout_s): never a second job for one segment.
                self.chain_failed(s, chain_id, "submit", exc, now=now, report=report)
                continue
            if report.submit_stalled:
                # sbatch timed out or lost the controller: the rest wait for a good poll (a
                # chain whose own sbatch was killed or answered garbage stops no one else)
                self.metrics.cycles_skipped.labels("submit_unknown").inc()
                break

    def submit(
        self,
        s: Session,
        chain: Chain,
        *,
        index: int,
        time_limit: int,
        now: int,
        report: CycleReport,
        presubmit: bool = False,
        decision: Decision | None = None,
        pending: PendingTransition | None = None,
    ) -> Submission:
        """Record the intent (committed), run sbatch as the owner, record what happened."""
        reason = decision.reason if decision is not None else "predecessor ended"
        predicted = decision.predicted_start if decision is not None else None
        sub = record_intent(
            s,
            chain,
            index=index,
            time_limit=time_limit,
            now=now,
            presubmit=presubmit,
            reason=reason,
            predicted_start=predicted,
            inputs=(
                {}
                if pending is None
                else {
                    "pred_job_id": pending.pred_job_id,
                    "pred_start": pending.pred_start,
                    "planned_end": pending.planned_end,
                    "remaining_s": pending.remaining(now),
                    "now": now,
                }
            ),
        )
        s.commit()  # the intent is durable before sbatch runs
        self._fault_point("after-intent")
        self.metrics.slurm_commands.labels("sbatch").inc()
        outcome = perform_submission(s, chain, sub, self.action_clients(chain), now)
        self._fault_point("after-sbatch")  # the job exists; its id is not committed
        if outcome == "rejected":
            report.rejected.append(sub.token)
            self.metrics.presubmissions.labels("rejected").inc()
            if chain.rejections >= self.cfg.max_rejections:
                why = f"sbatch refused: {sub.error}"
                self._end_chain(
                    s, chain, ChainState.FAILED, reason=why, rest=[], now=now, report=report
                )
        elif outcome in ("unknown", "unanswered"):
            report.unknown.append(sub.token)
            report.submit_stalled = report.submit_stalled or outcome == "unknown"
            self.metrics.presubmissions.labels("unknown").inc()
        else:
            assert sub.job_id is not None
            report.submitted.append(sub.job_id)
            self.metrics.presubmissions.labels("presubmitted" if presubmit else "reactive").inc()
        s.commit()
        return sub

    # ---- gauges ------------------------------------------------------------------------

    def _chain_gauges(self, s: Session) -> None:
        rows = s.execute(select(Chain.state, func.count()).group_by(Chain.state)).all()
        counts = {state: n for state, n in rows}
        for st in ChainState:
            self.metrics.chains.labels(st.value).set(counts.get(st, 0))
        # every active chain whose configured policy is not used as is, by why (a chain
        # with a current error of its own counts as "error")
        whys: dict[str, int] = dict.fromkeys(FALLBACK_WHYS, 0)
        for chain in s.scalars(select(Chain).where(Chain.state == ChainState.ACTIVE)):
            why = "error" if chain.error else self.policy_for(chain).why
            if why:
                whys[why] += 1
        for why, n in whys.items():
            self.metrics.policy_fallbacks.labels(why).set(n)


#: The warning signal a chain asks for (``--signal=[R|B:]SIG[@LEAD]``, sbatch's syntax).
SIGNAL_RE = re.compile(r"^(?P<pre>(?:[RB]{1,2}:)?)(?P<sig>[A-Za-z0-9]+)(?:@(?P<lead>[0-9]{1,7}))?$")
#: sbatch's lead when ``@LEAD`` is left out.
DEFAULT_SIGNAL_LEAD_S = 60
#: The shortest lead Mirage shortens a warning to.
SIGNAL_LEAD_MIN_S = 10


def signal_lead(time_limit: int) -> int:
    """The longest warning lead a segment of ``time_limit`` keeps: a tenth of it (at least
    10 s). A lead of 300 s, usual for hours-long jobs, would otherwise take a 2-minute
    segment's whole run."""
    return max(SIGNAL_LEAD_MIN_S, time_limit // 10)


def _signal_options(args: Sequence[str]) -> tuple[list[str], str | None]:
    """``args`` without their ``--signal`` options, and the last one's value (sbatch keeps
    the last)."""
    rest: list[str] = []
    value = None
    it = iter(args)
    for a in it:
        if a == "--signal":
            value = next(it, None)
        elif a.startswith("--signal="):
            value = a.removeprefix("--signal=")
        else:
            rest.append(a)
    return rest, value


def warning_options(chain: Chain, time_limit: int) -> list[str]:
    """The chain's own sbatch options, with the warning signal it asks for (its options
    over its ``#SBATCH`` lines) shortened to :func:`signal_lead` of this segment's limit.
    A chain that asks for no signal gets none: a batch shell that does not trap it would
    die of it (Slurm's own end, SIGTERM at the limit, is left as it is)."""
    rest, value = _signal_options(chain.sbatch_args)
    if value is None:
        _, value = _signal_options(script_directives(chain.script or b""))
        rest = list(chain.sbatch_args)
        if value is None:
            return rest
    else:
        rest.append(f"--signal={value}")
    m = SIGNAL_RE.match(value)
    if m is None:
        return list(chain.sbatch_args)  # sbatch judges what Mirage cannot read
    lead = int(m["lead"]) if m["lead"] else DEFAULT_SIGNAL_LEAD_S
    cap = signal_lead(time_limit)
    if lead <= cap:
        return list(chain.sbatch_args)
    own = [a for a in rest if not a.startswith("--signal=")]
    return [*own, f"--signal={m['pre']}{m['sig']}@{cap}"]


def build_request(chain: Chain, token: str, time_limit: int) -> SubmitRequest:
    """The sbatch request of one segment, from the chain's snapshot (script on stdin); a
    warning signal the chain asks for is shortened to fit the segment's limit."""
    extra = warning_options(chain, time_limit)
    if chain.export:
        extra.append(f"--export={chain.export}")
    return SubmitRequest(
        script=chain.script,
        job_name=job_name(chain.name, token),
        comment=f"mirage:{token}",
        time_limit=time_limit,
        nodes=chain.nodes,
        gres=chain.gres,
        partition=chain.partition,
        chdir=chain.chdir,
        extra_args=tuple(extra),
    )


def record_intent(
    s: Session,
    chain: Chain,
    *,
    index: int,
    time_limit: int,
    now: int,
    presubmit: bool,
    reason: str,
    predicted_start: int | None = None,
    inputs: dict[str, Any] | None = None,
) -> Submission:
    """Add (not commit) an INTENT row with a fresh token, and its event (with the inputs)."""
    sub = Submission(
        token=new_token(),
        chain_id=chain.id,
        index=index,
        state=SubmissionState.INTENT,
        time_limit_s=time_limit,
        presubmitted=presubmit,
        created_at=now,
        error="",
    )
    s.add(sub)
    s.add(
        event_row(
            now,
            "submit.intent",
            chain.id,
            reason,
            token=sub.token,
            index=index,
            time_limit=time_limit,
            presubmit=presubmit,
            policy=chain.policy,
            predicted_start=predicted_start,
            **(inputs or {}),
        )
    )
    return sub


def perform_submission(
    s: Session,
    chain: Chain,
    sub: Submission,
    client: SlurmClient,
    now: int,
) -> str:
    """Run sbatch for a committed intent: "submitted", "rejected", "unknown" (the controller
    timed out or could not be reached) or "unanswered" (sbatch was killed, or its answer
    could not be read). Not committed.

    A refusal (SubmitError) means no job exists: REJECTED, and so does a request that
    could not be started at all (a NUL byte in a value, a user the system cannot switch
    to: ValueError, OSError). Any other failure may hide a job: UNKNOWN, resolved by its
    token.
    """
    try:
        job_id = client.submit(build_request(chain, sub.token, sub.time_limit_s))
    except (SubmitError, ValueError, OSError) as exc:
        sub.state = SubmissionState.REJECTED
        sub.resolved_at = now
        sub.error = str(exc)[:2000]
        chain.rejections += 1
        s.add(event_row(now, "submit.rejected", chain.id, str(exc), token=sub.token))
        return "rejected"
    except SlurmError as exc:
        sub.state = SubmissionState.UNKNOWN
        sub.error = str(exc)[:2000]
        s.add(event_row(now, "submit.unknown", chain.id, str(exc), token=sub.token))
        stalled = isinstance(exc, SlurmUnreachableError | SlurmTimeoutError)
        return "unknown" if stalled else "unanswered"
    sub.state = SubmissionState.SUBMITTED
    sub.job_id = job_id
    sub.resolved_at = now
    chain.rejections = 0
    Daemon._new_segment(s, chain, sub, now)
    s.add(event_row(now, "submit", chain.id, "", token=sub.token, job_id=job_id, index=sub.index))
    return "submitted"


def register_chain(
    store: Store, chain: Chain, now: int, *, first_intent: bool = True
) -> Submission | None:
    """Store a new chain, and (by default) the intent of its first segment, in one commit.

    The caller then runs ``perform_submission`` for the returned intent (the CLI does, as
    the user, so segment 1 starts at once); if it never does, the daemon resolves the
    intent by its token like any other.
    """
    chain.created_at = chain.updated_at = now
    with store.session() as s:
        s.add(chain)
        s.add(
            event_row(
                now,
                "chain.register",
                chain.id,
                "",
                owner=chain.owner,
                script_sha256=chain.script_sha256,
                segments=chain.segments_target,
                until_file=chain.until_file,
            )
        )
        sub = None
        if first_intent:
            s.flush()
            sub = record_intent(
                s,
                chain,
                index=0,
                time_limit=first_limit(chain),
                now=now,
                presubmit=False,
                reason="registered",
            )
    return sub


def first_limit(chain: Chain) -> int:
    return chain.time_limit_s


def segments_done(chain: Chain) -> bool:
    """Whether the chain has had all its ``--segments N`` (each submitted segment counts;
    a revoked pre-submission gives its index back)."""
    target = chain.segments_target
    return target is not None and chain.next_index >= target
