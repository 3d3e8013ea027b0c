"""``[plan] replan = true``: a chain registered with ``chain submit --plan`` is planned
again before each segment, since the queue changes while a chain runs.

When: once per segment, at the first cycle where its predecessor has at most
:data:`REPLAN_LEAD_S` left (or no segment is live): close to the successor's submission,
when the queue the plan reads is nearly the one the successor meets, yet before the
policy's pre-submission (which, on a busy queue, comes up to a few hours early).

What: the work left is the chain's work less what its segments did (each ran
``trained_s`` in all, less the restart overhead per segment; a running predecessor is
counted as doing its full segment), at the chain's present size; the plan of that on
the daemon's last poll (:meth:`mirage.daemon.planning.Planner.answer`) gives the
successor's shape (partition, nodes, GPUs or CPUs per node, time limit) and, unless
``--segments`` was given, how many segments are left. Without the daemon's poll, or
with no work left, the shape stays.
Each change is an event (``chain.replan``) and the chain's plan record is rewritten.
With ``[plan] replan_min_gain_s``, the shape changes only when the recommendation is
predicted to finish the chain at least that much sooner than the chain's present shape on
the same plan (a shape is not changed back and forth for minutes); when it stays, the
record takes the present shape's fresh prediction.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from mirage.daemon.store import Chain, Segment, event_row
from mirage.plan.work import PlanInputError, Work, parse_work
from mirage.slurm.syntax import cpu_task_args, gpu_gres, without_task_args

if TYPE_CHECKING:
    from mirage.daemon.planning import Planner

log = logging.getLogger(__name__)

#: Re-plan a segment's successor once its predecessor has this long left (seconds).
REPLAN_LEAD_S = 2 * 3600


def due(chain: Chain, segs: list[Segment], now: int) -> bool:
    """Is the chain's next segment to be planned again now?"""
    plan = chain.plan
    if not plan or chain.next_index == 0 or plan.get("for_segment") == chain.next_index:
        return False
    if not segs:
        return True
    pred = segs[0]
    if len(segs) > 1 or pred.start is None:
        return False
    limit = pred.time_limit_s or chain.time_limit_s
    return pred.start + limit - now <= REPLAN_LEAD_S


def work_left(chain: Chain, running: Segment | None) -> Work | None:
    """The chain's work less what its segments did; None when nothing is left."""
    assert chain.plan is not None
    req = chain.plan.get("request") or {}
    overhead = int(chain.plan.get("overhead_s") or 0)
    work = parse_work(str(req.get("work") or ""), scaling=str(req.get("scaling") or "linear"),
                      points=list(req.get("points") or []))  # fmt: skip
    finished = chain.next_index - (1 if running is not None else 0)
    done = max(0, chain.trained_s - overhead * finished)
    if running is not None:
        done += max(0, (running.time_limit_s or chain.time_limit_s) - overhead)
    size = max(1, _size(chain, work.unit))
    left = work.remaining(done, size)
    return left if left.run_at(size) > 0 else None


def _size(chain: Chain, unit: str) -> int:
    """The chain's present size in ``unit``."""
    if unit == "node":
        return chain.nodes
    per = chain.planned_cpus_per_node if unit == "cpu" else chain.gpus_per_node
    return chain.nodes * per


def replan(  # noqa: PLR0917 - the advancer's one call
    s: Session, chain: Chain, segs: list[Segment], planner: Planner, now: int, min_gain_s: int = 0
) -> None:
    """Plan the chain's next segment again and take the shape chosen (see the module),
    unless it gains less than ``min_gain_s`` on the chain's present shape."""
    assert chain.plan is not None
    record = dict(chain.plan)
    record["for_segment"] = chain.next_index  # once per segment, whatever comes of it
    chain.plan = record
    try:
        left = work_left(chain, segs[0] if segs else None)
    except PlanInputError as exc:  # a plan stored by another version
        log.warning("chain %s: cannot re-plan: %s", chain.id, exc)
        return
    if left is None:
        return
    answer = planner.answer({**record["request"], "work_left": left.to_dict()}, chain.owner)
    if not answer.get("ok"):
        log.info("chain %s: no re-plan: %s", chain.id, answer.get("error"))
        return
    plan = answer["plan"]
    present = _present(chain, plan)
    gain = present["completion"] - plan["recommended"]["completion"] if present else None
    if present is not None and gain is not None and 0 <= gain < max(1, min_gain_s):
        _keep(chain, present, plan, gain)
        return
    _take(s, chain, plan, now)


def _present(chain: Chain, plan: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's candidate of the chain's present shape, or None when it is not one."""
    now = (chain.partition, chain.nodes, chain.gpus_per_node, chain.planned_cpus_per_node,
           chain.time_limit_s)  # fmt: skip
    for c in plan.get("candidates", []):
        shape = (c["partition"], c["nodes"], c["gpus_per_node"], c.get("cpus_per_node", 0),
                 c["time_limit_s"])  # fmt: skip
        if shape == now:
            return dict(c)
    return None


def _keep(chain: Chain, present: dict[str, Any], plan: dict[str, Any], gain: int) -> None:
    """The shape stays (the recommendation gains too little); the chain's predicted
    completion is the present shape's on this plan."""
    assert chain.plan is not None
    record = dict(chain.plan)
    record.update(completion=present["completion"], interval=present["interval"],
                  planned_at=plan["now"])  # fmt: skip
    chain.plan = record
    if gain > 0:
        log.info("chain %s: re-plan kept its shape: the recommendation gains %d s, under "
                 "[plan] replan_min_gain_s", chain.id, gain)  # fmt: skip


def _take(s: Session, chain: Chain, plan: dict[str, Any], now: int) -> None:
    """The chain's shape from here on is the plan's recommendation."""
    best = plan["recommended"]
    before = _shape(chain)
    chain.partition = best["partition"]
    chain.nodes = best["nodes"]
    chain.gpus_per_node = best["gpus_per_node"]
    # a new GPU count keeps the GPU type the chain asked for (gpu:a100:4 -> gpu:a100:2)
    chain.gres = gpu_gres(best["gpus_per_node"], chain.gres) if best["gpus_per_node"] > 0 else None
    chain.time_limit_s = best["time_limit_s"]
    if best.get("cpus_per_node", 0) > 0:
        chain.sbatch_args = [*without_task_args(chain.sbatch_args or []),
                             *cpu_task_args(best["nodes"], best["cpus_per_node"])]  # fmt: skip
    assert chain.plan is not None
    record = dict(chain.plan)
    if record.get("segments_from_plan", True):
        chain.segments_target = chain.next_index + best["segments"]
    record.update(shape=best, completion=best["completion"], interval=best["interval"],
                  planned_at=plan["now"], replans=int(record.get("replans", 0)) + 1)  # fmt: skip
    chain.plan = record
    chain.updated_at = now
    after = _shape(chain)
    reason = f"{before} -> {after}"
    s.add(
        event_row(
            now,
            "chain.replan",
            chain.id,
            reason,
            completion=best["completion"],
            segment=chain.next_index,
        )
    )


def _shape(chain: Chain) -> str:
    cpus = chain.planned_cpus_per_node
    per = f"{cpus} CPUs" if cpus else f"{chain.gpus_per_node} GPUs"
    return (
        f"{chain.partition or '-'}: {chain.nodes} x {per}, "
        f"{chain.time_limit_s} s, {chain.segments_target or '-'} segments"
    )
