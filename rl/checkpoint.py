"""Checkpoints: ``{logdir}/checkpoints/iter_{k:06d}/``, three files that are read differently.

* ``weights.npz``: arrays only, read with ``allow_pickle=False``: the variable groups
  (networks, optimizer slots) as ``{group}/{index}`` and running statistics (observation
  normaliser, return scaler) as ``{name}/{key}`` (:func:`flatten_arrays`);
* ``state.json``: the format version, the trainer's counters, RNG state and the run's settings
  (plain JSON values) and the SHA-256 of the two other files, computed when they were written;
* ``resume_state.pkl``: what only an exact resume needs and only pickle can hold (the
  environments' internals: physics, wrappers, RNGs).

Evaluating, exporting or plotting a run reads ``weights.npz`` and JSON only
(:func:`read_arrays`, :func:`read_state`), so a shared run directory cannot run code through
them. Only :func:`read_resume_state` (``python -m rl train --resume``) unpickles, and only after
checking the format version and the SHA-256 recorded in ``state.json``: a truncated, corrupted
or swapped file is refused with a :class:`CheckpointError` naming it. The hash is no defence
against someone who edits both files, so resume only run directories you created. The values of
``state.json`` are data to validate like any input: :meth:`rl.algorithms.base.Trainer.restore`
checks their types and ranges and their agreement with the checkpoint's name, its arrays and the
run's config, and refuses a mismatch with a :class:`CheckpointError`.

Checkpoints of the old format (``weights.npz`` and one ``state.pkl`` holding everything) are
refused by every reader, since reading them means unpickling; ``python -m rl
upgrade-checkpoint`` converts a run you created yourself.

A checkpoint is written to a temporary directory and renamed, so a crash never leaves a
partial one, and nothing is written through a symlink (:mod:`keras_structured.run_directory`);
the ``keep`` newest are kept. Checkpoints of a later iteration than the one being saved are
another run's (or an abandoned continuation's) and are removed first, so that the checkpoint
just written is always the newest and is never deleted by the retention.

Importing this module does not import TensorFlow (the CLI reads run directories before it).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

#: version of the checkpoint layout written by :func:`save_checkpoint` (the single-pickle layout
#: before it had none).
FORMAT_VERSION = 2
WEIGHTS_FILE = "weights.npz"
STATE_FILE = "state.json"
RESUME_FILE = "resume_state.pkl"
#: the single pickle of the old format.
LEGACY_FILE = "state.pkl"

_PATTERN = re.compile(r"^iter_(\d{6})$")


class CheckpointError(ValueError):
    """A checkpoint that is not read: old format, unknown version, a file that is missing or
    does not match its recorded SHA-256, or values that do not match the checkpoint or the run.
    The message names the file."""


def checkpoint_dirs(logdir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(logdir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _PATTERN.match(p.name))


def checkpoint_iteration(checkpoint: str | Path) -> int:
    """The iteration of a checkpoint directory ``iter_NNNNNN``.

    Raises:
        CheckpointError: the directory's name is not ``iter_NNNNNN``.
    """
    match = _PATTERN.match(Path(checkpoint).name)
    if match is None:
        raise CheckpointError(
            f"A checkpoint directory is named iter_NNNNNN after its iteration (six digits). "
            f"Received: {str(checkpoint)!r}"
        )
    return int(match.group(1))


def inconsistent_state(checkpoint: Path, requirement: str, received: str) -> CheckpointError:
    """The error for a value of ``checkpoint``'s ``state.json`` that is not that of a checkpoint
    of the run restoring it.

    Args:
        checkpoint: the checkpoint directory.
        requirement: what the value must be (``"iteration must be 3 ..."``).
        received: the value found (``"iteration=2"``).

    Returns:
        The error, naming the file, the requirement and the value.
    """
    return CheckpointError(
        f"{str(checkpoint / STATE_FILE)!r} does not match its checkpoint or this run (it was edited, "
        f"or copied from another run), so the checkpoint is not restored: {requirement}. "
        f"Received: {received}"
    )


def variable_arrays(variables: dict[str, list[tf.Variable]]) -> dict[str, np.ndarray]:
    """The values of variable groups as ``{group}/{index}`` arrays."""
    return {f"{group}/{i}": v.numpy() for group, vs in variables.items() for i, v in enumerate(vs)}


def assign_variables(arrays: dict[str, np.ndarray], variables: dict[str, list[tf.Variable]]) -> None:
    """Assigns the ``{group}/{index}`` arrays of :func:`variable_arrays` to ``variables``."""
    for group, vs in variables.items():
        for i, v in enumerate(vs):
            v.assign(arrays[f"{group}/{i}"])


def flatten_arrays(name: str, nested: dict) -> dict[str, np.ndarray]:
    """A nested dict of arrays and numbers as ``{name}/{key}/...`` arrays (for ``weights.npz``).

    Example:
        >>> flatten_arrays("rms", {"mean": np.zeros(2), "count": 3.0})
        {'rms/mean': array([0., 0.]), 'rms/count': array(3.)}
    """
    flat = {}
    for key, value in nested.items():
        path = f"{name}/{key}"
        flat.update(flatten_arrays(path, value) if isinstance(value, dict) else {path: np.asarray(value)})
    return flat


def unflatten_arrays(arrays: dict[str, np.ndarray], name: str) -> dict | None:
    """The nested dict that :func:`flatten_arrays` stored under ``name``; ``None`` if absent.

    Example:
        >>> unflatten_arrays(flatten_arrays("a", {"b": {"c": 1.0}}), "a")
        {'b': {'c': array(1.)}}
    """
    nested: dict = {}
    prefix = f"{name}/"
    for key, value in arrays.items():
        if key.startswith(prefix):
            *parents, leaf = key[len(prefix) :].split("/")
            node = nested
            for parent in parents:
                node = node.setdefault(parent, {})
            node[leaf] = value
    return nested or None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checkpoint_files(
    directory: Path, arrays: dict[str, np.ndarray], state: dict, resume_state: object
) -> None:
    """Writes ``weights.npz``, ``resume_state.pkl`` and, last, ``state.json`` with their SHA-256
    into ``directory``, each whole and never through a symlink (see :func:`save_checkpoint` for
    the arguments)."""
    # Imported here: importing keras_structured imports TensorFlow, which the command line
    # avoids until it trains.
    from keras_structured.run_directory import save_file, write_bytes, write_json

    save_file(directory / WEIGHTS_FILE, lambda path: np.savez(path, **arrays))
    write_bytes(directory / RESUME_FILE, pickle.dumps(resume_state))
    metadata = {
        "format_version": FORMAT_VERSION,
        "sha256": {name: _sha256(directory / name) for name in (WEIGHTS_FILE, RESUME_FILE)},
        "state": state,
    }
    write_json(directory / STATE_FILE, metadata)


def save_checkpoint(
    logdir: str | Path,
    iteration: int,
    arrays: dict[str, np.ndarray],
    state: dict,
    resume_state: object,
    keep: int = 2,
) -> Path:
    """Writes a checkpoint of ``iteration`` and applies the retention; returns its directory.

    Args:
        logdir: the run directory.
        iteration: the iteration, the checkpoint's name ``iter_NNNNNN``.
        arrays: numeric arrays (``weights.npz``); no object arrays.
        state: plain JSON values (``state.json``).
        resume_state: anything picklable that only a resume needs (``resume_state.pkl``).
        keep: how many checkpoints to keep.

    Returns:
        The checkpoint directory.
    """
    from keras_structured.run_directory import make_directory, save_directory  # see write_checkpoint_files

    root = make_directory(Path(logdir) / "checkpoints")
    final = save_directory(
        root / f"iter_{iteration:06d}",
        lambda folder: write_checkpoint_files(folder, arrays, state, resume_state),
    )
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
    if (path / WEIGHTS_FILE).is_file():
        return path
    for run_dir in (path, path.parent):
        found = checkpoint_dirs(run_dir)
        if found:
            return found[-1]
    raise FileNotFoundError(f"No checkpoint found in {str(path)!r} (expected checkpoints/iter_NNNNNN)")


def _metadata(checkpoint: Path) -> dict:
    """``state.json`` of ``checkpoint`` after checking the format version.

    Raises:
        CheckpointError: old format, missing or unreadable ``state.json``, other version.
    """
    path = checkpoint / STATE_FILE
    if not path.is_file() and (checkpoint / LEGACY_FILE).is_file():
        raise CheckpointError(
            f"{str(checkpoint)!r} is a checkpoint of the old format ({LEGACY_FILE}, before rl split "
            f"checkpoints into {WEIGHTS_FILE}, {STATE_FILE} and {RESUME_FILE}). Reading it means "
            "unpickling, which can run any code, so it is not supported. If you created the run "
            f"yourself, convert it with: python -m rl upgrade-checkpoint {checkpoint.parent.parent}; "
            "otherwise retrain it."
        )
    try:
        metadata = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"Cannot read {str(path)!r} (missing or corrupted): {error}") from error
    version = metadata.get("format_version") if isinstance(metadata, dict) else None
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{str(path)!r} is not a checkpoint of format version {FORMAT_VERSION}, the one this "
            f"version of rl reads. Received: format_version={version!r}"
        )
    if not isinstance(metadata.get("sha256"), dict) or not isinstance(metadata.get("state"), dict):
        raise CheckpointError(
            f"{str(path)!r} lacks its 'sha256' or 'state' entry; the checkpoint is corrupted"
        )
    return metadata


def _verified(checkpoint: Path, name: str, metadata: dict) -> Path:
    """The path of ``checkpoint / name`` after checking its SHA-256 against ``state.json``.

    Raises:
        CheckpointError: the file is missing or differs from the one written with ``state.json``.
    """
    path = checkpoint / name
    if not path.is_file():
        raise CheckpointError(f"{str(path)!r} is missing; the checkpoint is incomplete")
    expected, actual = metadata["sha256"].get(name), _sha256(path)
    if actual != expected:
        raise CheckpointError(
            f"{str(path)!r} does not match the SHA-256 recorded in {STATE_FILE} when the checkpoint "
            "was written: it was truncated, corrupted or replaced, and is not read. "
            f"Received: sha256={actual} (recorded: {expected})"
        )
    return path


def read_state(checkpoint: str | Path) -> dict:
    """The plain values (counters, RNG state) of ``state.json``; never unpickles.

    Raises:
        CheckpointError: see :func:`read_arrays`.
    """
    return _metadata(Path(checkpoint))["state"]


def read_arrays(checkpoint: str | Path) -> dict[str, np.ndarray]:
    """The arrays of ``weights.npz``, read with ``allow_pickle=False`` (never unpickles).

    Raises:
        CheckpointError: an old-format checkpoint, another format version, or a
            ``weights.npz`` that does not match its SHA-256.
    """
    checkpoint = Path(checkpoint)
    path = _verified(checkpoint, WEIGHTS_FILE, _metadata(checkpoint))
    with np.load(path, allow_pickle=False) as arrays:
        return {key: arrays[key] for key in arrays.files}


def read_resume_state(checkpoint: str | Path) -> object:
    """Unpickles ``resume_state.pkl`` after checking the format version and its SHA-256.

    Unpickling runs whatever code the file names: call this only on checkpoints you wrote.

    Raises:
        CheckpointError: an old-format checkpoint, another format version, a file that does not
            match its SHA-256, or one that cannot be unpickled here (the message names it).
    """
    checkpoint = Path(checkpoint)
    path = _verified(checkpoint, RESUME_FILE, _metadata(checkpoint))
    try:
        with path.open("rb") as f:
            return pickle.load(f)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as error:
        raise CheckpointError(f"Cannot unpickle {str(path)!r}: {error!r}") from error
