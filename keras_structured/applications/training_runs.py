"""Training runs in a log directory, one ``model.fit`` epoch at a time.

The contract shared by ``python -m keras_structured.applications.parsing train`` and
``python -m keras_structured.applications.nli train``. A run lives in one directory (``logdir``), which
one process writes at a time (:class:`~keras_structured.run_directory.RunLock`, held from
opening the run to its end) and whose every file is written whole, never through a symlink
(:mod:`keras_structured.run_directory`):

- ``config.json``: the run's settings (a dataclass, as ``dataclasses.asdict`` writes it),
  and ``vocabulary.json``;
- ``progress.csv``: one row per finished epoch, the epoch number (from 1) first, and the same
  numbers as TensorBoard scalars (``events.out.tfevents.*``, step = epoch), written by
  :class:`keras_structured.progress_log.ProgressLog` (whole when the run opens, then one
  appended row per epoch, synced before the epoch's checkpoint);
- ``checkpoint/``: ``model.keras`` (the model with its optimizer state) and ``state.json``
  (the loop state) after the last finished epoch, from which ``--resume`` continues. It is
  written as ``checkpoint.next/`` and swapped in by two renames, so a process killed at any
  moment leaves a whole checkpoint (:func:`~keras_structured.run_directory.save_directory`);
- ``best.keras``: the model of the best score so far (early stopping keeps it);
- ``final.json``: the summary, written when training ends.

The rules:

- a new run refuses a directory that holds any of :data:`RUN_FILES` (other files, such
  as a runner's logs, may sit beside them);
- a resumed run keeps its settings, except that a larger training budget
  (:data:`BUDGET_FIELDS`) extends it, finished or not: once the run has resumed,
  ``config.json`` is rewritten and ``final.json`` removed until the extended run ends (a
  resume that fails before, on a damaged log or missing data, leaves the run as it was); rows
  of epochs after the checkpoint (written before a crash) are dropped, and the TensorBoard
  events rewritten from the rows kept (a log that lost rows of the checkpoint's epochs is
  refused);
- a run whose first epoch never finished (``config.json`` but no checkpoint: that epoch failed
  or was killed) is *incomplete*: ``--resume`` with its settings starts it again from epoch 1
  (its ``config.json`` kept, its other files cleared), and a new run refuses the directory;
- divergence is an error: a non-finite loss or non-finite weights stop :meth:`TrainingRun.fit`
  with a :class:`~keras_structured.divergence.DivergenceError`, before anything of the epoch
  is written, so ``best.keras`` and the checkpoint never hold a non-finite model;
- the loop ends after ``epochs`` epochs, or once ``min_epochs`` have run and the last
  ``patience`` epochs brought no better score (:func:`finished`);
- with a time limit, no new epoch starts after that many minutes: the run stops with a
  checkpoint and without ``final.json``, to be resumed later;
- every epoch draws its randomness from :func:`epoch_seed`, so a resumed run sees the same
  batches as an uninterrupted one.

A ``train`` function reads the data between opening the run and starting it:

    with TrainingRun(config, logdir, PROGRESS_COLUMNS, "accuracy", resume, quiet, time_limit) as run:
        data = ...
        if run.resumed:
            model, vocabulary = run.restore(Vocabulary)
        else:
            vocabulary = ...
            run.write_settings(vocabulary)
            model = ...
            run.start()
        for epoch in run.epochs():
            history, seconds = run.fit(model, dataset, batches)
            row = ...  # the epoch's progress.csv row
            run.end_epoch(model, row, score)
            run.save_checkpoint(model, seconds)
        return run.finish({"trial_accuracy": run.state["best_accuracy"]}, {})

Leaving the ``with`` block, normally or by an error, releases the directory's lock.
"""

from __future__ import annotations

import dataclasses
import errno
import pathlib
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from keras_structured.divergence import DivergenceError, RaiseOnNonFiniteLoss, check_finite_weights
from keras_structured.progress_log import ProgressLog
from keras_structured.run_directory import (
    RunLock,
    recover_directory,
    save_directory,
    save_file,
    write_json,
)
from keras_structured.run_settings import check_resumed_settings, read_json_object, read_settings
from keras_structured.tensorboard_scalars import EVENTS_PATTERN
from keras_structured.validation import check_integer, check_number

if TYPE_CHECKING:
    import tensorflow as tf

#: Files that make a directory hold a run.
RUN_FILES = ("config.json", "progress.csv", "checkpoint", "best.keras", "final.json")
#: Files of an incomplete run (no finished epoch) that ``--resume`` clears to start it again.
INCOMPLETE_RUN_FILES = ("progress.csv", "best.keras", "final.json")
#: The counters of every run's loop state (``checkpoint/state.json``), with their types.
STATE_COUNTERS = {"epoch": (int,), "best_epoch": (int,), "bad_epochs": (int,), "train_seconds": (int, float)}
#: Settings a resumed run may increase: they extend its training budget.
BUDGET_FIELDS = ("epochs", "patience", "min_epochs")


def check_run_settings(config: Any) -> None:
    """Check the settings every run has, as the dataclass of its settings is built.

    Args:
        config: the settings: ``seed`` (>= 0), ``epochs``, ``patience``, ``min_epochs`` and
            ``batch_size`` (>= 1), ``learning_rate`` (finite, > 0) and ``learning_rate_decay``
            (in (0, 1]).

    Raises:
        ValueError: a setting that cannot work, named with its value.
    """
    check_integer("seed", config.seed, minimum=0)
    for name in ("epochs", "patience", "min_epochs", "batch_size"):
        check_integer(name, getattr(config, name), minimum=1)
    check_number("learning_rate", config.learning_rate, minimum=0, open_minimum=True)
    check_number("learning_rate_decay", config.learning_rate_decay, minimum=0, maximum=1, open_minimum=True)


def save_evaluation(logdir: str | pathlib.Path, split: str, result: dict) -> bool:
    """Keep an evaluation in its run: ``{logdir}/eval_{split}.json``, written whole.

    A run directory that cannot be written (read-only, another user's) keeps no copy: the
    evaluation is computed and returned all the same, which its command prints, and a line on
    standard error says that the file was not written. Any other failure to write raises.

    Args:
        logdir: the run directory.
        split: the split evaluated.
        result: the evaluation, a JSON-able dict.

    Returns:
        Whether the file was written.

    Raises:
        keras_structured.run_directory.UnsafePathError: the file is a symlink.
    """
    path = pathlib.Path(logdir) / f"eval_{split}.json"
    try:
        write_json(path, result)
    except OSError as error:
        if not isinstance(error, PermissionError) and error.errno != errno.EROFS:
            raise
        print(f"warning: {str(path)!r} not written ({error.strerror}): the run is read-only", file=sys.stderr)
        return False
    return True


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch`` (from 0) of a run seeded with ``seed``.

    Args:
        seed: the run's seed.
        epoch: the epoch, from 0.

    Returns:
        A seed that depends on ``(seed, epoch)`` only.
    """
    return seed * 100_003 + epoch


def _read_config(logdir: pathlib.Path, config_class: type):
    """The run's settings (:func:`~keras_structured.run_settings.read_settings`: a damaged or
    hand-edited ``config.json`` is refused, naming the file, the setting and the value)."""
    return read_settings(logdir / "config.json", config_class)


def read_vocabulary(logdir: pathlib.Path, vocabulary_class: type) -> Any:
    """The run's vocabulary, ``vocabulary_class.from_config`` of its ``vocabulary.json``.

    Raises:
        ValueError: the file is damaged (:func:`~keras_structured.run_settings.read_json_object`)
            or holds no ``vocabulary_class`` (edited, or another application's run): the file
            named.
    """
    path = logdir / "vocabulary.json"
    values = read_json_object(path)
    try:
        return vocabulary_class.from_config(values)
    except (TypeError, KeyError, ValueError) as error:  # from_config reads the file's values
        raise ValueError(
            f"{str(path)!r} does not hold a vocabulary of this command's runs (edited, or another "
            f"application's run?). Received: {type(error).__name__}: {error}"
        ) from None


def _read_state(path: pathlib.Path) -> dict:
    """A checkpoint's loop state, after refusing one whose counters are missing or not
    numbers (:data:`STATE_COUNTERS`; the file, entry and value named)."""
    state = read_json_object(path)
    for name, kinds in STATE_COUNTERS.items():
        value = state.get(name)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise ValueError(
                f"{str(path)!r} does not hold the loop state of a checkpoint (edited?): {name} must be "
                f"{' or '.join(kind.__name__ for kind in kinds)}. Received: {name}={value!r}"
            )
    return state


def finished(config: Any, state: dict) -> bool:
    """Whether the loop is over: all epochs run, or early stopping after ``min_epochs``.

    Args:
        config: the run's settings (``epochs``, ``patience``, ``min_epochs``).
        state: the loop state (``epoch``, the epochs run, and ``bad_epochs``, the epochs
            since the best score).

    Returns:
        True when no epoch is left to run.
    """
    if state["epoch"] >= config.epochs:
        return True
    return state["epoch"] >= config.min_epochs and state["bad_epochs"] >= config.patience


def reseed_dropout(model: keras.Model, seed: int) -> None:
    """Set every dropout layer's random state from ``seed``: the masks of an epoch then depend
    on ``(seed, epoch)`` only, not on what ran before (a ``.keras`` file does not store them).

    Args:
        model: a model whose top-level layers may include ``keras.layers.Dropout``.
        seed: the epoch's seed (:func:`epoch_seed`).
    """
    for index, layer in enumerate(model.layers):
        if isinstance(layer, keras.layers.Dropout):
            state = layer.seed_generator.state
            state.assign(np.array([seed, index], dtype=keras.backend.standardize_dtype(state.dtype)))


def _missing_checkpoint(logdir: pathlib.Path) -> FileNotFoundError:
    return FileNotFoundError(f"--resume needs a run with a checkpoint. Received: logdir={str(logdir)!r}")


def _check_resumed_settings(logdir: pathlib.Path, config: Any) -> None:
    """Refuse settings other than the stored ones, except a larger budget, which extends the
    run once it has resumed (:meth:`TrainingRun.restore`)."""
    check_resumed_settings(
        dataclasses.asdict(_read_config(logdir, type(config))),
        dataclasses.asdict(config),
        may_grow=BUDGET_FIELDS,
        advice=f"Start a new run in another logdir to change them (logdir={str(logdir)!r}).",
    )


def _clear_incomplete_run(logdir: pathlib.Path) -> None:
    """Delete the files of a run that finished no epoch, except its settings."""
    for name in INCOMPLETE_RUN_FILES:
        (logdir / name).unlink(missing_ok=True)
    for events in logdir.glob(EVENTS_PATTERN):
        events.unlink()


def check_logdir(logdir: pathlib.Path, config: Any, resume: bool) -> dict | None:
    """The loop state to resume from (None: a fresh start), after refusing to mix runs.

    A resumed run keeps its settings, except that a larger training budget
    (:data:`BUDGET_FIELDS`) extends it, finished or not. An incomplete run (``config.json``
    but no checkpoint: its first epoch failed or was killed) resumed with its settings starts
    again from epoch 1: None is returned. Nothing is written here: :class:`TrainingRun`
    records a larger budget (``config.json`` rewritten, ``final.json`` removed) once the run
    has resumed, and clears an incomplete run's files other than ``config.json`` when it
    starts again, so that a resume that fails before (a damaged ``progress.csv``, a missing
    dataset) leaves the run as it was.

    Args:
        logdir: the run directory.
        config: the settings given, a dataclass of the class stored in ``config.json``.
        resume: continue the run in ``logdir``.

    Returns:
        The loop state of ``checkpoint/state.json`` when resuming a run with a checkpoint,
        else None.

    Raises:
        FileNotFoundError: ``resume`` without a run.
        ValueError: ``resume`` with other settings (named, stored and given), or a smaller
            budget.
        FileExistsError: a new run in a directory that holds one, complete or not.
    """
    recover_directory(logdir / "checkpoint")
    state_path = logdir / "checkpoint" / "state.json"
    incomplete = not state_path.exists() and (logdir / "config.json").exists()
    if resume:
        if not (state_path.exists() or incomplete):
            raise _missing_checkpoint(logdir)
        _check_resumed_settings(logdir, config)
        if incomplete:
            return None
        return _read_state(state_path)
    held = [name for name in RUN_FILES if (logdir / name).exists()]
    if incomplete:
        raise FileExistsError(
            f"The logdir holds an incomplete run ({', '.join(held)}; no finished epoch: its first "
            "epoch failed or was stopped). Run the same train command with --resume to start it "
            "again from epoch 1 with its settings, or delete the logdir, or choose another one. "
            f"Received: logdir={str(logdir)!r}"
        )
    if held:
        raise FileExistsError(
            f"The logdir already holds a run ({', '.join(held)}): pass --resume to continue it, or "
            f"choose another logdir. Received: logdir={str(logdir)!r}"
        )
    return None


class _ProgressBar(keras.callbacks.Callback):
    """A tqdm bar over the batches of one epoch, with the running loss.

    Args:
        epoch: the epoch, from 0.
        epochs: the most epochs of the run.
        batches: the batches of the epoch (None: unknown).
    """

    def __init__(self, epoch: int, epochs: int, batches: int | None):
        super().__init__()
        from tqdm.auto import tqdm

        self.bar = tqdm(total=batches, desc=f"epoch {epoch + 1}/{epochs}", unit="batch", leave=False)

    def on_train_batch_end(self, batch, logs=None):
        self.bar.update(1)
        if logs and "loss" in logs:
            self.bar.set_postfix(loss=f"{float(logs['loss']):.4f}")

    def on_train_end(self, logs=None):
        self.bar.close()


class TrainingRun:
    """One training run in its log directory: the files, the loop state, when to stop.

    Opening a run locks the directory (a second writer gets a
    :class:`~keras_structured.run_directory.RunLockedError` naming this process), checks it
    (:func:`check_logdir`) and starts the clock of the time limit; the caller then starts or
    restores it, runs :meth:`epochs` and calls :meth:`finish` (see the module docstring).
    :meth:`finish` and :meth:`close` release the lock; use the run as a context manager so
    that an error releases it too.

    Args:
        config: the run's settings, a dataclass with ``seed``, ``epochs``, ``patience`` and
            ``min_epochs`` fields.
        logdir: the run directory: empty (or missing) for a new run.
        progress_columns: the columns of ``progress.csv``, ``"epoch"`` first.
        score: the name of the score that early stopping follows; the loop state keeps
            its best value as ``best_{score}``.
        resume: continue the run in ``logdir``.
        quiet: no progress bar.
        time_limit: minutes after which no new epoch starts (None: no limit).
        text_columns: the columns of ``progress.csv`` that hold text; the others hold
            numbers (:class:`~keras_structured.progress_log.ProgressLog`).

    Raises:
        RunLockedError: another process writes the directory.
        FileNotFoundError, ValueError, FileExistsError: runs that would mix, as for
            :func:`check_logdir`.

    Attributes:
        config: the settings.
        logdir: the run directory, a ``pathlib.Path``.
        resumed: whether the run continues from a checkpoint.
        state: the loop state, saved in ``checkpoint/state.json`` (None until
            :meth:`start` for a new run).
    """

    def __init__(
        self,
        config: Any,
        logdir: str | pathlib.Path,
        progress_columns: Sequence[str],
        score: str,
        resume: bool = False,
        quiet: bool = False,
        time_limit: float | None = None,
        text_columns: Sequence[str] = (),
    ):
        self._opened = time.perf_counter()
        self.config = config
        self.logdir = pathlib.Path(logdir)
        if resume and not self.logdir.is_dir():  # refused without creating it
            raise _missing_checkpoint(self.logdir)
        self._lock = RunLock(self.logdir).acquire()
        self._log: ProgressLog | None = None
        try:
            self.state = check_logdir(self.logdir, config, resume)
        except BaseException:
            self.close()
            raise
        self.resumed = self.state is not None
        self._restarted = resume and not self.resumed  # an incomplete run, started again
        self._columns = tuple(progress_columns)
        self._text_columns = tuple(text_columns)
        self._best = f"best_{score}"
        self._quiet = quiet
        self._time_limit = time_limit

    def __enter__(self) -> TrainingRun:
        return self

    def __exit__(self, *exception) -> None:
        self.close()

    def close(self) -> None:
        """Close the progress log and release the directory's lock (again: nothing)."""
        if self._log is not None:
            self._log.close()
            self._log = None
        self._lock.release()

    def write_settings(self, vocabulary: Any) -> None:
        """A new run's ``config.json`` and ``vocabulary.json``.

        Args:
            vocabulary: an object with ``get_config()``.
        """
        write_json(self.logdir / "config.json", dataclasses.asdict(self.config))
        write_json(self.logdir / "vocabulary.json", vocabulary.get_config())

    def start(self, **state) -> None:
        """A new run's loop state (epoch 0, no best score yet) and ``progress.csv`` header.

        An incomplete run resumed to start again first loses its files other than its
        settings (:data:`INCOMPLETE_RUN_FILES` and the TensorBoard events).

        Args:
            **state: more entries of the loop state, after the shared ones.
        """
        if self._restarted:
            _clear_incomplete_run(self.logdir)
        self.state = {
            "epoch": 0,
            self._best: -1.0,
            "best_epoch": -1,
            "bad_epochs": 0,
            "train_seconds": 0.0,
            **state,
        }
        self._log = ProgressLog(self.logdir, self._columns, text_columns=self._text_columns)

    def restore(self, vocabulary_class: type) -> tuple[keras.Model, Any]:
        """The checkpointed model and the vocabulary of a resumed run.

        Rows of ``progress.csv`` for epochs after the checkpoint are dropped, and the
        TensorBoard events are rewritten from the rows kept
        (:class:`~keras_structured.progress_log.ProgressLog`). Then, and only then, a larger
        budget given on resuming is recorded: ``config.json`` rewritten, ``final.json``
        removed until the extended run ends.

        Args:
            vocabulary_class: the class whose ``from_config`` reads ``vocabulary.json``.

        Returns:
            ``(model, vocabulary)``: the model with its optimizer state.

        Raises:
            keras_structured.progress_log.ProgressLogError: ``progress.csv`` lacks rows of
                the checkpoint's epochs.
        """
        vocabulary = read_vocabulary(self.logdir, vocabulary_class)
        model = keras.models.load_model(self.logdir / "checkpoint" / "model.keras")
        self._log = ProgressLog(
            self.logdir, self._columns, resume_step=self.state["epoch"], text_columns=self._text_columns
        )
        settings = dataclasses.asdict(self.config)
        if dataclasses.asdict(_read_config(self.logdir, type(self.config))) != settings:
            write_json(self.logdir / "config.json", settings)
            (self.logdir / "final.json").unlink(missing_ok=True)
        return model, vocabulary

    def epochs(self) -> Iterator[int]:
        """The epochs to run (from 0), each after the previous one's checkpoint.

        Yields:
            The next epoch, until :func:`finished` or the time limit.
        """
        while not finished(self.config, self.state):
            yield self.state["epoch"]
            if self._time_limit is not None and time.perf_counter() - self._opened >= 60 * self._time_limit:
                return

    def fit(
        self, model: keras.Model, dataset: tf.data.Dataset, batches: int | None, **fit_arguments
    ) -> tuple[keras.callbacks.History, float]:
        """Train ``model`` for the current epoch, with a progress bar unless quiet.

        Args:
            model: the compiled model.
            dataset: the epoch's training batches, already shuffled (``model.fit`` does not).
            batches: their number (for the progress bar).
            **fit_arguments: more arguments of ``model.fit``.

        Returns:
            ``(history, seconds)``: ``model.fit``'s history and the seconds it took.

        Raises:
            DivergenceError: a batch's loss or the weights after the epoch are not finite,
                or ``model.fit`` failed on non-finite weights (inside an op that refuses
                non-finite inputs, say).
        """
        epoch = self.state["epoch"]
        callbacks = [RaiseOnNonFiniteLoss(epoch)]
        if not self._quiet:
            callbacks.append(_ProgressBar(epoch, self.config.epochs, batches))
        start = time.perf_counter()
        try:
            history = model.fit(
                dataset,
                epochs=epoch + 1,
                initial_epoch=epoch,
                verbose=0,
                callbacks=callbacks,
                shuffle=False,
                **fit_arguments,
            )
        except DivergenceError:
            raise
        except Exception:  # an op that refuses non-finite inputs, say: name the cause if it is that
            check_finite_weights(model, f"in epoch {epoch + 1}")
            raise
        check_finite_weights(model, f"after epoch {epoch + 1}")
        return history, time.perf_counter() - start

    def end_epoch(self, model: keras.Model, row: dict, score: float, **best) -> bool:
        """Log the current epoch and keep its model if its score is the best so far.

        Args:
            model: the model after the epoch.
            row: the epoch's ``progress.csv`` row, by column.
            score: the epoch's score (higher is better).
            **best: more loop-state entries to store with a new best score.

        Returns:
            Whether the score is the best so far (``best.keras`` is then rewritten);
            otherwise the epoch counts towards ``patience``.
        """
        self._log.log(row)
        improved = score > self.state[self._best]
        if improved:
            self.state.update(
                {self._best: score, **best, "best_epoch": self.state["epoch"] + 1, "bad_epochs": 0}
            )
            save_file(self.logdir / "best.keras", model.save)
        else:
            self.state["bad_epochs"] += 1
        return improved

    def save_checkpoint(self, model: keras.Model, seconds: float) -> None:
        """Count the current epoch as run and write ``checkpoint/``.

        Args:
            model: the model after the epoch.
            seconds: the epoch's training seconds.
        """
        self.state["epoch"] += 1
        self.state["train_seconds"] += seconds

        def write(folder: pathlib.Path) -> None:
            save_file(folder / "model.keras", model.save)
            write_json(folder / "state.json", self.state)

        save_directory(self.logdir / "checkpoint", write)

    def finish(self, scores: dict, details: dict) -> dict:
        """The run's summary, written to ``final.json`` when the run is over; then :meth:`close`.

        Args:
            scores: the best scores, by summary key.
            details: more summary entries, after the shared ones.

        Returns:
            ``finished`` (False when the time limit stopped the run first: no file is
            written), ``best_epoch``, the ``scores``, ``train_seconds``, ``epochs_run``,
            ``stopped_early`` and the ``details``.
        """
        done = finished(self.config, self.state)
        summary = {
            "finished": done,
            "best_epoch": self.state["best_epoch"],
            **scores,
            "train_seconds": self.state["train_seconds"],
            "epochs_run": self.state["epoch"],
            "stopped_early": self.state["epoch"] < self.config.epochs,
            **details,
        }
        if done:
            write_json(self.logdir / "final.json", summary)
        self.close()
        return summary


def load_best(
    logdir: str | pathlib.Path, config_class: type, vocabulary_class: type, what: str
) -> tuple[keras.Model, Any, Any]:
    """The best model of a run, its vocabulary and its settings.

    Args:
        logdir: the run directory.
        config_class: the dataclass stored in ``config.json``.
        vocabulary_class: the class whose ``from_config`` reads ``vocabulary.json``.
        what: the model's name in the error message (``"parser"``).

    Returns:
        ``(model, vocabulary, config)``.

    Raises:
        FileNotFoundError: the run has no ``best.keras``.
    """
    logdir = pathlib.Path(logdir)
    if not (logdir / "best.keras").exists():
        raise FileNotFoundError(
            f"No trained {what} (best.keras) in the logdir. Received: logdir={str(logdir)!r}"
        )
    vocabulary = read_vocabulary(logdir, vocabulary_class)
    return keras.models.load_model(logdir / "best.keras"), vocabulary, _read_config(logdir, config_class)
