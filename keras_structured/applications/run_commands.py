"""The command-line parts every ``model.fit`` application shares (the parser, NLI).

Each application's ``__main__`` builds its parser with :func:`command_parser`, gives its
``train`` command the run options (:func:`add_run_options`: the run directory, resume, the
time limit and the settings of :func:`~keras_structured.applications.training_runs.check_run_settings`)
and adds the ``time`` command (:func:`add_time_command`); ``train`` and ``time`` then run
through :func:`train_command` and :func:`time_command`. Option types refuse values that
cannot work when they are parsed, naming the option, and the ``__main__`` runs the command with
:func:`keras_structured.command_line.run_command`, which prints a user error as one message
(exit status 2) unless ``--debug``, an option of every command, asks for the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from keras_structured.command_line import add_debug_option, integer, number

#: Option types: integers at least 0 and at least 1, positive numbers.
AT_LEAST_ZERO, AT_LEAST_ONE = integer(minimum=0), integer(minimum=1)
POSITIVE = number(minimum=0, open_minimum=True)


def _subcommand(**options) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` shows the defaults, with ``--debug``."""
    command = argparse.ArgumentParser(
        **{"formatter_class": argparse.ArgumentDefaultsHelpFormatter, **options}
    )
    add_debug_option(command, subcommand=True)
    return command


def command_parser(prog: str, description: str) -> tuple[argparse.ArgumentParser, Any]:
    """A parser with required subcommands; every command's ``--help`` shows the defaults, and
    every command has ``--debug`` (:func:`~keras_structured.command_line.add_debug_option`).

    Args:
        prog: the command (``python -m ...``).
        description: what it does.

    Returns:
        ``(parser, commands)``: ``commands.add_parser(name, help=...)`` adds a subcommand.
    """
    shows_defaults = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=shows_defaults)
    add_debug_option(parser)
    return parser, parser.add_subparsers(dest="command", required=True, parser_class=_subcommand)


def add_run_options(
    train: argparse.ArgumentParser,
    score: str,
    learning_rate: float,
    learning_rate_help: str,
    learning_rate_decay: float,
) -> None:
    """The ``train`` options of a run: ``--logdir``, the settings every run has, ``--resume``,
    ``--time-limit`` and ``--quiet``.

    Args:
        train: the ``train`` command.
        score: the score early stopping follows, in the help (``"dev UAS"``).
        learning_rate: the default learning rate.
        learning_rate_help: what it is (``"Adam's learning rate"``).
        learning_rate_decay: the default factor applied after an epoch without a better score.
    """
    train.add_argument("--logdir", required=True, help="run directory (must be empty unless --resume)")
    train.add_argument("--learning-rate", type=POSITIVE, default=learning_rate, help=learning_rate_help)
    train.add_argument(
        "--learning-rate-decay",
        type=number(minimum=0, maximum=1, open_minimum=True),
        default=learning_rate_decay,
        help=f"factor applied to the learning rate after an epoch without a better {score} (1: none)",
    )
    train.add_argument("--seed", type=AT_LEAST_ZERO, default=0)
    train.add_argument("--epochs", type=AT_LEAST_ONE, default=30, help="most epochs")
    train.add_argument(
        "--patience", type=AT_LEAST_ONE, default=5, help=f"epochs without a better {score} before stopping"
    )
    train.add_argument(
        "--min-epochs", type=AT_LEAST_ONE, default=1, help="epochs before early stopping may stop training"
    )
    train.add_argument("--batch-size", type=AT_LEAST_ONE, default=32)
    train.add_argument("--resume", action="store_true", help="continue the run in --logdir (same settings)")
    train.add_argument(
        "--time-limit",
        type=number(minimum=0),
        default=None,
        help="minutes after which no new epoch starts; the run stays resumable (no final.json yet)",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")


def add_time_command(commands: Any, help: str) -> argparse.ArgumentParser:
    """The ``time`` command: the training steps of several runs' checkpoints timed side by side
    (:mod:`keras_structured.applications.timing`).

    Args:
        commands: the subcommands of :func:`command_parser`.
        help: what the command measures.

    Returns:
        The command's parser.
    """
    time_steps = commands.add_parser("time", help=help)
    time_steps.add_argument("--logdir", action="append", required=True, help="a run (repeat for several)")
    time_steps.add_argument("--steps", type=AT_LEAST_ONE, default=30, help="timed steps per run")
    time_steps.add_argument("--output", default=None, help="also write the JSON into this file")
    return time_steps


def train_command(arguments: argparse.Namespace, config_class: type, train: Callable[..., dict]) -> None:
    """The ``train`` command: the settings from the parsed options, then the JSON summary.

    Args:
        arguments: the parsed options: one per field of ``config_class`` (same names), and
            ``logdir``, ``resume``, ``quiet`` and ``time_limit``.
        config_class: the settings' dataclass.
        train: called as ``train(config, logdir, resume=, quiet=, time_limit=)``; returns
            the summary, printed as one JSON line.
    """
    names = {field.name for field in dataclasses.fields(config_class)}
    config = config_class(**{name: value for name, value in vars(arguments).items() if name in names})
    summary = train(
        config,
        arguments.logdir,
        resume=arguments.resume,
        quiet=arguments.quiet,
        time_limit=arguments.time_limit,
    )
    print(json.dumps(summary))


def time_command(
    arguments: argparse.Namespace, time_training_steps: Callable[[list[str], int], dict]
) -> None:
    """The ``time`` command: print (and write to ``--output``) the runs' step timings.

    Args:
        arguments: the parsed options ``logdir`` (a list), ``steps`` and ``output``.
        time_training_steps: the application's timing of its checkpoints' steps.
    """
    from keras_structured.applications.timing import report_timings

    report_timings(time_training_steps(arguments.logdir, arguments.steps), arguments.output)


__all__ = [
    "AT_LEAST_ONE",
    "AT_LEAST_ZERO",
    "POSITIVE",
    "add_run_options",
    "add_time_command",
    "command_parser",
    "time_command",
    "train_command",
]
