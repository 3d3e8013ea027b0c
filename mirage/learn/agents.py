"""RL agents (DQN, PPO from stable-baselines3) over a gymnasium environment of the simulator.

The environment, :class:`ChainEnv`, is one chain transition per episode: at each decision
step the agent sees the decision features (:mod:`mirage.policy.features`) and chooses to
wait (0) or submit the successor now (1). Submitting ends the episode with reward -J
(hours / :data:`REWARD_SCALE`) of submitting at that step; at the planned end the successor
is submitted regardless. Waiting earns 0, and the discount is 1 (the episode is finite and
J already prices time).

It is built on the simulator through its counterfactual probes: for every step of a
sample the simulator has already computed, by forking the replay, when the successor
would start if submitted then. Until the agent submits, the successor does not exist, so
the world the agent observes does not depend on its actions, and the recorded curve *is*
the simulator's answer for every action sequence: an episode costs array lookups instead
of a replay, which is what makes hundreds of thousands of training steps affordable on two
cores. (:func:`mirage.evaluate.probes.probe_sample` documents the probes.)

Training episodes start at a random step: epsilon-greedy exploration submits within a
few steps, so without it late steps, where the decision matters, would never be seen.
Starting at step k is the same state as having waited k steps (the features carry time).
Evaluation episodes start at step 0.

Observations are the features through sign(x) * log1p(|x|), which tames the counts of a
deep queue without statistics that would have to be stored beside the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.policy.decision import DECISION_NAMES, decision_features

REWARD_SCALE = 10.0  # hours per unit of reward: keeps Q-values near 1
WAIT, SUBMIT = 0, 1


def observe(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (np.sign(x) * np.log1p(np.abs(x))).astype(np.float32)
    return out


class ChainEnv(gym.Env[np.ndarray, np.int64]):
    """Episodes over recorded samples: ``matrices[i]`` (K, F), ``costs[i]`` (K+1,) hours."""

    def __init__(
        self,
        matrices: Sequence[np.ndarray],
        costs: Sequence[np.ndarray],
        *,
        random_start: bool = True,
        seed: int = 0,
    ) -> None:
        if not matrices or len(matrices) != len(costs):
            raise ValueError("need one cost curve per sample, and at least one sample")
        self.matrices = [observe(m) for m in matrices]
        self.costs = [np.asarray(c, dtype=np.float64) for c in costs]
        self.random_start = random_start
        width = len(DECISION_NAMES)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(width,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.rng = np.random.default_rng(seed)
        self.i = 0
        self.k = 0
        self.order = 0  # evaluation episodes go through the samples in order

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        if self.random_start:
            self.i = int(self.rng.integers(len(self.matrices)))
            self.k = int(self.rng.integers(len(self.matrices[self.i])))
        else:
            self.i = self.order % len(self.matrices)
            self.order += 1
            self.k = 0
        return self.matrices[self.i][self.k], {"sample": self.i}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        m, cost = self.matrices[self.i], self.costs[self.i]
        obs = m[self.k]
        if int(action) == SUBMIT:
            return obs, -cost[self.k] / REWARD_SCALE, True, False, {"step": self.k}
        self.k += 1
        if self.k >= len(m):  # the planned end: submitted regardless
            return m[-1], -cost[len(m)] / REWARD_SCALE, True, False, {"step": len(m)}
        return m[self.k], 0.0, False, False, {}


# ---- training --------------------------------------------------------------------------

ALGOS = {"dqn": "DQN", "pg": "PPO"}


def make_model(kind: str, env: ChainEnv, seed: int) -> Any:
    """An untrained SB3 model; hyper-parameters fixed before looking at test results."""
    import torch
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.logger import Logger

    torch.set_num_threads(1)  # small nets: threads cost more than they give, and break determinism
    model = _new_model(kind, env, seed, DQN, PPO)
    # SB3's default logger makes an empty /tmp/SB3-<date> folder on every learn(); with
    # verbose=0 it writes nothing, so a logger with no outputs (and no folder) replaces it
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def _new_model(kind: str, env: ChainEnv, seed: int, dqn: Any, ppo: Any) -> Any:
    if kind == "dqn":
        return dqn(
            "MlpPolicy",
            env,
            gamma=1.0,
            learning_rate=5e-4,
            buffer_size=200_000,
            learning_starts=5_000,
            batch_size=256,
            train_freq=4,
            target_update_interval=2_000,
            exploration_fraction=0.3,
            exploration_final_eps=0.02,
            policy_kwargs={"net_arch": [128, 128]},
            seed=seed,
            device="cpu",
            verbose=0,
        )
    if kind == "pg":
        return ppo(
            "MlpPolicy",
            env,
            gamma=1.0,
            gae_lambda=0.95,
            n_steps=4096,
            batch_size=512,
            learning_rate=3e-4,
            ent_coef=0.01,
            policy_kwargs={"net_arch": [128, 128]},
            seed=seed,
            device="cpu",
            verbose=0,
        )
    raise ValueError(f"unknown agent {kind!r}; known: {', '.join(ALGOS)}")


def load_model(kind: str, path: Path) -> Any:
    from stable_baselines3 import DQN, PPO

    if kind == "dqn":
        return DQN.load(path, device="cpu")
    return PPO.load(path, device="cpu")


#: Margins (in the agent's score units) that tuning and recalibration choose among. DQN's
#: score is Q(submit) - Q(wait) in reward units (REWARD_SCALE hours each); PPO's is the
#: logit difference of its two actions. 0 is the agent as trained. Widened to +-64 where
#: CERIT's re-tuned pg sat at -8, then at -16 (now inside).
_STEPS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
MARGINS = (*(-m for m in reversed(_STEPS)), 0.0, *_STEPS)
#: Revocation margins (same units; None: never revoke) that tuning chooses among.
REVOKE_MARGINS: tuple[float | None, ...] = (None, 8.0, 4.0, 2.0, 1.0, 0.5, 0.25)


class AgentPolicy(Policy):
    """A trained agent deciding every pending transition in one batched forward pass.

    It submits where its score for submitting beats waiting by more than ``margin``: with
    margin 0, the agent's own greedy action. The margin is the agent's one decision
    constant, tuned like the forecasters' bands (`mirage train --recalibrate`), because a
    network trained on one mix of queues is, like a forecaster, off in level on another.
    """

    def __init__(
        self, model: Any, name: str, margin: float = 0.0, revoke_margin: float | None = None
    ) -> None:
        self.model = model
        self.name = name
        self.margin = margin
        self.revoke_margin = revoke_margin

    @property
    def revocable(self) -> bool:
        return self.revoke_margin is not None

    def plan(self, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per step: submit (score beats the margin), and revoke a pending pre-submission
        (score under the margin by more than ``revoke_margin``: waiting is now clearly the
        better action)."""
        submit: np.ndarray = score > self.margin
        if self.revoke_margin is None:
            return submit, np.zeros_like(submit)
        revoke: np.ndarray = score < self.margin - self.revoke_margin
        return submit, revoke

    def plan_for(self, matrix: np.ndarray, left_h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`plan` on a recorded sample's decision rows, in one batched forward pass."""
        return self.plan(self.scores(matrix))

    def revoke(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[bool]:
        if not pending or self.revoke_margin is None:
            return [False] * len(pending)
        return [bool(v) for v in self.plan(self.scores(decision_features(ctx, pending)))[1]]

    def scores(self, x: np.ndarray) -> np.ndarray:
        """Submit-over-wait score per row: Q difference (DQN) or logit difference (PPO)."""
        import torch

        obs = torch.as_tensor(observe(x))
        with torch.no_grad():
            if hasattr(self.model, "q_net"):  # DQN
                out = self.model.q_net(obs)
            else:
                out = self.model.policy.get_distribution(obs).distribution.logits
        diff: np.ndarray = (out[:, SUBMIT] - out[:, WAIT]).double().numpy()
        return diff

    def actions(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.where(self.scores(x) > self.margin, SUBMIT, WAIT)
        return out

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        if not pending:
            return []
        x = decision_features(ctx, pending)
        score = self.scores(x)
        return [
            Decision(
                submit=bool(v > self.margin),
                reason=f"{self.name}: {'submit' if v > self.margin else 'wait'} "
                f"(score {v:+.2f}, margin {self.margin:+g})",
            )
            for v in score.tolist()
        ]

    def steps_for(self, matrix: np.ndarray, left_h: np.ndarray) -> int:
        """The submission step on a recorded sample: the first step the agent submits."""
        return first_above(self.scores(matrix), self.margin)


def first_above(score: np.ndarray, margin: float) -> int:
    """The first step whose score beats the margin (``len(score)``: none)."""
    hit = np.nonzero(score > margin)[0]
    return int(hit[0]) if len(hit) else len(score)
