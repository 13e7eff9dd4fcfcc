"""Checkpoints of a :class:`~keras_structured.applications.parsing.tracenorm.models.TraceNormModel` run.

One ``.npz`` file holds the model's factors and distance weights ``b``, the step, the
per-step history and the run's settings; it is written whole
(:func:`keras_structured.run_directory.save_file`). Checkpoints written before the distance
weights were renamed hold them under ``eta`` (and ``"eta"`` atoms in their history);
:func:`load_checkpoint` reads both.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np

from keras_structured.applications.parsing.tracenorm.models import TraceNormModel
from keras_structured.run_directory import save_file

#: The file name of a trainer's checkpoint in its ``logdir``.
CHECKPOINT_NAME = "checkpoint.npz"
#: The arrays of :meth:`TraceNormModel.state`, and ``eta``, the distance weights of older checkpoints.
_STATE_KEYS = ("weights", "left", "right", "distance_weights", "eta")
#: The atom kind of the distance weights in the history of older checkpoints (``"b"`` now).
_OLD_DISTANCE_ATOM = "eta"


def save_checkpoint(
    path: str | os.PathLike, model: TraceNormModel, step: int, history: list[dict], config: dict | None = None
) -> None:
    """Write the model, the step, the history and the config to an ``.npz`` file, whole.

    Arrays ``weights, left, right, distance_weights``; ``step``; ``history`` and ``config`` as JSON
    strings. The file is written to a new temporary file beside ``path`` and renamed over
    it, so a crash never leaves a half-written checkpoint, and a symlink is never followed.

    Args:
        path: the file.
        model: the :class:`TraceNormModel`.
        step: the number of Frank-Wolfe steps taken.
        history: the per-step records (JSON-serialisable dicts).
        config: the run's settings (JSON-serialisable), or None.

    Raises:
        keras_structured.run_directory.UnsafePathError: ``path`` or its folder is a symlink.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "checkpoint.npz"
        >>> save_checkpoint(path, TraceNormModel(dim=4), 0, [])
        >>> load_checkpoint(path)[1]
        0
    """
    arrays = {
        **model.state(),
        "step": np.int64(step),
        "history": np.array(json.dumps(history)),
        "config": np.array(json.dumps(config)),
    }

    def write(temporary: pathlib.Path) -> None:
        with open(temporary, "wb") as handle:
            np.savez(handle, **arrays)

    save_file(path, write)


def load_checkpoint(path: str | os.PathLike) -> tuple[TraceNormModel, int, list[dict], dict | None]:
    """Read a checkpoint of :func:`save_checkpoint`, or an older one (module docstring).

    Args:
        path: the ``.npz`` file.

    Returns:
        ``(model, step, history, config)``.

    Raises:
        FileNotFoundError: if the file does not exist.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint not found. Received: path='{path}'")
    with np.load(path) as data:
        model = TraceNormModel.from_state({key: data[key] for key in data.files if key in _STATE_KEYS})
        step, history, config = (
            int(data["step"]),
            json.loads(str(data["history"])),
            json.loads(str(data["config"])),
        )
    for record in history:
        if record.get("atom") == _OLD_DISTANCE_ATOM:
            record["atom"] = "b"
    return model, step, history, config
