"""Linear-chain scores for the structured losses: unary scores packed with learned transitions.

A Keras loss sees one ``y_pred`` tensor, so the structured losses over label sequences
take the transition scores packed with the unary ones, ``(batch, n, K, K + 1)``
(:func:`keras_structured.ops.pack_sequence_scores`). :class:`SequenceScores` owns the
transition (and boundary) weights and returns that tensor, so a tagger trains with
``SparseMAPLoss(SequenceStructure())`` (or the margin, hinge, perceptron and CRF losses)
without a hand-written layer, and predicts from the same weights with
:class:`keras_structured.SparseMAPSequence` called on the packed scores.
"""

from __future__ import annotations

import keras

from keras_structured.layers._masks import check_position_mask, lengths_from_mask
from keras_structured.ops.sequence_scores import add_boundary_scores, pack_sequence_scores


class SequenceWeights:
    """The weights of a linear chain over ``K`` labels: ``transitions`` ``(K, K)``, ``start``, ``end``.

    Shared by :class:`SequenceScores` and :class:`keras_structured.SparseMAPSequence`, so
    that both have the same weights in the same order (``set_weights`` moves them between
    the two).
    """

    def _build_sequence_weights(self, num_labels: int) -> None:
        self.transitions = self.add_weight(
            name="transitions", shape=(num_labels, num_labels), initializer=self.transitions_initializer
        )
        if self.use_boundary:
            self.start = self.add_weight(name="start", shape=(num_labels,), initializer="zeros")
            self.end = self.add_weight(name="end", shape=(num_labels,), initializer="zeros")

    def _boundary(self) -> dict:
        return {"start": self.start, "end": self.end} if self.use_boundary else {}


@keras.saving.register_keras_serializable(package="keras_structured")
class SequenceScores(SequenceWeights, keras.layers.Layer):
    """Packs unary label scores with learned transition (and boundary) scores.

    A label sequence ``y`` of length ``L`` scores

        sum_i unary[i, y_i] + sum_{i < L - 1} T[y_i, y_{i+1}] + start[y_0] + end[y_{L-1}],

    with a trainable ``(K, K)`` transition matrix ``T`` (from-label first) and, with
    ``use_boundary=True``, trainable start and end scores. The layer returns these scores
    packed as ``(batch, n, K, K + 1)`` (:func:`keras_structured.ops.pack_sequence_scores`;
    the boundary scores are added to the unary scores of the first position and of the
    last one before the padding), the ``y_pred`` that the structured losses over
    sequences take: ``SparseMAPLoss(SequenceStructure())``, ``MarginSparseMAPLoss``,
    ``StructuredHingeLoss``, ``StructuredPerceptronLoss`` (same structure) and
    ``LinearChainCRFLoss``.

    To predict with the weights it learned, call
    :class:`keras_structured.SparseMAPSequence` on the packed scores (it then reads the
    transitions from them and has no weights of its own), or decode the best sequence
    with ``map_decode(SequenceStructure(), *unpack_sequence_scores(scores), lengths=...)``.
    The weights have the names, shapes and order of ``SparseMAPSequence``'s, so
    ``set_weights`` also moves them between the two layers.

    Args:
        use_boundary: learn start and end label scores.
        transitions_initializer: initializer of ``T``.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``(batch, n, K)`` unary scores, ``K`` known.
        mask: ``(batch, n)`` Keras mask of right-padded sequences (e.g. from
            ``Embedding(mask_zero=True)``): the end scores go to the last unmasked
            position. The mask is passed on to the next layer, which is how
            ``SparseMAPSequence`` after this layer finds the lengths.
        lengths: ``(batch,)`` lengths, instead of a mask. Without either, the end scores
            go to position ``n - 1``; pass one whenever sequences are padded.

    Returns:
        Packed scores ``(batch, n, K, K + 1)`` in the layer's compute dtype (float16
        under ``mixed_float16``; the weights stay float32): ``[..., 0]`` the unary
        scores (boundary scores added), ``[:, i, :, 1:]`` the transitions ``T``.

    Raises:
        ValueError: at build time, for inputs that are not ``(batch, n, K)`` with a known
            ``K``; at call time, for a mask that is not ``(batch, n)``.

    Example:
        >>> import keras
        >>> from keras_structured import SparseMAPLoss, SparseMAPSequence
        >>> from keras_structured.engine import SequenceStructure
        >>> tokens = keras.Input((None,), dtype="int32")
        >>> hidden = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
        >>> scores = SequenceScores(use_boundary=True)(keras.layers.Dense(3)(hidden))
        >>> tagger = keras.Model(tokens, scores)  # trains with the structured loss
        >>> tagger.compile("adam", SparseMAPLoss(SequenceStructure()))
        >>> predictor = keras.Model(tokens, SparseMAPSequence()(scores))  # same weights
        >>> tagger.output.shape, predictor.output.shape
        ((None, None, 3, 4), (None, None, 3))
    """

    supports_masking = True

    def __init__(self, use_boundary: bool = False, transitions_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.use_boundary = bool(use_boundary)
        self.transitions_initializer = keras.initializers.get(transitions_initializer)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "SequenceScores expects unary scores of shape (batch, n, K) with known K. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self._build_sequence_weights(input_shape[-1])
        self.built = True

    def call(self, inputs, mask=None, lengths=None):
        check_position_mask("SequenceScores", mask, inputs)
        if lengths is None:
            lengths = lengths_from_mask(mask)
        unary = add_boundary_scores(inputs, lengths=lengths, **self._boundary())
        return pack_sequence_scores(unary, self.transitions)

    def compute_output_shape(self, input_shape):
        batch, n, num_labels = input_shape
        return (batch, n, num_labels, num_labels + 1)

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            use_boundary=self.use_boundary,
            transitions_initializer=keras.initializers.serialize(self.transitions_initializer),
        )
        return config
