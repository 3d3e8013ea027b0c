"""Prometheus metrics of one daemon (a fresh ``CollectorRegistry`` each, so tests can read them).

All names start with ``mirage_``; no label carries a user or a job id (cardinality, and
privacy: the exporter is readable by anyone who can reach its address).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

#: A minute to a week: transitions are seconds to days apart.
DURATION_BUCKETS = (
    0.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    3 * 3600.0,
    6 * 3600.0,
    12 * 3600.0,
    86400.0,
    2 * 86400.0,
    4 * 86400.0,
    7 * 86400.0,
)

#: A second to an hour: a handoff is the predecessor's checkpoint and exit.
HANDOFF_BUCKETS = (1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)

#: a restart: seconds for a small model, tens of minutes for a large one's checkpoint
RESTART_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
#: what reading a segment's timing report gave (mirage.daemon.timing)
TIMING_OUTCOMES = ("read", "unusable")

#: where a pre-submitted successor started against its stated 90% interval
INTERVAL_OUTCOMES = ("inside", "early", "late")


def interval_outcome(start: int, low: int | None, high: int | None) -> str | None:
    """One of :data:`INTERVAL_OUTCOMES` for a successor's start against the interval stated
    when it was pre-submitted; None without one (reactive submissions, policies that state
    none)."""
    if low is None or high is None:
        return None
    if start < low:
        return "early"
    return "late" if start > high else "inside"


#: why a Slurm record was not applied (``mirage_slurm_records_ignored_total{reason}``)
IGNORED_REASONS = ("duplicate", "stale_pending", "id_reused", "extra_job")
#: the steps of a cycle that are one chain's own (``mirage_chain_errors_total{step}``)
CHAIN_STEPS = ("reconcile", "decide", "submit", "revoke")
#: why a chain's configured policy is not used (``mirage_policy_fallback_chains{why}``)
FALLBACK_WHYS = ("queue", "partition", "cluster", "coverage", "error")


class DaemonMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.poll_duration = Histogram(
            "mirage_poll_duration_seconds",
            "Time of one poll (squeue + sacct)",
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.cycle_duration = Histogram(
            "mirage_cycle_duration_seconds",
            "Time of one whole cycle (poll, reconcile, decide, act)",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.poll_errors = Counter(
            "mirage_poll_errors", "Failed polls, by kind", ["kind"], registry=r
        )
        self.slurm_reachable = Gauge(
            "mirage_slurm_reachable", "1 if the last poll reached Slurm", registry=r
        )
        self.accounting_reachable = Gauge(
            "mirage_slurm_accounting_reachable",
            "1 if the last poll's sacct reached slurmdbd (0: the cycle went on from squeue)",
            registry=r,
        )
        self.slurm_commands = Counter(
            "mirage_slurm_commands", "Slurm commands run, by command", ["command"], registry=r
        )
        self.cycles_skipped = Counter(
            "mirage_cycles_skipped",
            "Cycles not run: the previous one overran, backoff, or the lease is elsewhere",
            ["why"],
            registry=r,
        )
        self.database_writable = Gauge(
            "mirage_database_writable",
            "1 if the daemon recorded its last cycle; 0: the database is full, read-only or "
            "failing, and no chain advances",
            registry=r,
        )
        self.lease_held = Gauge("mirage_lease_held", "1 if this daemon holds the lease", registry=r)
        self.chains = Gauge("mirage_chains", "Chains by state", ["state"], registry=r)
        self.presubmissions = Counter(
            "mirage_presubmissions",
            "Successor submissions by outcome",
            ["outcome"],
            registry=r,
        )
        self.handoffs = Counter("mirage_handoffs", "Handoff signals sent", registry=r)
        self.records_ignored = Counter(
            "mirage_slurm_records_ignored",
            "Slurm records not applied, by why: duplicate (squeue listed one id twice with "
            "different states), stale_pending (PENDING in sacct alone), id_reused (the id "
            "now carries another token), extra_job (a second job of one submission: cancelled)",
            ["reason"],
            registry=r,
        )
        for why in IGNORED_REASONS:  # exported at 0 before the first, as alerts expect
            self.records_ignored.labels(why)
        self.revocations = Counter(
            "mirage_revocations",
            "Pre-submitted successors cancelled while pending: the policy found them too early",
            registry=r,
        )
        self.interruption = Histogram(
            "mirage_interruption_seconds",
            "Training idle between a segment's end and its successor's start",
            registry=r,
            buckets=DURATION_BUCKETS,
        )
        self.overlap = Histogram(
            "mirage_overlap_seconds",
            "Planned end of a segment minus its successor's start, when positive",
            registry=r,
            buckets=DURATION_BUCKETS,
        )
        self.transition_cost = Histogram(
            "mirage_transition_cost_seconds",
            "J of a transition (mirage.policy.cost): its idle time, and for an early start "
            "the handoff window and its share of one more segment (held twice without handoff)",
            registry=r,
            buckets=DURATION_BUCKETS,
        )
        self.handoff_window = Histogram(
            "mirage_handoff_window_seconds",
            "A segment's end minus its successor's start, when positive: both allocations "
            "held while the predecessor checkpoints and exits (signalled or not)",
            registry=r,
            buckets=HANDOFF_BUCKETS,
        )
        self.restart_overhead = Histogram(
            "mirage_restart_overhead_seconds",
            "A segment's restart overhead as its job reported it: from its predecessor's "
            "checkpoint being there to training resumed (the job-side helper's resumed)",
            registry=r,
            buckets=RESTART_BUCKETS,
        )
        self.timing_reports = Counter(
            "mirage_timing_reports",
            "Segments' timing reports read, by outcome: read (a restart overhead measured) "
            "or unusable (garbled, another job's, times out of order: the chain's note)",
            ["outcome"],
            registry=r,
        )
        for outcome in TIMING_OUTCOMES:
            self.timing_reports.labels(outcome)
        self.prediction_error = Histogram(
            "mirage_prediction_error_seconds",
            "|predicted successor start - actual start|",
            registry=r,
            buckets=DURATION_BUCKETS,
        )
        # live coverage of the forecasters' stated 90% intervals (inside / all), the figure
        # `mirage evaluate` reports on a test window: queues drift, intervals may not cover
        self.predicted_interval = Counter(
            "mirage_predicted_interval",
            "Pre-submitted successors by where their start fell against the stated 90% "
            "interval of the predicted start: inside, early (before it) or late (after it)",
            ["outcome"],
            registry=r,
        )
        for outcome in INTERVAL_OUTCOMES:  # exported at 0 before the first
            self.predicted_interval.labels(outcome)
        # one chain's failure is that chain's: counted here, the cycle goes on for the rest
        self.chain_errors = Counter(
            "mirage_chain_errors",
            "Chains whose own step failed in a cycle (the cycle went on for the others), by "
            "step: reconcile, decide, submit or revoke",
            ["step"],
            registry=r,
        )
        for step in CHAIN_STEPS:
            self.chain_errors.labels(step)
        self.cycle_failures = Counter(
            "mirage_cycle_failures",
            "Cycles that failed as a whole (an error outside any one chain's step)",
            registry=r,
        )
        # chains whose configured policy is not used as is, by why (fallback reasons)
        self.policy_fallbacks = Gauge(
            "mirage_policy_fallback_chains",
            "Active chains decided by the fallback policy instead of the configured one, by "
            "why: queue (the daemon cannot see the whole queue), partition (the model's "
            "profile lacks the chain's partition), cluster (the model was tuned for another "
            "cluster), coverage (its stated intervals stopped covering), error",
            ["why"],
            registry=r,
        )
        for why in FALLBACK_WHYS:
            self.policy_fallbacks.labels(why)
        self.test_only = Counter(
            "mirage_test_only", "sbatch --test-only estimates run (each costs a job id)", registry=r
        )
        self.model = Info("mirage_model", "The policy in use", registry=r)
        self.model_age = Gauge(
            "mirage_model_age_seconds",
            "Age of the trained model in use (0: a baseline)",
            registry=r,
        )

    def serve(self, address: str, port: int) -> None:
        """Start the HTTP exporter in a background thread."""
        from prometheus_client import start_http_server

        start_http_server(port, addr=address, registry=self.registry)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (tests); 0 for a labelled series not yet seen, and a
        KeyError for a name no metric has (a misspelt name must not read as 0)."""
        got = self.registry.get_sample_value(name, labels or {})
        if got is not None:
            return got
        known = self.sample_names()
        if name not in known:
            raise KeyError(f"no metric sample {name!r}; known: {', '.join(sorted(known))}")
        return 0.0

    def sample_names(self) -> set[str]:
        """Every sample name the registry's metrics can have (``_total``, ``_bucket``, ...)."""
        suffixes = ("", "_total", "_count", "_sum", "_bucket", "_created", "_info")
        return {f.name + s for f in self.registry.collect() for s in suffixes}
