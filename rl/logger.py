"""Per-iteration metrics: ``progress.csv`` (the benchmark contract), TensorBoard, progress bar."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from keras_structured._tensorboard import ScalarWriter

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

    Args:
        logdir: run directory.
        resume_iteration: when resuming, rows after this iteration are dropped from an
            existing CSV (so it matches an uninterrupted run); ``None`` starts a new CSV. The
            TensorBoard events are rewritten from the rows kept (one new event file, the old
            ones deleted), so a run resumed after a crash shows each step once, as in
            ``progress.csv``; the replayed events carry the time of the resume.
        total_steps: target of the progress bar; ``None`` disables the bar.
    """

    def __init__(
        self,
        logdir: str | Path,
        resume_iteration: int | None = None,
        total_steps: int | None = None,
        initial_step: int = 0,
    ):
        self.path = Path(logdir) / "progress.csv"
        rows = []
        if resume_iteration is not None and self.path.exists():
            with self.path.open(newline="") as f:
                rows = [row for row in csv.DictReader(f) if int(row["iteration"]) <= resume_iteration]
        self._file = self.path.open("w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS)
        self._writer.writeheader()
        self._writer.writerows(rows)
        self._file.flush()
        kept = [(int(row["global_step"]), _scalars(row)) for row in rows]
        self._summary = ScalarWriter(logdir, rewrite=kept if resume_iteration is not None else None)
        self._bar = _Bar(total_steps, initial_step) if total_steps else None
        self.last_return = math.nan

    def log(self, row: dict[str, float]) -> None:
        """Appends ``row`` (keys from :data:`COLUMNS`) to the CSV, TensorBoard and the bar."""
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise KeyError(f"Unknown metric keys {sorted(unknown)}; add them to COLUMNS")
        self._writer.writerow({key: _format(row.get(key, math.nan)) for key in COLUMNS})
        self._file.flush()
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


def read_progress(logdir: str | Path) -> list[dict[str, float]]:
    """Rows of ``{logdir}/progress.csv`` as floats (empty cells become NaN)."""
    with (Path(logdir) / "progress.csv").open(newline="") as f:
        return [{k: float(v) if v != "" else math.nan for k, v in row.items()} for row in csv.DictReader(f)]
