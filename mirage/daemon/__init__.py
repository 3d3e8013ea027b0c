"""The provisioner daemon: chains of checkpoint/resume jobs on a real Slurm cluster.

Modules:

- ``store``: SQLAlchemy models (chains, submissions = the exactly-once ledger, segments,
  events, leases), the engine factory (SQLite WAL by default, PostgreSQL by URL) and
  ``migrate`` (Alembic, ``migrations/``).
- ``states``: the documented Slurm-state -> chain-action table (a pure function).
- ``core``: ``Daemon.cycle(now)``: poll (one squeue + one sacct), reconcile (tokens,
  segment ends, handoffs), decide (policies, batched), act (intent committed before
  sbatch; UNKNOWN on timeout; never blindly retried); the lease.
- ``chains``: registering a chain: the snapshot every segment is submitted from.
- ``identity``: sbatch/scancel as the chain's owner; the completion marker as the owner.
- ``api``: the users' Unix socket (SO_PEERCRED); ``status``: what users are shown.
- ``service``: APScheduler trigger, sd_notify and the watchdog; ``metrics``: Prometheus.
- ``handoff``: the job-side helper (stdlib only) that makes a successor wait for its
  predecessor's last checkpoint; ``deploy/examples/train.sbatch`` uses it.
- ``config``: the TOML configuration (``deploy/mirage.toml.example``).
- ``cli``: ``mirage chain …``, ``mirage status``, ``mirage daemon``.
"""
