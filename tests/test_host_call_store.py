"""The host call's store (:mod:`keras_structured.ops.host_call._store`): what a forward call
keeps for its backward one. On TensorFlow nothing is kept where no tape records the call
(``predict``, ``evaluate``, eager calls), a function traced without a tape and differentiated
under one still gets its exact gradient, and the store's bound holds the memory really kept."""

from __future__ import annotations

import gc
import tracemalloc

import keras
import numpy as np
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine.lp import Budget, FactorGraph, LPSparseMAPOptions, Pair, Xor
from keras_structured.ops import lp_sparsemap_host
from keras_structured.ops.host_call import HandleStore
from keras_structured.ops.lp_sparsemap_host import SOLUTIONS

# Made once: the host functions are found by graph object.
GRAPH = FactorGraph(4, [Budget([0, 1, 2, 3], 2), Pair(0, 1), Xor([2, 3])])


def _model() -> keras.Model:
    inputs = keras.Input((3,))
    outputs = ks.LPSparseMAP(GRAPH)(keras.layers.Dense(4)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_inference_keeps_nothing_and_training_takes_what_it_kept():
    """Every predict batch kept an entry before (100 batches left 102), and every evaluation
    or validation batch, and every eager call."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 3)).astype("float32"), rng.uniform(size=(64, 4)).astype("float32")
    model = _model()
    kept = len(SOLUTIONS)
    model.predict(np.concatenate([x] * 5), batch_size=32, verbose=0)
    model.evaluate(x, y, batch_size=32, verbose=0)
    model(x[:32])
    ks.lp_sparsemap(GRAPH, x[:8, :3] @ np.ones((3, 4), "float32"))
    assert len(SOLUTIONS) == kept
    model.fit(x, y, batch_size=32, epochs=1, validation_data=(x, y), verbose=0)
    assert len(SOLUTIONS) == kept


def test_a_function_traced_without_a_tape_still_has_its_gradient():
    """Differentiated under a tape outside it, a tf.function traced without one solves
    again in its backward call (nothing was kept) and gives the same gradient."""
    rng = np.random.default_rng(1)
    eta_u, eta_v = tf.constant(rng.normal(size=(5, 4))), tf.constant(rng.normal(size=(5, GRAPH.v_size)))
    upstream = tf.constant(rng.normal(size=(5, 4)))
    solve = tf.function(lambda u, v: ks.lp_sparsemap(GRAPH, u, v)[0])
    solve(eta_u, eta_v)  # traced here, with no tape
    gradients = []
    for function in (solve, lambda u, v: ks.lp_sparsemap(GRAPH, u, v)[0]):
        kept = len(SOLUTIONS)
        with tf.GradientTape() as tape:
            tape.watch([eta_u, eta_v])
            u = function(eta_u, eta_v)
        gradients.append(tape.gradient(u, [eta_u, eta_v], output_gradients=upstream))
        assert len(SOLUTIONS) == kept
    for traced, eager in zip(*gradients, strict=True):
        np.testing.assert_array_equal(traced.numpy(), eager.numpy())


def test_the_bound_holds_the_memory_really_kept(monkeypatch):
    """Forward calls whose backward calls never come fill a store of 128 KiB: what it keeps,
    measured by tracemalloc, is within the bound (it counted an eighth of it, and a
    seventeenth of the resident memory, when the solutions kept their SuperLU factors)."""
    store = HandleStore(max_bytes=2**17)
    monkeypatch.setattr(lp_sparsemap_host, "SOLUTIONS", store)
    rng = np.random.default_rng(2)
    options = LPSparseMAPOptions()

    def forward():
        eta_u, eta_v = rng.normal(size=(8, 4)), rng.normal(size=(8, GRAPH.v_size))
        lp_sparsemap_host.forward(eta_u, eta_v, graph=GRAPH, options=options)

    forward()
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(14):
            forward()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 1 < len(store) < 14
    assert held <= 1.3 * store.max_bytes  # and a few allocations of the loop


def test_discarding_keeps_nothing_and_takes_give_none():
    from keras_structured.ops.host_call._store import discarding  # (new: the others run on older code)

    store = HandleStore()
    with discarding():
        handles = store.put(["a", "b"], size=2)
    assert len(store) == 0 and store.nbytes == 0
    assert store.take(handles) is None
    kept = store.put(["a"], size=1)
    assert kept[0, 0] != handles[0, 0]
    assert store.take(kept)[0] == ["a"]
