"""Keras layers for multi-output polynomial networks (PNs) and factorization machines (FMs).

Both share a basis ``H`` (``k x d``, the hidden units) across outputs and give output ``c`` a
low-rank interaction matrix ``W_c = H^T diag(v_c) H`` (Blondel et al., "Multi-output Polynomial
Networks and Factorization Machines", 2017). The maths lives in :mod:`._ops`, in ``keras.ops``;
the layers store arguments and weights and delegate. They run on every Keras backend; sparse
inputs are ``tf.SparseTensor`` on TensorFlow and ``jax.experimental.sparse.BCOO`` on JAX.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_structured.polynomial import _ops
from keras_structured.validation import check_integer


class _SharedBasisLayer(keras.layers.Layer):
    """Base of both layers: ``basis (rank, d)`` then ``output_weights (rank, units)``."""

    def __init__(
        self,
        units: int,
        rank: int,
        basis_initializer="glorot_uniform",
        output_initializer="glorot_uniform",
        basis_regularizer=None,
        output_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = check_integer("units", units, minimum=1)
        self.rank = check_integer("rank", rank, minimum=1)
        self.basis_initializer = keras.initializers.get(basis_initializer)
        self.output_initializer = keras.initializers.get(output_initializer)
        self.basis_regularizer = keras.regularizers.get(basis_regularizer)
        self.output_regularizer = keras.regularizers.get(output_regularizer)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        # Like Dense: every vector along the last axis is mapped on its own, so a Keras
        # mask on the leading axes (e.g. padded sequences) still holds for the outputs.
        self.supports_masking = True

    def __call__(self, inputs, *args, **kwargs):
        sparse = _ops.is_sparse(inputs) or getattr(inputs, "sparse", False)
        if sparse and keras.backend.backend() == "tensorflow":
            # XLA has no kernel for sparse-dense matmul: models fed sparse inputs must not jit-compile.
            # (jax.jit compiles JAX's sparse arrays.)
            self.supports_jit = False
        return super().__call__(inputs, *args, **kwargs)

    def _basis_dim(self, input_dim: int) -> int:
        return input_dim

    def build(self, input_shape) -> None:
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(
                f"{type(self).__name__} needs the last dimension of its inputs to be known. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_dim})
        self.basis = self._add_weight("basis", (self.rank, self._basis_dim(input_dim)), "basis")
        self.output_weights = self._add_weight("output_weights", (self.rank, self.units), "output")

    def _add_weight(self, name: str, shape: tuple, setting: str):
        """A weight initialised and regularised by the layer's ``{setting}_initializer`` and
        ``{setting}_regularizer``."""
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=getattr(self, f"{setting}_initializer"),
            regularizer=getattr(self, f"{setting}_regularizer"),
        )

    def _serialized_settings(self, *settings: str) -> dict:
        """``{setting}_initializer`` then ``{setting}_regularizer`` of ``settings``, serialized for
        ``get_config``."""
        initializers = {
            f"{setting}_initializer": keras.initializers.serialize(getattr(self, f"{setting}_initializer"))
            for setting in settings
        }
        regularizers = {
            f"{setting}_regularizer": keras.regularizers.serialize(getattr(self, f"{setting}_regularizer"))
            for setting in settings
        }
        return {**initializers, **regularizers}

    def _cast_inputs(self, inputs):
        if _ops.is_sparse(inputs) and len(inputs.shape) != 2:
            raise ValueError(
                f"{type(self).__name__} takes sparse inputs of shape (batch, d) only. "
                f"Received: shape={inputs.shape}"
            )
        return ops.cast(inputs, self.compute_dtype)

    def compute_output_shape(self, input_shape) -> tuple:
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(units=self.units, rank=self.rank, **self._serialized_settings("basis", "output"))
        return config


@keras.saving.register_keras_serializable(package="keras_structured")
class PolynomialNetwork(_SharedBasisLayer):
    """Multi-output polynomial network: a hidden layer with squared activation.

    Computes, for each output ``c``,
    ``o_c(x) = sum_r V[r, c] (h_r . x)^2 = x^T W_c x`` with ``W_c = H^T diag(v_c) H``,
    where ``H`` (``rank x d``, attribute ``basis``) is shared by all outputs and ``V``
    (``rank x units``, attribute ``output_weights``) mixes the hidden units per output.
    With ``augment=True`` the input is ``[1, x]`` (the constant first), so ``H`` has
    ``d + 1`` columns and the quadratic form also holds the linear term ``2 W_c[0, 1:] . x``
    and the bias ``W_c[0, 0]``. Cost ``O(d k)`` per example, ``O(nnz k)`` for sparse inputs.

    Args:
        units: number of outputs ``m``, a positive integer.
        rank: number of basis vectors (hidden units) ``k``, a positive integer.
        augment: prepend a constant feature 1 to the inputs.
        basis_initializer: initializer of ``basis``.
        output_initializer: initializer of ``output_weights``.
        basis_regularizer: optional regularizer of ``basis``.
        output_regularizer: optional regularizer of ``output_weights``.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: dense tensor ``(batch, ..., d)``, or a sparse one ``(batch, d)``: a
            ``tf.SparseTensor`` on TensorFlow, a ``jax.experimental.sparse.BCOO`` on JAX (PyTorch
            takes dense inputs only). TensorFlow's XLA has no sparse matmul: there a functional
            model fed sparse inputs is never jit-compiled; compile a subclassed one with
            ``jit_compile=False``. A Keras mask on the leading axes (e.g. padded sequences) is
            passed on unchanged, as by ``Dense``.

    Returns:
        Tensor ``(batch, ..., units)`` of ``o_c(x)``, in the layer's compute dtype.

    Raises:
        ValueError: at construction, for ``units`` or ``rank`` that are not positive
            integers; at build time, for inputs whose last dimension is unknown; at call
            time, for sparse inputs that are not ``(batch, d)``.

    Example:
        >>> layer = PolynomialNetwork(units=2, rank=1)
        >>> layer.build((None, 2))
        >>> layer.set_weights([np.array([[1.0, 2.0]]), np.array([[1.0, -1.0]])])
        >>> keras.ops.convert_to_numpy(layer(np.array([[1.0, 1.0]])))  # (1 + 2)^2 times (1, -1)
        array([[ 9., -9.]], dtype=float32)
    """

    def __init__(
        self,
        units: int,
        rank: int,
        augment: bool = False,
        basis_initializer="glorot_uniform",
        output_initializer="glorot_uniform",
        basis_regularizer=None,
        output_regularizer=None,
        **kwargs,
    ):
        super().__init__(
            units,
            rank,
            basis_initializer=basis_initializer,
            output_initializer=output_initializer,
            basis_regularizer=basis_regularizer,
            output_regularizer=output_regularizer,
            **kwargs,
        )
        self.augment = bool(augment)

    def _basis_dim(self, input_dim: int) -> int:
        return input_dim + 1 if self.augment else input_dim

    def call(self, inputs):
        return _ops.polynomial_network(
            self._cast_inputs(inputs), self.basis, self.output_weights, augment=self.augment
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config["augment"] = self.augment
        return config


@keras.saving.register_keras_serializable(package="keras_structured")
class FactorizationMachine(_SharedBasisLayer):
    """Multi-output factorization machine: pairwise interactions through a shared low-rank basis.

    Computes, for each output ``c``,
    ``o_c(x) = b_c + w_c . x + sum_r V[r, c] ANOVA2(h_r, x)`` with
    ``ANOVA2(h, x) = sum_{i<j} h_i x_i h_j x_j = ((h . x)^2 - sum_i h_i^2 x_i^2) / 2``,
    i.e. ``sum_{i<j} (W_c)_{ij} x_i x_j`` with ``W_c = H^T diag(v_c) H``: unlike
    :class:`PolynomialNetwork`, no squared feature ``x_i^2`` enters. ``H`` (``rank x d``) is the
    attribute ``basis``, ``V`` (``rank x units``) ``output_weights``, ``w`` (``d x units``)
    ``kernel`` and ``b`` ``bias``. Cost ``O(d k)`` per example, ``O(nnz k)`` for sparse inputs.

    Args:
        units: number of outputs ``m``, a positive integer.
        rank: number of basis vectors ``k``, a positive integer.
        use_linear: learn the linear term ``w_c . x``.
        use_bias: learn the bias ``b_c``.
        basis_initializer: initializer of ``basis``.
        output_initializer: initializer of ``output_weights``.
        kernel_initializer: initializer of ``kernel``.
        bias_initializer: initializer of ``bias``.
        basis_regularizer: optional regularizer of ``basis``.
        output_regularizer: optional regularizer of ``output_weights``.
        kernel_regularizer: optional regularizer of ``kernel``.
        bias_regularizer: optional regularizer of ``bias``.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments, returns and errors: as for :class:`PolynomialNetwork`.

    Example:
        >>> layer = FactorizationMachine(units=1, rank=1)
        >>> layer.build((None, 3))
        >>> basis, output_weights = np.array([[1.0, 2.0, 3.0]]), np.array([[1.0]])
        >>> kernel, bias = np.array([[1.0], [0.0], [0.0]]), np.array([0.5])
        >>> layer.set_weights([basis, output_weights, kernel, bias])
        >>> keras.ops.convert_to_numpy(layer(np.ones((1, 3))))  # (1*2 + 1*3 + 2*3) + 1 + 0.5
        array([[12.5]], dtype=float32)
    """

    def __init__(
        self,
        units: int,
        rank: int,
        use_linear: bool = True,
        use_bias: bool = True,
        basis_initializer="glorot_uniform",
        output_initializer="glorot_uniform",
        kernel_initializer="zeros",
        bias_initializer="zeros",
        basis_regularizer=None,
        output_regularizer=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        **kwargs,
    ):
        super().__init__(
            units,
            rank,
            basis_initializer=basis_initializer,
            output_initializer=output_initializer,
            basis_regularizer=basis_regularizer,
            output_regularizer=output_regularizer,
            **kwargs,
        )
        self.use_linear, self.use_bias = bool(use_linear), bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)

    def build(self, input_shape) -> None:
        super().build(input_shape)
        self.kernel = self.bias = None
        if self.use_linear:
            self.kernel = self._add_weight("kernel", (input_shape[-1], self.units), "kernel")
        if self.use_bias:
            self.bias = self._add_weight("bias", (self.units,), "bias")

    def call(self, inputs):
        return _ops.factorization_machine(
            self._cast_inputs(inputs), self.basis, self.output_weights, kernel=self.kernel, bias=self.bias
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            use_linear=self.use_linear, use_bias=self.use_bias, **self._serialized_settings("kernel", "bias")
        )
        return config
