"""The two ESIM layers that Keras lacks: the alignment (attention) step and masked pooling."""

from __future__ import annotations

import keras
import tensorflow as tf

import keras_structured as ks
from keras_structured.applications.nli.alignments import ATTENTIONS, align
from keras_structured.applications.nli.transition_bins import NUM_BINS
from keras_structured.validation import check_one_of

__all__ = ["Alignment", "MaskedPooling"]


def _lengths(mask, values: tf.Tensor) -> tf.Tensor:
    """``(batch,)`` lengths of right-padded ``values`` ``(batch, t, d)`` from a Keras mask
    (without a mask, every step is real)."""
    if mask is None:
        shape = tf.shape(values)
        return tf.fill(shape[:1], shape[1])
    return tf.reduce_sum(tf.cast(mask, tf.int32), axis=-1)


@keras.saving.register_keras_serializable(package="keras_structured")
class Alignment(keras.layers.Layer):
    """ESIM's local inference step: each word's weighted average of the other sentence's words.

    With word vectors ``a`` ``(m, d)`` and ``b`` ``(n, d)``, the scores ``G = a b^T`` are
    turned into attention matrices ``P2H`` ``(m, n)`` and ``H2P`` ``(n, m)`` by the chosen
    alignment (:mod:`keras_structured.applications.nli.alignments`):

    * ``"softmax"``: ``P2H[i] = softmax(G[i, :])``, ``H2P[j] = softmax(G[:, j])`` (Chen et al. 2017);
    * ``"sequence"``: ``P2H = argmax_{u in M_seq(m, n)} <G, u> + <T(w_p), v> - ||u||^2 / 2``
      over the marginal polytope of tag sequences (one hypothesis word per premise word),
      ``H2P`` the same on ``G^T`` with ``w_h``; the 18 learned binned transition scores
      (:mod:`keras_structured.applications.nli.transition_bins`) are the ``(2, 9)`` weight
      ``transitions`` (row 0: ``w_p``, premise to hypothesis);
    * ``"matching"``: ``P2H = argmax_{u in M_match(m, n)} <G, u> - ||u||^2 / 2`` over the
      polytope of bipartite matchings, ``H2P = P2H^T``; no parameters.

    The layer returns ``a~ = P2H b`` and ``b~ = H2P a``. The SparseMAP variants call Python
    MAP oracles, so they set ``supports_jit = False``.

    Args:
        attention: one of ``"softmax"``, ``"sequence"``, ``"matching"``.
        transitions_initializer: initializer of the transition weights (``"sequence"``).
        max_iter: most MAP calls per SparseMAP problem (see
            :class:`keras_structured.SolverOptions`; None: its default).
        tol: relative Wolfe-gap tolerance of the solver (None: the default).
        exact_jacobian: run the active set to its finite termination for the exact
            Jacobian (None: the default, True); False stops at ``tol``.

    Call arguments:
        inputs: ``[a (batch, m, d), b (batch, n, d)]``, right-padded.
        mask: ``[premise_mask (batch, m), hypothesis_mask (batch, n)]`` Keras masks (passed
            by Keras from the embeddings); padded words get exactly zero attention and zero
            gradient. Without masks every word is real.

    Returns:
        ``[a~ (batch, m, d), b~ (batch, n, d)]``, masked like the inputs.

    Example:
        >>> a, b = tf.eye(3)[None], tf.eye(3)[None, ::-1]
        >>> aligned, _ = Alignment("matching")([a * 5, b * 5])
        >>> aligned.numpy()[0].argmax(axis=1).tolist()
        [0, 1, 2]
    """

    def __init__(
        self,
        attention: str = "softmax",
        transitions_initializer="zeros",
        max_iter: int | None = None,
        tol: float | None = None,
        exact_jacobian: bool | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention = check_one_of("attention", attention, ATTENTIONS)
        self.transitions_initializer = keras.initializers.get(transitions_initializer)
        settings = {"max_iter": max_iter, "tol": tol, "exact_jacobian": exact_jacobian}
        self.options = ks.SolverOptions(**{k: v for k, v in settings.items() if v is not None})
        self.supports_masking = True
        # On the instance: keras.layers.Layer.__init__ sets supports_jit there.
        self.supports_jit = attention == "softmax"

    def build(self, input_shape):
        if not isinstance(input_shape, (list, tuple)) or len(input_shape) != 2:
            raise ValueError(
                f"Alignment expects [premise, hypothesis] inputs. Received: input_shape={input_shape}"
            )
        premise, hypothesis = input_shape
        if len(premise) != 3 or len(hypothesis) != 3 or premise[-1] != hypothesis[-1] or premise[-1] is None:
            raise ValueError(
                "Alignment expects (batch, m, d) and (batch, n, d) inputs with the same known d. "
                f"Received: input_shape={input_shape}"
            )
        if self.attention == "sequence":
            self.transitions = self.add_weight(
                name="transitions", shape=(2, NUM_BINS), initializer=self.transitions_initializer
            )

    def attention_weights(self, inputs, mask=None, return_info: bool = False) -> dict:
        """The attention matrices of ``inputs`` (see the class docstring).

        Returns:
            ``{"p2h": (batch, m, n), "h2p": (batch, n, m)}``, and with ``return_info`` also
            ``"structures"``, ``(batch, problems)`` int32 numbers of structures with nonzero
            weight, and ``"converged"``, ``(batch, problems)`` booleans: whether SparseMAP
            finished (two problems a pair for ``"sequence"``, one for ``"matching"``, none
            for ``"softmax"``).
        """
        premise, hypothesis = inputs
        if not self.built:  # called directly, before the layer's first call
            self.build([tuple(premise.shape), tuple(hypothesis.shape)])
        masks = mask if isinstance(mask, (list, tuple)) else (None, None)
        scores = tf.matmul(premise, hypothesis, transpose_b=True)
        weights = self.transitions if self.attention == "sequence" else None
        result = align(
            self.attention,
            scores,
            _lengths(masks[0], premise),
            _lengths(masks[1], hypothesis),
            weights,
            return_info=return_info,
            options=self.options,
        )
        weights = {"p2h": result[0], "h2p": result[1]}
        return {**weights, **result[2]} if return_info else weights

    def call(self, inputs, mask=None):
        weights = self.attention_weights(inputs, mask)
        premise, hypothesis = inputs
        return [tf.matmul(weights["p2h"], hypothesis), tf.matmul(weights["h2p"], premise)]

    def compute_mask(self, inputs, mask=None):
        return list(mask) if isinstance(mask, (list, tuple)) else [None, None]

    def compute_output_shape(self, input_shape):
        return [tuple(input_shape[0]), tuple(input_shape[1])]

    def get_config(self):
        config = super().get_config()
        config.update(
            attention=self.attention,
            transitions_initializer=keras.initializers.serialize(self.transitions_initializer),
            max_iter=self.options.max_iter,
            tol=self.options.tol,
            exact_jacobian=self.options.exact_jacobian,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_structured")
class MaskedPooling(keras.layers.Layer):
    """Average and max pooling over the real (unmasked) time steps, concatenated.

    For ``x`` ``(batch, t, d)`` with mask ``mask``, returns ``[mean_i x_i ; max_i x_i]``
    ``(batch, 2 d)`` over the steps with ``mask_i`` true (every step without a mask). Padded
    steps get zero gradient. A sequence with no real step gives NaN; ESIM's sentences
    always have one.

    Call arguments:
        inputs: ``(batch, t, d)``.
        mask: ``(batch, t)`` Keras mask.

    Example:
        >>> x = tf.constant([[[1.0], [3.0], [100.0]]])
        >>> MaskedPooling()(x, mask=tf.constant([[True, True, False]])).numpy().tolist()
        [[2.0, 3.0]]
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if mask is None:
            return tf.concat([tf.reduce_mean(inputs, axis=1), tf.reduce_max(inputs, axis=1)], axis=-1)
        real = tf.cast(mask, tf.bool)[:, :, None]
        zeros = tf.zeros([], inputs.dtype)
        total = tf.reduce_sum(tf.where(real, inputs, zeros), axis=1)
        mean = total / tf.reduce_sum(tf.cast(real, inputs.dtype), axis=1)
        largest = tf.reduce_max(tf.where(real, inputs, tf.constant(float("-inf"), inputs.dtype)), axis=1)
        return tf.concat([mean, largest], axis=-1)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        features = None if input_shape[-1] is None else 2 * input_shape[-1]
        return (input_shape[0], features)
