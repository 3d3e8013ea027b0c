"""The daemon's unit of work: one serial ``cycle(now)``: poll, reconcile, decide, act.

Nothing here reads the wall clock or sleeps: production calls ``cycle(int(time.time()))``
from one APScheduler interval job (``mirage.daemon.service``); tests and the simulated
backend call it with simulated time. The Slurm client, the clock-free store, the policy
and the owner-identity client factory are injected.

Per cycle, whatever the number of chains: one ``client.queue()`` and one
``client.accounting(since)`` (the window starts ``sacct_overlap_s`` before the last good
poll, widened back to the oldest submission or job that is still unaccounted for), plus
the actions themselves (sbatch, scancel) and at most ``test_only_per_cycle`` estimates.
One daemon per cluster acts: the lease.

The :class:`Daemon` orchestrates; each step lives with what it holds:

- :mod:`mirage.daemon.reconcile`: Slurm's records into segment states;
- :mod:`mirage.daemon.ledger`: the submission ledger, exactly once (intent, sbatch,
  adoption by token);
- :mod:`mirage.daemon.advance`: the state table applied to each chain, handoff, chain end;
- :mod:`mirage.daemon.routing`: which policy decides each chain, and its decisions;
- :mod:`mirage.daemon.revoke`: pending pre-submissions cancelled when far too early.

Each gets :class:`mirage.daemon.context.StepContext`, the narrow state a chain's step
acts with; one chain's failure is that chain's (:meth:`StepContext.chain_failed`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mirage.daemon import health, ledger, reconcile, revoke
from mirage.daemon.advance import Advancer
from mirage.daemon.config import Config
from mirage.daemon.context import (
    ActionClients,
    MarkerCheck,
    StepContext,
    fault_from_env,
    local_marker_check,
    set_note,
)
from mirage.daemon.metrics import FALLBACK_WHYS, DaemonMetrics
from mirage.daemon.outcomes import CycleReport, Skip, SubmitOutcome, Want
from mirage.daemon.planning import Planner
from mirage.daemon.policies import model_key, plan_calibration
from mirage.daemon.routing import PolicyChoice, PolicyRouter
from mirage.daemon.store import (
    Chain,
    ChainState,
    Segment,
    Store,
    Submission,
    SubmissionState,
    event_row,
    new_token,
)
from mirage.daemon.timing import ReportRead, TimingReader, local_read
from mirage.policy.base import Decision, PendingTransition, Policy
from mirage.profile.schema import ClusterProfile, Partition
from mirage.slurm.client import SlurmClient
from mirage.slurm.types import (
    JobState,
    QueueSnapshot,
    SlurmError,
    SlurmJob,
    SlurmTimeoutError,
    SlurmUnreachableError,
    StartEstimate,
    SubmitRequest,
)

log = logging.getLogger(__name__)

CURSOR_KEY = "accounting_cursor"
#: The last poll whose squeue answered (``mirage status``: how fresh a job's state is); the
#: accounting cursor above moves only when sacct answered too.
QUEUE_POLL_KEY = "queue_poll"


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
        report_read: ReportRead | None = None,
        refuse_root_chains: bool = False,
    ) -> None:
        self.store = store
        self.client = client
        self.config = config if config is not None else Config()
        self.cfg = self.config.daemon
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{new_token()[2:10]}"
        self.metrics = metrics if metrics is not None else DaemonMetrics()
        self.ctx = StepContext(
            cfg=self.cfg,
            metrics=self.metrics,
            clients=action_clients or (lambda _chain: client),
            marker_check=marker_check or local_marker_check,
            fault=fault_from_env(),
            timings=TimingReader(report_read or local_read),
        )
        self.router = PolicyRouter(self.config, client, self.ctx, profile=profile,
                                   policies=policies)  # fmt: skip
        self.advancer = Advancer(self.ctx, self.router)
        self.advancer.limit_bound_only = self.config.policy.presubmit_only_limit_bound
        # `mirage plan` on the socket plans on this daemon's last poll (planning.py)
        self.planner = Planner(client, self._plan_profile, self._plan_forecaster,
                               plan_calibration(self.config.policy))  # fmt: skip
        if self.config.plan.replan:
            self.advancer.planner = self.planner
            self.advancer.replan_min_gain_s = self.config.plan.replan_min_gain_s
        self._model_metrics()
        # A chain of uid 0 would have its jobs run as root by a daemon that submits as each
        # owner: one registered as root, or a row written into the database by anyone who
        # can (its password may be in a configuration users read). Refused unless the
        # configuration allows it ([daemon] allow_root_chains).
        self.refuse_root_chains = refuse_root_chains
        self._failures = 0
        self._next_poll = 0
        cursor = store.get_value(CURSOR_KEY)
        self._last_ok_poll: int | None = int(cursor) if cursor else None
        self.last_report: CycleReport | None = None
        self.cycle_failures = 0
        self._slurm_fact: tuple[bool, str] | None = None
        self._accounting_fact: tuple[bool, str] | None = None
        # since when (and why) this daemon cannot record its cycles, None while it can
        self.database_error: dict[str, Any] | None = None

    def _model_metrics(self) -> None:
        """The default policy's model and age, and each model's age for ``mirage status``."""
        used, default = self.router.used, self.config.policy.default
        self.metrics.model.info({"policy": default, "kind": used.kind, "created": used.created})
        if used.created_at:
            created = used.created_at
            self.metrics.model_age.set_function(lambda: max(0.0, time.time() - created))
        else:
            self.metrics.model_age.set(0)  # a baseline has no trained model
        for name, lp in self.router.loaded.items():
            self.store.set_value(model_key(name), str(int(lp.created_at)) if lp.created_at else "")

    def _plan_profile(self) -> ClusterProfile | None:
        """What plans are made on: the policies' profile, else the live partitions."""
        if self.router.profile is not None:
            return self.router.profile
        parts = self.router.partitions(self._last_ok_poll or int(time.time()))
        return ClusterProfile(name="live", partitions=parts) if parts else None

    def _plan_forecaster(self) -> Policy | None:
        """The trained default policy, for plans, unless it is set aside at start."""
        used = self.router.used
        if used.kind != "learned" or self.router.policy_summary().get("fallback"):
            return None
        return used.policy

    # ---- what callers see of the steps -------------------------------------------------

    @property
    def policies(self) -> dict[str, Policy]:
        return self.router.policies

    @property
    def profile(self) -> ClusterProfile | None:
        return self.router.profile

    @property
    def action_clients(self) -> ActionClients:
        return self.ctx.clients

    def policy_summary(self) -> dict[str, Any]:
        """See :meth:`PolicyRouter.policy_summary`."""
        return self.router.policy_summary()

    def policy_for(self, chain: Chain) -> PolicyChoice:
        return self.router.policy_for(chain)

    def partitions(self, now: int) -> tuple[Partition, ...]:
        return self.router.partitions(now)

    def resolve_partition(self, chain: Chain | None) -> str | None:
        return self.router.resolve_partition(chain)

    def estimate(self, request: SubmitRequest, chain: Chain | None = None) -> StartEstimate:
        return self.router.estimate(request, chain)

    def chain_failed(
        self, s: Session, chain_id: str, step: str, exc: Exception, *, now: int,
        report: CycleReport,
    ) -> None:  # fmt: skip
        self.ctx.chain_failed(s, chain_id, step, exc, now=now, report=report)

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
        try:
            self._record_cycle(report)
        except Exception as exc:
            self._database_failed(exc, report.now)
            raise
        self._database_ok()
        return report

    def _database_failed(self, exc: Exception, now: int) -> None:
        """The cycle could not be recorded: say why where it can still be read (the metrics,
        and ``mirage status`` through the socket, which asks this process)."""
        why = self.store.unwritable(exc)
        text = f"the database is {why}" if why else f"the database failed: {type(exc).__name__}"
        if self.database_error is None:
            self.database_error = {"since": now, "error": text, "detail": str(exc)[:500]}
        else:
            self.database_error["error"] = text
        self.metrics.database_writable.set(0)

    def _database_ok(self) -> None:
        self.database_error = None
        self.metrics.database_writable.set(1)

    def database_health(self) -> dict[str, Any]:
        """Whether this daemon could record its last cycle (``mirage status``)."""
        if self.database_error is None:
            return {"writable": True}
        return {"writable": False, **self.database_error}

    def _record_cycle(self, report: CycleReport) -> None:
        """The cycle's facts for ``mirage status`` (raises if the database is gone)."""
        info = health.CycleInfo(
            at=report.now,
            finished=not report.failed,
            skipped=report.skipped or "",
            error=report.error[:2000],
            failures_total=self.cycle_failures,
            chain_errors=len(report.chain_errors),
        )
        health.write(self.store, health.CYCLE_KEY, info)
        if report.skipped in (Skip.LEASE, Skip.BACKOFF):
            return  # nothing was asked of Slurm
        fact = (not report.skipped, report.error[:500] if report.skipped else "")
        if fact != self._slurm_fact:
            reachable, error = fact
            health.write(
                self.store, health.SLURM_KEY, health.SlurmInfo(reachable, error, report.now)
            )
            self._slurm_fact = fact
        if report.skipped:
            return  # squeue did not answer: nothing was asked of slurmdbd
        acct = (not report.accounting_error, report.accounting_error[:500])
        if acct != self._accounting_fact:
            health.write(
                self.store, health.ACCOUNTING_KEY, health.SlurmInfo(acct[0], acct[1], report.now)
            )
            self._accounting_fact = acct

    def _cycle(self, now: int, report: CycleReport) -> None:
        if not self.store.acquire_lease(self.cfg.cluster, self.holder, now, self.cfg.lease_ttl_s):
            self.metrics.lease_held.set(0)
            self.metrics.cycles_skipped.labels("lease").inc()
            report.skipped = Skip.LEASE
            return
        self.metrics.lease_held.set(1)
        if now < self._next_poll:
            self.metrics.cycles_skipped.labels("backoff").inc()
            report.skipped = Skip.BACKOFF
            return
        polled = self._poll(now, report)
        if polled is None:
            return
        snapshot, records, accounting = polled
        report.acted = True
        self.router.observe(now, snapshot, accounting)
        self.planner.observe(now, snapshot, accounting)
        self.router.refresh_live(now)
        with self.store.sessions() as s:
            self.router.check_coverage(s)
            queued = frozenset(j.job_id for j in snapshot.jobs)
            wants, revocable = self._reconcile(s, now, records, report, queued)
            s.commit()
            # one budget of estimates per cycle, for decisions and revocations alike
            self.router.test_only_left = self.cfg.test_only_per_cycle
            presubmits = [w for w in wants if w.presubmit]
            chosen = self.router.decide(s, now, snapshot, presubmits, report)
            chosen = self._capped(s, chosen)
            s.commit()
            wants = [w for w in wants if not w.presubmit] + chosen
            # a slow cycle may have lost the lease: renew before acting, or act on nothing
            if not self.store.acquire_lease(
                self.cfg.cluster, self.holder, now, self.cfg.lease_ttl_s
            ):
                report.skipped = Skip.LEASE
                return
            self._act(s, now, wants, report)
            s.commit()
            revoke.act(
                self.ctx,
                self.router,
                s,
                now=now,
                snapshot=snapshot,
                candidates=revocable,
                report=report,
            )
            s.commit()
            self._clear_errors(s, report)
            self._chain_gauges(s)

    def _clear_errors(self, s: Session, report: CycleReport) -> None:
        """A chain whose every step went through this cycle has no current error (its
        count and time stay, for ``mirage status``)."""
        q = select(Chain).where(Chain.state == ChainState.ACTIVE, Chain.error != "")
        for chain in s.scalars(q):
            if chain.id not in report.chain_errors:
                chain.error = ""
        s.commit()

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
            report.skipped = Skip.UNREACHABLE if kind == "unreachable" else Skip.ERROR
            report.error = str(exc)
            log.warning("poll failed (%s), next poll in %ds: %s", kind, delay, exc)
            if self._failures == 1:
                with self.store.session() as s:
                    s.add(event_row(now, "poll.failed", None, str(exc), error_kind=kind))
            return None
        accounting = self._accounting(since, now, report)
        self.metrics.poll_duration.observe(time.perf_counter() - t0)
        self.metrics.slurm_reachable.set(1)
        if self._failures:
            with self.store.session() as s:
                s.add(event_row(now, "poll.recovered", None, f"after {self._failures} failures"))
        self._failures = 0
        self._next_poll = 0
        self.store.set_value(QUEUE_POLL_KEY, str(now))
        if not report.accounting_error:
            self._last_ok_poll = now
            self.store.set_value(CURSOR_KEY, str(now))
        records, ignored = reconcile.merge_records(snapshot.jobs, accounting)
        for why, n in ignored.items():
            self.metrics.records_ignored.labels(why).inc(n)
        return snapshot, records, accounting

    def _accounting(self, since: int, now: int, report: CycleReport) -> list[SlurmJob]:
        """sacct's records since ``since``; none when slurmdbd cannot answer while the
        controller does. The cycle then goes on from squeue, which lists ended jobs with
        their state until MinJobAge: only what needs accounting waits (a segment squeue no
        longer lists stays unknown; a submission whose outcome is unknown is never
        declared lost), and the cursor stays, so the next answer covers the outage."""
        try:
            report.slurm_reads += 1
            self.metrics.slurm_commands.labels("sacct").inc()
            accounting = self.client.accounting(since, every_state=True)
        except SlurmError as exc:
            first = self._accounting_fact is None or self._accounting_fact[0]
            report.accounting_error = str(exc) or type(exc).__name__
            self.metrics.poll_errors.labels("accounting").inc()
            self.metrics.accounting_reachable.set(0)
            log.warning("accounting (sacct) failed, going on from squeue: %s", exc)
            if first:
                with self.store.session() as s:
                    s.add(event_row(now, "accounting.failed", None, report.accounting_error))
            return []
        self.metrics.accounting_reachable.set(1)
        return accounting

    def _reconcile(
        self,
        s: Session,
        now: int,
        records: dict[str, SlurmJob],
        report: CycleReport,
        queued: frozenset[str],
    ) -> tuple[list[Want], list[revoke.Revocable]]:
        """Adopt or lose unresolved submissions, update segments from Slurm's records
        (``queued``: the ids squeue listed), advance chains. Returns what to submit and
        which pending pre-submissions a policy may revoke."""
        by_token, extras = ledger.index_tokens(records.values())
        chains = {c.id: c for c in s.scalars(select(Chain).where(Chain.state == ChainState.ACTIVE))}
        unresolved = ledger.resolve_submissions(
            self.ctx,
            s,
            now=now,
            by_token=by_token,
            chains=chains,
            report=report,
            may_lose=not report.accounting_error,  # unseen by squeue alone proves nothing
        )
        s.flush()

        live: dict[str, list[Segment]] = defaultdict(list)
        for seg in s.scalars(select(Segment).where(Segment.finished.is_(False))):
            own = reconcile.own_record(self.ctx, seg, records, queued)
            reconcile.update_segment(seg, own, now)
            if seg.revoke_at is not None and revoke.settle(self.ctx, s, seg, now):
                continue  # cancelled by a revocation: no longer the chain's
            live[seg.chain_id].append(seg)
        reconcile.observe_transitions(self.ctx, s, now)
        reconcile.read_timings(self.ctx, s, now, chains)
        reconcile.cancel_extras(self.ctx, s, now, extras, report)
        s.commit()  # what holds for every chain is kept whatever one chain does next

        wants: list[Want] = []
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
                    self.advancer.stop_segments(
                        s, ended, [g for g in segs if not g.finished], now, report
                    )
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
    ) -> tuple[Want | None, revoke.Revocable | None]:
        """One chain's bookkeeping: advance it, and its revocable successor if any."""
        segs = sorted(live, key=lambda g: g.index)
        want = self.advancer.advance(
            s, chain, segs, has_unresolved=has_unresolved, now=now, report=report
        )
        if chain.state is not ChainState.ACTIVE:
            return want, None
        return want, self.advancer.revocable(s, chain, [g for g in segs if not g.finished], now)

    def _capped(self, s: Session, chosen: list[Want]) -> list[Want]:
        """The pre-submissions the fairness cap lets through ([policy]
        max_presubmitted_per_user): each user's pending pre-submitted successors and this
        cycle's together at most the cap; the rest wait (a note on the chain, counted)."""
        cap = self.config.policy.max_presubmitted_per_user
        if cap <= 0 or not chosen:
            return chosen
        rows = s.execute(
            select(Chain.owner, func.count())
            .join(Segment, Segment.chain_id == Chain.id)
            .where(Segment.presubmitted, ~Segment.finished,
                   Segment.job_state == JobState.PENDING.value)
            .group_by(Chain.owner)
        ).all()  # fmt: skip
        pending = {owner: int(n) for owner, n in rows}
        kept = []
        for w in chosen:
            owner = w.chain.owner
            if pending.get(owner, 0) >= cap:
                set_note(w.chain, f"{owner} has {cap} pre-submitted successors pending: this "
                                  "one waits ([policy] max_presubmitted_per_user)")  # fmt: skip
                self.metrics.presubmissions.labels("capped").inc()
                continue
            pending[owner] = pending.get(owner, 0) + 1
            kept.append(w)
        return kept

    def _act(self, s: Session, now: int, wants: list[Want], report: CycleReport) -> None:
        budget = self.cfg.max_submits_per_cycle
        for w in wants:
            if budget <= 0:
                self.metrics.cycles_skipped.labels("submit_limit").inc()
                break
            budget -= 1
            if w.chain.uid == 0 and self.refuse_root_chains:
                why = "chains of uid 0 are refused ([daemon] allow_root_chains = false)"
                self.advancer.end_chain(
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
        """One segment through the ledger (:func:`mirage.daemon.ledger.submit`); a chain
        that Slurm refused ``max_rejections`` times in a row ends FAILED."""
        sub, outcome = ledger.submit(self.ctx, s, chain, index=index, time_limit=time_limit,
                                     now=now, report=report, presubmit=presubmit,
                                     decision=decision, pending=pending)  # fmt: skip
        if outcome is SubmitOutcome.REJECTED and chain.rejections >= self.cfg.max_rejections:
            why = f"sbatch refused: {sub.error}"
            self.advancer.end_chain(
                s, chain, ChainState.FAILED, reason=why, rest=[], now=now, report=report
            )
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
