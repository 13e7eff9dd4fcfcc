"""Every layer and loss of the library in ``model.fit`` and ``model.evaluate``, on every backend.

:data:`MODELS` holds one small model per layer or loss (a layer trained with ``"mse"``, a loss
on a model of plain Keras layers), each fitted for one epoch of two batches and evaluated:
Keras's trainers build the loss on placeholders first (PyTorch on its ``meta`` device, then
on ones where that fails), then jit the steps on JAX, and run them eagerly on PyTorch, which
the op-level tests in the other ``test_backends_*.py`` modules do not reach. TensorFlow runs
the table in the test process, JAX and PyTorch in one process each (``tests/backend_harness.py``),
started once for the module; a backend whose package is not installed is skipped.
``test_the_table_holds_every_layer_and_loss`` keeps the table complete.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

import keras_structured as ks
from keras_structured import projections
from keras_structured.engine import DependencyTreeStructure, SequenceStructure, SimplexStructure
from keras_structured.engine.lp import AtMostOne, Budget, FactorGraph, Pair
from tests.backend_harness import BACKENDS, OTHER_BACKENDS, backend_params, missing_backend, start_calls

MODULE = __name__
BATCH, EXAMPLES = 4, 8  # one epoch of two batches
WORDS, FEATURES, TAGS = 4, 3, 3

# --- what each backend runs ---------------------------------------------------------------


def _rng():
    return np.random.default_rng(0)


def _features(*shape) -> np.ndarray:
    return _rng().normal(size=(EXAMPLES, *shape)).astype("float32")


def _dense_model(input_shape: tuple, *layers) -> keras.Model:
    """The functional model of ``layers`` in a row."""
    inputs = outputs = keras.Input(input_shape)
    for layer in layers:
        outputs = layer(outputs)
    return keras.Model(inputs, outputs)


def _target(model: keras.Model) -> np.ndarray:
    """Targets in ``[0, 1]`` of the model's output shape, for ``"mse"``."""
    return _rng().uniform(size=(EXAMPLES, *model.output.shape[1:])).astype("float32")


def _layer_model(input_shape: tuple, units: int, layer) -> tuple:
    """Dense scores of ``units`` on the last axis into ``layer``, fitted with ``"mse"``."""
    model = _dense_model(input_shape, keras.layers.Dense(units), layer)
    return model, "mse", _features(*input_shape), _target(model)


def _heads() -> np.ndarray:
    """``(EXAMPLES, WORDS + 1)`` head vectors of trees of 2 to ``WORDS`` words, ``-1`` padded:
    word 1 on the root, every other word on a word before it (one root child)."""
    rng = _rng()
    heads = np.full((EXAMPLES, WORDS + 1), -1)
    for example in range(EXAMPLES):
        words = 2 + example % (WORDS - 1)
        heads[example, 1 : words + 1] = [0, *(rng.integers(1, m) for m in range(2, words + 1))]
    return heads


def _tags() -> np.ndarray:
    """``(EXAMPLES, WORDS)`` tag sequences of 1 to ``WORDS`` tags, ``-1`` padded."""
    tags = _rng().integers(0, TAGS, size=(EXAMPLES, WORDS))
    tags[np.arange(WORDS)[None, :] > np.arange(EXAMPLES)[:, None] % WORDS] = -1
    return tags


def _arc_model(loss) -> tuple:
    """Arc scores ``[head, modifier]`` from each position's features, trained with ``loss``."""
    model = _dense_model((WORDS + 1, FEATURES), keras.layers.Dense(WORDS + 1))
    return model, loss, _features(WORDS + 1, FEATURES), _heads()


def _packed_sequence_model(loss) -> tuple:
    """Packed sequence scores ``(n, K, K + 1)`` from each position's features, trained with ``loss``."""
    model = _dense_model(
        (WORDS, FEATURES),
        keras.layers.Dense(TAGS * (TAGS + 1)),
        keras.layers.Reshape((WORDS, TAGS, TAGS + 1)),
    )
    return model, loss, _features(WORDS, FEATURES), _tags()


def _crf_tagger() -> tuple:
    """Embedding (mask) -> Dense -> ``SequenceScores``, trained with ``LinearChainCRFLoss``."""
    tags = _tags()
    words = np.where(tags >= 0, tags + 1 + 3 * (np.arange(WORDS) % 2), 0)
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(8, 4, mask_zero=True)(tokens)
    scores = ks.SequenceScores(use_boundary=True)(keras.layers.Dense(TAGS)(hidden))
    return keras.Model(tokens, scores), ks.LinearChainCRFLoss(), words, tags


def _gaussian_model() -> tuple:
    inputs = keras.Input((FEATURES,))
    mean = keras.layers.Dense(2)(inputs)
    std = keras.layers.Dense(2, activation="softplus")(inputs)
    outputs = projections.GaussianProjection(min_entropy=2.5, diagonal=True)([mean, std])
    x = _features(FEATURES)
    return keras.Model(inputs, outputs), ["mse", "mse"], x, [x[:, :2], np.ones((EXAMPLES, 2), "float32")]


def _lp_loss_model() -> tuple:
    """Scores of three labels, at most one on, trained with ``LPSparseMAPLoss`` on one-hot gold."""
    model = _dense_model((FEATURES,), keras.layers.Dense(3))
    gold = np.eye(3, dtype="float32")[_rng().integers(0, 3, size=EXAMPLES)]
    return model, ks.LPSparseMAPLoss(FactorGraph(3, [AtMostOne([0, 1, 2])])), _features(FEATURES), gold


#: name -> () -> (model, loss, x, y): one small model per layer and loss of the library.
MODELS = {
    "Sparsemax+SparsemaxLoss": lambda: (
        _dense_model((FEATURES,), keras.layers.Dense(TAGS), ks.Sparsemax()),
        ks.SparsemaxLoss(from_logits=False, sparse_labels=True),
        _features(FEATURES),
        _rng().integers(0, TAGS, size=EXAMPLES),
    ),
    "SparseMAP": lambda: _layer_model((FEATURES,), TAGS, ks.SparseMAP(SimplexStructure())),
    "SparseMAPSequence": lambda: _layer_model((WORDS, FEATURES), TAGS, ks.SparseMAPSequence()),
    "SparseMAPDependencyTree": lambda: _layer_model(
        (WORDS + 1, FEATURES), WORDS + 1, ks.SparseMAPDependencyTree()
    ),
    "SparseMAPMatching": lambda: _layer_model((3, FEATURES), 3, ks.SparseMAPMatching()),
    "SparseMAPBudget": lambda: _layer_model((FEATURES,), 4, ks.SparseMAPBudget(k=2)),
    "LPSparseMAP": lambda: _layer_model(
        (FEATURES,), 4, ks.LPSparseMAP(FactorGraph(4, [Budget([0, 1, 2, 3], 2), Pair(0, 1)]))
    ),
    "PolynomialNetwork": lambda: _layer_model((FEATURES,), FEATURES, ks.PolynomialNetwork(2, 3)),
    "FactorizationMachine": lambda: _layer_model((FEATURES,), FEATURES, ks.FactorizationMachine(2, 3)),
    "InterpolationProjection": lambda: _layer_model(
        (FEATURES,), 2, projections.InterpolationProjection(projections.L2Ball(1.0))
    ),
    "GaussianProjection": _gaussian_model,
    "SequenceScores+LinearChainCRFLoss": _crf_tagger,
    "TreeCRFLoss": lambda: _arc_model(ks.TreeCRFLoss()),
    "TreeCRFLoss(single_root)": lambda: _arc_model(ks.TreeCRFLoss(single_root=True)),
    "SparseMAPLoss": lambda: _arc_model(ks.SparseMAPLoss(DependencyTreeStructure())),
    "StructuredPerceptronLoss": lambda: _arc_model(ks.StructuredPerceptronLoss(DependencyTreeStructure())),
    "MarginSparseMAPLoss": lambda: _packed_sequence_model(ks.MarginSparseMAPLoss(SequenceStructure())),
    "StructuredHingeLoss": lambda: _packed_sequence_model(ks.StructuredHingeLoss(SequenceStructure())),
    "LPSparseMAPLoss": _lp_loss_model,
}


def fit_and_evaluate(name: str) -> dict:
    """``model.fit`` (one epoch of two batches) and ``model.evaluate`` of ``MODELS[name]``;
    both losses finite."""
    keras.utils.set_random_seed(0)
    model, loss, x, y = MODELS[name]()
    model.compile(keras.optimizers.Adam(0.01), loss)
    history = model.fit(x, y, epochs=1, batch_size=BATCH, verbose=0).history["loss"]
    evaluated = model.evaluate(x, y, batch_size=EXAMPLES, verbose=0)
    evaluated = evaluated[0] if isinstance(evaluated, list) else evaluated
    assert np.isfinite(history).all() and np.isfinite(evaluated), (history, evaluated)
    return {"fit": np.array(history), "evaluate": np.array(evaluated)}


# --- the tests ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backend_runs(tmp_path_factory) -> dict:
    """backend -> its pending calls of :func:`fit_and_evaluate`, one per model: JAX and PyTorch
    started first, each in its process, then TensorFlow here while they run."""
    directory = tmp_path_factory.mktemp("backends_fit")
    calls = {name: (f"{MODULE}:fit_and_evaluate", {"name": name}) for name in MODELS}
    runs = {
        backend: start_calls(backend, calls, directory)
        for backend in (*OTHER_BACKENDS, "tensorflow")
        if missing_backend(backend) is None
    }
    yield runs
    for run in runs.values():
        if run.process is not None and run.process.poll() is None:
            run.process.kill()


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("backend", backend_params(*BACKENDS))
def test_fits_and_evaluates(backend, name, backend_runs):
    backend_runs[backend].wait()[name]  # raises the backend's traceback if it failed


def test_the_table_holds_every_layer_and_loss():
    exported = {
        value
        for module in (ks, ks.projections, ks.polynomial)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, (keras.layers.Layer, keras.losses.Loss))
    }
    covered = set()
    for build in MODELS.values():
        model, loss, _, _ = build()
        covered |= {type(layer) for layer in model.layers} | {type(item) for item in keras.tree.flatten(loss)}
    assert exported - covered == set(), sorted(cls.__name__ for cls in exported - covered)
