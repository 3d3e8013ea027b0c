"""How the shipped configuration is chosen: on tuning splits only, no harm first.

A deployment lives with every load its cluster has, quiet weeks included, and an admin
switches off a provisioner that makes the quiet days worse. So the shipped configuration
(:data:`mirage.policy.guard.SHIPPED`, the daemon's ``[policy]`` defaults) is not the
setting of least mean J: it is the setting of least mean J among those that harm no load
level on the tuning split.

The candidates are the wait-statistic baselines (``qbets``, ``running-average``) with each
constant of :data:`GRID`, and Slurm's estimate (``slurm-estimate``, no constant), behind
the estimate guard with each margin of :data:`MARGIN_FRACTIONS` (shares of the successor's
time limit, as the daemon's ``guard_margin_fraction``); where the tuning samples have
look-ahead curves (``mirage train`` records them), also behind the look-ahead veto (margins
:data:`LOOKAHEAD_MARGINS_H`) alone or beside the estimate veto, and with no guard
(:func:`guards`); where trained models are given (``scripts/select_shipped.py --learned``),
each of them behind every guard of the grid too. A candidate is *safe* when, at every load
given and every level there with at least :data:`SELECT_MIN_N` samples, the paired 95%
interval of its J minus reactive's ends at or below :data:`SAFE_BOUND_H` (zero): no
measurable harm on the tuning month, stricter than the +0.05 h mark the test month is held
to (:data:`mirage.evaluate.stats.NO_HARM_H`), because the quiet weeks of the months after
differ from the tuning month's and the grid's hundreds of candidates let some pass by
chance. :data:`SELECT_MIN_N` is far below the 30 samples a level needs to count in a report
(:data:`mirage.evaluate.stats.MIN_N`): a report must not claim a level on a handful of
samples, but the choice must not ignore harm a handful shows. A busy tuning month may hold
only a few quiet samples (CERIT's February: 6 at a 2 h spacing, none at 12 h), and a choice
blind to them harmed every quiet day of the month after. The choice is the safe candidate
of least mean J summed over the loads; none safe: reactive. When no level at any load has
MIN_N samples, there is no choice: a handful of samples is not enough to choose on
(:func:`select` says so, and ``mirage train`` then writes no file). ``mirage train`` runs
it on the tuning split it tunes on and writes the choice as the cluster's ``policy.toml``
(:mod:`mirage.learn.ship`); ``scripts/select_shipped.py`` runs it alone.

The walk is the daemon's rule on recorded samples: the inner policy's answer at every
step, the guard's veto and revocation from the estimate and look-ahead start recorded at
that step (:class:`mirage.policy.guard.Guard`), then
:func:`mirage.policy.base.revocable_step`; the same as :meth:`Walker.run` on a
:class:`~mirage.policy.guard.Guard`, with the inner policy walked once for every guard.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from mirage.evaluate.harness import (
    HOUR,
    LEARNED,
    LOOKAHEAD,
    BatchedPolicy,
    Walker,
    factory,
    guarded,
    learned_plans,
)
from mirage.evaluate.stats import MIN_N, Gain, gains, load_levels
from mirage.policy.cost import CostModel
from mirage.policy.guard import guard_kind, vetoes_text

GRID: dict[str, tuple[float, ...]] = {
    "qbets": (0.5, 0.75, 0.9, 0.95),
    "running-average": (1.0, 1.5, 2.0, 3.0),
    # no constant (0 stands for none): submits once Slurm's --test-only date passes the
    # end; that date counts the jobs ahead at their limits, so it runs late and the rule
    # pre-submits into quiet queues (it harms ls6's at every margin up to 16 h)
    "slurm-estimate": (0.0,),
}
#: The estimate veto's margins, as shares of the successor's time limit. Slurm's
#: --test-only date counts every pending job ahead as whole nodes for its whole limit
#: (mirage.sim.testonly), so on a quiet queue it can lie a day or more past a start that
#: comes early: margins reach one whole limit (on ls6's 48 h segments these are 0, 1, 2,
#: 4, 8, 12, 16, 24, 36 and 48 h, the hours the grid tried before it was relative). A
#: share, not hours: what an early start costs a job that hands off is the segment it
#: shortens (mirage.policy.cost), so the tolerance scales with the segment.
MARGIN_FRACTIONS = (0.0, 1 / 48, 1 / 24, 1 / 12, 1 / 6, 1 / 4, 1 / 3, 1 / 2, 3 / 4, 1.0)
#: The look-ahead veto's margins (h): its start is a simulation with predicted run times,
#: neither late nor early by construction, so they lie around 0 (experiments/
#: lookahead-guard.py walked these on ls6 and Theta).
LOOKAHEAD_MARGINS_H = (-2.0, 0.0, 2.0, 4.0, 8.0)
#: A candidate is safe when no level's paired 95% upper bound of (its J - reactive's) on
#: the tuning split lies above this (h). With the +0.05 h of the test mark, HPC2N (held
#: out) chose a look-ahead candidate whose quiet level at load 1.1 then missed that mark on
#: the month after (+0.10 h); at 0 it chose one that kept it, and ls6's and Theta's choices
#: were the same at both (experiments/strict-bound.py; docs/evaluation.md says how this
#: was seen: after HPC2N's test month, so HPC2N's figures with it are not held out).
SAFE_BOUND_H = 0.0
#: A tuning level with this many samples or more is judged for harm (a report counts a
#: level from MIN_N = 30, and a choice is made only where some level has MIN_N). Seen on
#: CERIT after its test month (docs/evaluation.md): its February has 6 quiet samples at
#: a 2 h spacing; judged, they rule out the choice that harmed March's quiet days. ls6's,
#: Theta's and HPC2N's choices are the same at 5 as at 30.
SELECT_MIN_N = 5
#: The estimate margins (shares of the limit) tried beside the look-ahead veto (either
#: vetoes).
WITH_LOOKAHEAD = (1 / 6, 1 / 2, 1.0)


def inner_submits(walker: Walker, method: str, constant: float) -> list[np.ndarray]:
    """Per sample, the unguarded policy's "submit" at every decision step."""
    out = []
    for ctxs, p in zip(walker.ctxs, walker.pending, strict=True):
        policy = factory(method, constant)()
        answers = np.zeros(len(ctxs), bool)
        for k, ctx in enumerate(ctxs):
            policy.observe(ctx)
            answers[k] = policy.decide(ctx, [p])[0].submit
        out.append(answers)
    return out


def guards(lookahead: bool) -> list[tuple[float | None, float | None]]:
    """The guard settings of the grid, (estimate margin as a share of the limit, look-ahead
    margin in hours) (None: that veto off): no guard at all, every estimate margin alone;
    with look-ahead curves
    also the look-ahead alone and each of its margins beside some estimate margins. No
    guard is a candidate everywhere: an early start of a job that hands off costs little
    (:mod:`mirage.policy.cost`), so an unguarded policy may well be the best."""
    out: list[tuple[float | None, float | None]] = [(None, None)]
    out += [(m, None) for m in MARGIN_FRACTIONS]
    if lookahead:
        out += [(m, la) for la in LOOKAHEAD_MARGINS_H for m in (None, *WITH_LOOKAHEAD)]
    return out


@dataclass
class Candidate:
    method: str
    constant: float
    margin: float | None  # the estimate veto's margin, a share of the limit (None: no veto)
    lookahead_h: float | None = None  # the look-ahead veto's margin (None: none)
    levels: dict[float, dict[str, Gain]] = field(default_factory=dict)  # load -> level ->
    mean_j_h: dict[float, float] = field(default_factory=dict)  # load -> mean J, all samples

    @property
    def safe(self) -> bool:
        """No level that counts (not "all") has its upper bound above :data:`SAFE_BOUND_H`."""
        bounds = [g.harm.hi for per in self.levels.values() for lv, g in per.items() if lv != "all"]
        return all(not math.isnan(hi) and hi <= SAFE_BOUND_H for hi in bounds)

    @property
    def total_j_h(self) -> float:
        return float(sum(self.mean_j_h.values()))

    @property
    def guard(self) -> str:
        """The ``[policy] guard`` that runs it."""
        return guard_kind(self.margin is not None, self.lookahead_h is not None)

    def label(self) -> str:
        """E.g. "qbets 0.9, guard: estimate 1/6 of the limit"."""
        if self.method in LEARNED:
            what = f"{self.method} (trained)"
        elif self.method == "slurm-estimate":
            what = self.method
        else:
            what = f"{self.method} {self.constant:g}"
        return (
            f"{what}, guard: {vetoes_text(None, self.lookahead_h, estimate_fraction=self.margin)}"
        )

    def as_dict(self) -> dict[str, object]:
        return {"policy": self.method, "constant": self.constant, "guard": self.guard,
                "guard_margin_fraction": self.margin, "guard_lookahead_margin_h": self.lookahead_h,
                "safe": self.safe, "mean_J_h": {f"{k:g}": v for k, v in self.mean_j_h.items()},
                "levels": {f"{ld:g}": {lv: g.as_dict() for lv, g in per.items()}
                           for ld, per in self.levels.items()}}  # fmt: skip


def candidates(
    walkers: Mapping[float, Walker],
    cost_model: CostModel,
    *,
    boot: int = 2000,
    learned: Mapping[str, BatchedPolicy] | None = None,
) -> list[Candidate]:
    """Every candidate of the grid, measured on each load's (tuning) walker; the look-ahead
    veto's only where every walker has look-ahead curves. ``learned``: trained policies
    (rf, xgb, dqn, pg) that are candidates too, each behind every guard of the grid (the
    walkers need their recorded queue features)."""
    out: dict[tuple[str, float, float | None, float | None], Candidate] = {}
    grid = guards(all(LOOKAHEAD in w.curves for w in walkers.values()))
    for load, w in walkers.items():
        base = {"reactive": w.run(factory("reactive", None)), "oracle": w.oracle(cost_model)}
        inners: list[tuple[str, float, list[np.ndarray], list[np.ndarray] | None]] = [
            (method, c, inner_submits(w, method, c), None)
            for method, constants in GRID.items()
            for c in constants
        ]
        inners += [(name, 0.0, *learned_plans(w, p)) for name, p in (learned or {}).items()]
        for method, c, submits, revokes in inners:
            for m, la in grid:
                cand = out.setdefault((method, c, m, la), Candidate(method, c, m, la))
                x = guarded(w, submits, None, _s(la), margin_fraction=m, revokes=revokes)
                judged = gains({**base, "x": x}, cost_model, boot=boot, min_n=SELECT_MIN_N)
                cand.levels[load] = {lv: g.methods["x"] for lv, g in judged.items()}
                cand.mean_j_h[load] = float(x.cost(cost_model).mean()) / HOUR
    return list(out.values())


def _s(hours: float | None) -> float | None:
    return None if hours is None else hours * HOUR


def choose(cands: Sequence[Candidate]) -> Candidate | None:
    """The safe candidate of least summed mean J (ties: the grid's order); None: none safe."""
    safe = [c for c in cands if c.safe]
    return min(safe, key=lambda c: c.total_j_h) if safe else None


@dataclass
class Choice:
    """The grid measured on tuning walkers and what it chooses."""

    candidates: list[Candidate]
    chosen: Candidate | None  # None: no candidate is safe (reactive submission)
    judged: bool  # some level (not "all") had MIN_N samples: enough to choose at all

    @property
    def toml(self) -> str:
        return policy_toml(self.chosen)


def select(
    walkers: Mapping[float, Walker],
    cost_model: CostModel,
    *,
    boot: int = 2000,
    added: Mapping[float, int] | None = None,
    learned: Mapping[str, BatchedPolicy] | None = None,
) -> Choice:
    """Measure the grid on each load's tuning walker and choose (:func:`choose`).
    ``added``: per load, how many of its walker's last samples a census added at a denser
    spacing (:mod:`mirage.evaluate.census`); they veto, but do not count towards the MIN_N
    that makes a choice possible: 30 quiet samples found in three days at 2 h are not a
    month's evidence. ``learned``: trained policies among the candidates
    (:func:`candidates`)."""
    cands = candidates(walkers, cost_model, boot=boot, learned=learned)
    # a choice needs one level a report would count (MIN_N) at the split's own spacing;
    # every smaller one of SELECT_MIN_N or more still vetoes the candidates that harm it
    judged = any(_enough(w, (added or {}).get(load, 0)) for load, w in walkers.items())
    return Choice(cands, choose(cands), judged)


def _enough(walker: Walker, added: int) -> bool:
    """Some level (not "all") of the walker's samples but its last ``added`` has MIN_N."""
    gaps = walker.run(factory("reactive", None)).gap[: len(walker.samples) - added]
    _, counts = np.unique(load_levels(gaps), return_counts=True)
    return bool(counts.size) and int(counts.max()) >= MIN_N


def policy_toml(c: Candidate | None) -> str:
    """The ``[policy]`` lines that make the daemon run candidate ``c`` (None: reactive)."""
    if c is None:
        return '[policy]\ndefault = "reactive"'
    lines = ["[policy]", f'default = "{c.method}"']
    # float literals ("2.0", not "2"): the configuration takes these keys as floats only
    if c.method == "qbets":
        lines.append(f"qbets_quantile = {float(c.constant)!r}")
    elif c.method == "running-average":
        lines.append(f"average_factor = {float(c.constant)!r}")
    lines.append(f'guard = "{c.guard}"')
    if c.margin is not None:
        lines.append(f"guard_margin_fraction = {round(c.margin, 6)!r}")
    if c.lookahead_h is not None:
        lines.append(f"guard_lookahead_margin_s = {round(c.lookahead_h * HOUR)}")
    return "\n".join(lines)
