"""A plan request as one JSON-able mapping: what ``mirage plan`` sends to the daemon's
socket (``{"op": "plan", ...}``) and what it plans itself without a daemon, so that both
read the options one way.

    {"work": "96h@4gpu", "scaling": "linear", "points": ["2gpu=170h"],
     "partitions": [], "sizes": [], "limits": ["12h"], "overhead": "10m",
     "later_wait_share": 1.0, "draws": 4, "method": "plan", "partition": null}

``work_left`` (:meth:`Work.to_dict`), when present, replaces ``work``: a chain re-planned
between segments (mirage.daemon.replan) plans what it has left. Empty lists take the
profile's defaults (:mod:`.shapes`); ``partition`` is where the
habitual shape goes (the default partition when null).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mirage.plan.calibrate import WaitCalibration
from mirage.plan.predict import Options, Plan, WaitForecast, plan_chain
from mirage.plan.queue import METHODS, Snapshot
from mirage.plan.shapes import candidates
from mirage.plan.source import habitual_shape
from mirage.plan.work import PlanInputError, Work, parse_amount, parse_work
from mirage.policy.lookahead import MAX_DRAWS

DEFAULT_OVERHEAD = "10m"
DEFAULT_DRAWS = 4


def _strings(req: Mapping[str, Any], key: str) -> list[str]:
    value = req.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PlanInputError(f"{key} must be a list of strings")
    return value


def _ints(req: Mapping[str, Any], key: str) -> list[int]:
    value = req.get(key) or []
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
    ):
        raise PlanInputError(f"{key} must be a list of positive integers")
    return value


def options_of(req: Mapping[str, Any]) -> Options:
    overhead = parse_amount(str(req.get("overhead") or "0"))
    draws = req.get("draws", DEFAULT_DRAWS)
    if not isinstance(draws, int) or isinstance(draws, bool) or not 0 <= draws <= MAX_DRAWS:
        raise PlanInputError(f"draws must be 0 to {MAX_DRAWS}")
    share = req.get("later_wait_share", 1.0)
    if not isinstance(share, int | float) or isinstance(share, bool) or not 0 <= share <= 1:
        raise PlanInputError("later_wait_share must be a number from 0 to 1")
    method = str(req.get("method") or "plan")
    if method not in METHODS:
        raise PlanInputError(f"unknown method {method!r}: use {' or '.join(METHODS)}")
    return Options(overhead_s=overhead, later_wait_share=float(share), draws=draws, method=method)


def check_request(req: Mapping[str, Any]) -> None:
    """What can be checked before a queue is read: the work and the options."""
    _work(req)
    options_of(req)
    _strings(req, "partitions")
    _ints(req, "sizes")
    for x in _strings(req, "limits"):
        parse_amount(x)


def _work(req: Mapping[str, Any]) -> Work:
    """``work_left`` (a Work's dict: what a chain re-planned has left) else ``work``."""
    left = req.get("work_left")
    if isinstance(left, dict):
        return Work.from_dict(left)
    return parse_work(
        str(req.get("work") or ""),
        scaling=str(req.get("scaling") or "linear"),
        points=_strings(req, "points"),
    )


def plan_request(
    q: Snapshot,
    req: Mapping[str, Any],
    forecast: WaitForecast | None = None,
    calibration: WaitCalibration | None = None,
) -> Plan:
    """The plan ``req`` asks for, on the queue ``q`` (with the cluster's wait
    ``calibration`` where it has one); PlanInputError for bad options."""
    work = _work(req)
    options = replace(options_of(req), calibration=calibration)
    try:
        shapes = candidates(
            q.profile,
            work,
            partitions=_strings(req, "partitions"),
            sizes=_ints(req, "sizes"),
            limits_s=[parse_amount(x) for x in _strings(req, "limits")],
            overhead_s=options.overhead_s,
        )
        partition = req.get("partition")
        habit = habitual_shape(q.profile, work, str(partition) if partition else None)
    except ValueError as exc:  # an unknown partition (ProfileError) included
        raise PlanInputError(str(exc)) from exc
    return plan_chain(q, work, shapes, options=options, forecast=forecast, habitual=habit)
