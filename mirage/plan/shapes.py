"""The shapes a chain could take: partition x size x segment time limit.

A size is a GPU count, a CPU count (work on a partition without GPUs: ``300h@32cpu``) or,
for work given in nodes, a node count. ``n`` GPUs (CPUs) on a partition of ``G`` GPUs
(CPUs) per node is one node when ``n <= G``, else ``ceil(n / G)`` nodes with the same
count on each (6 GPUs on 4-GPU nodes: 2 nodes x 3); a count that cannot be spread evenly
(5 on 4-GPU nodes) is left out, as is one larger than the partition. A GPU or node shape
takes its nodes' CPUs as Slurm's defaults give them; a CPU shape takes no GPU and shares
its nodes (one task per node with that many CPUs: :func:`mirage.daemon.plancli.shape_args`).

Defaults, from the cluster profile: every partition with GPUs (with nodes or CPUs: every
partition); sizes 1, 2, 4, ... up to a node's GPUs (CPUs), the work's own size, and
whole-node multiples up to twice that; segment limits 6, 12, 24 and 48 hours and the
partition's maximum, those above the maximum left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mirage.plan.work import PlanInputError, Work
from mirage.profile.schema import ClusterProfile, Partition

HOUR = 3600
DEFAULT_LIMITS_S = (6 * HOUR, 12 * HOUR, 24 * HOUR, 48 * HOUR)
#: A partition without a maximum time limit is offered up to this one.
UNLIMITED_MAX_S = 7 * 24 * HOUR


@dataclass(frozen=True, order=True)
class Shape:
    """One request: ``nodes`` x ``gpus_per_node`` on ``partition`` for ``time_limit`` s;
    ``cpus_per_node`` > 0 for a CPU shape (a share of each node, no GPU)."""

    partition: str
    nodes: int
    gpus_per_node: int
    time_limit: int
    cpus_per_node: int = 0

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def cpus(self) -> int:
        """The CPUs a CPU shape asks for (0: its nodes' default, a GPU or node shape)."""
        return self.nodes * self.cpus_per_node

    def size(self, unit: str) -> int:
        """The size the work's scaling is in: GPUs, CPUs or nodes."""
        if unit == "node":
            return self.nodes
        return self.cpus if unit == "cpu" else self.gpus

    def to_dict(self) -> dict[str, object]:
        return {"partition": self.partition, "nodes": self.nodes,
                "gpus_per_node": self.gpus_per_node, "cpus_per_node": self.cpus_per_node,
                "time_limit_s": self.time_limit}  # fmt: skip


def layout(part: Partition, size: int, unit: str) -> tuple[int, int, int] | None:
    """(nodes, GPUs per node, CPUs per node: 0 unless a CPU shape) for ``size`` on
    ``part``, or None when it does not fit."""
    if unit == "node":
        fits = part.nodes is None or size <= part.nodes
        return (size, part.gpus_per_node, 0) if fits else None
    per = part.cpus_per_node if unit == "cpu" else part.gpus_per_node
    if per <= 0:
        return None
    nodes = -(-size // per)
    if size % nodes or (part.nodes is not None and nodes > part.nodes):
        return None
    return (nodes, 0, size // nodes) if unit == "cpu" else (nodes, size // nodes, 0)


def shape_of(part: Partition, size: int, unit: str, limit: int) -> Shape | None:
    """The shape of ``size`` on ``part`` for ``limit`` s, or None when it does not fit."""
    where = layout(part, size, unit)
    return None if where is None else Shape(part.name, where[0], where[1], limit, where[2])


def default_sizes(part: Partition, work: Work) -> list[int]:
    own = work.base[0]
    if work.unit == "node":
        return sorted({1, 2, 4, own} | {2 * own})
    per = part.cpus_per_node if work.unit == "cpu" else part.gpus_per_node
    out, g = {own}, 1
    while g <= max(per, 1):
        out.add(g)
        g *= 2
    out |= {k * per for k in (1, 2) if k * per <= 2 * own}
    return sorted(out)


def default_limits(part: Partition) -> list[int]:
    top = part.max_time_s or UNLIMITED_MAX_S
    return sorted({x for x in DEFAULT_LIMITS_S if x <= top} | {top})


def candidates(
    profile: ClusterProfile,
    work: Work,
    *,
    partitions: Sequence[str] = (),
    sizes: Sequence[int] = (),
    limits_s: Sequence[int] = (),
    overhead_s: int = 0,
) -> list[Shape]:
    """Every shape of the given (else default) partitions, sizes and limits that fits the
    cluster and leaves room for useful work after the restart overhead."""
    parts = [profile.partition(p) for p in partitions] if partitions else _usable(profile, work)
    out: list[Shape] = []
    for part in parts:
        for size in sizes or default_sizes(part, work):
            for limit in limits_s or default_limits(part):
                shape = shape_of(part, size, work.unit, limit)
                if shape is not None and _allowed(part, limit, overhead_s):
                    out.append(shape)
    if not out:
        raise PlanInputError(
            "no candidate shape fits: check the partitions, sizes and limits against the "
            f"cluster profile {profile.name!r} and the restart overhead ({overhead_s} s)"
        )
    return sorted(set(out))


def _usable(profile: ClusterProfile, work: Work) -> Iterable[Partition]:
    if work.unit == "node":
        return profile.partitions
    if work.unit == "cpu":
        return [p for p in profile.partitions if p.cpus_per_node > 0]
    return [p for p in profile.partitions if p.gpus_per_node > 0]


def _allowed(part: Partition, limit: int, overhead_s: int) -> bool:
    top = part.max_time_s
    return limit > overhead_s and (top is None or limit <= top)
