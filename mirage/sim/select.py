"""Node choice as Slurm 22.05's select/cons_tres makes it, for jobs that share nodes.

One home for the rule: the main scheduler (``Simulation._pick``) and both backfill
planners (``NodePlan.earliest``, ``WillRunPlan``) call ``eval_nodes``.

What ``cons_tres`` does (src/plugins/select/cons_tres/job_test.c at slurm-22-05-8-1, no
topology plugin, no LLN, no ``bf_busy_nodes``, no required or contiguous nodes):

- ``_can_job_run_on_node`` gives each node that can run the job a scheduling weight: the
  node's weight, with its low byte ``0xff - near_gpu_cnt`` for a job that asks for GPUs
  ("Favor nodes with more co-located GPUs"). ``near_gpu_cnt`` is the node's free GPUs
  near the job's cores (with gres.conf naming no ``Cores``, all of them), capped at what
  the job asks per node (``gres_select_filter_remove_unusable``: ``max_node_gres`` is
  ``--gres=gpu:N``'s N). Every node that fits a ``--gres`` job so weighs the same; the
  weights differ only where a node has fewer free GPUs than asked (``--gpus`` per job,
  not modelled). Node weights themselves are not modelled (all equal).
- ``_eval_nodes`` groups the usable nodes into sets of consecutive node indices of equal
  weight (a node that cannot run the job, or is outside the partition, ends a set). It
  takes the set of lowest weight; among sets of equal weight, the first one with enough
  CPUs and nodes, then one with enough and fewer CPUs in all, or while none has enough,
  the one with the most CPUs. A job of one node takes, in that set, the node with the
  fewest available CPUs (the first such); a larger job takes the set's nodes in index
  order, then the next best set, until it has its nodes.

So a job goes to the fullest node by CPUs that fits, but only within the first run of
consecutive usable nodes (or a later run with fewer CPUs in all): a node that cannot run
the job splits the partition, and the fullest node of a later run can lose to a run that
comes first. ``avail_cpus`` is taken as the node's free CPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_BYTE = 0xFF
#: Free GPUs or CPUs per node index: a list, or a numpy row of a plan.
Counts = Sequence[int] | np.ndarray[Any, Any]


def eval_nodes(
    fit: Sequence[int],
    gfree: Counts,
    cfree: Counts,
    count: int,
    *,
    gpus: int,
    cpus: int,
) -> tuple[int, ...] | None:
    """The ``count`` nodes cons_tres picks among ``fit`` (sorted node indices, each able
    to run the job: ``gpus`` GPUs and ``cpus`` CPUs free per node), sorted; None if too
    few. ``gfree``/``cfree``: free GPUs and CPUs per node index (at the planned start)."""
    if len(fit) < count:
        return None
    if count == len(fit):
        return tuple(fit)
    sets = _consecutive_sets(fit, gfree, cfree, gpus)
    chosen: list[int] = []
    rem_nodes, rem_cpus = count, count * cpus
    while sets:
        k = _best_set(sets, rem_nodes, rem_cpus)
        nodes = sets.pop(k)[2]
        if rem_nodes <= 1:
            single = _best_single(nodes, cfree, rem_cpus)
            if single is not None:
                nodes = [single]
        for n in nodes:
            if rem_nodes <= 0 and rem_cpus <= 0:
                break
            chosen.append(n)
            rem_nodes -= 1
            rem_cpus -= cpus  # _cpus_to_use: what the job uses there, not all free
        if rem_nodes <= 0:
            return tuple(sorted(chosen))
    return None


def _consecutive_sets(
    fit: Sequence[int], gfree: Counts, cfree: Counts, gpus: int
) -> list[tuple[int, int, list[int]]]:
    """(weight, CPUs in all, nodes) per run of consecutive indices of equal weight."""
    sets: list[tuple[int, int, list[int]]] = []
    prev = -2
    for n in fit:
        w = _BYTE - min(int(gfree[n]), gpus) if gpus else _BYTE
        if sets and n == prev + 1 and sets[-1][0] == w:
            weight, total, nodes = sets[-1]
            nodes.append(n)
            sets[-1] = (weight, total + int(cfree[n]), nodes)
        else:
            sets.append((w, int(cfree[n]), [n]))
        prev = n
    return sets


def _best_set(sets: Sequence[tuple[int, int, list[int]]], rem_nodes: int, rem_cpus: int) -> int:
    """The set ``_eval_nodes`` takes next (its ``best_fit_index`` loop)."""
    best = 0
    best_w, best_cpus = sets[0][0], sets[0][1]
    best_ok = best_cpus >= rem_cpus and len(sets[0][2]) >= rem_nodes
    for k in range(1, len(sets)):
        w, total, nodes = sets[k]
        ok = total >= rem_cpus and len(nodes) >= rem_nodes
        tighter = (ok and not best_ok) or (ok and total < best_cpus)
        new = w < best_w or (w == best_w and (tighter or (not ok and total > best_cpus)))
        if new:
            best, best_w, best_cpus, best_ok = k, w, total, ok
    return best


def _best_single(nodes: Sequence[int], cfree: Counts, rem_cpus: int) -> int | None:
    """ "No required nodes, try best fit single node": the fewest available CPUs."""
    best, size = None, 0
    for n in nodes:
        c = int(cfree[n])
        if c < rem_cpus:
            continue
        if best is None or c < size:
            best, size = n, c
            if size == rem_cpus:
                break
    return best
