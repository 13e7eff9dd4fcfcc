"""Cost of a training step of several trained NLI runs, measured side by side in one process.

The runs' checkpointed models (with their optimizers) take training steps in turn on the
same batches (:func:`keras_structured._step_timing.interleaved_step_seconds`). The weights
change in memory only; nothing is written to the runs.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import keras
import numpy as np

from keras_structured._step_timing import interleaved_step_seconds, step_summary
from keras_structured._validation import check_integer
from keras_structured.nli.batching import encode_pairs
from keras_structured.nli.layers import Alignment, MaskedPooling
from keras_structured.nli.sick_reader import read_sick
from keras_structured.nli.vocabulary import Vocabulary

__all__ = ["time_training_steps"]


def _load(logdir: pathlib.Path) -> tuple[keras.Model, Vocabulary, dict]:
    model_path = logdir / "checkpoint" / "model.keras"
    if not model_path.is_file():
        raise FileNotFoundError(
            f"No checkpoint (checkpoint/model.keras) in the logdir. Received: logdir={str(logdir)!r}"
        )
    vocabulary = Vocabulary.from_config(json.loads((logdir / "vocabulary.json").read_text()))
    config = json.loads((logdir / "config.json").read_text())
    custom_objects = {"Alignment": Alignment, "MaskedPooling": MaskedPooling}
    return keras.models.load_model(model_path, custom_objects=custom_objects), vocabulary, config


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
    steps = check_integer("steps", steps, minimum=1)
    logdirs = [pathlib.Path(logdir) for logdir in logdirs]
    if not logdirs:
        raise ValueError("logdirs must not be empty. Received: logdirs=[]")
    runs = [_load(logdir) for logdir in logdirs]
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
