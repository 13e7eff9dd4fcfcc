"""Checkpoints: ``{logdir}/checkpoints/iter_{k:06d}/`` with ``weights.npz`` and ``state.pkl``.

``weights.npz`` holds variable groups (networks, optimizer slots) as ``{group}/{index}``
arrays; ``state.pkl`` the rest (counters, RNG, environment and normaliser states). A
checkpoint is written to a temporary directory and renamed, so a crash never leaves a
partial one; the ``keep`` newest are kept. Checkpoints of a later iteration than the one
being saved are another run's (or an abandoned continuation's) and are removed first, so that
the checkpoint just written is always the newest and is never deleted by the retention.

Importing this module does not import TensorFlow (the CLI reads run directories before it).
"""

from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

_PATTERN = re.compile(r"^iter_(\d{6})$")


def checkpoint_dirs(logdir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(logdir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _PATTERN.match(p.name))


def checkpoint_iteration(checkpoint: str | Path) -> int:
    """The iteration of a checkpoint directory ``iter_NNNNNN``."""
    return int(_PATTERN.match(Path(checkpoint).name).group(1))


def save_checkpoint(
    logdir: str | Path, iteration: int, variables: dict[str, list[tf.Variable]], state: dict, keep: int = 2
) -> Path:
    """Writes the values of ``variables`` and the picklable ``state``; returns the directory."""
    root = Path(logdir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"iter_{iteration:06d}"
    tmp = root / f".tmp_iter_{iteration:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    arrays = {f"{group}/{i}": v.numpy() for group, vs in variables.items() for i, v in enumerate(vs)}
    np.savez(tmp / "weights.npz", **arrays)
    with (tmp / "state.pkl").open("wb") as f:
        pickle.dump(state, f)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    found = checkpoint_dirs(logdir)
    stale = [p for p in found if checkpoint_iteration(p) > iteration]  # another run's
    older = [p for p in found if checkpoint_iteration(p) <= iteration][:-keep]
    for old in stale + older:
        shutil.rmtree(old)
    return final


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory for ``path``: a checkpoint itself, or the newest in a run dir.

    Raises:
        FileNotFoundError: if there is none.
    """
    path = Path(path)
    if (path / "weights.npz").is_file():
        return path
    for run_dir in (path, path.parent):
        found = checkpoint_dirs(run_dir)
        if found:
            return found[-1]
    raise FileNotFoundError(f"No checkpoint found in {str(path)!r} (expected checkpoints/iter_NNNNNN)")


def load_checkpoint(checkpoint: str | Path, variables: dict[str, list[tf.Variable]]) -> dict:
    """Assigns the saved values to ``variables`` (same groups and order) and returns the state."""
    checkpoint = Path(checkpoint)
    with np.load(checkpoint / "weights.npz") as arrays:
        for group, vs in variables.items():
            for i, v in enumerate(vs):
                v.assign(arrays[f"{group}/{i}"])
    with (checkpoint / "state.pkl").open("rb") as f:
        return pickle.load(f)
