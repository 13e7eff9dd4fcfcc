"""The training algorithms: projected policy iteration and the PPO-clip baseline."""

from __future__ import annotations

from rl.algorithms.base import Trainer
from rl.algorithms.ppo import PPO
from rl.algorithms.projected import EntropySchedule, ProjectedPolicyIteration
from rl.config import TrainConfig

ALGORITHM_CLASSES: dict[str, type[Trainer]] = {"projected": ProjectedPolicyIteration, "ppo": PPO}


def make_trainer(config: TrainConfig, verbose: bool = False) -> Trainer:
    """The trainer of ``config.algo`` (validates the config and builds everything)."""
    config.validate()
    return ALGORITHM_CLASSES[config.algo](config, verbose)


__all__ = [
    "ALGORITHM_CLASSES",
    "PPO",
    "EntropySchedule",
    "ProjectedPolicyIteration",
    "Trainer",
    "make_trainer",
]
