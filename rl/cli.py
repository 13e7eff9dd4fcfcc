"""Command line: ``python -m rl {train, evaluate, plot}`` (see ``python -m rl --help``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from pathlib import Path

from rl.config import ALGORITHMS, TrainConfig, default_config

_FIELD_TYPES = typing.get_type_hints(TrainConfig)


def _parse_override(text: str) -> tuple[str, object]:
    """``FIELD=VALUE`` -> ``(field, value)`` converted to the field's type."""
    name, sep, raw = text.partition("=")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    if not sep or name not in fields:
        raise ValueError(f"--set expects FIELD=VALUE with FIELD one of {sorted(fields)}. Received: {text!r}")
    kind = _FIELD_TYPES[name]
    if raw.lower() == "none":
        return name, None
    if kind is bool:
        if raw.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{name} expects true/false. Received: {raw!r}")
        return name, raw.lower() in ("true", "1")
    if kind == tuple[int, ...]:
        return name, tuple(int(x) for x in raw.split(",") if x)
    for candidate in (int, float, str):
        if kind == candidate or kind == (candidate | None):
            return name, candidate(raw)
    raise ValueError(f"Cannot parse {name}={raw!r}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m rl``."""
    parser = argparse.ArgumentParser(prog="python -m rl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a policy (projected policy iteration or PPO)")
    train.add_argument(
        "--env",
        default="CartPole-v1",
        help="gymnasium id (CartPole-v1, Acrobot-v1, "
        "Pendulum-v1, InvertedPendulum-v5, Hopper-v5, HalfCheetah-v5)",
    )
    train.add_argument("--algo", default="projected", help=f"one of {ALGORITHMS}")
    train.add_argument("--steps", type=int, default=None, help="environment steps (default: 100000)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--num-envs", type=int, default=None, help="parallel envs (default: per env family)")
    train.add_argument("--logdir", default=None, help="run directory (default: runs/rl/ENV__ALGO__sSEED)")
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --logdir from its newest checkpoint "
        "(its config.json is used; --steps may extend it)",
    )
    train.add_argument("--kl-bound", type=float, default=None, help="KL trust region eps")
    train.add_argument("--entropy-bound", type=float, default=None, help="initial entropy lower bound (nats)")
    train.add_argument("--per-state", action="store_true", help="per-state instead of averaged constraints")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override any TrainConfig field, e.g. --set update_epochs=5 (repeatable)",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar")

    evaluate = commands.add_parser("evaluate", help="returns of a checkpointed policy")
    evaluate.add_argument("--checkpoint", required=True, help="a run directory or one of its checkpoints")
    evaluate.add_argument("--episodes", type=int, default=10)
    evaluate.add_argument("--seed", type=int, default=10_000, help="seed of the first evaluation episode")
    evaluate.add_argument("--json", action="store_true", help="print one JSON line")

    plot = commands.add_parser("plot", help="learning curves of run directories, grouped by run name")
    plot.add_argument("runs", nargs="+", help="run directories (seeds of a run: names ending in _sN)")
    plot.add_argument("--output", default="learning_curves.png", help="PNG path")
    plot.add_argument("--key", default="charts/episodic_return", help="progress.csv column")
    return parser


def _train_config(args: argparse.Namespace) -> TrainConfig:
    if args.resume:
        if args.logdir is None:
            raise ValueError("--resume needs --logdir (the run to continue). Received: --logdir None")
        config = TrainConfig.load(Path(args.logdir) / "config.json")
        config.logdir = args.logdir  # the run may have been moved since
        if args.steps is not None:
            config.total_steps = args.steps
        config.validate()
        return config
    overrides = dict(_parse_override(text) for text in args.set)
    overrides["seed"] = args.seed
    for name, value in (
        ("total_steps", args.steps),
        ("num_envs", args.num_envs),
        ("logdir", args.logdir),
        ("kl_bound", args.kl_bound),
        ("entropy_bound", args.entropy_bound),
    ):
        if value is not None:
            overrides[name] = value
    if args.per_state:
        overrides["per_state"] = True
    return default_config(args.env, args.algo, **overrides)


def _train(args: argparse.Namespace) -> None:
    config = _train_config(args)  # validated before TensorFlow is even imported
    from rl.algorithms import make_trainer
    from rl.checkpoint import resolve_checkpoint

    trainer = make_trainer(config, verbose=not args.quiet)
    if args.resume:
        trainer.restore(resolve_checkpoint(config.logdir))
    row = trainer.train()
    print(
        json.dumps(
            {
                "logdir": config.logdir,
                "global_step": row.get("global_step"),
                "episodic_return": row.get("charts/episodic_return"),
            }
        )
    )


def _evaluate(args: argparse.Namespace) -> None:
    from rl.evaluation import evaluate

    if args.episodes <= 0:
        raise ValueError(f"--episodes must be positive. Received: {args.episodes}")
    results = evaluate(args.checkpoint, args.episodes, args.seed)
    if args.json:
        print(json.dumps(results))
        return
    for mode in ("deterministic", "stochastic"):
        print(
            f"{mode:>13}: {results[f'{mode}_mean']:.2f} +- {results[f'{mode}_std']:.2f} "
            f"over {args.episodes} episodes"
        )


def _plot(args: argparse.Namespace) -> None:
    from rl.plotting import plot

    print(plot(args.runs, args.output, args.key))


def main(argv: list[str] | None = None) -> int:
    """Runs the command; configuration errors exit with status 2 and a one-line message."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command = {"train": _train, "evaluate": _evaluate, "plot": _plot}[args.command]
    try:
        command(args)
    except (ValueError, FileNotFoundError) as error:
        parser.exit(2, f"python -m rl {args.command}: error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
