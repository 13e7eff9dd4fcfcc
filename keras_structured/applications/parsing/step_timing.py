"""Training throughput of several parser runs, measured side by side in one process.

The issue behind Table 1 asks for sentences per second with the SparseMAP loss against the
CRF loss, same model, same run: the checkpointed models of the runs (with their optimizers
and losses) take training steps in turn on the same batches
(:func:`keras_structured.applications.timing.interleaved_step_seconds`), so that the load of a
shared machine hits them alike. The weights change in memory only; nothing is written to
the runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np

from keras_structured.applications.parsing.batching import make_dataset
from keras_structured.applications.parsing.conllu_reader import read_conllu, treebank_paths
from keras_structured.applications.parsing.model import ArcScorer
from keras_structured.applications.parsing.vocabulary import Vocabulary
from keras_structured.applications.timing import interleaved_step_seconds, load_checkpoints, step_summary

__all__ = ["time_training_steps"]


def time_training_steps(logdirs: Sequence, steps: int = 30, seed: int = 0) -> dict:
    """Seconds per training step and sentences per second of each run, interleaved on the same batches.

    The batches are ``steps`` batches of the first run's training sentences (those its
    training kept: at most ``max_length`` words), in an order drawn from ``seed``, without
    word dropout; every run gets the same sentences in its own vocabulary.

    Args:
        logdirs: parser run directories with ``checkpoint/model.keras``.
        steps: timed steps per run (``>= 1``).
        seed: seed of the order of the sentences.

    Returns:
        ``{logdir: {"loss", "steps", "median_step_s", "mean_step_s", "sentences_per_s"}}``
        (logdirs as given, as strings); ``sentences_per_s`` is the batch size over the
        median step time.

    Raises:
        ValueError: no logdirs, or ``steps < 1``.
        FileNotFoundError: a logdir without a checkpoint.

    Example (two trained runs; ``python -m keras_structured.applications.parsing time`` does the same)::

        time_training_steps(["runs/vi-sparsemap", "runs/vi-crf"], steps=20)
    """
    logdirs, steps, runs = load_checkpoints(logdirs, steps, Vocabulary, {"ArcScorer": ArcScorer})
    config = runs[0][2]
    train = read_conllu(
        treebank_paths(config["treebank"], ("train",))["train"], single_root=config.get("single_root", False)
    )
    train = [s for s in train[: config.get("max_train_sentences")] if 0 < s.length <= config["max_length"]]
    size = config["batch_size"]
    order = np.random.default_rng(seed).permutation(len(train))[: steps * size]
    chosen = [train[i] for i in order]

    def run_steps(model: keras.Model, vocabulary: Vocabulary, labels: bool) -> list:
        dataset = make_dataset(chosen, vocabulary, size, shuffle=False, labels=labels)
        return [
            lambda inputs=inputs, targets=targets: model.train_on_batch(inputs, targets)
            for inputs, targets in dataset.as_numpy_iterator()
        ]

    seconds = interleaved_step_seconds(
        [
            run_steps(model, vocabulary, run_config.get("labels", False))
            for model, vocabulary, run_config in runs
        ]
    )
    results = {}
    for logdir, (_, _, run_config), run_seconds in zip(logdirs, runs, seconds, strict=True):
        summary = step_summary(run_seconds)
        summary["sentences_per_s"] = size / summary["median_step_s"]
        results[str(logdir)] = {"loss": run_config["loss"], **summary}
    return results
