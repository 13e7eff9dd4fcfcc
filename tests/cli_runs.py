"""Helpers of the tests that train from a command line into a log directory
(``python -m keras_structured.applications.parsing`` and ``python -m keras_structured.applications.nli``)."""

from __future__ import annotations

import csv
import errno
import os
import pathlib
import runpy
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence

import numpy as np

#: 30 sentences of the English Web Treebank (UD 2), lengths 9 to 51 words.
SAMPLE_CONLLU = pathlib.Path(__file__).parent / "data" / "en_ewt_sample.conllu"


def sample_treebank(folder: pathlib.Path, dev_sentences: int | None = None) -> pathlib.Path:
    """A treebank folder (created) whose three splits are the 30-sentence sample.

    Args:
        folder: the folder to create.
        dev_sentences: the dev split is the sample's first ``dev_sentences`` sentences (all
            by default); each epoch of a run parses the dev split.
    """
    folder.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        shutil.copy(SAMPLE_CONLLU, folder / f"en_sample-ud-{split}.conllu")
    if dev_sentences is not None:
        sentences = SAMPLE_CONLLU.read_text().strip().split("\n\n")[:dev_sentences]
        (folder / "en_sample-ud-dev.conllu").write_text("\n\n".join(sentences) + "\n\n")
    return folder


def write_pairs(path: pathlib.Path, counts=(("train", 24), ("trial", 10), ("test", 10)), seed: int = 0):
    """A SICK-like file of short pairs whose labels follow from the words (so a model can learn)."""
    rng = np.random.default_rng(seed)
    subjects, verbs, places = ("man", "woman", "dog", "boy"), ("plays", "runs", "sleeps"), ("park", "house")
    rows, pair_id = [], 1
    for split, count in counts:
        for k in range(count):
            subject, verb, place = rng.choice(subjects), rng.choice(verbs), rng.choice(places)
            premise = f"A {subject} {verb} in the {place}"
            label = ("entailment", "contradiction", "neutral")[k % 3]
            hypothesis = {
                "entailment": f"A {subject} {verb} in a {place}",
                "contradiction": f"No {subject} {verb} in the {place}",
                "neutral": f"A {subject} {verb} happily in a big {place}",
            }[label]
            rows.append(f"{pair_id}\t{premise}\t{hypothesis}\t{label}\t{split}")
            pair_id += 1
    path.write_text("pair_id\tsentence_a\tsentence_b\tlabel\tsplit\n" + "\n".join(rows) + "\n")
    return path


def read_progress(logdir: pathlib.Path) -> list[dict]:
    """The rows of a run's ``progress.csv``, by column name."""
    with open(logdir / "progress.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def scalar_events(logdir: str | pathlib.Path) -> list[tuple[str, int, float]]:
    """``[(tag, step, value)]`` of every TensorBoard scalar event in ``logdir``'s event files."""
    import tensorflow as tf

    found = []
    for path in sorted(pathlib.Path(logdir).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                found.append((value.tag, event.step, float(tf.make_ndarray(value.tensor))))
    return found


def train_in_parts(
    main: Callable[[list[str]], None], arguments: Callable[..., list[str]], logdir: pathlib.Path, epochs: int
) -> None:
    """Train into ``logdir`` one epoch per invocation, as a session's time limit would stop it.

    Args:
        main: the command line's ``main``.
        arguments: ``arguments(logdir, *extra)``, the ``train`` command line.
        logdir: the run directory.
        epochs: the run's epochs.
    """
    for _ in range(epochs):
        resume = ["--resume"] if (logdir / "checkpoint").exists() else []
        main(arguments(logdir, "--time-limit", "0", *resume))
        if (logdir / "final.json").exists():
            break


def main_in_new_process(package: str, *argvs: Sequence[str]) -> None:
    """``python -m package argv`` for each ``argv``, one after the other, in one fresh
    interpreter with TensorFlow's op determinism on (the command lines have no option for it)
    and one OpenMP thread.

    A run resumed in the process that ran its earlier epochs inherits that process's random
    state; only a new process shows what a resume after a real interruption does.

    Args:
        package: the command line's package, such as ``"keras_structured.applications.parsing"``.
        *argvs: the arguments of each command.

    Raises:
        AssertionError: a command failed (its stderr is shown).
    """
    script = "\n".join(
        [
            "import importlib, tensorflow as tf",
            "tf.config.experimental.enable_op_determinism()",
            f"main = importlib.import_module({package + '.__main__'!r}).main",
            *(f"main({list(argv)!r})" for argv in argvs),
        ]
    )
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]


def run_script(path: str | os.PathLike, *args: str) -> None:
    """Runs the program ``path`` as ``python path args`` does, but in this process (TensorFlow
    is imported already): as ``__main__``, with ``sys.argv`` set and the program's folder first
    on ``sys.path``; both, and Keras's dtype policy, are restored afterwards. Its output goes to
    this process's stdout (pytest's ``capsys``).

    Args:
        path: the script.
        *args: its command-line arguments.

    Raises:
        SystemExit: the program exited with a status other than 0.
    """
    import keras

    path = str(path)
    argv, sys_path, policy = sys.argv, list(sys.path), keras.config.dtype_policy()
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    finally:
        sys.argv = argv
        sys.path[:] = sys_path
        keras.config.set_dtype_policy(policy)


def make_read_only(monkeypatch, folder: pathlib.Path) -> None:
    """Refuse, as a read-only disk does (``EROFS``), every file opened for writing under ``folder``
    (the tests run as root, whom file permissions do not stop). Every writer of a run directory
    opens its files with ``os.open``: the temporary files, the lock, the appended logs."""
    folder, os_open = folder.resolve(), os.open

    def refuse(path, flags, *args, **kwargs):
        writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        if writes and pathlib.Path(path).resolve().is_relative_to(folder):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
