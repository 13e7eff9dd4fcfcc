"""Run directories: which files belong to a run, where it stands, and clearing it.

A run writes ``config.json``, ``progress.csv``, TensorBoard event files
(``events.out.tfevents.*``) and ``checkpoints/iter_NNNNNN/`` into its logdir. Other files
there (a benchmark's logs and markers, say) are not the run's and are never touched.
``python -m rl train`` refuses a logdir that holds a run unless told to ``--resume`` it or to
``--overwrite`` it, so that the CSV, the event files and the checkpoints of a logdir always
belong to one run. The lock file ``.lock`` of the process writing the run
(:class:`keras_structured.run_directory.RunLock`) is not part of it: ``--overwrite`` keeps it.

``progress.csv`` grows by one row per iteration, appended; a row cut short by a crash while
it was written is never read (:func:`rl.logger.read_progress`). Importing this
module does not import TensorFlow.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NamedTuple

from rl.checkpoint import checkpoint_dirs, checkpoint_iteration
from rl.config import TrainConfig

#: the files and folders a run writes into its logdir (besides the TensorBoard event files).
RUN_FILES = ("config.json", "progress.csv", "checkpoints")
EVENTS_PATTERN = "events.out.tfevents.*"


def run_files(logdir: str | Path) -> list[Path]:
    """The files and folders of a run present in ``logdir`` (symlinks too; empty when it holds none)."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        return []
    found = [logdir / name for name in RUN_FILES if os.path.lexists(logdir / name)]
    return found + sorted(logdir.glob(EVENTS_PATTERN))


def last_row(logdir: str | Path, max_iteration: int | None = None) -> dict[str, float] | None:
    """The last ``progress.csv`` row (up to ``max_iteration``) as numbers (:func:`rl.logger.read_progress`,
    which refuses a log that cannot be read); ``None`` if none."""
    from rl.logger import read_progress  # imports TensorFlow: only when needed

    if not (Path(logdir) / "progress.csv").is_file():
        return None
    rows = [r for r in read_progress(logdir) if max_iteration is None or r["iteration"] <= max_iteration]
    return rows[-1] if rows else None


def describe_run(logdir: str | Path) -> str:
    """One line naming the run in ``logdir``: env, algorithm, seed, logged step, checkpoint."""
    logdir = Path(logdir)
    parts = []
    if (logdir / "config.json").is_file():
        try:
            config = TrainConfig.load(logdir / "config.json")
        except ValueError:
            parts.append("an unreadable config.json")
        else:
            parts.append(
                f"{config.env_id} {config.algo} seed {config.seed}, total_steps {config.total_steps}"
            )
    try:
        row = last_row(logdir)
    except ValueError:
        parts.append("an unreadable progress.csv")
    else:
        parts.append(f"logged up to step {row['global_step']:.0f}" if row else "no progress logged")
    checkpoints = checkpoint_dirs(logdir)
    parts.append(f"newest checkpoint {checkpoints[-1].name}" if checkpoints else "no checkpoint")
    return "; ".join(parts)


class Remedy(NamedTuple):
    """What to do with a run found where a new one would start."""

    resumable: str
    """For a run with a checkpoint."""
    incomplete: str
    """For a run without one: its first iteration failed or was interrupted."""


_INCOMPLETE = "The run is incomplete (its first iteration failed or was interrupted) and cannot be resumed: "
CLI_REMEDY = Remedy(
    "Pass --resume to continue it, --overwrite to delete it and start afresh, or choose another --logdir.",
    _INCOMPLETE + "pass --overwrite to delete it and start afresh, or choose another --logdir.",
)
LIBRARY_REMEDY = Remedy(
    "Restore one of its checkpoints (trainer.restore) to continue it, delete it with "
    "rl.run_dir.clear_run, or choose another logdir.",
    _INCOMPLETE + "delete it with rl.run_dir.clear_run, or choose another logdir.",
)


def check_new_run(logdir: str | Path, overwrite: bool, remedy: Remedy = CLI_REMEDY) -> None:
    """Checks that a new run may be trained into ``logdir`` (``overwrite``: a run there will
    be replaced, by :func:`clear_run`).

    Args:
        logdir: the run directory.
        overwrite: whether a run in ``logdir`` will be deleted first.
        remedy: what the message proposes, for a run with and without a checkpoint.

    Raises:
        FileExistsError: ``logdir`` holds a run and ``overwrite`` is false; the message names
            the run and its step, then the remedy.
    """
    if run_files(logdir) and not overwrite:
        advice = remedy.resumable if checkpoint_dirs(logdir) else remedy.incomplete
        raise FileExistsError(f"{str(logdir)!r} already holds a run ({describe_run(logdir)}). {advice}")


def clear_run(logdir: str | Path) -> None:
    """Deletes the run's files in ``logdir`` (:func:`run_files`); other files, and the lock, are
    kept. A symlink among them is removed, never followed."""
    for path in run_files(logdir):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def newest_iteration(logdir: str | Path) -> int | None:
    """The iteration of the newest checkpoint in ``logdir``; ``None`` if there is none."""
    found = checkpoint_dirs(logdir)
    return checkpoint_iteration(found[-1]) if found else None


__all__ = [
    "CLI_REMEDY",
    "EVENTS_PATTERN",
    "LIBRARY_REMEDY",
    "RUN_FILES",
    "Remedy",
    "check_new_run",
    "clear_run",
    "describe_run",
    "last_row",
    "newest_iteration",
    "run_files",
]
