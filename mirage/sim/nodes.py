"""The simulated cluster's nodes and partitions, as the engine numbers them.

Nodes and sharing (Slurm's select/cons_tres): every node has GPUs and CPUs; partitions
may overlap (a node named in several partitions is one node, its shape from the first of
them in the profile). Nodes are numbered in the profile's partition order; a partition's
nodes are a sorted tuple of node numbers. Built once per simulation: nothing changes it
afterwards, so forks share it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mirage.profile.schema import ClusterProfile
from mirage.sim.errors import SimError
from mirage.slurm.hostlist import expand as expand_hostlist


class Nodes:
    """Node shapes, partition membership and the sums the engine plans with."""

    def __init__(
        self,
        profile: ClusterProfile,
        nodes: int | Mapping[str, int] | None,
        named: Mapping[str, Sequence[str]],
    ) -> None:
        """``nodes`` and ``named``: Simulation's ``nodes`` and ``partition_nodes``."""
        unknown = sorted(set(named) - {p.name for p in profile.partitions})
        if unknown:
            raise SimError(f"partition_nodes names unknown partition(s): {', '.join(unknown)}")
        over: dict[str, int] = {}
        if isinstance(nodes, int):
            over[profile.partition().name] = nodes
        elif nodes is not None:
            over.update(nodes)
        self.names: list[str] = []
        self.gpus: list[int] = []
        self.cpus: list[int] = []
        index: dict[str, int] = {}
        members: dict[str, tuple[int, ...]] = {}
        for p in profile.partitions:
            if p.name in named:
                names = list(named[p.name])
            elif p.node_list and _same_nodes(p.node_list, over.get(p.name)):
                # a captured profile names its nodes: partitions that share one share it (a
                # count asked equal to the list's is the same nodes, not as many fresh ones)
                names = expand_hostlist(p.node_list)
            else:
                n = over.get(p.name, p.nodes)
                if n is None:
                    raise SimError(f"partition {p.name!r} has no node count: pass nodes=")
                names = [f"{p.name}-{k:04d}" for k in range(n)]
            for name in names:
                if name not in index:
                    index[name] = len(self.names)
                    self.names.append(name)
                    self.gpus.append(p.gpus_per_node)
                    self.cpus.append(p.cpus_per_node)
            members[p.name] = tuple(sorted({index[name] for name in names}))
        self.part_nodes = members
        self.part_arr = {q: np.asarray(m, dtype=np.int64) for q, m in members.items()}
        self.part_no = {q: k for k, q in enumerate(members)}
        parts_of: list[list[str]] = [[] for _ in self.names]
        for q, m in members.items():
            for node in m:
                parts_of[node].append(q)
        self.node_parts = [tuple(ps) for ps in parts_of]
        self.overlapping = any(len(ps) > 1 for ps in parts_of)
        # partitions none of whose nodes another partition has (see backfill._node_walk)
        self.alone_parts = frozenset(
            q for q, m in members.items() if all(len(parts_of[node]) == 1 for node in m)
        )
        self.capacity = {p: len(m) for p, m in members.items()}
        self.total_nodes = len(self.names)
        self.total_cpus = sum(self.cpus)
        self.part_cpus = {p.name: p.cpus_per_node for p in profile.partitions}


def _same_nodes(node_list: str, asked: int | None) -> bool:
    """Whether a partition keeps its named nodes: no count asked, or the list's own."""
    return asked is None or asked == len(expand_hostlist(node_list))
