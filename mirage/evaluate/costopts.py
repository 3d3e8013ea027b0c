"""The cost of record's command-line options, shared by ``mirage evaluate`` and
``mirage train`` (:mod:`mirage.policy.cost`; :func:`mirage.evaluate.inputs.cost_from`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from mirage.policy.cost import DEFAULT_COST

F = TypeVar("F", bound=Callable[..., Any])

#: the keyword arguments these options give, as ``run`` and ``train_models`` take them
COST_KEYS = ("restart_min", "handoff_s", "extra_idle_h", "held_twice")


def cost_options(f: F) -> F:
    """--restart-min, --handoff-s, --extra-idle-h and --held-twice (in that order)."""
    d = DEFAULT_COST
    held_twice = click.option(
        "--held-twice", is_flag=True,
        help="Cost: the job cannot hand off; an early start is charged 0.5 x overlap "
        "(SC'23's J) instead.",
    )  # fmt: skip
    extra_idle = click.option(
        "--extra-idle-h", type=click.FloatRange(min=0), default=d.extra_idle_s / 3600,
        show_default=True,
        help="Cost: the idle time of the extra transition a shortened segment adds, in hours.",
    )  # fmt: skip
    handoff = click.option(
        "--handoff-s", type=click.FloatRange(min=0), default=d.handoff_s, show_default=True,
        help="Cost: the handoff window h, both allocations held, in seconds.",
    )  # fmt: skip
    restart = click.option(
        "--restart-min", type=click.FloatRange(min=0), default=d.restart_s / 60,
        show_default=True,
        help="Cost: a segment's restart overhead R (load the checkpoint, warm up), in minutes.",
    )  # fmt: skip
    return restart(handoff(extra_idle(held_twice(f))))


def cost_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    """The cost's keyword arguments out of a command's options."""
    return {k: kw[k] for k in COST_KEYS}
