"""Helpers of the tests that train from a command line into a log directory
(``python -m keras_structured.parsing`` and ``python -m keras_structured.nli``)."""

from __future__ import annotations

import csv
import pathlib
from collections.abc import Callable


def read_progress(logdir: pathlib.Path) -> list[dict]:
    """The rows of a run's ``progress.csv``, by column name."""
    with open(logdir / "progress.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def train_in_parts(
    main: Callable[[list[str]], None], arguments: Callable[..., list[str]], logdir: pathlib.Path, epochs: int
) -> None:
    """Train into ``logdir`` one epoch per invocation, as a session's time limit would stop it.

    Args:
        main: the command line's ``main``.
        arguments: ``arguments(logdir, *extra)``, the ``train`` command line.
        logdir: the run directory.
        epochs: the run's epochs.
    """
    for _ in range(epochs):
        resume = ["--resume"] if (logdir / "checkpoint").exists() else []
        main(arguments(logdir, "--time-limit", "0", *resume))
        if (logdir / "final.json").exists():
            break
