"""Run directories: which files belong to a run, where it stands, and clearing it.

A run writes ``config.json``, ``progress.csv``, TensorBoard event files
(``events.out.tfevents.*``) and ``checkpoints/iter_NNNNNN/`` into its logdir. Other files
there (a benchmark's logs and markers, say) are not the run's and are never touched.
``python -m rl train`` refuses a logdir that holds a run unless told to ``--resume`` it or to
``--overwrite`` it, so that the CSV, the event files and the checkpoints of a logdir always
belong to one run. Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from rl.checkpoint import checkpoint_dirs, checkpoint_iteration
from rl.config import TrainConfig

#: the files and folders a run writes into its logdir (besides the TensorBoard event files).
RUN_FILES = ("config.json", "progress.csv", "checkpoints")
EVENTS_PATTERN = "events.out.tfevents.*"


def run_files(logdir: str | Path) -> list[Path]:
    """The files and folders of a run present in ``logdir`` (empty when it holds none)."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        return []
    found = [logdir / name for name in RUN_FILES if (logdir / name).exists()]
    return found + sorted(logdir.glob(EVENTS_PATTERN))


def last_row(logdir: str | Path, max_iteration: int | None = None) -> dict[str, str] | None:
    """The last ``progress.csv`` row (up to ``max_iteration``) as strings; ``None`` if none."""
    path = Path(logdir) / "progress.csv"
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if max_iteration is None or int(r["iteration"]) <= max_iteration]
    return rows[-1] if rows else None


def describe_run(logdir: str | Path) -> str:
    """One line naming the run in ``logdir``: env, algorithm, seed, logged step, checkpoint."""
    logdir = Path(logdir)
    parts = []
    if (logdir / "config.json").is_file():
        try:
            config = TrainConfig.load(logdir / "config.json")
        except (ValueError, TypeError, KeyError):
            parts.append("an unreadable config.json")
        else:
            parts.append(
                f"{config.env_id} {config.algo} seed {config.seed}, total_steps {config.total_steps}"
            )
    row = last_row(logdir)
    parts.append(f"logged up to step {row['global_step']}" if row else "no progress logged")
    checkpoints = checkpoint_dirs(logdir)
    parts.append(f"newest checkpoint {checkpoints[-1].name}" if checkpoints else "no checkpoint")
    return "; ".join(parts)


CLI_REMEDY = (
    "Pass --resume to continue it, --overwrite to delete it and start afresh, or choose another --logdir."
)
LIBRARY_REMEDY = (
    "Restore one of its checkpoints (trainer.restore) to continue it, delete it with "
    "rl.run_dir.clear_run, or choose another logdir."
)


def check_new_run(logdir: str | Path, overwrite: bool, remedy: str = CLI_REMEDY) -> None:
    """Checks that a new run may be trained into ``logdir`` (``overwrite``: a run there will
    be replaced, by :func:`clear_run`).

    Raises:
        FileExistsError: ``logdir`` holds a run and ``overwrite`` is false; the message names
            the run and its step, then ``remedy``.
    """
    if run_files(logdir) and not overwrite:
        raise FileExistsError(f"{str(logdir)!r} already holds a run ({describe_run(logdir)}). {remedy}")


def clear_run(logdir: str | Path) -> None:
    """Deletes the run's files in ``logdir`` (:func:`run_files`); other files are kept."""
    for path in run_files(logdir):
        if path.is_dir():
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
    "check_new_run",
    "clear_run",
    "describe_run",
    "last_row",
    "newest_iteration",
    "run_files",
]
