"""Per-iteration metrics: ``progress.csv`` (the benchmark contract), TensorBoard, progress bar."""

from __future__ import annotations

import math
from pathlib import Path

from keras_structured.progress_log import ProgressLog, read_numbers

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
    """Writes one row per iteration to ``{logdir}/progress.csv``, TensorBoard and a progress bar.

    The log is the project's one progress log (:class:`keras_structured.progress_log.ProgressLog`):
    ``progress.csv`` written whole when the logger starts (its header and, when resuming, the
    rows kept), each later row appended and synced to disk before the iteration's checkpoint
    is written, so a crash never loses a checkpointed iteration's row; at worst it cuts the
    last row short, which readers leave out (:func:`read_progress`). TensorBoard's step is
    ``global_step``.

    Args:
        logdir: run directory.
        resume_iteration: when resuming, the iteration of the checkpoint: the rows of
            iterations 1 to it are kept, later ones dropped, so that the CSV matches an
            uninterrupted run; ``None`` starts a new CSV. The TensorBoard events are rewritten
            from the rows kept (one new event file, the old ones deleted), so a run resumed
            after a crash shows each step once, as in ``progress.csv``; the replayed events
            carry the time of the resume.
        total_steps: target of the progress bar; ``None`` disables the bar.
        initial_step: the step the bar starts from.

    Raises:
        ProgressLogError: when resuming, ``progress.csv`` lacks a row of the checkpoint's
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
        self._log = ProgressLog(
            logdir, COLUMNS, resume_iteration, step_column="iteration", tensorboard_step="global_step"
        )
        self._bar = _Bar(total_steps, initial_step) if total_steps else None
        self.last_return = math.nan

    def log(self, row: dict[str, float]) -> None:
        """Appends ``row`` (keys from :data:`COLUMNS`) to the CSV, TensorBoard and the bar."""
        self._log.log(row)
        if not math.isnan(row.get("charts/episodic_return", math.nan)):
            self.last_return = row["charts/episodic_return"]
        if self._bar is not None:
            values = {name: row.get(key, math.nan) for key, name in _BAR_KEYS.items()}
            values["return"] = self.last_return
            self._bar.update(int(row["global_step"]), values)

    def close(self) -> None:
        """Closes the CSV, the event file and the bar."""
        self._log.close()
        if self._bar is not None:
            self._bar.close()


def read_progress(logdir: str | Path) -> list[dict[str, float]]:
    """Rows of ``{logdir}/progress.csv`` as floats (empty cells become NaN; a last row cut short
    by a crash is left out).

    Raises:
        ValueError: the file was edited into a log that cannot be read: a cell that is not a
            number, a column not in :data:`COLUMNS`, a row of more or fewer cells than the
            header, a byte that is not UTF-8 (the file, row or line, and value named;
            :func:`keras_structured.progress_log.read_numbers`).
    """
    return read_numbers(logdir, COLUMNS)
