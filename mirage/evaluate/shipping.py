"""How the shipped configuration is chosen: on tuning splits only, no harm first.

A deployment lives with every load its cluster has, quiet weeks included, and an admin
switches off a provisioner that makes the quiet days worse. So the shipped configuration
(:data:`mirage.policy.guard.SHIPPED`, the daemon's ``[policy]`` defaults) is not the
setting of least mean J: it is the setting of least mean J among those that harm no load
level on the tuning split.

The candidates are the wait-statistic baselines (``qbets``, ``running-average``) with
each constant of :data:`GRID`, and Slurm's estimate (``slurm-estimate``, no constant),
behind the estimate guard with each margin of :data:`MARGINS_H`. A candidate is *safe*
when, at every load given and every level there with at least
:data:`mirage.evaluate.stats.MIN_N` samples, the paired 95% interval of its J minus
reactive's ends at most :data:`mirage.evaluate.stats.NO_HARM_H` above zero. The choice is
the safe candidate of least mean J summed over the loads; none safe: reactive. When no
level at any load has enough samples to judge harm, there is no choice: a candidate
would be "safe" by default (:func:`select` says so, and ``mirage train`` then writes no
file). ``mirage train`` runs it on the tuning split it tunes on and writes the choice as
the cluster's ``policy.toml`` (:mod:`mirage.learn.ship`); ``scripts/select_shipped.py``
runs it alone.

The walk is the daemon's rule on recorded samples: the inner policy's answer at every
step, the guard's veto and revocation from the estimate recorded at that step
(:meth:`mirage.policy.guard.EstimateGuard.early`), then
:func:`mirage.policy.base.revocable_step`; the same as :meth:`Walker.run` on an
:class:`~mirage.policy.guard.EstimateGuard`, with the inner policy walked once for every
margin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from mirage.evaluate.harness import HOUR, Outcomes, Walker, factory, outcomes_at
from mirage.evaluate.stats import Gain, gains
from mirage.policy.base import revocable_step

GRID: dict[str, tuple[float, ...]] = {
    "qbets": (0.5, 0.75, 0.9, 0.95),
    "running-average": (1.0, 1.5, 2.0, 3.0),
    # no constant (0 stands for none): submits once Slurm's --test-only date passes the
    # end; that date counts the jobs ahead at their limits, so it runs late and the rule
    # pre-submits into quiet queues (it harms ls6's at every margin up to 16 h)
    "slurm-estimate": (0.0,),
}
#: Slurm's --test-only date counts every pending job ahead as whole nodes for its whole
#: limit (mirage.sim.testonly), so on a quiet queue it can lie a day or more past a start
#: that comes early: margins reach 48 h (with that estimate no margin up to 16 h was safe
#: on ls6's tuning month).
MARGINS_H = (0.0, 1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 36.0, 48.0)


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


def guarded(walker: Walker, submits: Sequence[np.ndarray], margin_s: float) -> Outcomes:
    """The outcomes of ``submits`` behind the estimate guard with ``margin_s``."""
    steps, revoked = [], []
    for s, submit in zip(walker.samples, submits, strict=True):
        est = s.estimate[:-1]
        early = (est >= 0) & (est < s.planned_end + margin_s)
        k, n = revocable_step(submit & ~early, early, s.succ_start, s.steps)
        steps.append(k)
        revoked.append(n)
    return outcomes_at(walker.samples, steps, revoked)


@dataclass
class Candidate:
    method: str
    constant: float
    margin_h: float
    levels: dict[float, dict[str, Gain]] = field(default_factory=dict)  # load -> level ->
    mean_j_h: dict[float, float] = field(default_factory=dict)  # load -> mean J, all samples

    @property
    def safe(self) -> bool:
        return all(g.no_harm for per in self.levels.values() for lv, g in per.items()
                   if lv != "all")  # fmt: skip

    @property
    def total_j_h(self) -> float:
        return float(sum(self.mean_j_h.values()))

    def as_dict(self) -> dict[str, object]:
        return {"policy": self.method, "constant": self.constant, "guard_margin_h": self.margin_h,
                "safe": self.safe, "mean_J_h": {f"{k:g}": v for k, v in self.mean_j_h.items()},
                "levels": {f"{ld:g}": {lv: g.as_dict() for lv, g in per.items()}
                           for ld, per in self.levels.items()}}  # fmt: skip


def candidates(
    walkers: Mapping[float, Walker], alpha: float, *, boot: int = 2000
) -> list[Candidate]:
    """Every candidate of the grid, measured on each load's (tuning) walker."""
    out: dict[tuple[str, float, float], Candidate] = {}
    for load, w in walkers.items():
        base = {"reactive": w.run(factory("reactive", None)), "oracle": w.oracle(alpha)}
        for method, constants in GRID.items():
            for c in constants:
                submits = inner_submits(w, method, c)
                for m in MARGINS_H:
                    cand = out.setdefault((method, c, m), Candidate(method, c, m))
                    res = {**base, "x": guarded(w, submits, m * HOUR)}
                    cand.levels[load] = {lv: g.methods["x"] for lv, g in
                                         gains(res, alpha, boot=boot).items()}  # fmt: skip
                    cand.mean_j_h[load] = float(res["x"].cost(alpha).mean()) / HOUR
    return list(out.values())


def choose(cands: Sequence[Candidate]) -> Candidate | None:
    """The safe candidate of least summed mean J (ties: the grid's order); None: none safe."""
    safe = [c for c in cands if c.safe]
    return min(safe, key=lambda c: c.total_j_h) if safe else None


@dataclass
class Choice:
    """The grid measured on tuning walkers and what it chooses."""

    candidates: list[Candidate]
    chosen: Candidate | None  # None: no candidate is safe (reactive submission)
    judged: bool  # some level (not "all") had enough samples to judge harm

    @property
    def toml(self) -> str:
        return policy_toml(self.chosen)


def select(walkers: Mapping[float, Walker], alpha: float, *, boot: int = 2000) -> Choice:
    """Measure the grid on each load's tuning walker and choose (:func:`choose`)."""
    cands = candidates(walkers, alpha, boot=boot)
    judged = any(lv != "all" for c in cands[:1] for per in c.levels.values() for lv in per)
    return Choice(cands, choose(cands), judged)


def policy_toml(c: Candidate | None) -> str:
    """The ``[policy]`` lines that make the daemon run candidate ``c`` (None: reactive)."""
    if c is None:
        return '[policy]\ndefault = "reactive"'
    lines = ["[policy]", f'default = "{c.method}"']
    if c.method == "qbets":
        lines.append(f"qbets_quantile = {c.constant:g}")
    elif c.method == "running-average":
        lines.append(f"average_factor = {c.constant:g}")
    lines += ['guard = "estimate"', f"guard_margin_s = {round(c.margin_h * HOUR)}"]
    return "\n".join(lines)
