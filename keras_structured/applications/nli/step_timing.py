"""Cost of a training step of several trained NLI runs, measured side by side in one process.

The runs' checkpointed models (with their optimizers) take training steps in turn on the
same batches (:func:`keras_structured.applications.timing.interleaved_step_seconds`). The weights
change in memory only; nothing is written to the runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from keras_structured.applications.nli.batching import encode_pairs
from keras_structured.applications.nli.layers import Alignment, MaskedPooling
from keras_structured.applications.nli.sick_reader import read_sick
from keras_structured.applications.nli.vocabulary import Vocabulary
from keras_structured.applications.timing import interleaved_step_seconds, load_checkpoints, step_summary

__all__ = ["time_training_steps"]


def time_training_steps(logdirs: Sequence, steps: int = 30, seed: int = 0) -> dict:
    """Seconds per training step of each run's checkpoint, interleaved on the same batches.

    Args:
        logdirs: run directories with ``checkpoint/model.keras``.
        steps: timed steps per run (``>= 1``): that many batches of training pairs.
        seed: seed of the choice of batches (a permutation of the first run's training pairs).

    Returns:
        ``{logdir: {"attention", "steps", "median_step_s", "mean_step_s"}}`` (logdirs as
        given, as strings).
    """
    logdirs, steps, runs = load_checkpoints(
        logdirs, steps, Vocabulary, {"Alignment": Alignment, "MaskedPooling": MaskedPooling}
    )
    config = runs[0][2]
    pairs = read_sick(config["data"], ("train",))["train"][: config.get("max_train_pairs")]
    order = np.random.default_rng(seed).permutation(len(pairs))
    size = config["batch_size"]
    chunks = [[pairs[i] for i in order[k * size : (k + 1) * size]] for k in range(steps)]
    chunks = [chunk for chunk in chunks if chunk]
    batches = [[encode_pairs(chunk, vocabulary) for chunk in chunks] for _, vocabulary, _ in runs]

    def step(model, batch):
        features = {"premise": batch["premise"], "hypothesis": batch["hypothesis"]}
        return lambda: model.train_on_batch(features, batch["label"])

    times = interleaved_step_seconds(
        [
            [step(model, batch) for batch in run_batches]
            for (model, _, _), run_batches in zip(runs, batches, strict=True)
        ]
    )
    return {
        str(logdir): {"attention": run[2]["attention"], **step_summary(seconds)}
        for logdir, run, seconds in zip(logdirs, runs, times, strict=True)
    }
