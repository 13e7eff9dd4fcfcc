"""Training with Keras's distribution API on JAX: a SparseMAP model over several devices.

The README's tagger (``Embedding`` -> ``Dense`` -> ``SequenceScores``, trained with
``SparseMAPLoss``, whose solver runs on the host through ``jax.pure_callback``) is trained
on the same global batches three ways, each in fresh JAX processes
(``tests/backend_harness.py``): on one device; with ``keras.distribution.DataParallel`` over
two CPU devices of one process (``XLA_FLAGS=--xla_force_host_platform_device_count=2``, set
before JAX starts); and over two local processes joined by ``keras.distribution.initialize``
(``jax.distributed.initialize``: a coordinator on localhost, Gloo collectives on CPU), each
process feeding its half of every global batch. The weights must agree to 1e-5. Skipped
where JAX is not installed.
"""

from __future__ import annotations

import socket

import keras
import numpy as np
import pytest

import keras_structured as ks
from keras_structured.engine import SequenceStructure
from tests.backend_harness import require_backend, start_calls

MODULE = __name__
TWO_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
GLOBAL_BATCH = 16
EPOCHS = 2
WEIGHT_TOL = 1e-5


# --- what the JAX processes run -----------------------------------------------------------


def _data() -> tuple[np.ndarray, np.ndarray]:
    """The README's synthetic tagging data: words (0 pads) and tags (-1 pads)."""
    rng = np.random.default_rng(0)
    words = rng.integers(1, 12, size=(64, 8))
    tags = words % 3
    lengths = rng.integers(3, 9, size=64)
    padding = np.arange(8) >= lengths[:, None]
    words[padding], tags[padding] = 0, -1
    return words, tags


def _tagger() -> keras.Model:
    """The README's tagger, compiled with the SparseMAP loss (plain SGD: no step-size
    normalisation to magnify rounding differences).

    Its transitions start random, not at zero as in the README: with zero transition scores
    the loss is flat along the transition marginals ``v`` of the optimal face (many ``v``
    share the optimal ``u``), its gradient in the transitions is not unique, and the scores'
    rounding differences between one and two devices (1e-8: the sharded matrix products sum
    in another order) pick another one, moving the first step's transitions by 1e-4."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(12, 16, mask_zero=True)(tokens)
    unary = keras.layers.Dense(3)(hidden)
    scores = ks.SequenceScores(use_boundary=True, transitions_initializer="random_normal")(unary)
    model = keras.Model(tokens, scores)
    model.compile(keras.optimizers.SGD(0.5), ks.SparseMAPLoss(SequenceStructure()))
    return model


def _process_share(array: np.ndarray, process_id: int, num_processes: int) -> np.ndarray:
    """The rows of ``array`` that process ``process_id`` feeds: its slice of every global batch."""
    per_process = GLOBAL_BATCH // num_processes
    batches = array.reshape((-1, GLOBAL_BATCH) + array.shape[1:])
    share = batches[:, process_id * per_process : (process_id + 1) * per_process]
    return share.reshape((-1,) + array.shape[1:])


def train(devices: int = 1, process_id: int = 0, num_processes: int = 1, port: int = 0) -> dict:
    """Fits the tagger on ``devices`` devices (``DataParallel`` when more than one) of
    ``num_processes`` processes (``keras.distribution.initialize`` when more than one);
    returns the initial and final weights, the losses and the devices holding the weights."""
    import jax

    if num_processes > 1:
        keras.distribution.initialize(f"localhost:{port}", num_processes, process_id)
    assert jax.device_count() >= devices, jax.devices()
    if devices > 1:
        # Each process feeds its own share of every global batch (no tf.data to shard).
        distribution = keras.distribution.DataParallel(
            devices=keras.distribution.list_devices()[:devices], auto_shard_dataset=num_processes == 1
        )
        keras.distribution.set_distribution(distribution)
    try:
        keras.utils.set_random_seed(0)
        model = _tagger()
        initial = model.get_weights()
        words, tags = (_process_share(array, process_id, num_processes) for array in _data())
        history = model.fit(
            words, tags, batch_size=GLOBAL_BATCH // num_processes, epochs=EPOCHS, shuffle=False, verbose=0
        )
        holders = {len(weight.value.sharding.device_set) for weight in model.weights}
        results = {f"final/{i}": weight for i, weight in enumerate(model.get_weights())}
        results.update({f"initial/{i}": weight for i, weight in enumerate(initial)})
        return {**results, "losses": np.array(history.history["loss"]), "devices": np.array(sorted(holders))}
    finally:
        keras.distribution.set_distribution(None)


# --- the tests, under TensorFlow --------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict:
    """One JAX process with two CPU devices: the tagger trained on one of them, then with
    ``DataParallel`` over both."""
    require_backend("jax")
    calls = {"one": (f"{MODULE}:train", {"devices": 1}), "two": (f"{MODULE}:train", {"devices": 2})}
    results = start_calls("jax", calls, tmp_path_factory.mktemp("distribution"), env=TWO_DEVICES).wait()
    return {name: results[name] for name in calls}


def _assert_same_weights(values: dict, expected: dict) -> None:
    keys = [key for key in expected if key.startswith(("initial/", "final/"))]
    assert keys and sorted(keys) == sorted(key for key in values if key.startswith(("initial/", "final/")))
    for key in keys:
        np.testing.assert_allclose(values[key], expected[key], rtol=WEIGHT_TOL, atol=WEIGHT_TOL, err_msg=key)


def test_data_parallel_over_two_devices_equals_one_device(one_process):
    one, two = one_process["one"], one_process["two"]
    assert one["devices"].tolist() == [1] and two["devices"].tolist() == [2]  # weights replicated on both
    assert one["losses"][-1] < one["losses"][0], one["losses"]
    assert not np.allclose(one["final/0"], one["initial/0"])  # the steps moved the weights
    _assert_same_weights(two, one)
    # The epoch losses fall from about 1.5 to 1e-3: an absolute tolerance besides the relative
    # one, as for the weights, since the devices sum in another order (4e-8 apart seen at 7e-4).
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=WEIGHT_TOL, atol=WEIGHT_TOL)


@pytest.mark.slow
def test_two_processes_equal_one_device(one_process, tmp_path):
    port = _free_port()
    runs = [
        start_calls(
            "jax",
            {"train": (f"{MODULE}:train", {"devices": 2, "process_id": i, "num_processes": 2, "port": port})},
            tmp_path / f"process{i}",
            env={"JAX_PLATFORMS": "cpu"},
            timeout=300,
        )
        for i in range(2)
    ]
    results = [run.wait()["train"] for run in runs]
    for result in results:
        assert result["devices"].tolist() == [2]
        _assert_same_weights(result, one_process["one"])
