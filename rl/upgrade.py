"""Conversion of old-format checkpoints (``weights.npz`` + one ``state.pkl``) to the current layout.

The old ``state.pkl`` held the counters and RNG state, the environments, the running statistics
and (projected) the entropy schedule in one pickle. :func:`upgrade_checkpoint` moves the
statistics into ``weights.npz``, the plain values into ``state.json`` and the environments into
``resume_state.pkl`` (:mod:`rl.checkpoint`), so that a resumed run still continues identically.
Converting unpickles ``state.pkl``, which can run any code: convert only runs you created.

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np

from rl.checkpoint import (
    LEGACY_FILE,
    RESUME_FILE,
    STATE_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    checkpoint_dirs,
    flatten_arrays,
    write_checkpoint_files,
)

#: the running statistics of the old ``state.pkl`` (``None`` when not used), now in ``weights.npz``.
_STATISTICS = ("obs_rms", "reward_scaler")


def upgrade_checkpoint(checkpoint: str | Path) -> None:
    """Rewrites an old-format checkpoint directory in the current layout, in place.

    The new files are written next to it and moved in with ``state.json`` last, so an
    interrupted conversion leaves an old-format checkpoint that can be converted again.

    Args:
        checkpoint: a checkpoint directory holding ``weights.npz`` and ``state.pkl``.

    Raises:
        FileNotFoundError: ``checkpoint`` has no ``state.pkl``.
        CheckpointError: ``state.pkl`` cannot be unpickled (truncated, corrupted; named).
    """
    checkpoint = Path(checkpoint)
    legacy = checkpoint / LEGACY_FILE
    if not legacy.is_file():
        raise FileNotFoundError(f"No old-format checkpoint in {str(checkpoint)!r} (no {LEGACY_FILE})")
    try:
        with legacy.open("rb") as f:
            state = pickle.load(f)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as error:
        raise CheckpointError(f"Cannot unpickle {str(legacy)!r}: {error!r}") from error
    with np.load(checkpoint / WEIGHTS_FILE, allow_pickle=False) as arrays:
        arrays = {key: arrays[key] for key in arrays.files}
    for name in _STATISTICS:
        statistics = state.pop(name)
        if statistics is not None:
            arrays.update(flatten_arrays(name, statistics))
    resume_state = {"envs": state.pop("envs")}
    tmp = checkpoint.parent / f".tmp_upgrade_{checkpoint.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write_checkpoint_files(tmp, arrays, state, resume_state)
    for name in (WEIGHTS_FILE, RESUME_FILE, STATE_FILE):
        os.replace(tmp / name, checkpoint / name)
    tmp.rmdir()
    legacy.unlink()


def upgrade_run(path: str | Path) -> list[Path]:
    """Converts every old-format checkpoint of a run directory (or the checkpoint ``path``).

    Args:
        path: a run directory or one checkpoint directory.

    Returns:
        The checkpoints converted (none when all are current).

    Raises:
        FileNotFoundError: ``path`` holds no checkpoint.
    """
    path = Path(path)
    found = [path] if (path / WEIGHTS_FILE).is_file() else checkpoint_dirs(path)
    if not found:
        raise FileNotFoundError(f"No checkpoint found in {str(path)!r} (expected checkpoints/iter_NNNNNN)")
    old = [checkpoint for checkpoint in found if (checkpoint / LEGACY_FILE).is_file()]
    for checkpoint in old:
        upgrade_checkpoint(checkpoint)
    return old
