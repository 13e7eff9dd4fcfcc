"""Per-iteration metrics: ``progress.csv`` (the benchmark contract), TensorBoard, progress bar."""

from __future__ import annotations

import csv
import io
import itertools
import math
import os
from pathlib import Path

from keras_structured.run_directory import open_for_appending, write_csv
from keras_structured.tensorboard_scalars import ScalarWriter
from rl.checkpoint import CheckpointError
from rl.run_dir import read_rows

#: columns of ``progress.csv``, one row per update (NaN / empty where not applicable).
COLUMNS = (
    "global_step",
    "iteration",
    "time/sps",
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/episodes",
    "losses/policy_loss",
    "losses/value_loss",
    "losses/distill_loss",
    "constraints/kl",
    "constraints/kl_mean",
    "constraints/kl_max",
    "constraints/eps",
    "constraints/entropy",
    "constraints/entropy_mean",
    "constraints/entropy_min",
    "constraints/entropy_bound",
    "constraints/entropy_projection_active",
    "constraints/kl_projection_active",
    "constraints/safeguard_alpha",
)

_BAR_KEYS = {"charts/episodic_return": "return", "constraints/kl": "kl", "constraints/entropy": "entropy"}


def _format(value) -> str:
    if isinstance(value, float) and math.isnan(value):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


class _Bar:
    """tqdm if installed, else ``keras.utils.Progbar``."""

    def __init__(self, total: int, initial: int):
        try:
            from tqdm.auto import tqdm
        except ImportError:
            import keras

            self._tqdm = None
            self._progbar = keras.utils.Progbar(total, stateful_metrics=list(_BAR_KEYS.values()))
        else:
            self._tqdm = tqdm(total=total, initial=initial, unit="step")
        self._last = initial

    def update(self, step: int, values: dict[str, float]) -> None:
        if self._tqdm is not None:
            self._tqdm.update(step - self._last)
            self._tqdm.set_postfix({k: f"{v:.4g}" for k, v in values.items()}, refresh=False)
        else:
            self._progbar.update(step, list(values.items()))
        self._last = step

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()


class Logger:
    """Writes one row per iteration to ``{logdir}/progress.csv`` and TensorBoard scalars.

    ``progress.csv`` is written whole (a temporary file renamed over it) when the logger
    starts: its header and, when resuming, the rows kept. Each later row is appended and
    flushed to disk before the iteration's checkpoint is written, so a crash never loses a
    checkpointed iteration's row; at worst it cuts the last row short, which readers leave
    out (:func:`rl.run_dir.read_rows`). Rewriting the whole file at every row would cost time
    quadratic in the iterations (0.18 s a row at 10,000 rows, against 0.2 ms to append).

    Args:
        logdir: run directory.
        resume_iteration: when resuming, the iteration of the checkpoint: the rows of
            iterations 1 to it are kept (:func:`resumed_rows`), later ones dropped, so that the
            CSV matches an uninterrupted run; ``None`` starts a new CSV. The TensorBoard events
            are rewritten from the rows kept (one new event file, the old ones deleted), so a run
            resumed after a crash shows each step once, as in ``progress.csv``; the replayed
            events carry the time of the resume.
        total_steps: target of the progress bar; ``None`` disables the bar.
        initial_step: the step the bar starts from.

    Raises:
        CheckpointError: when resuming, ``progress.csv`` lacks a row of the checkpoint's
            iterations (nothing is written).
        UnsafePathError: ``progress.csv`` is a symlink (nothing is written).
    """

    def __init__(
        self,
        logdir: str | Path,
        resume_iteration: int | None = None,
        total_steps: int | None = None,
        initial_step: int = 0,
    ):
        self.path = Path(logdir) / "progress.csv"
        rows = [] if resume_iteration is None else resumed_rows(logdir, resume_iteration)
        write_csv(self.path, COLUMNS, [[row.get(key, "") for key in COLUMNS] for row in rows])
        self._file = open_for_appending(self.path)
        kept = [(int(row["global_step"]), _scalars(row)) for row in rows]
        self._summary = ScalarWriter(logdir, rewrite=kept if resume_iteration is not None else None)
        self._bar = _Bar(total_steps, initial_step) if total_steps else None
        self.last_return = math.nan

    def log(self, row: dict[str, float]) -> None:
        """Appends ``row`` (keys from :data:`COLUMNS`) to the CSV, TensorBoard and the bar."""
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise KeyError(f"Unknown metric keys {sorted(unknown)}; add them to COLUMNS")
        line = io.StringIO()
        csv.writer(line).writerow([_format(row.get(key, math.nan)) for key in COLUMNS])
        self._file.write(line.getvalue().encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())
        step = int(row["global_step"])
        self._summary.write(step, _scalars(row))
        if not math.isnan(row.get("charts/episodic_return", math.nan)):
            self.last_return = row["charts/episodic_return"]
        if self._bar is not None:
            values = {name: row.get(key, math.nan) for key, name in _BAR_KEYS.items()}
            values["return"] = self.last_return
            self._bar.update(step, values)

    def close(self) -> None:
        """Closes the CSV, the event file and the bar."""
        self._file.close()
        self._summary.close()
        if self._bar is not None:
            self._bar.close()


def _scalars(row: dict) -> dict:
    """The TensorBoard scalars of a ``progress.csv`` row: every column but the step counters."""
    return {key: value for key, value in row.items() if key not in ("global_step", "iteration")}


def resumed_rows(logdir: str | Path, iteration: int) -> list[dict[str, str]]:
    """The ``progress.csv`` rows that a run resumed from a checkpoint of ``iteration`` keeps: its
    first ``iteration`` rows, which must be those of iterations 1 to ``iteration``, in order.

    Args:
        logdir: the run directory.
        iteration: the iteration of the checkpoint.

    Returns:
        The rows, as strings.

    Raises:
        CheckpointError: a row is missing or out of place (the log was truncated, or written
            by two processes at once): the run's log cannot be continued.
        FileNotFoundError: there is no ``progress.csv``.
    """
    kept = read_rows(logdir)[:iteration]
    found = [row.get("iteration") for row in kept]
    expected = [str(i) for i in range(1, iteration + 1)]
    if found != expected:
        row = next(i for i, (a, b) in enumerate(itertools.zip_longest(found, expected)) if a != b)
        received = f"iteration={found[row]!r} in row {row + 1}" if row < len(found) else f"{row} row(s)"
        raise CheckpointError(
            f"{str(Path(logdir) / 'progress.csv')!r} must hold the rows of iterations 1 to {iteration}, "
            f"in order, to resume the checkpoint of iteration {iteration}; it was truncated or written by "
            f"two processes at once, so the run's log cannot be continued: train the run afresh. "
            f"Received: {received}"
        )
    return kept


def read_progress(logdir: str | Path) -> list[dict[str, float]]:
    """Rows of ``{logdir}/progress.csv`` as floats (empty cells become NaN; a last row cut short
    by a crash is left out)."""
    return [{k: float(v) if v != "" else math.nan for k, v in row.items()} for row in read_rows(logdir)]
