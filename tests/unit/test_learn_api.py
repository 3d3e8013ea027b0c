"""``mirage.learn.train_models``: ``mirage train`` as a Python call, on the bundled ls6 slice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.evaluate.inputs import InputError
from mirage.learn import OptionError, TrainError, train_models
from mirage.learn.artifacts import load_policy

REPO = Path(__file__).resolve().parents[2]
SLICE = str(REPO / "traces" / "ls6-a100-slice.log.gz")
LS6 = str(REPO / "models" / "ls6" / "profile.toml")
#: The small settings of tests/unit/test_learn.py: a few samples, a short window.
SMALL: dict[str, Any] = {"every_h": 12.0, "time_limit_h": 4.0, "step_min": 30.0, "window_h": 10.0,
         "warmup_h": 12.0, "train_split": "2022-11-06:2022-11-12",
         "tune_split": "2022-11-12:2022-11-15"}  # fmt: skip
SMALL_ARGS = [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()]


def _steady(out: dict[str, Any]) -> dict[str, Any]:
    """The output less its wall-clock measures (they differ from one run to the next)."""
    return {
        kind: {k: v for k, v in m.items() if k != "fit_s"} for kind, m in out["policies"].items()
    }


def test_train_models_returns_what_train_json_prints(tmp_path: Path) -> None:
    models, cache = tmp_path / "models", str(tmp_path / "cache")
    got = train_models("ls6", policies=["rf"], trace=SLICE, profile=LS6, loads=[2],
                       models_dir=models, cache=cache, **SMALL)  # fmt: skip
    assert set(got) == {"wall_s", "policies", "shipped"} and set(got["policies"]) == {"rf"}
    # three days of tuning at 4 h: 16 samples, too few to choose on (a level of 30); by
    # default (--quiet-every-h 2) a census adds the quiet ones at 2 h, which veto
    # candidates but do not make a choice possible
    shipped = got["shipped"]
    assert shipped["quiet_added"]["2"] > 0 and not shipped["judged"], shipped
    assert shipped["file"] is None and not (models / "ls6" / "policy.toml").exists()
    _policy, meta = load_policy(models / "ls6" / "rf")  # saved, and loads
    assert meta.cluster == "ls6" and meta.training["loads"] == [2.0]
    argv = ["train", "--cluster", "ls6", "--trace", SLICE, "--profile", LS6, "--load", "2",
            "--policy", "rf", "--models", str(models), "--cache", cache, *SMALL_ARGS,
            "--json", "--no-policy-file"]  # fmt: skip
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout)
    assert set(printed) == set(got) and printed["wall_s"] >= 0
    assert printed["shipped"] is None  # --no-policy-file: no choice made
    assert _steady(printed) == _steady(json.loads(json.dumps(got)))


def test_train_adds_every_quiet_tuning_sample_at_the_denser_spacing(tmp_path: Path) -> None:
    """``--quiet-every-h 2`` (the default): the tuning samples (every 4 h) hold fewer than
    30 quiet ones, so a census (one fork a sample) finds the quiet ones at 2 h, and exactly
    those are probed and walked by the shipped choice; each census gap equals its probe's
    last step. A load whose own spacing is as dense has no census."""
    from mirage.evaluate.census import ReactiveGap, probe_gap
    from mirage.evaluate.probes import SampleResult
    from mirage.evaluate.stats import load_levels

    models, cache = tmp_path / "models", tmp_path / "cache"
    got = train_models("ls6", policies=["rf"], trace=SLICE, profile=LS6, loads=[2],
                       models_dir=models, cache=str(cache), quiet_every_h=2.0, **SMALL)  # fmt: skip
    shipped = got["shipped"]
    (where,) = {p.parent for p in cache.rglob("*.reactive-v1.npz")}  # the tuning split's
    census = [ReactiveGap.load(p) for p in where.glob("*.reactive-v1.npz")]
    gaps = {c.t: c.gap for c in census if c.gap is not None}
    quiet = {t for t, lv in zip(gaps, load_levels(np.array(list(gaps.values()))), strict=True)
             if lv == "low"}  # fmt: skip
    probed = {s.t: s for s in map(SampleResult.load, where.glob("*.e2.npz"))}
    assert quiet and shipped["quiet_added"] == {"2": len(quiet)} and quiet <= set(probed)
    assert len(probed) == shipped["samples"]["2"]  # walked: no other sample probed
    assert all(probe_gap(probed[t]) == gaps[t] for t in quiet)
    with pytest.raises(OptionError, match="at least 1 s") as bad:
        train_models("ls6", trace=SLICE, profile=LS6, models_dir=tmp_path, quiet_every_h=-1.0)
    assert bad.value.option == "--quiet-every-h"
    dense = tmp_path / "dense"
    got = train_models("ls6", policies=["rf"], trace=SLICE, profile=LS6, loads=["2:2"],
                       models_dir=dense, cache=str(dense / "cache"), **SMALL)  # fmt: skip
    assert got["shipped"]["quiet_added"] == {} and got["shipped"]["samples"]["2"] >= 30
    assert not list((dense / "cache").rglob("*.reactive-v1.npz"))  # no census was run


def test_few_quiet_warning_says_whether_a_census_ran() -> None:
    """The warning names the census only where it ran: a load sampled as densely as the
    census's spacing had none, and with the census off it says how to turn it on."""
    from mirage.learn.api import _census_said

    hour = 3600
    assert _census_said(4 * hour, 2 * hour) == "with every quiet sample at a 2h00m spacing"
    assert _census_said(2 * hour, 2 * hour) == "sampled every 2h00m, no census (its spacing: 2h00m)"
    assert _census_said(5, 2 * hour).startswith("sampled every 5s, no census")
    assert _census_said(4 * hour, 0) == "--quiet-every-h 2 finds more; it is off"


def test_train_models_refuses_unusable_input_before_work(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"trace": SLICE, "profile": LS6, "models_dir": tmp_path}
    with pytest.raises(OptionError, match="cannot train nope") as bad:
        train_models("ls6", policies="rf,nope", **kw)
    assert bad.value.option == "--policy"
    with pytest.raises(OptionError, match="expected positive LOAD") as bad:
        train_models("ls6", loads=["1:0.0001"], **kw)
    assert bad.value.option is None
    with pytest.raises(OptionError, match="expected positive LOAD"):
        train_models("ls6", loads=[0.0], **kw)
    with pytest.raises(InputError, match="must end before the tuning split"):
        train_models("ls6", train_split="2022-11-06:2022-11-20",
                     tune_split="2022-11-12:2022-11-15", **kw)  # fmt: skip
    with pytest.raises(InputError, match="at least one second"):
        train_models("ls6", every_h=0.0, **kw)
    with pytest.raises(InputError, match="no trained policy to recalibrate"):
        train_models("ls6", recalibrate=tmp_path, **kw)
    assert not (tmp_path / "ls6").exists()  # nothing written


def test_train_models_says_why_training_cannot_be_done(tmp_path: Path) -> None:
    """No sample in a split: a TrainError (the command's one-line error, exit 1)."""
    with pytest.raises(TrainError, match="no usable samples"):
        train_models("ls6", policies="rf", trace=SLICE, profile=LS6, models_dir=tmp_path,
                     cache=None, every_h=12.0, window_h=10.0, warmup_h=12.0,
                     train_split="2022-11-06:2022-11-06T06:00",
                     tune_split="2022-11-12:2022-11-12T06:00")  # fmt: skip
