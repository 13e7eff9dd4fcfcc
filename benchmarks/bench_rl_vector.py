"""Environment steps/s of ``rl``'s vector envs: gymnasium ``SyncVectorEnv`` against ``AsyncVectorEnv``.

Each cell steps ``rl.envs.VectorEnvs`` (the class the trainers use: same-step autoreset,
episode statistics) with uniformly random actions for ``--seconds`` after ``--warmup`` steps
and a fresh construction (worker start-up is not timed), and reports env steps/s (vector steps
times ``num_envs``). Sync and async are measured one after the other in the same run for each
task and number of envs, and compared as the ratio async / sync. No policy is evaluated, so
this is the upper bound of what a vector env adds to training throughput; async helps only
when an env step costs more than the inter-process round trip and there are idle cores.

Example:
    python benchmarks/bench_rl_vector.py --seconds 10
    python benchmarks/bench_rl_vector.py --envs CartPole-v1 --num-envs 4 --seconds 2
"""

from __future__ import annotations

import argparse
import os
import time

from gymnasium.vector.utils import batch_space

from rl.config import VECTOR_KINDS
from rl.envs import VectorEnvs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="Env steps/s of sync vs async gymnasium vector envs (rl.envs.VectorEnvs).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Hopper-v5"], help="gymnasium ids")
    parser.add_argument("--num-envs", nargs="+", type=int, default=[4, 8], help="vector sizes")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed stepping per cell")
    parser.add_argument("--warmup", type=int, default=50, help="untimed vector steps per cell")
    parser.add_argument("--seed", type=int, default=0, help="env and action seed")
    return parser.parse_args(argv)


def steps_per_second(
    env_id: str, num_envs: int, vector: str, seconds: float, warmup: int, seed: int
) -> float:
    """Env steps/s of ``num_envs`` copies of ``env_id`` in a ``vector`` vector env."""
    envs = VectorEnvs(env_id, num_envs, seed, vector)
    actions = batch_space(envs.single_action_space, num_envs)
    actions.seed(seed)
    try:
        for _ in range(warmup):
            envs.step(actions.sample())
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            envs.step(actions.sample())
            steps += 1
        elapsed = time.perf_counter() - start
    finally:
        envs.close()
    return steps * num_envs / elapsed


def main(argv: list[str] | None = None) -> None:
    """Measures every cell and prints a markdown table."""
    args = parse_args(argv)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{os.cpu_count()} CPU cores, load average {load} (1, 5, 15 min) at the start; "
        f"{args.seconds:g} s of random-action stepping per cell after {args.warmup} warm-up steps.\n"
    )
    print("| env | num_envs | sync steps/s | async steps/s | async / sync |")
    print("| --- | --- | --- | --- | --- |")
    for env_id in args.envs:
        for num_envs in args.num_envs:
            rates = {
                vector: steps_per_second(env_id, num_envs, vector, args.seconds, args.warmup, args.seed)
                for vector in VECTOR_KINDS
            }
            ratio = rates["async"] / rates["sync"]
            print(
                f"| {env_id} | {num_envs} | {rates['sync']:.0f} | {rates['async']:.0f} | {ratio:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
