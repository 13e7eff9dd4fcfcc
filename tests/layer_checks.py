"""One helper that runs the standard checks on a Keras layer (after Keras's ``run_layer_test``).

``check_layer(layer_class, init_kwargs, inputs, tmp_path=tmp_path)`` checks, on tiny inputs:

1. config: ``from_config(get_config())`` and a ``keras.saving`` serialization round trip
   give back the same class and config;
2. eager call: finite outputs whose shapes are those of ``compute_output_shape`` and of a
   symbolic call on ``keras.Input``; the ``from_config(get_config())`` clone, given the same
   weights, returns the same outputs;
3. compiled call: the same outputs as eager, under ``tf.function`` on TensorFlow and, when
   ``supports_jit``, ``jax.jit`` of ``stateless_call`` on JAX (nothing on PyTorch);
4. ``model.fit``: two Adam steps on a squared error to random targets give a finite loss
   and move every trainable weight of the layer, or the kernel of an upstream ``Dense``
   (initialised to the identity) when the layer has none;
5. ``.keras`` save and load of the trained model: same layer class and config, identical
   outputs (eager calls of both models);
6. ``mixed_float16`` global policy (restored afterwards): the layer, given the float32
   layer's weights, returns finite outputs in the documented dtype (float16 unless the
   layer documents another), the dtype of the symbolic call too, close to the float32
   outputs; its weights stay float32;
7. ``supports_jit``: False exactly when the traced call holds a Python op (a
   ``tf.numpy_function`` or ``tf.py_function``, e.g. a MAP oracle); when True, the call
   compiles with XLA and agrees with eager. Checked last and raised as
   :class:`SupportsJitMismatch`, so that a test can mark a known wrong flag as an expected
   failure (``raises=SupportsJitMismatch``) without hiding the other checks. TensorFlow only:
   on the other backends ``supports_jit`` only chooses whether check 3 runs.

Checks 1, 2 and 4-6 run on every Keras backend (``tests/backend_harness.py`` runs this helper
under JAX and PyTorch).

Call-time tensors other than the inputs (a ``mask``, ``lengths``) go in ``call_kwargs``;
in the models they become extra ``keras.Input``s passed by keyword.

Example (in a test taking pytest's ``tmp_path``)::

    check_layer(Sparsemax, {"axis": -1}, scores, call_kwargs={"mask": mask}, tmp_path=tmp_path)
"""

from __future__ import annotations

import keras
import numpy as np

PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})


class SupportsJitMismatch(AssertionError):
    """``supports_jit`` disagrees with the traced call; raised after every other check passed."""


@keras.saving.register_keras_serializable(package="keras_structured_tests")
class SquaredError(keras.losses.Loss):
    """Squared error averaged over the axes from ``rank`` on: Keras weights the loss by the
    output mask, of that rank (``"mse"`` averages the last axis whatever the mask's rank)."""

    def __init__(self, rank: int, **kwargs):
        super().__init__(**kwargs)
        self.rank = rank

    def call(self, y_true, y_pred):
        error = keras.ops.square(y_pred - y_true)
        axes = tuple(range(self.rank, len(error.shape)))
        return keras.ops.mean(error, axis=axes) if axes else error

    def get_config(self):
        return {**super().get_config(), "rank": self.rank}


def check_layer(
    layer_class,
    init_kwargs: dict,
    inputs,
    *,
    tmp_path,
    call_kwargs: dict | None = None,
    upstream_activation: str | None = None,
    mixed_precision_dtype: str = "float16",
    mixed_precision_tol: float = 5e-2,
    graph_tol: float = 1e-6,
    custom_objects: dict | None = None,
) -> keras.layers.Layer:
    """Runs the checks listed in the module docstring; returns the layer called eagerly.

    Seeds Keras, NumPy and Python (``keras.utils.set_random_seed(0)``) so that weights and
    targets are the same on every run.

    Args:
        layer_class: the layer class.
        init_kwargs: constructor arguments.
        inputs: a numpy array, or a list of them, passed as the layer's first argument; the
            layer must return floating tensors (one, a list or a dict).
        tmp_path: a directory for the ``.keras`` file.
        call_kwargs: other call arguments, as numpy arrays (e.g. ``mask``, ``lengths``).
        upstream_activation: activation of the upstream ``Dense`` used when the layer has
            no trainable weights (e.g. ``"softmax"`` for inputs that must be probabilities).
        mixed_precision_dtype: the output dtype the layer documents under ``mixed_float16``.
        mixed_precision_tol: ``rtol`` and ``atol`` between float16 and float32 outputs.
        graph_tol: ``rtol`` and ``atol`` between eager and compiled outputs.
        custom_objects: passed to deserialization and ``load_model``.
    """
    call_kwargs = dict(call_kwargs or {})
    keras.utils.set_random_seed(0)
    check_config(layer_class, init_kwargs, custom_objects)

    layer = layer_class(**init_kwargs)
    outputs = _numpy(layer(_tensors(inputs), **_tensors(call_kwargs)))
    for output in _flat(outputs):
        assert np.all(np.isfinite(output)), f"{layer_class.__name__}: non-finite eager outputs"
    _assert_shapes(layer.compute_output_shape(_shapes(inputs)), outputs, "compute_output_shape")
    clone = layer_class.from_config(layer.get_config())
    clone(_tensors(inputs), **_tensors(call_kwargs))
    clone.set_weights(layer.get_weights())
    _assert_close(
        _numpy(clone(_tensors(inputs), **_tensors(call_kwargs))), outputs, 0.0, "from_config(get_config())"
    )
    symbolic = _model(layer_class(**init_kwargs), inputs, call_kwargs)
    _assert_shapes(_structure_like(symbolic.outputs, outputs, lambda t: t.shape), outputs, "symbolic call")

    python_ops = _check_compiled(layer, inputs, call_kwargs, outputs, graph_tol)
    model = _check_fit(layer_class, init_kwargs, inputs, call_kwargs, outputs, upstream_activation)
    _check_save_load(model, layer_class, inputs, call_kwargs, tmp_path, custom_objects)
    _check_mixed_precision(
        layer, init_kwargs, inputs, call_kwargs, outputs, mixed_precision_dtype, mixed_precision_tol
    )
    _check_supports_jit(layer, python_ops, inputs, call_kwargs, outputs, graph_tol)
    return layer


def check_config(layer_class, init_kwargs: dict, custom_objects: dict | None = None) -> None:
    """``from_config`` and ``keras.saving`` round trips give back the class and config."""
    layer = layer_class(**init_kwargs)
    config = layer.get_config()
    clone = layer_class.from_config(config)
    assert type(clone) is layer_class and clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(layer), custom_objects=custom_objects
    )
    assert type(restored) is layer_class and restored.get_config() == config


def _python_ops(graph) -> set[str]:
    """The Python-calling ops of a traced graph, nested functions included."""
    graph_def = graph.as_graph_def()
    ops = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        ops.update(node.op for node in function.node_def)
    return ops & PYTHON_OPS


def _check_compiled(layer, inputs, call_kwargs, expected, tol) -> set[str]:
    """The compiled call agrees with eager; returns the Python-calling ops of the traced call
    (TensorFlow; an empty set on the other backends)."""
    x, kwargs = _tensors(inputs), _tensors(call_kwargs)
    backend = keras.backend.backend()
    if backend == "jax" and layer.supports_jit:
        import jax

        def call(trainable, non_trainable, x, kwargs):
            return layer.stateless_call(trainable, non_trainable, x, **kwargs)[0]

        variables = (
            [v.value for v in layer.trainable_variables],
            [v.value for v in layer.non_trainable_variables],
        )
        compiled = jax.jit(call)(*variables, x, kwargs)
        _assert_close(_numpy(compiled), expected, tol, f"{type(layer).__name__} under jax.jit")
    if backend != "tensorflow":
        return set()
    import tensorflow as tf

    traced = tf.function(_caller(layer)).get_concrete_function(x, kwargs)
    _assert_close(_numpy(traced(x, kwargs)), expected, tol, f"{type(layer).__name__} under tf.function")
    return _python_ops(traced.graph)


def _check_supports_jit(layer, python_ops: set[str], inputs, call_kwargs, expected, tol) -> None:
    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    name = type(layer).__name__
    if layer.supports_jit == bool(python_ops):
        raise SupportsJitMismatch(
            f"{name}.supports_jit is {layer.supports_jit} but its call holds Python ops {sorted(python_ops)}"
        )
    if layer.supports_jit:
        x, kwargs = _tensors(inputs), _tensors(call_kwargs)
        compiled = tf.function(_caller(layer), jit_compile=True)(x, kwargs)
        _assert_close(_numpy(compiled), expected, tol, f"{name} under XLA")


def _caller(layer):
    def call(x, kwargs):
        return layer(x, **kwargs)

    return call


def _check_fit(layer_class, init_kwargs, inputs, call_kwargs, outputs, upstream_activation):
    layer = layer_class(**init_kwargs)
    layer(_tensors(inputs), **_tensors(call_kwargs))  # builds, to know the trainable weights
    upstream = None
    if not layer.trainable_weights:
        first = _flat(inputs)[0]
        upstream = keras.layers.Dense(
            first.shape[-1], kernel_initializer="identity", activation=upstream_activation
        )
    model = _model(layer, inputs, call_kwargs, upstream)
    # The upstream kernel only: a layer invariant to shifts along an axis (Sparsemax along a
    # non-last axis) leaves the bias a gradient of exactly zero, nonzero only by rounding.
    watched = [upstream.kernel] if upstream is not None else layer.trainable_weights
    before = [w.numpy().copy() for w in watched]
    rng = np.random.default_rng(0)
    targets = _structure_like(outputs, outputs, lambda y: rng.normal(size=y.shape).astype("float32"))
    losses = [SquaredError(_loss_rank(output)) for output in model.outputs]
    losses = losses if isinstance(outputs, list) else losses[0]
    model.compile(keras.optimizers.Adam(0.01), losses)
    batch = len(_flat(inputs)[0])
    history = model.fit(_model_data(inputs, call_kwargs), targets, batch_size=-(-batch // 2), verbose=0)
    assert np.all(np.isfinite(history.history["loss"])), f"{layer_class.__name__}: non-finite fit loss"
    for weight, old in zip(watched, before, strict=True):
        assert not np.array_equal(weight.numpy(), old), (
            f"{layer_class.__name__}: fit left {weight.path} unchanged"
        )
    return model


def _loss_rank(output) -> int:
    mask = getattr(output, "_keras_mask", None)
    return len((output if mask is None else mask).shape)


def _check_save_load(model, layer_class, inputs, call_kwargs, tmp_path, custom_objects) -> None:
    data = _model_data(inputs, call_kwargs)
    path = tmp_path / f"{layer_class.__name__}.keras"
    model.save(path)
    restored = keras.saving.load_model(path, custom_objects=custom_objects)
    [original] = [layer for layer in model.layers if type(layer) is layer_class]
    [loaded] = [layer for layer in restored.layers if type(layer) is layer_class]
    assert loaded.get_config() == original.get_config()
    data = _tensors(data if len(data) > 1 else data[0])
    # Eager calls of both models (the traced call is checked by _check_tf_function): a predict
    # function traced for each model would cost more than the rest of this check.
    for got, want in zip(_flat(_numpy(restored(data))), _flat(_numpy(model(data))), strict=True):
        np.testing.assert_array_equal(got, want, err_msg=f"{layer_class.__name__} after .keras save/load")


def _check_mixed_precision(layer32, init_kwargs, inputs, call_kwargs, outputs32, dtype, tol) -> None:
    name = type(layer32).__name__
    kwargs = {key: value for key, value in init_kwargs.items() if key != "dtype"}
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        layer = type(layer32)(**kwargs)
        symbolic = _model(layer, inputs, call_kwargs)
        layer.set_weights(layer32.get_weights())
        outputs = layer(_tensors(inputs), **_tensors(call_kwargs))
        for weight in layer.weights:
            if "float" in weight.dtype:
                assert weight.dtype == "float32", (
                    f"{name} under mixed_float16: {weight.path} is {weight.dtype}"
                )
        for output, spec in zip(_flat(outputs), _flat(symbolic.outputs), strict=True):
            got = keras.backend.standardize_dtype(output.dtype)
            assert got == dtype, f"{name} under mixed_float16 returns {got}, documented {dtype}"
            assert keras.backend.standardize_dtype(spec.dtype) == got, (
                f"{name} under mixed_float16: symbolic dtype {spec.dtype}, eager dtype {got}"
            )
    finally:
        keras.config.set_dtype_policy(previous)
    outputs = _numpy(outputs)
    for output in _flat(outputs):
        assert np.all(np.isfinite(output.astype("float32"))), f"{name}: non-finite mixed_float16 outputs"
    _assert_close(
        _structure_like(outputs, outputs, lambda y: y.astype("float32")), outputs32, tol, f"{name} in float16"
    )


def _model(layer, inputs, call_kwargs, upstream=None) -> keras.Model:
    """A functional model: ``keras.Input``s for the inputs and the call arguments, then the layer."""
    flat = [keras.Input(x.shape[1:], dtype=x.dtype.name) for x in _flat(inputs)]
    extra = {key: keras.Input(value.shape[1:], dtype=value.dtype.name) for key, value in call_kwargs.items()}
    layer_inputs = list(flat)
    if upstream is not None:
        layer_inputs[0] = upstream(layer_inputs[0])
    outputs = layer(layer_inputs if isinstance(inputs, list) else layer_inputs[0], **extra)
    return keras.Model(flat + list(extra.values()), outputs)


def _model_data(inputs, call_kwargs) -> list:
    return _flat(inputs) + list(call_kwargs.values())


def _flat(values) -> list:
    if isinstance(values, dict):
        return [values[key] for key in sorted(values)]
    return list(values) if isinstance(values, (list, tuple)) else [values]


def _structure_like(values, template, fn):
    """``fn`` over ``values`` (flattened), packed like ``template`` (an array, list or dict)."""
    flat = [fn(value) for value in _flat(values)]
    if isinstance(template, dict):
        return dict(zip(sorted(template), flat, strict=True))
    return flat if isinstance(template, (list, tuple)) else flat[0]


def _tensors(values):
    convert = keras.ops.convert_to_tensor
    if isinstance(values, dict):
        return {key: convert(value) for key, value in values.items()}
    if isinstance(values, (list, tuple)):
        return [convert(value) for value in values]
    return convert(values)


def _numpy(values):
    return _structure_like(values, values, keras.ops.convert_to_numpy)


def _shapes(inputs):
    return [tuple(x.shape) for x in inputs] if isinstance(inputs, list) else tuple(inputs.shape)


def _assert_shapes(expected, outputs, what: str) -> None:
    """Shapes match, a ``None`` (unknown) dimension or shape matching anything."""
    if isinstance(expected, tuple) and all(d is None or isinstance(d, int) for d in expected):
        expected = [expected]  # one shape
    actual = [tuple(y.shape) for y in _flat(outputs)]
    expected = [None if shape is None else tuple(shape) for shape in _flat(expected)]
    assert len(expected) == len(actual), f"{what} gives {len(expected)} outputs, the call {len(actual)}"
    for want, got in zip(expected, actual, strict=True):
        if want is None:
            continue
        assert len(want) == len(got) and all(w is None or w == g for w, g in zip(want, got, strict=True)), (
            f"{what} gives shape {want}, the call {got}"
        )


def _assert_close(got, want, tol: float, what: str) -> None:
    for g, w in zip(_flat(got), _flat(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=what)
