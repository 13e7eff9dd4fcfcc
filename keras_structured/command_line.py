"""Command lines: option types that refuse values which cannot work, and user errors without
a traceback.

Option types (:func:`number`, :func:`integer`) refuse a value when it is parsed: ``argparse``
then names the option in its message, e.g. ``argument --learning-rate: must be a finite number
> 0. Received: 'inf'``, instead of a run that diverges or fails deep inside TensorFlow.

Errors found later (a missing file, a damaged run directory, settings that a resumed run may
not change) are the user's, not the program's: :func:`run_command` (the parser's and NLI's
command lines) and :func:`exit_on_error` (``python -m rl``) print them as one message,
``{prog} {command}: error: {message}``, and exit with status 2 (:func:`exit_status`); a run
that diverged exits with status 1. ``--debug``, an option of every command, or the
environment variable ``KERAS_STRUCTURED_DEBUG=1`` shows the traceback instead.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("--learning-rate", type=number(minimum=0, open_minimum=True))
    >>> _ = parser.add_argument("--seed", type=integer(minimum=0))
    >>> parser.parse_args(["--learning-rate", "1e-3", "--seed", "2"])
    Namespace(learning_rate=0.001, seed=2)
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from keras_structured.divergence import DivergenceError
from keras_structured.run_directory import RunLockedError
from keras_structured.validation import check_integer, check_number

__all__ = [
    "DEBUG_HELP",
    "DEBUG_VARIABLE",
    "USER_ERRORS",
    "add_debug_option",
    "exit_on_error",
    "exit_status",
    "integer",
    "number",
    "run_command",
]

#: The environment variable that, set to anything but ``""`` or ``"0"``, shows the traceback
#: of a user error (as ``--debug`` does).
DEBUG_VARIABLE = "KERAS_STRUCTURED_DEBUG"
#: The help of ``--debug``.
DEBUG_HELP = f"show the traceback of an error (or set {DEBUG_VARIABLE}=1)"
#: The errors of input that cannot work: options, files (missing, unreadable, damaged), run
#: directories (locked, holding another run, read-only), settings. The library raises
#: ``ValueError`` (and its subclasses) for input it refuses, and the operating system an
#: ``OSError`` naming the file; ``IndexError`` is an index out of range (``--index``).
USER_ERRORS = (ValueError, OSError, RunLockedError, IndexError)


def _option_type(
    cast: Callable[[str], float | int], check: Callable[..., float | int], name: str, **bounds
) -> Callable[[str], float | int]:
    """The ``argparse`` type that casts the option's text and checks it with ``check``."""

    def parse(text: str) -> float | int:
        try:
            value = cast(text)
        except ValueError:
            value = text  # refused by the check, with its requirement
        try:
            return check("value", value, **bounds)
        except ValueError as error:
            message = str(error).split(". Received:")[0].removeprefix("value ")
            raise argparse.ArgumentTypeError(f"{message}. Received: {text!r}") from None

    parse.__name__ = name
    return parse


def number(
    minimum: float | None = None,
    maximum: float | None = None,
    open_minimum: bool = False,
    open_maximum: bool = False,
) -> Callable[[str], float]:
    """An ``argparse`` type: a finite real number in the given interval (NaN and inf refused).

    Args:
        minimum, maximum: the bounds, or None.
        open_minimum, open_maximum: exclude the bound itself.

    Returns:
        A function from the option's text to a ``float``.
    """
    return _option_type(
        float,
        check_number,
        "number",
        minimum=minimum,
        maximum=maximum,
        open_minimum=open_minimum,
        open_maximum=open_maximum,
    )


def integer(minimum: int | None = None) -> Callable[[str], int]:
    """An ``argparse`` type: an integer ``>= minimum``.

    Args:
        minimum: the smallest value allowed, or None.

    Returns:
        A function from the option's text to an ``int``.
    """
    return _option_type(int, check_integer, "integer", minimum=minimum)


def add_debug_option(parser: argparse.ArgumentParser, subcommand: bool = False) -> None:
    """Give ``parser`` the ``--debug`` flag (:data:`DEBUG_HELP`).

    Args:
        parser: a command line, or one of its subcommands.
        subcommand: ``parser`` is a subcommand: its flag, when not given, leaves the value
            of the main parser's (given before the subcommand) as it is.
    """
    default = argparse.SUPPRESS if subcommand else False
    parser.add_argument("--debug", action="store_true", default=default, help=DEBUG_HELP)


def exit_status(error: BaseException) -> int | None:
    """The exit status of a command stopped by ``error``: 2 for a user error
    (:data:`USER_ERRORS`), 1 for a run that diverged, None for a bug (its traceback is shown).

    Example:
        >>> exit_status(FileNotFoundError(2, "No such file or directory", "x.conllu"))
        2
        >>> exit_status(TypeError("a bug")) is None
        True
    """
    if isinstance(error, USER_ERRORS):
        return 2
    return 1 if isinstance(error, DivergenceError) else None


def exit_on_error(parser: argparse.ArgumentParser, args: argparse.Namespace, error: Exception) -> None:
    """End the command that ``error`` stopped: with status :func:`exit_status` and the message
    ``{prog} {command}: error: {error}`` on standard error, or, for a bug or with ``--debug``
    (or :data:`DEBUG_VARIABLE`), by raising ``error`` again, which shows its traceback.

    Call it in the ``except`` block that caught ``error``.

    Args:
        parser: the command line, whose ``prog`` starts the message.
        args: the parsed options (``command``, the subcommand; ``debug``).
        error: the error.

    Raises:
        SystemExit: with the status, for a user error or a divergence.
    """
    status = exit_status(error)
    debug = getattr(args, "debug", False) or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
    if status is None or debug:
        raise error
    command = f"{parser.prog} {args.command}" if getattr(args, "command", None) else parser.prog
    parser.exit(status, f"{command}: error: {error}\n")


def run_command(
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], object],
    argv: list[str] | None = None,
) -> int:
    """Parse ``argv`` and run the command: the entry point of a command line.

    Args:
        parser: the command line (with :func:`add_debug_option`).
        run: runs the parsed command.
        argv: the arguments (None: ``sys.argv[1:]``).

    Returns:
        0, when the command succeeded.

    Raises:
        SystemExit: status 2 on options that ``parser`` refuses or a user error, 1 on a
            divergence, each with its message (:func:`exit_on_error`).
    """
    args = parser.parse_args(argv)
    try:
        run(args)
    except Exception as error:
        exit_on_error(parser, args, error)
    return 0
