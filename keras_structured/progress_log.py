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

A log someone edited by hand is read as written when it can be: a byte-order mark and blank
lines are skipped, and a column the log no longer has is left empty (one added since the run
started). What cannot be read is refused with a ``ValueError`` naming the file, the row or line,
the column and the value, never read as another number or a blank: a non-UTF-8 byte, a row of
more or fewer cells than the header, a column the log does not know (a renamed one), a step
that is not a whole number, and, for the readers of numbers (:func:`read_numbers`), a cell
that is not one.

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
from collections.abc import Collection, Mapping, Sequence

from keras_structured.run_directory import open_for_appending, read_csv, write_csv
from keras_structured.tensorboard_scalars import ScalarWriter

#: The name of the log in its run directory.
PROGRESS_FILE = "progress.csv"


class ProgressLogError(ValueError):
    """A run's ``progress.csv`` cannot be read or continued: it lacks rows of the steps its
    checkpoint holds, or was edited (the message names the file, the row and the value)."""


def format_cell(value: object) -> str:
    """A CSV cell: ``""`` for NaN, else ``str`` (every digit of a float kept).

    Example:
        >>> import numpy as np
        >>> [format_cell(v) for v in (float("nan"), 0.1, np.float64(0.25), 3, "A")]
        ['', '0.1', '0.25', '3', 'A']
    """
    return "" if isinstance(value, float) and math.isnan(value) else str(value)


def _read_log(logdir: str | os.PathLike, columns: Sequence[str] | None) -> list[dict[str, str]]:
    """The rows of ``{logdir}/progress.csv`` (:func:`read_rows`), after refusing a header
    column that is not one of ``columns`` (None: any)."""
    path = pathlib.Path(logdir) / PROGRESS_FILE
    header, rows = read_csv(path)
    unknown = [name for name in header if columns is not None and name not in columns]
    if unknown:
        raise ProgressLogError(
            f"{str(path)!r} has columns this run's log does not (edited or renamed?); its columns "
            f"are {list(columns)}. Received: {', '.join(repr(name) for name in unknown)}"
        )
    return [dict(zip(header, row, strict=True)) for row in rows]


def read_rows(logdir: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of ``{logdir}/progress.csv``, as strings by column.

    A last row cut short by a crash (the file does not end with a line break) is left out:
    its cells could read as other numbers (``10`` for ``1024``). A byte-order mark and blank
    lines are skipped.

    Args:
        logdir: the run directory.

    Returns:
        The rows, in order.

    Raises:
        FileNotFoundError: there is no ``progress.csv``.
        ValueError: the file is not UTF-8, or a row has more or fewer cells than the header
            (:func:`keras_structured.run_directory.read_csv`: the file and line named).
    """
    return _read_log(logdir, None)


def _cell_error(logdir: str | os.PathLike, row: int, column: str, requirement: str, value: str) -> ValueError:
    """The error for the cell ``column`` of data row ``row`` (from 1) that is not ``requirement``."""
    return ProgressLogError(
        f"{str(pathlib.Path(logdir) / PROGRESS_FILE)!r} row {row}: {column} must be {requirement} "
        f"(was the file edited?). Received: {column}={value!r}"
    )


def _step_number(logdir: str | os.PathLike, row: int, column: str, value: str) -> int:
    """The step number in a cell (:func:`_cell_error` unless it is a whole number)."""
    if not value.isdigit():
        raise _cell_error(logdir, row, column, "a step number", value)
    return int(value)


def _number(logdir: str | os.PathLike, row: int, column: str, value: str) -> float:
    """The number in a cell, NaN when it is empty (:func:`_cell_error` unless it is one)."""
    try:
        return float(value) if value.strip() else math.nan
    except ValueError:
        raise _cell_error(logdir, row, column, "a number or empty", value) from None


def read_numbers(
    logdir: str | os.PathLike, columns: Sequence[str] | None = None, text_columns: Collection[str] = ()
) -> list[dict[str, float]]:
    """The rows of ``{logdir}/progress.csv`` (:func:`read_rows`) as numbers, an empty cell NaN.

    Args:
        logdir: the run directory.
        columns: the log's columns: a header column not among them is refused (None: any).
        text_columns: the columns that hold text, kept as strings.

    Returns:
        The rows, in order.

    Raises:
        FileNotFoundError: there is no ``progress.csv``.
        ValueError: a cell of another column is not a number, a header column is not among
            ``columns``, or :func:`read_rows` refuses the file (the file, row, column and
            value named).
    """
    return [
        {
            column: cell if column in text_columns else _number(logdir, row_number, column, cell)
            for column, cell in row.items()
        }
        for row_number, row in enumerate(_read_log(logdir, columns), start=1)
    ]


def rows_up_to(
    logdir: str | os.PathLike,
    step: int,
    step_column: str,
    columns: Sequence[str] | None = None,
    counters: Collection[str] = (),
    text_columns: Collection[str] | None = None,
) -> list[dict[str, str]]:
    """The rows a run resumed from a checkpoint of ``step`` keeps: its first ``step`` rows,
    which must be those of steps 1 to ``step``, in order.

    Args:
        logdir: the run directory.
        step: the checkpoint's step (0: none kept).
        step_column: the column that numbers the steps.
        columns: the log's columns: a header column not among them is refused (None: any).
        counters: more columns that must hold step numbers (a TensorBoard step).
        text_columns: the columns that may hold text; the others must hold numbers or
            nothing (None: any column may hold text).

    Returns:
        The rows, as strings.

    Raises:
        ProgressLogError: a row is missing or out of place (the log was truncated, or written
            by two processes at once): the run's log cannot be continued; or the file was
            edited into a log that cannot be read: a column not in ``columns``, a step that is
            not a whole number, or text outside ``text_columns`` (named with the file, row and
            value).
        ValueError: :func:`read_rows` refuses the file.
        FileNotFoundError: there is no ``progress.csv`` (and ``step`` > 0).
    """
    if step == 0:
        return []
    kept = _read_log(logdir, columns)[:step]
    for row_number, row in enumerate(kept, start=1):
        for column in {step_column, *counters}:
            _step_number(logdir, row_number, column, row.get(column, ""))
        for column, cell in row.items():
            if text_columns is not None and column not in text_columns:
                _number(logdir, row_number, column, cell)
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
        text_columns: the columns that hold text (left out of TensorBoard); the others hold
            numbers, which a resumed run checks in the rows it keeps.

    Raises:
        ProgressLogError: when resuming, ``progress.csv`` lacks a row of the checkpoint's
            steps, or was edited into a log that cannot be continued (:func:`rows_up_to`;
            nothing is written).
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
        text_columns: Collection[str] = (),
    ):
        self.columns = tuple(columns)
        self.path = pathlib.Path(logdir) / PROGRESS_FILE
        step_column = step_column or self.columns[0]
        self._tensorboard_step = tensorboard_step or step_column
        self._counters = {step_column, self._tensorboard_step}
        self.rows = []
        if resume_step is not None:
            self.rows = rows_up_to(
                logdir, resume_step, step_column, self.columns, self._counters, text_columns
            )
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


__all__ = [
    "PROGRESS_FILE",
    "ProgressLog",
    "ProgressLogError",
    "format_cell",
    "read_numbers",
    "read_rows",
    "rows_up_to",
]
