"""A run's progress log: ``progress.csv`` and the same numbers as TensorBoard scalars.

One row per step of a run (an epoch of ``model.fit``, an RL iteration, a Frank-Wolfe step),
numbered from 1 in one of its columns (the first, unless told otherwise). The file is written
the way every writer of a run directory writes (:mod:`keras_structured.run_directory`): when
the log opens, ``progress.csv`` is written whole (its header and, for a resumed run, the rows
it keeps) by a temporary file renamed over it; each later row is appended, flushed and synced
to disk before the step's checkpoint is written, so a crash never loses a checkpointed step's
row. At worst a crash cuts the last row short, and :func:`read_rows` leaves such a row out.
Rewriting the whole file at every row would cost time quadratic in the steps (0.18 s a row at
10,000 rows, against 0.2 ms to append).

A resumed run keeps the rows of steps 1 to its checkpoint's step, which must be there and in
order (a log that lost rows, or that two processes wrote, is refused: the run cannot be
continued), drops the later ones a crash left, and rewrites its TensorBoard events from the
rows kept, so that it shows every step once, as an uninterrupted run does.

Keras's :class:`keras.callbacks.CSVLogger` and :class:`keras.callbacks.TensorBoard` write
the same two things for ``model.fit``, but a resumed run would append the rows and events
of the epochs a crash made it run again (``CSVLogger(append=True)``), or lose the earlier
ones (``append=False``); and a run that is not ``model.fit`` (RL, Frank-Wolfe) has no
callbacks to call. Hence this one log for every run of the project.

Example:
    >>> import tempfile
    >>> logdir = tempfile.mkdtemp()
    >>> with ProgressLog(logdir, ["epoch", "loss"], tensorboard=False) as log:
    ...     log.log({"epoch": 1, "loss": 0.5})
    ...     log.log({"epoch": 2, "loss": 0.25})
    >>> [row["loss"] for row in read_rows(logdir)]
    ['0.5', '0.25']
    >>> with ProgressLog(logdir, ["epoch", "loss"], resume_step=1, tensorboard=False) as log:
    ...     [row["epoch"] for row in log.rows]
    ['1']
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import os
import pathlib
from collections.abc import Mapping, Sequence

from keras_structured.run_directory import open_for_appending, read_csv, write_csv
from keras_structured.tensorboard_scalars import ScalarWriter

#: The name of the log in its run directory.
PROGRESS_FILE = "progress.csv"


class ProgressLogError(ValueError):
    """A resumed run's ``progress.csv`` lacks rows of the steps its checkpoint holds."""


def format_cell(value: object) -> str:
    """A CSV cell: ``""`` for NaN, else ``str`` (every digit of a float kept).

    Example:
        >>> import numpy as np
        >>> [format_cell(v) for v in (float("nan"), 0.1, np.float64(0.25), 3, "A")]
        ['', '0.1', '0.25', '3', 'A']
    """
    return "" if isinstance(value, float) and math.isnan(value) else str(value)


def read_rows(logdir: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of ``{logdir}/progress.csv``, as strings by column.

    A last row cut short by a crash (the file does not end with a line break) is left out:
    its cells could read as other numbers (``10`` for ``1024``).

    Args:
        logdir: the run directory.

    Returns:
        The rows, in order.

    Raises:
        FileNotFoundError: there is no ``progress.csv``.
    """
    columns, rows = read_csv(pathlib.Path(logdir) / PROGRESS_FILE)
    return [dict(zip(columns, row, strict=False)) for row in rows]


def rows_up_to(logdir: str | os.PathLike, step: int, step_column: str) -> list[dict[str, str]]:
    """The rows a run resumed from a checkpoint of ``step`` keeps: its first ``step`` rows,
    which must be those of steps 1 to ``step``, in order.

    Args:
        logdir: the run directory.
        step: the checkpoint's step (0: none kept).
        step_column: the column that numbers the steps.

    Returns:
        The rows, as strings.

    Raises:
        ProgressLogError: a row is missing or out of place (the log was truncated, or written
            by two processes at once): the run's log cannot be continued.
        FileNotFoundError: there is no ``progress.csv`` (and ``step`` > 0).
    """
    if step == 0:
        return []
    kept = read_rows(logdir)[:step]
    found = [row.get(step_column) for row in kept]
    expected = [str(i) for i in range(1, step + 1)]
    if found != expected:
        row = next(i for i, (a, b) in enumerate(itertools.zip_longest(found, expected)) if a != b)
        received = f"{step_column}={found[row]!r} in row {row + 1}" if row < len(found) else f"{row} row(s)"
        raise ProgressLogError(
            f"{str(pathlib.Path(logdir) / PROGRESS_FILE)!r} must hold the rows of {step_column}s 1 to "
            f"{step}, in order, to resume the checkpoint of {step_column} {step}; it was truncated or "
            "written by two processes at once, so the run's log cannot be continued: train the run "
            f"afresh. Received: {received}"
        )
    return kept


class ProgressLog:
    """Writes a run's rows to ``progress.csv`` and, unless told not to, TensorBoard.

    Args:
        logdir: the run directory (it exists).
        columns: the columns.
        resume_step: when resuming, the step of the checkpoint: rows 1 to it are kept
            (:func:`rows_up_to`), later ones dropped, and the TensorBoard events rewritten
            from the rows kept. None starts a new log.
        step_column: the column that numbers the steps from 1 (default: the first).
        tensorboard_step: the column giving the TensorBoard step (default: ``step_column``).
        tensorboard: write TensorBoard scalars (every column but ``step_column`` and
            ``tensorboard_step``; empty cells left out).

    Raises:
        ProgressLogError: when resuming, ``progress.csv`` lacks a row of the checkpoint's
            steps (nothing is written).
        keras_structured.run_directory.UnsafePathError: ``progress.csv`` is a symlink
            (nothing is written).

    Attributes:
        rows: the rows kept from before (strings by column), then none added.
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        columns: Sequence[str],
        resume_step: int | None = None,
        step_column: str | None = None,
        tensorboard_step: str | None = None,
        tensorboard: bool = True,
    ):
        self.columns = tuple(columns)
        self.path = pathlib.Path(logdir) / PROGRESS_FILE
        step_column = step_column or self.columns[0]
        self._tensorboard_step = tensorboard_step or step_column
        self._counters = {step_column, self._tensorboard_step}
        self.rows = [] if resume_step is None else rows_up_to(logdir, resume_step, step_column)
        write_csv(self.path, self.columns, [[row.get(c, "") for c in self.columns] for row in self.rows])
        self._file = open_for_appending(self.path)
        self._scalars = None
        if tensorboard:
            kept = [(int(row[self._tensorboard_step]), self._scalars_of(row)) for row in self.rows]
            self._scalars = ScalarWriter(logdir, rewrite=kept if resume_step is not None else None)

    def __enter__(self) -> ProgressLog:
        return self

    def __exit__(self, *exception) -> None:
        self.close()

    def _scalars_of(self, row: Mapping[str, object]) -> dict[str, object]:
        return {key: value for key, value in row.items() if key not in self._counters}

    def log(self, row: Mapping[str, object]) -> None:
        """Append ``row`` (values by column; a missing one is left empty) and its scalars.

        Raises:
            KeyError: a key of ``row`` is not a column.
        """
        unknown = set(row) - set(self.columns)
        if unknown:
            raise KeyError(f"Unknown columns {sorted(unknown)}: the log's columns are {list(self.columns)}")
        line = io.StringIO()
        csv.writer(line).writerow([format_cell(row.get(column, math.nan)) for column in self.columns])
        self._file.write(line.getvalue().encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._scalars is not None:
            self._scalars.write(int(row[self._tensorboard_step]), self._scalars_of(row))

    def close(self) -> None:
        """Close the file and the event writer (again: nothing)."""
        if not self._file.closed:
            self._file.close()
        if self._scalars is not None:
            self._scalars.close()
            self._scalars = None


__all__ = ["PROGRESS_FILE", "ProgressLog", "ProgressLogError", "format_cell", "read_rows", "rows_up_to"]
