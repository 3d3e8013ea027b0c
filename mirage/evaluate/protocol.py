"""Mirage's evaluation protocol: what a sample is, where samples lie, the splits.

A *sample* is one chain transition injected into a trace replay: at sample time ``t`` a
predecessor (``nodes`` nodes, ``gpus`` GPUs, time limit ``time_limit_s``, running to its
limit) is submitted; it starts at ``s`` (it may wait); while it runs the policy is asked
at every decision step (``s, s + step_s, ...``) whether to submit the successor (same
request) now; at ``s + time_limit_s`` the successor is submitted regardless.

Splits (ls6, Mirage's validation window): training data up to 2023-01-31, tuning on
February 2023, test on March 2023. A split's samples lie in ``[start, end)`` with their
whole window (``window_s``, 5 days) before ``end``, and the replay for a split is cut at
``end`` (``prepare_trace(before=end)``): no job submitted at or after the end of a split
is ever read while it is evaluated, so tuning never sees the test window.

Load: a load factor f > 1 shrinks the cluster to round(nodes / f) (same trace, same
dates), so that medium and heavy cases appear in numbers.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mirage.policy.cost import DEFAULT_COST, CostModel
from mirage.slurm.syntax import parse_when

HOUR = 3600
DAY = 86400
MINUTE = 60


@dataclass(frozen=True)
class Split:
    name: str
    start: int  # epoch s, first sample time at or after it
    end: int  # epoch s, every sample window ends by it; the replay is cut here

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Protocol:
    """Everything that fixes a sample's outcome (hashed into the probe cache key)."""

    nodes: int = 1  # predecessor and successor request
    gpus: int = 0  # GPUs over all nodes; 0: whole nodes
    time_limit_s: int = 48 * HOUR
    step_s: int = 10 * MINUTE  # decision step
    every_s: int = 4 * HOUR  # one sample every ...
    # A sample's window runs from the predecessor's start (its run + the successor's wait).
    # The predecessor itself may queue up to one more window first: on a loaded cluster it
    # rarely starts at once, and counting its wait inside the window dropped every sample.
    window_s: int = 5 * DAY
    warmup_s: int = 2 * DAY  # at least this much replay before the first sample
    history_s: int = 24 * HOUR  # how far back the recorded waits go before a sample
    cost: CostModel = DEFAULT_COST  # not part of the probes: J is computed afterwards
    partition: str | None = None

    def __post_init__(self) -> None:
        positive = {
            "nodes": self.nodes,
            "time limit": self.time_limit_s,
            "decision step": self.step_s,
            "sample spacing": self.every_s,
            "sample window": self.window_s,
        }
        for what, value in positive.items():
            if value < 1:  # a step or spacing under a second would never advance
                raise ValueError(f"the {what} must be positive, got {value}")
        if self.gpus < 0 or self.warmup_s < 0 or self.history_s < 0:
            raise ValueError("GPUs, warm-up and history must not be negative")

    @property
    def steps(self) -> int:
        """Decision steps while the predecessor runs (the submission at its end excluded)."""
        return -(-self.time_limit_s // self.step_s)

    def probe_key(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("cost")
        d.pop("every_s")
        return d


@dataclass(frozen=True)
class Setting:
    """One evaluated world: a trace, a profile, a cluster size, a split."""

    trace: str
    profile: str
    nodes: int  # the default partition's node count after load scaling
    load: float
    split: Split
    protocol: Protocol = field(default_factory=Protocol)

    def key(self) -> str:
        blob = json.dumps(
            {
                "trace": _identity(self.trace),
                "profile": _identity(self.profile),
                "nodes": self.nodes,
                "cut": self.split.end,
                "protocol": self.protocol.probe_key(),
                "version": 2,  # 2: the window starts at the predecessor's start
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _identity(path_or_name: str) -> str:
    """A file by its name and content hash (paths may differ between machines)."""
    path = Path(path_or_name)
    if path.is_file():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        return f"{path.name}:{digest}"
    return path_or_name


#: Mirage's splits for ls6 (site-local dates, America/Chicago). Training uses the three
#: months before the tuning split (the trace starts 2022-10-05: its first weeks warm up).
LS6_SPLITS = {
    "train": ("2022-11-01", "2023-02-01"),
    "tune": ("2023-02-01", "2023-03-01"),
    "test": ("2023-03-01", "2023-04-01"),
}
TRAIN_DAYS = 90


def default_splits(cluster: str, tz: str, first: int, last: int) -> dict[str, Split]:
    """ls6: train November 2022 to January 2023, tune February, test March 2023. Other
    traces: test = the last 30 days of submits, tuning = the 30 days before, training =
    the 90 days before that (the replay's warm-up is everything earlier)."""
    if cluster == "ls6":
        return {
            name: Split(name, parse_when(a, tz), parse_when(b, tz))
            for name, (a, b) in LS6_SPLITS.items()
        }
    end = last + 1
    return {
        "train": Split("train", end - (60 + TRAIN_DAYS) * DAY, end - 60 * DAY),
        "tune": Split("tune", end - 60 * DAY, end - 30 * DAY),
        "test": Split("test", end - 30 * DAY, end),
    }


def sample_times(split: Split, protocol: Protocol, first_submit: int) -> list[int]:
    """Sample points of a split: every ``every_s`` from its start (after the warm-up),
    each with its whole window before the split's end."""
    t = max(split.start, first_submit + protocol.warmup_s)
    out = []
    while t + protocol.window_s <= split.end:
        out.append(t)
        t += protocol.every_s
    return out


def spread(times: list[int], n: int) -> list[int]:
    """At most ``n`` of ``times`` (sorted), spread evenly over them, first and last
    included: a quick run sees the whole split, not its first days."""
    if n <= 0 or n >= len(times):
        return list(times)
    if n == 1:
        return [times[len(times) // 2]]
    step = (len(times) - 1) / (n - 1)
    return [times[round(k * step)] for k in range(n)]


def scaled_nodes(base_nodes: int, load: float) -> int:
    if not 0 < load < float("inf"):
        raise ValueError(f"load must be positive, got {load}")
    return max(1, round(base_nodes / load))


@dataclass(frozen=True)
class Block:
    """A block of a rolling recalibration: its samples, and the window it is re-tuned on."""

    start: int  # epoch s: the block's samples lie in [start, end)
    end: int
    tune_from: int  # its tuning samples lie in [tune_from, start), windows over by start


def blocks(start: int, end: int, every_s: int, window_s: int) -> list[Block]:
    if every_s <= 0 or window_s <= 0:
        raise ValueError("the block length and the tuning window must be positive")
    out, t = [], start
    while t < end:
        out.append(Block(t, min(end, t + every_s), t - window_s))
        t += every_s
    return out
