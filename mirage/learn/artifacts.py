"""Trained policies on disk: ``models/<cluster>/<policy>/`` with ``metadata.json``.

The metadata records what a model was trained on and with what: the trace and its hash,
the windows, the feature set and its version, the policy's constants (band, quantile
levels, the cost), the metrics measured on the tuning split, and the library versions. A
model is loaded only if its feature set and version equal the running code's and the
libraries that read its files have the same major.minor version: anything else raises
:class:`ModelCompatibilityError` naming the difference, never a silently wrong policy.
"""

from __future__ import annotations

import calendar
import json
import platform
import time
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.extras import missing, require
from mirage.policy.base import Policy
from mirage.policy.decision import DECISION_NAMES, DECISION_SET
from mirage.policy.features import FEATURE_VERSION

if TYPE_CHECKING:
    from mirage.learn.agents import AgentPolicy

METADATA = "metadata.json"
FORMAT = 1  # of metadata.json itself

#: Libraries whose version must match (major.minor) for each kind of model file.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "rf": ("scikit-learn", "numpy"),
    "xgb": ("xgboost",),
    "dqn": ("stable-baselines3", "torch"),
    "pg": ("stable-baselines3", "torch"),
}
POLICIES = ("rf", "xgb", "dqn", "pg")
#: the agents among them: they need the ``rl`` extra (torch, stable-baselines3, gymnasium)
AGENTS = ("dqn", "pg")


class ModelError(RuntimeError):
    """A model folder that cannot be used."""


class ModelCompatibilityError(ModelError):
    """A model trained with another feature set or library version."""


def library_version(name: str) -> str:
    # xgboost-cpu installs the "xgboost" module under another distribution name
    for dist in (name, f"{name}-cpu"):
        try:
            return importlib_metadata.version(dist)
        except importlib_metadata.PackageNotFoundError:
            continue
    return "missing"


def _major_minor(version: str) -> str:
    return ".".join(version.split("+", maxsplit=1)[0].split(".")[:2])


@dataclass
class ModelMeta:
    policy: str  # rf | xgb | dqn | pg
    cluster: str
    files: list[str]
    params: dict[str, Any]  # band_s, levels, cost, ...
    training: dict[str, Any]  # trace, hash, windows, loads, samples, seed
    metrics: dict[str, Any] = field(default_factory=dict)
    feature_set: str = DECISION_SET
    feature_version: int = FEATURE_VERSION
    feature_names: list[str] = field(default_factory=lambda: list(DECISION_NAMES))
    libraries: dict[str, str] = field(default_factory=dict)
    created: str = ""
    format: int = FORMAT

    def write(self, folder: Path) -> None:
        self.libraries = {n: library_version(n) for n in LIBRARIES[self.policy]}
        self.libraries["python"] = platform.python_version()
        self.created = self.created or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = json.dumps(self.__dict__, indent=1, sort_keys=True)
        (folder / METADATA).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def read(cls, folder: Path) -> ModelMeta:
        path = folder / METADATA
        if not path.is_file():
            raise ModelError(f"{folder}: no {METADATA} (train a model with `mirage train`)")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(**raw)
        except (ValueError, TypeError) as exc:
            raise ModelError(f"{path}: unreadable model metadata: {exc}") from exc

    def check(self) -> None:
        """Raise :class:`ModelCompatibilityError` unless this code can use the model."""
        problems = []
        if (self.feature_set, self.feature_version) != (DECISION_SET, FEATURE_VERSION):
            problems.append(
                f"feature set {self.feature_set} v{self.feature_version}, this Mirage computes "
                f"{DECISION_SET} v{FEATURE_VERSION}"
            )
        elif self.feature_names != list(DECISION_NAMES):
            problems.append("feature columns differ from this Mirage's")
        for lib in LIBRARIES.get(self.policy, ()):
            have, had = library_version(lib), self.libraries.get(lib, "missing")
            if _major_minor(have) != _major_minor(had):
                problems.append(f"trained with {lib} {had}, installed {have}")
        if problems:
            raise ModelCompatibilityError(
                f"{self.policy} model for {self.cluster}: "
                + "; ".join(problems)
                + " (retrain it with `mirage train`)"
            )

    def created_epoch(self) -> float | None:
        try:
            return float(calendar.timegm(time.strptime(self.created, "%Y-%m-%dT%H:%M:%SZ")))
        except ValueError:
            return None


def load_policy(folder: Path | str) -> tuple[Policy, ModelMeta]:
    """The trained policy in ``folder`` (checked against this code) and its metadata."""
    folder = Path(folder)
    meta = ModelMeta.read(folder)
    meta.check()
    if meta.policy in ("rf", "xgb"):
        from mirage.learn.forecast import FORECASTERS, ForecastPolicy

        levels = tuple(float(v) for v in meta.params["levels"])
        forecaster = FORECASTERS[meta.policy].load(folder, levels)
        band, act = float(meta.params["band_s"]), int(meta.params["act"])
        quiet = float(meta.params.get("quiet_band_s", band))
        pad = float(meta.params.get("interval_pad", 0.0))
        calm = int(meta.params.get("quiet_act", act))
        pads = meta.params.get("interval_pads")  # older models: one pad for every row
        revoke = meta.params.get("revoke_margin_h")  # older models (and None): never revoke
        policy = ForecastPolicy(
            forecaster, band, act, meta.policy, quiet_band_s=quiet, interval_pad=pad,
            quiet_act=calm, interval_pads=None if pads is None else [float(v) for v in pads],
            revoke_margin_h=None if revoke is None else float(revoke),
        )  # fmt: skip
        return policy, meta
    if meta.policy in AGENTS:
        require("rl", f"the {meta.policy} policy ({folder})")
        from mirage.learn.agents import AgentPolicy, load_model

        model = load_model(meta.policy, folder / meta.files[0])
        margin = float(meta.params.get("margin", 0.0))  # older models: the agent as trained
        revoke = meta.params.get("revoke_margin")  # older models (and None): never revoke
        return AgentPolicy(
            model, meta.policy, margin, None if revoke is None else float(revoke)
        ), meta
    raise ModelError(f"{folder}: unknown policy {meta.policy!r}; known: {', '.join(POLICIES)}")


def agent_class() -> type[AgentPolicy] | None:
    """``AgentPolicy``, or None without the ``rl`` extra (no agent can be loaded then):
    for isinstance checks that must not import torch on a base install."""
    if missing("rl") is not None:
        return None
    from mirage.learn.agents import AgentPolicy

    return AgentPolicy
