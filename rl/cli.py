"""Command line: ``python -m rl {train, evaluate, export, plot, fields}`` (see ``python -m rl --help``).

A user error (an option, a configuration, a run directory or a checkpoint that cannot work)
exits with status 2 and one message, a run that diverged with status 1; ``--debug`` (an option
of every command) or ``KERAS_STRUCTURED_DEBUG=1`` shows the traceback instead
(:mod:`keras_structured.command_line`).

``--help``, ``fields`` and configuration errors answer without importing TensorFlow, unless a
numeric option is given: :mod:`keras_structured.command_line` checks those when they are
parsed, and importing keras_structured imports TensorFlow. ``train`` holds a lock on its run
directory while it reads and writes it: a second process is refused, naming the first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import textwrap
import typing
from collections.abc import Callable
from pathlib import Path

from rl.config import (
    ALGORITHMS,
    RESUMABLE_FIELDS,
    TUNED_ENVS,
    VECTOR_KINDS,
    TrainConfig,
    default_config,
    field_docs,
)
from rl.run_dir import check_new_run, clear_run, last_row, newest_iteration

if typing.TYPE_CHECKING:
    from keras_structured.run_directory import RunLock

_FIELD_TYPES = typing.get_type_hints(TrainConfig)

_DESCRIPTION = """\
Projected policy iteration (Akrour et al. 2019) and a PPO-clip baseline.

  train     train a policy into a run directory (progress.csv, TensorBoard events,
            config.json, checkpoints/)
  evaluate  deterministic and stochastic returns of a checkpointed policy
  export    a checkpointed policy as a .keras model (raw observations -> logits or mean)
  upgrade-checkpoint
            convert a run's old-format checkpoints (one state.pkl) to the current layout
  plot      learning curves of run directories
  fields    the configuration fields that --set accepts, with defaults and meanings

Run "python -m rl COMMAND --help" for the options of a command."""


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
    try:
        if kind == tuple[int, ...]:
            return name, tuple(int(x) for x in raw.split(",") if x)
        for candidate in (int, float, str):
            if kind == candidate or kind == (candidate | None):
                return name, candidate(raw)
    except ValueError:
        pass
    raise ValueError(f"--set {name} expects a value of type {kind}. Received: {text!r}")


def _option_type(name: str, **bounds: float) -> Callable[[str], float | int]:
    """The ``argparse`` type ``keras_structured.command_line.{name}(**bounds)``: a value that
    cannot work is refused when parsed, naming the option. Imported when an option is parsed,
    since importing keras_structured imports TensorFlow, which ``--help`` and ``fields`` do
    without."""

    def parse(text: str) -> float | int:
        from keras_structured import command_line

        return getattr(command_line, name)(**bounds)(text)

    parse.__name__ = name
    return parse


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (not ``None`` ones, whose help says what they mean, nor
    those of flags) and keeps the line breaks of descriptions and epilogs."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


# keras_structured.command_line.DEBUG_HELP and add_debug_option, which importing would import
# TensorFlow: --help and fields answer without it.
_DEBUG_HELP = "show the traceback of an error (or set KERAS_STRUCTURED_DEBUG=1)"


class _Command(argparse.ArgumentParser):
    """A subcommand, with ``--debug`` (when not given, the main parser's value stands)."""

    def __init__(self, **options):
        super().__init__(**options)
        self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)


class _Given(argparse.Action):
    """``store``, and records the destination in ``namespace.given``: ``--resume`` refuses a
    setting given explicitly (even at its default) that differs from the run's."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def _fields_epilog() -> str:
    names = ", ".join(f.name for f in dataclasses.fields(TrainConfig))
    text = (
        f"--set FIELD names: {names}. See python -m rl fields [--env ENV --algo ALGO] for each "
        "field's default and meaning. Step counts (--steps, total_steps) are rounded up to whole "
        "batches of num_envs * num_steps environment steps."
    )
    return textwrap.fill(text, 100)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m rl``."""
    parser = argparse.ArgumentParser(
        prog="python -m rl", description=_DESCRIPTION, formatter_class=_HelpFormatter
    )
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="{train,evaluate,export,upgrade-checkpoint,plot,fields}",
        parser_class=_Command,
    )

    train = commands.add_parser(
        "train",
        help="train a policy (projected policy iteration or PPO)",
        description="Train a policy into --logdir. A logdir that already holds a run is refused\n"
        "unless --resume or --overwrite is given.",
        epilog=_fields_epilog(),
        formatter_class=_HelpFormatter,
    )
    train.set_defaults(given=set())
    train.add_argument(
        "--env",
        default="CartPole-v1",
        action=_Given,
        help="gymnasium id: any env with Discrete or bounded 1-D Box actions and Box (or flattenable "
        "Discrete, MultiDiscrete, MultiBinary, Dict, Tuple) observations; defaults follow its kind "
        f"(MuJoCo, else discrete or continuous actions), tuned on {', '.join(TUNED_ENVS)}",
    )
    train.add_argument("--algo", default="projected", choices=ALGORITHMS, action=_Given, help="algorithm")
    train.add_argument(
        "--steps",
        type=_option_type("integer", minimum=1),
        default=TrainConfig.total_steps,
        action=_Given,
        help="environment steps, rounded up to whole batches of num_envs * num_steps; with "
        "--resume, the new step budget of the run",
    )
    train.add_argument(
        "--seed",
        type=_option_type("integer", minimum=0),
        default=0,
        action=_Given,
        help="seed of networks, numpy and envs",
    )
    train.add_argument(
        "--num-envs",
        type=_option_type("integer", minimum=1),
        default=None,
        action=_Given,
        help="parallel envs (default: per env family)",
    )
    train.add_argument(
        "--vector",
        default=TrainConfig.vector,
        choices=VECTOR_KINDS,
        action=_Given,
        help="gymnasium vector env: sync (all envs in this process) or async (one process per env); "
        "same results, and a resumed run may change it",
    )
    train.add_argument("--logdir", default=None, help="run directory (default: runs/rl/ENV__ALGO__sSEED)")
    existing = train.add_mutually_exclusive_group()
    existing.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --logdir from its newest checkpoint with its config.json; only "
        "--steps and --vector may change (settings that differ from the run's are refused). This "
        "unpickles the checkpoint's resume_state.pkl (after checking its SHA-256), which can run any "
        "code: use it only on run directories you created",
    )
    existing.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the run in --logdir (config.json, progress.csv, checkpoints, TensorBoard "
        "events; other files are kept) and train afresh",
    )
    train.add_argument(
        "--kl-bound",
        type=_option_type("number", minimum=0, open_minimum=True),
        default=None,
        action=_Given,
        help="KL trust region eps (default: per env family)",
    )
    train.add_argument(
        "--entropy-bound",
        type=_option_type("number"),
        default=None,
        action=_Given,
        help="initial entropy lower bound in nats (default: none until the entropy halves)",
    )
    train.add_argument("--per-state", action="store_true", help="per-state instead of averaged constraints")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override any TrainConfig field (names below), e.g. --set update_epochs=5 (repeatable)",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar")

    evaluate = commands.add_parser(
        "evaluate",
        help="returns of a checkpointed policy",
        description="Deterministic and stochastic returns of a checkpointed policy. Reads only\n"
        "weights.npz and JSON (never a pickle), so it is safe on run directories from others.",
        formatter_class=_HelpFormatter,
    )
    evaluate.add_argument(
        "--checkpoint", required=True, help="a run directory (its newest checkpoint) or a checkpoint"
    )
    evaluate.add_argument(
        "--episodes", type=_option_type("integer", minimum=1), default=10, help="episodes per mode"
    )
    evaluate.add_argument(
        "--seed",
        type=_option_type("integer", minimum=0),
        default=10_000,
        help="seed of the first evaluation episode",
    )
    evaluate.add_argument("--json", action="store_true", help="print one JSON line")

    export = commands.add_parser(
        "export",
        help="a checkpointed policy as a .keras model",
        description="Write a checkpointed policy as a .keras model of built-in Keras layers, loadable\n"
        "with keras.models.load_model(PATH, safe_mode=True) without rl. Input: raw observations\n"
        "(the run's observation normalisation is the first layer). Output: the logits (discrete\n"
        "actions: the action is their argmax) or the Gaussian mean (continuous actions: the action\n"
        "is the mean clipped to the action bounds). Never unpickles.",
        formatter_class=_HelpFormatter,
    )
    export.add_argument(
        "--checkpoint", required=True, help="a run directory (its newest checkpoint) or a checkpoint"
    )
    export.add_argument("--output", required=True, help="model file, ending in .keras")

    upgrade = commands.add_parser(
        "upgrade-checkpoint",
        help="convert old-format checkpoints (one state.pkl) of a run you created",
        description="Convert the old-format checkpoints (weights.npz and one state.pkl) of a run to the\n"
        "current layout (weights.npz, state.json, resume_state.pkl), so that evaluate, export and\n"
        "--resume read them. This unpickles state.pkl, which can run any code: use it only on run\n"
        "directories you created.",
        formatter_class=_HelpFormatter,
    )
    upgrade.add_argument("run", help="a run directory (all its checkpoints) or one checkpoint")

    plot = commands.add_parser(
        "plot",
        help="learning curves of run directories, grouped by run name",
        description="Learning curves of run directories; seeds of a run (names ending in _sN) are grouped.",
        formatter_class=_HelpFormatter,
    )
    plot.add_argument("runs", nargs="+", help="run directories (seeds of a run: names ending in _sN)")
    plot.add_argument("--output", default="learning_curves.png", help="PNG path")
    plot.add_argument("--key", default="charts/episodic_return", help="progress.csv column")

    fields = commands.add_parser(
        "fields",
        help="configuration fields (--set FIELD=VALUE) with defaults and meanings",
        description="Each TrainConfig field with its default for --env and --algo, and its meaning.",
        formatter_class=_HelpFormatter,
    )
    fields.add_argument("--env", default="CartPole-v1", help="show the defaults for this gymnasium env")
    fields.add_argument("--algo", default="projected", choices=ALGORITHMS, help="algorithm")
    return parser


def _requested(args: argparse.Namespace, explicit_only: bool) -> dict[str, object]:
    """Config values asked for on the command line (``explicit_only``: only those given)."""
    values = dict(_parse_override(text) for text in args.set)
    options = {
        "env_id": ("env", args.env),
        "algo": ("algo", args.algo),
        "seed": ("seed", args.seed),
        "total_steps": ("steps", args.steps),
        "num_envs": ("num_envs", args.num_envs),
        "vector": ("vector", args.vector),
        "kl_bound": ("kl_bound", args.kl_bound),
        "entropy_bound": ("entropy_bound", args.entropy_bound),
    }
    for name, (dest, value) in options.items():
        defaulted = not explicit_only and value is not None and name not in values
        if dest in args.given or defaulted:  # an option given overrides --set, a default does not
            values[name] = value
    if args.per_state:
        values["per_state"] = True
    if args.logdir is not None:
        values["logdir"] = args.logdir
    return values


def _train_config(args: argparse.Namespace) -> TrainConfig:
    if args.resume:
        return _resume_config(args)
    values = _requested(args, explicit_only=False)
    return default_config(values.pop("env_id"), values.pop("algo"), **values)


def _resume_config(args: argparse.Namespace) -> TrainConfig:
    """The run's config with the new step budget; refuses any other setting that differs."""
    if args.logdir is None:
        raise ValueError("--resume needs --logdir (the run to continue). Received: --logdir None")
    config = TrainConfig.load(Path(args.logdir) / "config.json")
    requested = _requested(args, explicit_only=True)
    requested.pop("logdir")  # the run may have been moved since
    from keras_structured.run_settings import check_resumed_settings  # imports TensorFlow

    check_resumed_settings(
        {name: getattr(config, name) for name in requested},
        requested,
        may_change=RESUMABLE_FIELDS,
        advice=f"Resuming the run in {args.logdir!r}, only the step budget (--steps) and --vector may "
        "change: start a new run (another --logdir, or --overwrite) to change the others.",
    )
    config.logdir = args.logdir
    for name in RESUMABLE_FIELDS:
        if name in requested:
            setattr(config, name, requested[name])
    config.validate()
    return config


def _json_line(values: dict[str, object]) -> str:
    """``values`` as one JSON line; NaN and infinities become ``null`` (valid JSON)."""
    clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}
    return json.dumps(clean, allow_nan=False)


def _summary(logdir: str, step: int | None, episodic_return: float | None) -> str:
    return _json_line({"logdir": logdir, "global_step": step, "episodic_return": episodic_return})


def _train(args: argparse.Namespace) -> None:
    config = _train_config(args)  # validated before TensorFlow is even imported
    from keras_structured.run_directory import RunLock

    with RunLock(config.logdir) as lock:  # before reading the run: another process may be writing it
        _train_locked(args, config, lock)


def _train_locked(args: argparse.Namespace, config: TrainConfig, lock: RunLock) -> None:
    """Trains, resumes or overwrites the run of ``config`` while this process holds ``lock``."""
    if args.resume:
        iteration = newest_iteration(config.logdir)
        if iteration is None:
            raise FileNotFoundError(
                f"No checkpoint to resume in {config.logdir!r} (expected checkpoints/iter_NNNNNN); "
                "train it afresh with --overwrite"
            )
        if iteration >= config.num_iterations:
            row = last_row(config.logdir, iteration) or {}
            step = int(row["global_step"]) if row else iteration * config.batch_size
            episodic_return = row.get("charts/episodic_return")  # NaN: none ended (null)
            print(f"{config.logdir}: already complete at step {step} (total_steps {config.total_steps})")
            print(_summary(config.logdir, step, episodic_return))
            return
    else:
        check_new_run(config.logdir, args.overwrite)
    from rl.algorithms import make_trainer
    from rl.checkpoint import resolve_checkpoint

    trainer = make_trainer(config, verbose=not args.quiet)  # may still refuse the config
    try:
        if args.resume:
            trainer.restore(resolve_checkpoint(config.logdir))
        elif args.overwrite:
            clear_run(config.logdir)
        row = trainer.train(lock)
    finally:
        trainer.close()
    print(_summary(config.logdir, row.get("global_step"), row.get("charts/episodic_return")))


def _fields(args: argparse.Namespace) -> None:
    config = default_config(args.env, args.algo)
    docs = {name: re.sub(r"(:\w+:)?`+([^`]*)`+", r"\2", doc) for name, doc in field_docs().items()}
    print(f"TrainConfig fields (--set FIELD=VALUE); defaults for --env {args.env} --algo {args.algo}:")
    for field in dataclasses.fields(TrainConfig):
        print(f"\n  {field.name} = {getattr(config, field.name)!r}")
        print(
            textwrap.fill(docs.get(field.name, ""), 96, initial_indent="      ", subsequent_indent="      ")
        )


def _evaluate(args: argparse.Namespace) -> None:
    from rl.evaluation import evaluate

    results = evaluate(args.checkpoint, args.episodes, args.seed)
    if args.json:
        print(json.dumps(results))
        return
    for mode in ("deterministic", "stochastic"):
        print(
            f"{mode:>13}: {results[f'{mode}_mean']:.2f} +- {results[f'{mode}_std']:.2f} "
            f"over {args.episodes} episodes"
        )


def _export(args: argparse.Namespace) -> None:
    from rl.export import export_policy

    print(export_policy(args.checkpoint, args.output))


def _upgrade(args: argparse.Namespace) -> None:
    from rl.upgrade import upgrade_run

    upgraded = upgrade_run(args.run)
    print(f"upgraded {len(upgraded)} checkpoint(s) in {args.run}" + "".join(f"\n  {p}" for p in upgraded))


def _plot(args: argparse.Namespace) -> None:
    from rl.plotting import plot

    print(plot(args.runs, args.output, args.key))


def main(argv: list[str] | None = None) -> int:
    """Runs the command. Input that cannot work (options, configuration, run directory,
    checkpoint) exits with status 2, a run that diverged with status 1, each with one message
    (:func:`keras_structured.command_line.exit_on_error`); ``--debug`` shows the traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    commands = {
        "train": _train,
        "evaluate": _evaluate,
        "export": _export,
        "upgrade-checkpoint": _upgrade,
        "plot": _plot,
        "fields": _fields,
    }
    try:
        commands[args.command](args)
    except Exception as error:
        from keras_structured.command_line import exit_on_error  # imports TensorFlow: only on an error

        exit_on_error(parser, args, error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
