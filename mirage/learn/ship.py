"""The cluster's shipped configuration, chosen by ``mirage train`` on its tuning split.

After training (or recalibrating) on a cluster, the tuning split's samples at the tuning
loads are walked with every candidate of :mod:`mirage.evaluate.shipping` (the wait
baselines and Slurm's estimate, each behind the estimate guard at each margin, and behind
the look-ahead veto, whose curves ``mirage train`` records on the tuning samples), and the
safe candidate of least mean J is written as ``<models>/<cluster>/policy.toml``. The
daemon configured with that cluster takes it for the ``[policy]`` keys its configuration
leaves out (:func:`mirage.policy.guard.cluster_policy`), and ``mirage evaluate --cluster``
measures it as ``shipped``: what ``mirage train`` ships is what is measured.

No file is written, and the daemon keeps its defaults, when no level has enough tuning
samples to judge harm (a short or quiet tuning split); an older file is then left as it
is. When no candidate is safe, the file says ``default = "reactive"``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mirage.evaluate.harness import HOUR, Walker
from mirage.evaluate.probes import SampleResult
from mirage.evaluate.protocol import Protocol, Split
from mirage.evaluate.shipping import Choice, select
from mirage.policy.cost import CostModel
from mirage.policy.guard import POLICY_FILE
from mirage.profile.schema import load_profile

log = logging.getLogger(__name__)


def choose_and_write(
    cluster: str,
    profile: str,
    split: Split,
    by_load: Mapping[float, tuple[Protocol, list[SampleResult]]],
    *,
    folder: Path,
    cost_model: CostModel,
    lookahead: Mapping[float, list[np.ndarray]] | None = None,
    quiet: Mapping[float, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Choose on ``by_load`` (each tuning load's protocol and samples; ``lookahead``: each
    sample's look-ahead curve, in the same order, for the look-ahead veto's candidates) and
    write ``folder/policy.toml``; what was chosen and where it went (``mirage train
    --json``'s ``shipped``). ``quiet``: per load, how many of its samples are quiet ones
    added at a denser spacing (count, spacing in s), for the file's comment."""
    prof = load_profile(profile)
    walkers = {
        load: Walker(
            samples,
            protocol,
            prof,
            prof.partition(protocol.partition).name,
            lookahead=None if lookahead is None else lookahead.get(load),
        )
        for load, (protocol, samples) in by_load.items()
    }
    added = {ld: n for ld, (n, _) in (quiet or {}).items()}
    choice = select(walkers, cost_model, added=added)
    out = summary(choice)
    # what the choice walked: per load its samples, and of them the census's quiet ones
    out["samples"] = {f"{ld:g}": len(samples) for ld, (_, samples) in by_load.items()}
    out["quiet_added"] = {f"{ld:g}": n for ld, n in added.items()}
    if not choice.judged:
        out["file"] = None
        out["reason"] = "no tuning level has enough samples to judge harm: defaults kept"
        log.warning("shipped configuration: %s", out["reason"])
        return out
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / POLICY_FILE
    text = provenance(cluster, split, by_load, choice, quiet or {}) + choice.toml + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    out["file"] = str(path)
    log.info("shipped configuration written to %s: %s", path, out["policy"])
    return out


def summary(choice: Choice) -> dict[str, Any]:
    c = choice.chosen
    if c is None:
        return {"policy": "reactive", "judged": choice.judged, "safe_candidates": 0}
    return {
        "policy": c.method,
        "constant": c.constant,
        "guard": c.guard,
        "guard_margin_fraction": c.margin,
        "guard_lookahead_margin_s": None if c.lookahead_h is None else round(c.lookahead_h * HOUR),
        "label": c.label(),
        "tune_mean_J_h": {f"{k:g}": round(v, 3) for k, v in c.mean_j_h.items()},
        "judged": choice.judged,
        "safe_candidates": sum(x.safe for x in choice.candidates),
    }


def provenance(
    cluster: str,
    split: Split,
    by_load: Mapping[float, tuple[Protocol, list[SampleResult]]],
    choice: Choice,
    quiet: Mapping[float, tuple[int, int]],
) -> str:
    """The comment that says how the choice was made."""
    start, end = (time.strftime("%Y-%m-%d", time.gmtime(t)) for t in (split.start, split.end))
    when = f"{start} to {end}"

    def samples(ld: float, p: Protocol, s: list[SampleResult]) -> str:
        n, every = quiet.get(ld, (0, 0))
        dense = f" and {n} quiet ones every {every / HOUR:g} h" if every else ""
        return f"{len(s) - n} samples every {p.every_s / HOUR:g} h{dense}"

    loads = ", ".join(
        f"{ld:g} ({samples(ld, p, s)}, step {p.step_s / 60:g} min)"
        for ld, (p, s) in by_load.items()
    )
    how = (
        f"the safe candidate of least summed mean J ({choice.chosen.total_j_h:.2f} h)"
        if choice.chosen is not None
        else "no candidate was safe at every level: reactive submission"
    )
    return (
        f"# Chosen by mirage train on {cluster}'s tuning split, {when} (UTC), at loads\n"
        f"# {loads}:\n# {how}.\n# The daemon configured with this cluster (and mirage "
        "evaluate --cluster) takes these\n# [policy] values where its configuration leaves "
        "them out.\n"
    )
