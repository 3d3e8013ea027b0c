"""What the daemon says about itself, for ``mirage status`` (read from the database).

Four small JSON facts in ``daemon_state``, written by the daemon and read by anyone:

- ``daemon_start``: who started, when, with what (version, host, pid, lease holder,
  policy and model, socket, metrics address, database, models path);
- ``last_cycle``: the last cycle's time, whether it finished, what it skipped and why,
  the count of cycles that failed as a whole, and how many chains had an error in it;
- ``slurm``: whether the last poll reached Slurm, its error, and since when;
- ``accounting``: the same for slurmdbd (sacct), once the controller answered.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from mirage.daemon.store import Store

START_KEY = "daemon_start"
CYCLE_KEY = "last_cycle"
SLURM_KEY = "slurm"
ACCOUNTING_KEY = "accounting"


@dataclass
class StartInfo:
    version: str
    host: str
    pid: int
    holder: str
    started_at: int
    policy: str
    model: str = ""  # "xgb (ls6, trained 2026-11-20T…Z)"; "" for a baseline
    model_created_at: int | None = None
    fallback: str = ""  # why the configured policy is not used as is, "" when it is
    socket: str = ""
    metrics: str = ""  # "127.0.0.1:9750", "" when off
    database: str = ""  # password hidden
    models_dir: str = ""
    guard: str = ""  # the default policy's guard: "estimate 1/6 of the limit", "none"
    install: str = ""  # a root daemon: why users cannot run this install ("" when they can)


@dataclass
class CycleInfo:
    at: int
    finished: bool = True  # False: the cycle failed as a whole (error says why)
    skipped: str = ""  # "lease", "backoff", "unreachable", "error"
    error: str = ""
    failures_total: int = 0  # cycles that failed as a whole since this daemon started
    chain_errors: int = 0  # chains whose own step failed in this cycle
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SlurmInfo:
    reachable: bool
    error: str = ""
    since: int | None = None  # when it last changed


def write(store: Store, key: str, info: StartInfo | CycleInfo | SlurmInfo) -> None:
    store.set_value(key, json.dumps(asdict(info)))


def read(store: Store, key: str) -> dict[str, Any] | None:
    """The stored fact, or None (never written, or unreadable)."""
    raw = store.get_value(key)
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
