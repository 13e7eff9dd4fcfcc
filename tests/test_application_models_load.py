"""The application models (ESIM with structured alignments, the BiLSTM parser) reload from
``.keras`` in a new process that imports only ``keras`` and ``keras_structured.applications``:
their layers are registered by that import (the library itself imports no application)."""

import subprocess
import sys

import numpy as np

from keras_structured.applications.nli.model import build_esim
from keras_structured.applications.parsing.model import build_parser

_LOAD = r"""
import sys
import numpy as np
import keras
import keras_structured.applications  # noqa: F401 (registers the applications' layers)
for path in sys.argv[1:]:
    model = keras.saving.load_model(path)
    inputs = np.load(path + ".inputs.npz")
    outputs = model({name: inputs[name] for name in inputs.files}, training=False)
    np.save(path + ".outputs.npy", keras.ops.convert_to_numpy(outputs))
"""


def _save(model, inputs, path):
    model.save(path)
    np.savez(f"{path}.inputs.npz", **inputs)
    return np.asarray(model(inputs, training=False))


def test_a_new_process_reloads_both_models_after_importing_the_applications(tmp_path):
    rng = np.random.default_rng(0)
    expected = {}
    for attention in ("sequence", "matching"):
        pairs = {side: rng.integers(2, 30, size=(3, 5)) for side in ("premise", "hypothesis")}
        model = build_esim(30, attention=attention, embedding_dim=8, units=6)
        expected[tmp_path / f"esim_{attention}.keras"] = _save(
            model, pairs, tmp_path / f"esim_{attention}.keras"
        )
    parser = build_parser(20, 6, word_dim=8, tag_dim=4, lstm_units=6, lstm_layers=1, mlp_units=6)
    sentences = {name: rng.integers(1, 6, size=(2, 4)) for name in ("words", "tags")}
    expected[tmp_path / "parser.keras"] = _save(parser, sentences, tmp_path / "parser.keras")
    subprocess.run(
        [sys.executable, "-c", _LOAD, *map(str, expected)], check=True, capture_output=True, text=True
    )
    for path, outputs in expected.items():
        np.testing.assert_allclose(np.load(f"{path}.outputs.npy"), outputs, rtol=1e-5, atol=1e-6)
