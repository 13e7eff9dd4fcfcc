"""Training steps of several models timed side by side in one process.

Timings of separate runs are hard to compare on a shared machine: another job may slow one
of them down. Here every model takes its training step on batch ``k`` before any model
takes batch ``k + 1``, and the order of the models rotates from batch to batch, so that a
slow period of the machine hits them alike. A first pass over the batches, not timed,
traces the training functions. Used by ``python -m keras_structured.applications.nli time`` and
``python -m keras_structured.applications.parsing time``.
"""

from __future__ import annotations

import json
import pathlib
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from keras_structured.applications.training_runs import read_vocabulary
from keras_structured.engine import SparseMAPConvergenceWarning
from keras_structured.run_directory import save_output_file
from keras_structured.run_settings import read_json_object
from keras_structured.validation import check_integer

__all__ = ["interleaved_step_seconds", "load_checkpoints", "report_timings", "step_summary"]


def interleaved_step_seconds(steps: Sequence[Sequence[Callable[[], object]]]) -> list[list[float]]:
    """Seconds of every training step, the models taking turns on each batch.

    Args:
        steps: ``steps[r][k]`` takes model ``r``'s training step on batch ``k``; every model
            has the same number of batches.

    Returns:
        ``seconds[r][k]``, from the second (timed) pass over the batches.

    Raises:
        ValueError: no models, or models with different numbers of batches.

    Example:
        >>> seconds = interleaved_step_seconds([[lambda: None] * 3, [lambda: None] * 3])
        >>> [len(row) for row in seconds]
        [3, 3]
    """
    if not steps or len({len(batches) for batches in steps}) != 1:
        raise ValueError(
            "Give every model the same number of batches, and at least one model. "
            f"Received: batches per model={[len(batches) for batches in steps]}"
        )
    seconds: list[list[float]] = [[] for _ in steps]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseMAPConvergenceWarning)
        for timed in (False, True):
            for k in range(len(steps[0])):
                for shift in range(len(steps)):
                    r = (k + shift) % len(steps)
                    start = time.perf_counter()
                    steps[r][k]()
                    if timed:
                        seconds[r].append(time.perf_counter() - start)
    return seconds


def step_summary(seconds: Sequence[float]) -> dict:
    """``{"steps", "median_step_s", "mean_step_s"}`` of one model's step times."""
    return {
        "steps": len(seconds),
        "median_step_s": float(np.median(seconds)),
        "mean_step_s": float(np.mean(seconds)),
    }


def report_timings(result: dict, output: str | None = None) -> None:
    """Print the timings as one JSON line, and write them into ``output`` too when given (the
    user's path, its symlinked folders followed, written whole:
    :func:`keras_structured.run_directory.save_output_file`)."""
    if output:
        save_output_file(output, lambda path: path.write_text(json.dumps(result, indent=1) + "\n"))
    print(json.dumps(result))


def load_checkpoints(
    logdirs: Sequence, steps: int, vocabulary_class: type, custom_objects: dict | None = None
) -> tuple[list[pathlib.Path], int, list[tuple[keras.Model, Any, dict]]]:
    """The checkpointed models of runs (with their optimizers), their vocabularies and settings.

    Args:
        logdirs: run directories with ``checkpoint/model.keras``, ``vocabulary.json`` and
            ``config.json``.
        steps: timed steps per run, checked (``>= 1``).
        vocabulary_class: the class whose ``from_config`` reads ``vocabulary.json``.
        custom_objects: the model's layers that Keras must be told about.

    Returns:
        ``(logdirs as paths, steps, [(model, vocabulary, config dict), ...])``.

    Raises:
        ValueError: no logdirs, or ``steps < 1``.
        FileNotFoundError: a logdir without a checkpoint.
    """
    steps = check_integer("steps", steps, minimum=1)
    logdirs = [pathlib.Path(logdir) for logdir in logdirs]
    if not logdirs:
        raise ValueError("logdirs must not be empty. Received: logdirs=[]")
    runs = []
    for logdir in logdirs:
        model_path = logdir / "checkpoint" / "model.keras"
        if not model_path.is_file():
            raise FileNotFoundError(
                f"No checkpoint (checkpoint/model.keras) in the logdir. Received: logdir={str(logdir)!r}"
            )
        vocabulary = read_vocabulary(logdir, vocabulary_class)
        config = read_json_object(logdir / "config.json")
        runs.append((keras.models.load_model(model_path, custom_objects=custom_objects), vocabulary, config))
    return logdirs, steps, runs
