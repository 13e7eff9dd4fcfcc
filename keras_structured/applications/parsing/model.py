"""Kiperwasser & Goldberg's arc-factored BiLSTM parser, and the five losses it is trained with.

The parser of the SparseMAP paper's section 5.1 (Kiperwasser & Goldberg 2016, graph-based):
every token ``i`` of ``ROOT w_1 ... w_n`` is the concatenation of a word and a POS
embedding, read by a two-layer bidirectional LSTM into ``r_i``, and every arc ``h -> m``
gets the score of a one-hidden-layer perceptron on the pair,

    score(h, m) = v^T tanh(W_head r_h + W_dep r_m + b),

so the model maps ``(batch, n + 1)`` word and tag ids to ``(batch, n + 1, n + 1)`` arc
scores ``[head, modifier]``, the layout of
:class:`~keras_structured.engine.DependencyTreeStructure` and of every tree loss.
"""

from __future__ import annotations

import keras
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import DependencyTreeStructure
from keras_structured.validation import check_integer, check_number, check_one_of

# The losses of Table 1, by the names the command line uses.
LOSSES = ("sparsemap", "margin_sparsemap", "crf", "hinge", "perceptron")


def make_loss(name: str, single_root: bool = False) -> keras.losses.Loss:
    """The tree loss called ``name`` (one of :data:`LOSSES`).

    Args:
        name: ``"sparsemap"`` (:class:`~keras_structured.SparseMAPLoss`),
            ``"margin_sparsemap"`` (:class:`~keras_structured.MarginSparseMAPLoss`),
            ``"crf"`` (:class:`~keras_structured.TreeCRFLoss`), ``"hinge"``
            (:class:`~keras_structured.StructuredHingeLoss`) or ``"perceptron"``
            (:class:`~keras_structured.StructuredPerceptronLoss`).
        single_root: trees with exactly one word attached to the root.

    Returns:
        The loss, taking gold heads ``(batch, n + 1)`` (``-1`` at the root and padding)
        and arc scores ``(batch, n + 1, n + 1)``.

    Example:
        >>> make_loss("crf").name
        'tree_crf_loss'
    """
    structure = DependencyTreeStructure(single_root=single_root)
    makers = {
        "sparsemap": lambda: ks.SparseMAPLoss(structure),
        "margin_sparsemap": lambda: ks.MarginSparseMAPLoss(structure),
        "crf": lambda: ks.TreeCRFLoss(single_root=single_root),
        "hinge": lambda: ks.StructuredHingeLoss(structure),
        "perceptron": lambda: ks.StructuredPerceptronLoss(structure),
    }
    return makers[check_one_of("loss", name, LOSSES)]()


@keras.saving.register_keras_serializable(package="keras_structured")
class ArcScorer(keras.layers.Layer):
    """Arc scores ``score(h, m) = v^T tanh(W_head r_h + W_dep r_m + b)`` of token vectors ``r``.

    Args:
        units: hidden units of the perceptron (100 in Kiperwasser & Goldberg).

    Call arguments:
        inputs: ``(batch, n + 1, d)`` token vectors, the root first.

    Returns:
        ``(batch, n + 1, n + 1)`` arc scores ``[head, modifier]``. Entries of padding
        tokens are finite and meaningless: the tree losses and decoders read the sentence
        lengths from the gold heads or take them as an argument.

    Example:
        >>> ArcScorer(4)(tf.zeros([2, 3, 5])).shape
        TensorShape([2, 3, 3])
    """

    def __init__(self, units: int = 100, **kwargs):
        super().__init__(**kwargs)
        self.units = check_integer("units", units, minimum=1)
        self.supports_masking = True

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"ArcScorer expects (batch, tokens, features) inputs with known features. "
                f"Received: input_shape={input_shape}"
            )
        features = input_shape[-1]
        self.head = keras.layers.Dense(self.units, use_bias=False, name="head")
        self.dependent = keras.layers.Dense(self.units, name="dependent")
        self.output_weights = keras.layers.Dense(1, use_bias=False, name="output")
        self.head.build((None, None, features))
        self.dependent.build((None, None, features))
        self.output_weights.build((None, None, None, self.units))

    def call(self, inputs):
        heads = self.head(inputs)[:, :, None, :]  # (batch, head, 1, units)
        dependents = self.dependent(inputs)[:, None, :, :]  # (batch, 1, modifier, units)
        return tf.squeeze(self.output_weights(tf.tanh(heads + dependents)), -1)

    def compute_mask(self, inputs, mask=None):
        return None  # the losses take the lengths from the gold heads

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], input_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units)
        return config


def build_parser(
    num_words: int,
    num_tags: int,
    word_dim: int = 100,
    tag_dim: int = 25,
    lstm_units: int = 125,
    lstm_layers: int = 2,
    mlp_units: int = 100,
    dropout: float = 0.0,
) -> keras.Model:
    """The arc-factored BiLSTM parser (Kiperwasser & Goldberg 2016's sizes by default).

    Args:
        num_words: word vocabulary size, padding (id 0) included.
        num_tags: POS tag vocabulary size, padding (id 0) included.
        word_dim: word embedding size.
        tag_dim: POS embedding size.
        lstm_units: units per direction of each BiLSTM layer.
        lstm_layers: number of BiLSTM layers.
        mlp_units: hidden units of the arc perceptron.
        dropout: rate of the dropout on the embeddings and on each BiLSTM layer's output,
            in training only (Kiperwasser & Goldberg use none: 0).

    Returns:
        A ``keras.Model`` from ``{"words": (batch, n + 1), "tags": (batch, n + 1)}`` integer
        ids (0 = padding, the root token first) to ``(batch, n + 1, n + 1)`` arc scores.

    Example:
        >>> model = build_parser(50, 10)
        >>> model({"words": tf.constant([[2, 5, 7]]), "tags": tf.constant([[2, 3, 4]])}).shape
        TensorShape([1, 3, 3])
    """
    for name, value in (
        ("num_words", num_words),
        ("num_tags", num_tags),
        ("word_dim", word_dim),
        ("tag_dim", tag_dim),
        ("lstm_units", lstm_units),
        ("lstm_layers", lstm_layers),
        ("mlp_units", mlp_units),
    ):
        check_integer(name, value, minimum=1)
    dropout = check_number("dropout", dropout, minimum=0.0, maximum=1.0, open_maximum=True)
    words = keras.Input((None,), dtype="int32", name="words")
    tags = keras.Input((None,), dtype="int32", name="tags")
    embedded = keras.layers.Concatenate(name="tokens")(
        [
            keras.layers.Embedding(num_words, word_dim, mask_zero=True, name="word_embedding")(words),
            keras.layers.Embedding(num_tags, tag_dim, mask_zero=True, name="tag_embedding")(tags),
        ]
    )
    hidden = keras.layers.Dropout(dropout, name="token_dropout")(embedded) if dropout else embedded
    for layer in range(lstm_layers):
        hidden = keras.layers.Bidirectional(
            keras.layers.LSTM(lstm_units, return_sequences=True), name=f"bilstm_{layer}"
        )(hidden)
        if dropout:
            hidden = keras.layers.Dropout(dropout, name=f"bilstm_{layer}_dropout")(hidden)
    scores = ArcScorer(mlp_units, name="arc_scores")(hidden)
    return keras.Model({"words": words, "tags": tags}, scores, name="kg_parser")
