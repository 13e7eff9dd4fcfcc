"""End-to-end throughput of stable-baselines3 PPO on a MuJoCo task: the reference for ``bench_rl.py``.

Trains stable-baselines3 PPO with its defaults for MuJoCo-sized problems (one
environment, ``MlpPolicy`` with separate 64x64 tanh policy and value networks,
``n_steps=2048`` rollouts, 10 epochs of minibatches of 64) on the CPU for
``--steps`` environment steps and prints one JSON line whose ``steps_per_s`` is
the number of environment steps divided by the wall time of ``model.learn``:
rollout collection and updates together, model construction excluded.

Needs torch and stable-baselines3, which the library itself does not::

    pip install -e ".[rl,rl-bench]"
    python benchmarks/sb3_ppo_reference.py --steps 20480 --threads 1
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

INSTALL_HINT = (
    "the SB3 reference needs torch and stable-baselines3; install the `rl-bench` extra: "
    'pip install -e ".[rl-bench]"'
)


def measure(
    env_id: str = "Hopper-v5", steps: int = 20_480, seed: int = 0, threads: int = 1
) -> dict[str, Any]:
    """Train SB3 PPO for ``steps`` environment steps and return its throughput.

    Args:
        env_id: Gymnasium environment id.
        steps: environment steps (a multiple of 2048 gives whole rollouts).
        seed: seed of the model and the environment.
        threads: ``torch.set_num_threads`` value.

    Returns:
        ``env``, ``steps`` (as counted by SB3), ``wall_s`` (time of ``learn``),
        ``steps_per_s``, ``torch_threads`` and the torch / stable-baselines3 versions.

    Raises:
        ImportError: torch or stable-baselines3 is missing (the message names the extra).
    """
    try:
        import stable_baselines3
        import torch
        from stable_baselines3 import PPO
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error

    torch.set_num_threads(threads)
    model = PPO(
        "MlpPolicy",
        env_id,
        n_steps=2048,
        batch_size=64,
        n_epochs=10,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    return {
        "env": env_id,
        "steps": int(model.num_timesteps),
        "wall_s": round(wall, 3),
        "steps_per_s": round(model.num_timesteps / wall, 1),
        "torch_threads": threads,
        "torch": torch.__version__,
        "stable_baselines3": stable_baselines3.__version__,
    }


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: print one JSON line with the measured throughput."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--env", default="Hopper-v5", help="Gymnasium environment id")
    parser.add_argument("--steps", type=int, default=20_480, help="environment steps to train for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    try:
        result = measure(args.env, args.steps, args.seed, args.threads)
    except ImportError as error:
        parser.exit(2, f"error: {error}\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
