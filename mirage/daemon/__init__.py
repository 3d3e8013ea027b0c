"""The provisioner daemon: chains of checkpoint/resume jobs on a real Slurm cluster.

Modules:

- ``store``: SQLAlchemy models (chains, submissions = the exactly-once ledger, segments,
  events, leases), the engine factory (SQLite WAL by default, PostgreSQL by URL) and
  ``migrate`` (Alembic, ``migrations/``).
- ``states``: the documented Slurm-state -> chain-action table (a pure function).
- ``core``: ``Daemon.cycle(now)``, the orchestration: the lease, the poll (one squeue +
  one sacct), then each step below in turn; one chain's failure is that chain's.
- ``reconcile``: Slurm's records into segment states (one record per id, a reused id is
  not the segment's job, second jobs of one submission cancelled, transitions observed).
- ``ledger``: exactly once: the intent committed before sbatch, UNKNOWN on a timeout,
  adoption by token, LOST only after ``unknown_timeout_s``; the sbatch request.
- ``advance``: the state table applied to each chain: continue, stop, handoff signal
  (intent first), chain end; what to submit next.
- ``routing``: which policy decides each chain (fallbacks and why), batched decisions,
  the cycle's budget of ``sbatch --test-only`` estimates.
- ``revoke``: cancelling a pending pre-submission that would start far too early.
- ``context``: ``StepContext``, the narrow state each step acts with; ``outcomes``: the
  outcome enums (submission, segment, skipped cycle) and the cycle's report.
- ``chains``: registering a chain: the snapshot every segment is submitted from.
- ``identity``: sbatch/scancel as the chain's owner; the completion marker as the owner.
- ``api``: the users' Unix socket (SO_PEERCRED); ``status``: what users are shown.
- ``service``: APScheduler trigger, sd_notify and the watchdog; ``metrics``: Prometheus.
- ``handoff``: the job-side helper (stdlib only) that makes a successor wait for its
  predecessor's last checkpoint; ``deploy/examples/train.sbatch`` uses it.
- ``config``: the TOML configuration (``deploy/mirage.toml.example``).
- ``cli``: ``mirage chain …``, ``mirage status``, ``mirage daemon``.
"""
