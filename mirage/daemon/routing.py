"""Which policy decides each chain, and its batched decisions.

The router holds the policies (built once, at start, from ``[policy]``: a trained model
that does not fit this code stops the daemon with its reason) and what decides whether
the configured one may be used for a chain: the cluster's live partitions (read at the
first good poll and hourly), the trained models' fit to them, their recent interval
coverage, and whether the daemon sees the whole queue. It also spends the cycle's budget
of Slurm start estimates (``sbatch --test-only``): the policies' first, then
``mirage status``'s.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirage.daemon.config import Config
from mirage.daemon.context import StepContext, set_note
from mirage.daemon.ledger import build_request
from mirage.daemon.outcomes import CycleReport, Want
from mirage.daemon.policies import (
    LoadedPolicy,
    build_policies,
    learned_profile,
    profile_path,
    shape_mismatch,
    tuned_elsewhere,
)
from mirage.daemon.store import Chain, Event
from mirage.policy.base import Decision, DecisionContext, Policy
from mirage.profile.schema import ClusterProfile, Partition, ProfileError
from mirage.slurm.client import SlurmClient
from mirage.slurm.types import QueueSnapshot, SlurmError, SlurmJob, StartEstimate, SubmitRequest

log = logging.getLogger(__name__)

#: The script of a policy's ``sbatch --test-only`` request (never run).
TEST_ONLY_SCRIPT = b"#!/bin/sh\ntrue\n"
#: How often the live cluster's partitions are read again (`scontrol show partition|node`).
LIVE_REFRESH_S = 3600


@dataclass(frozen=True)
class PolicyChoice:
    """The policy deciding one chain (``name``), and when it is the fallback, the
    configured one it stands in for (``fallback_for``), why (``note``) and the kind of why
    (``why``: one of metrics.FALLBACK_WHYS); all "" when the configured one decides."""

    name: str
    policy: Policy
    fallback_for: str = ""
    note: str = ""
    why: str = ""

    @property
    def label(self) -> str:
        """As logs and ``mirage status`` show it: ``"reactive (fallback: xgb)"``."""
        return f"{self.name} (fallback: {self.fallback_for})" if self.fallback_for else self.name


class PolicyRouter:
    """The policies, which one decides each chain, and their decisions."""

    def __init__(
        self,
        config: Config,
        client: SlurmClient,
        ctx: StepContext,
        *,
        profile: ClusterProfile | None = None,
        policies: Mapping[str, Policy] | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.ctx = ctx
        self.profile = profile
        pcfg = config.policy
        # trained models are loaded (and version-checked) once, at start: a model that does
        # not fit this code stops the daemon with its reason instead of deciding wrongly
        loaded = build_policies(pcfg)
        if self.profile is None and any(lp.kind != "baseline" for lp in loaded.values()):
            self.profile = learned_profile(pcfg)
        self.policies: dict[str, Policy] = {n: lp.policy for n, lp in loaded.items()}
        self.policies.update(policies or {})
        self.loaded: dict[str, LoadedPolicy] = loaded
        self.used = loaded[pcfg.default]
        # A trained model whose profile is not the one its constants were tuned on (ls6's
        # model beside a profile captured from this cluster) is set aside from the start.
        self._tuned_note = {
            name: note
            for name, lp in loaded.items()
            if lp.kind == "learned" and (note := tuned_elsewhere(lp, profile_path(pcfg)))
        }
        self.test_only_left = 0  # what is left of this cycle's --test-only budget
        self._warmed = False  # the policies' accounting history read (see _warmup)
        self._live: tuple[Partition, ...] | None = None  # the cluster's partitions, as read
        self._live_at: int | None = None
        self._coverage_note: dict[str, str] = {}  # policy name -> why set aside (this cycle)
        self._warned: set[str] = set()

    def check_coverage(self, s: Session) -> None:
        """This cycle's verdicts on the trained models' interval coverage (before the
        chains are advanced: a model set aside is set aside for the whole cycle)."""
        self._coverage_note = self._coverage(s)

    def policy_summary(self) -> dict[str, Any]:
        """The configured default policy as the start line and ``mirage status`` show it:
        ``policy``, ``model`` (a trained model: name, cluster, creation time; "" for a
        baseline), ``model_created_at`` (epoch seconds or None) and ``fallback`` (why the
        daemon does not use it as is, "" when it does)."""
        pcfg = self.config.policy
        used = self.used
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

    def _warmup(self, now: int, policies: list[Policy]) -> list[SlurmJob]:
        """Once, at the first good poll: the accounting history the policies ask for
        (``warmup_s``), in one extra ``sacct``; a failure is logged and tried again."""
        span = max((p.warmup_s for p in policies), default=0)
        if span <= 0:
            self._warmed = True
            return []
        self.ctx.metrics.slurm_commands.labels("sacct").inc()
        try:
            history = self.client.accounting(now - span, every_state=True)
        except SlurmError as exc:
            log.warning("reading %d days of accounting for the policy failed: %s",
                        span // 86400, exc)  # fmt: skip
            return []
        self._warmed = True
        since = dt.datetime.fromtimestamp(now - span, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        log.info("policy warm-up: %d accounting records since %s", len(history), since)
        return history

    def observe(self, now: int, snapshot: QueueSnapshot, accounting: list[SlurmJob]) -> None:
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

    def refresh_live(self, now: int) -> None:
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
            self.refresh_live(now)
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
        for name, lp in self.loaded.items():
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
        lp = self.loaded.get(name)
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
        if not self.ctx.cfg.sees_all_jobs and policy.needs_queue:
            note = f"{name} needs the whole queue (sees_all_jobs = false)"
            return PolicyChoice(fb, self.policies[fb], name, note, "queue")
        note, why = self._set_aside(name, partition)
        if note:
            self._warn_once(note)
            return PolicyChoice(fb, self.policies[fb], name, note, why)
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
        if self.test_only_left <= 0:
            return StartEstimate(None, None)
        self.test_only_left -= 1
        self.ctx.metrics.test_only.inc()
        self.ctx.metrics.slurm_commands.labels("sbatch_test_only").inc()
        if request.script is None and request.script_path is None:
            request = replace(request, script=TEST_ONLY_SCRIPT)
        client = self.client if chain is None else self.ctx.clients(chain)
        try:
            return client.test_only(request)
        except (SlurmError, ValueError, OSError) as exc:
            log.info("sbatch --test-only failed: %s", exc)
            return StartEstimate(None, None)

    def decide(
        self,
        s: Session,
        now: int,
        snapshot: QueueSnapshot,
        wants: list[Want],
        report: CycleReport,
    ) -> list[Want]:
        """One batched ``decide`` per policy in use; the wants whose answer is "submit".

        A batch that raises is asked again one chain at a time, so that a chain whose
        decision fails (its error recorded on it) is not pre-submitted this cycle (its
        successor goes in when its predecessor ends, as reactive submission would) and
        every other chain is decided as usual."""
        if not wants:
            return []
        groups: dict[str, tuple[PolicyChoice, list[Want]]] = {}
        for w in wants:
            choice = self.policy_for(w.chain)
            set_note(w.chain, choice.note)
            groups.setdefault(choice.label, (choice, []))[1].append(w)
        out: list[Want] = []
        for choice, group in groups.values():
            for w, d in self._decide_group(
                s, now=now, snapshot=snapshot, policy=choice.policy, group=group, report=report
            ):
                self._apply_decision(w.chain, choice, d, now)
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
        group: list[Want],
        report: CycleReport,
    ) -> list[tuple[Want, Decision]]:
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
        out: list[tuple[Want, Decision]] = []
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
        w: Want,
        report: CycleReport,
    ) -> list[tuple[Want, Decision]]:
        assert w.pending is not None
        try:
            (d,) = policy.decide(ctx, [w.pending])
        except Exception as exc:  # this chain's decision, and only its own, failed
            s.commit()  # the other chains' decisions so far stay
            self.ctx.chain_failed(s, w.chain.id, "decide", exc, now=now, report=report)
            note = "its policy failed (see error): submitted when its predecessor ends"
            chain = s.get(Chain, w.chain.id)
            if chain is not None:
                set_note(chain, note)
                s.commit()
            return []
        report.decisions += 1
        return [(w, d)]

    @staticmethod
    def _apply_decision(c: Chain, choice: PolicyChoice, d: Decision, now: int) -> None:
        lo, hi = d.interval if d.interval is not None else (None, None)
        if (c.policy, c.fallback_for) != (choice.name, choice.fallback_for):
            c.policy, c.fallback_for = choice.name, choice.fallback_for
        if (c.predicted_start, c.predicted_low, c.predicted_high) != (d.predicted_start, lo, hi):
            c.predicted_start, c.predicted_low, c.predicted_high = d.predicted_start, lo, hi
        c.decided_at = now
        if not d.submit and d.reason:
            # why the successor is not pre-submitted yet, with the policy's own figures
            held = f"not pre-submitted yet: {d.reason}"
            set_note(c, f"{choice.note}; {held}" if choice.note else held)

    def _slurm_estimates(self, waiting: list[Want]) -> None:
        """Slurm's own estimate for successors not yet submitted, for ``mirage status``.

        Each costs an ``sbatch --test-only`` (and a job id on the controller): whatever is
        left of ``test_only_per_cycle`` after the policies goes to the chains whose
        predecessor ends soonest, each at most once per segment.
        """
        if self.test_only_left <= 0:
            return
        due = sorted(
            (w for w in waiting if w.pending is not None),
            key=lambda w: w.pending.planned_end if w.pending is not None else 0,
        )
        for w in due:
            if self.test_only_left <= 0:
                break
            if w.chain.slurm_estimate_for == w.index:
                continue
            est = self.estimate(build_request(w.chain, "mg" + "0" * 16, w.time_limit), w.chain)
            w.chain.slurm_estimate = est.start
            w.chain.slurm_estimate_for = w.index
