"""Kiperwasser & Goldberg's arc-factored BiLSTM parser, and the five losses it is trained with.

The parser of the SparseMAP paper's section 5.1 (Kiperwasser & Goldberg 2016, graph-based):
every token ``i`` of ``ROOT w_1 ... w_n`` is the concatenation of a word and a POS
embedding, read by a two-layer bidirectional LSTM into ``r_i``, and every arc ``h -> m``
gets the score of a one-hidden-layer perceptron on the pair,

    score(h, m) = v^T tanh(W_head r_h + W_dep r_m + b),

so the model maps ``(batch, n + 1)`` word and tag ids to ``(batch, n + 1, n + 1)`` arc
scores ``[head, modifier]``, the layout of
:class:`~keras_structured.engine.DependencyTreeStructure` and of every tree loss.

Variants (:func:`build_parser`'s arguments; the defaults are the design above):

- ``root="learned"``, the SparseMAP authors' parser (``vene/sparsemap-parser``,
  ``scorers.h``): the BiLSTM reads ``BOS w_1 ... w_n EOS`` (the root token's embeddings
  serve as ``BOS``, :class:`EndOfSentence` appends a learned ``EOS`` vector), and the root's
  head representation is a learned vector of the perceptron's hidden space:
  ``score(0, m) = v^T tanh(root + W_dep r_m + b)``;
- ``arc_bias_initializer="random"``: ``b`` starts Glorot-uniform, as DyNet initialises every
  parameter, rather than at zero;
- no POS tags (``num_tags=0``): the tokens are the word embeddings alone;
- labelled parsing (``num_relations > 0``): Kiperwasser & Goldberg's arc-label classifier
  (:class:`RelationScorer`), an MLP on ``[r_h ; r_m]`` of each word and its head, trained
  jointly with the tree loss (:class:`RelationCrossEntropy`). The model then takes the heads
  as an input (the gold tree in training, the predicted one when parsing) and returns
  ``{"arcs": arc scores, "labels": relation logits}``.
"""

from __future__ import annotations

import keras
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import DependencyTreeStructure
from keras_structured.validation import check_integer, check_number, check_one_of

# The losses of Table 1, by the names the command line uses.
LOSSES = ("sparsemap", "margin_sparsemap", "crf", "hinge", "perceptron")
#: How the losses of a batch's sentences are combined, by name: Keras's reduction.
REDUCTIONS = {"mean": "sum_over_batch_size", "sum": "sum"}
#: Where the root's head representation comes from (:class:`ArcScorer`).
ROOTS = ("token", "learned")
#: The initialisations of the arc perceptron's bias ``b``, by name: the Keras initializer.
#: ``"random"`` is DyNet's Glorot-uniform initialisation, which for a vector of ``d``
#: entries draws from ``U(-sqrt(3 / d), sqrt(3 / d))``, as Keras's ``glorot_uniform`` does.
ARC_BIAS_INITIALIZERS = {"zeros": "zeros", "random": "glorot_uniform"}


def make_loss(
    name: str, single_root: bool = False, cost_weight: float = 1.0, reduction: str = "mean"
) -> keras.losses.Loss:
    """The tree loss called ``name`` (one of :data:`LOSSES`).

    Args:
        name: ``"sparsemap"`` (:class:`~keras_structured.SparseMAPLoss`),
            ``"margin_sparsemap"`` (:class:`~keras_structured.MarginSparseMAPLoss`),
            ``"crf"`` (:class:`~keras_structured.TreeCRFLoss`), ``"hinge"``
            (:class:`~keras_structured.StructuredHingeLoss`) or ``"perceptron"``
            (:class:`~keras_structured.StructuredPerceptronLoss`).
        single_root: trees with exactly one word attached to the root.
        cost_weight: the weight ``w >= 0`` of the Hamming cost of the ``"hinge"`` and
            ``"margin_sparsemap"`` losses (the other losses have none). The Hamming distance
            between two trees over arc indicators counts each wrong head twice (the gold arc
            missed, another arc taken), so ``w = 0.5`` costs one per wrong head, the cost of
            the SparseMAP authors' parser.
        reduction: ``"mean"`` (the mean over the batch's sentences) or ``"sum"`` (their
            sum, as the SparseMAP authors' parser trains): a key of :data:`REDUCTIONS`.

    Returns:
        The loss, taking gold heads ``(batch, n + 1)`` (``-1`` at the root and padding)
        and arc scores ``(batch, n + 1, n + 1)``.

    Example:
        >>> make_loss("crf").name
        'tree_crf_loss'
    """
    cost_weight = check_number("cost_weight", cost_weight, minimum=0)
    keras_reduction = REDUCTIONS[check_one_of("reduction", reduction, REDUCTIONS)]
    structure = DependencyTreeStructure(single_root=single_root)
    makers = {
        "sparsemap": lambda: ks.SparseMAPLoss(structure, reduction=keras_reduction),
        "margin_sparsemap": lambda: ks.MarginSparseMAPLoss(
            structure, cost_weight=cost_weight, reduction=keras_reduction
        ),
        "crf": lambda: ks.TreeCRFLoss(single_root=single_root, reduction=keras_reduction),
        "hinge": lambda: ks.StructuredHingeLoss(
            structure, cost_weight=cost_weight, reduction=keras_reduction
        ),
        "perceptron": lambda: ks.StructuredPerceptronLoss(structure, reduction=keras_reduction),
    }
    return makers[check_one_of("loss", name, LOSSES)]()


@keras.saving.register_keras_serializable(package="keras_structured")
class ArcScorer(keras.layers.Layer):
    """Arc scores ``score(h, m) = v^T tanh(W_head r_h + W_dep r_m + b)`` of token vectors ``r``.

    With ``root="learned"`` (the SparseMAP authors' parser), the root's head representation
    is a learned vector ``root`` of the hidden space instead of ``W_head r_0``:

        score(0, m) = v^T tanh(root + W_dep r_m + b),

    so that the first token's vector ``r_0`` enters no score of an arc to a word.

    Args:
        units: hidden units of the perceptron (100 in Kiperwasser & Goldberg).
        root: ``"token"`` (the root's head representation is ``W_head r_0``) or
            ``"learned"`` (a learned vector, Glorot-uniform at first); one of :data:`ROOTS`.
        bias_initializer: the initializer of ``b`` (a Keras initializer or its name):
            ``"zeros"``, or ``"glorot_uniform"`` as DyNet initialises it.

    Call arguments:
        inputs: ``(batch, n + 1, d)`` token vectors, the root first.

    Returns:
        ``(batch, n + 1, n + 1)`` arc scores ``[head, modifier]``. Entries of padding
        tokens, and the column of the root as a modifier, are finite and meaningless: the
        tree losses and decoders read the sentence lengths from the gold heads or take them
        as an argument.

    Example:
        >>> ArcScorer(4)(tf.zeros([2, 3, 5])).shape
        TensorShape([2, 3, 3])
        >>> ArcScorer(4, root="learned", bias_initializer="glorot_uniform")(tf.zeros([2, 3, 5])).shape
        TensorShape([2, 3, 3])
    """

    def __init__(self, units: int = 100, root: str = "token", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.units = check_integer("units", units, minimum=1)
        self.root = check_one_of("root", root, ROOTS)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"ArcScorer expects (batch, tokens, features) inputs with known features. "
                f"Received: input_shape={input_shape}"
            )
        features = input_shape[-1]
        self.head = keras.layers.Dense(self.units, use_bias=False, name="head")
        self.dependent = keras.layers.Dense(
            self.units, bias_initializer=self.bias_initializer, name="dependent"
        )
        self.output_weights = keras.layers.Dense(1, use_bias=False, name="output")
        self.head.build((None, None, features))
        self.dependent.build((None, None, features))
        self.output_weights.build((None, None, None, self.units))
        if self.root == "learned":
            self.root_vector = self.add_weight(shape=(self.units,), initializer="glorot_uniform", name="root")

    def call(self, inputs):
        heads = self.head(inputs)  # (batch, head, units)
        if self.root == "learned":
            root = tf.cast(self.root_vector, heads.dtype)
            root = tf.broadcast_to(root, tf.stack([tf.shape(heads)[0], 1, self.units]))
            heads = tf.concat([root, heads[:, 1:]], axis=1)
        dependents = self.dependent(inputs)[:, None, :, :]  # (batch, 1, modifier, units)
        return tf.squeeze(self.output_weights(tf.tanh(heads[:, :, None, :] + dependents)), -1)

    def compute_mask(self, inputs, mask=None):
        return None  # the losses take the lengths from the gold heads

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], input_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            root=self.root,
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config


@keras.saving.register_keras_serializable(package="keras_structured")
class EndOfSentence(keras.layers.Layer):
    """Appends a learned end-of-sentence vector after the last token of every sequence.

    The SparseMAP authors' parser reads ``BOS w_1 ... w_n EOS`` with its BiLSTM; this layer
    adds the ``EOS``. A sequence's tokens are the first ``length`` positions of its row
    (those of the mask, or the whole row without one); the vector goes to position
    ``length`` and the mask grows by one.

    Call arguments:
        inputs: ``(batch, t, d)`` token vectors.
        mask: ``(batch, t)`` booleans, true on each row's tokens (a prefix), or None.

    Returns:
        ``(batch, t + 1, d)``: each row's tokens, the end vector, then padding (zeros), with
        the mask of ``length + 1`` tokens (None without an input mask).

    Example:
        >>> EndOfSentence()(tf.ones([2, 3, 4])).shape
        TensorShape([2, 4, 4])
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"EndOfSentence expects (batch, tokens, features) inputs with known features. "
                f"Received: input_shape={input_shape}"
            )
        self.vector = self.add_weight(shape=(input_shape[-1],), initializer="glorot_uniform", name="end")

    @staticmethod
    def _lengths(inputs, mask):
        if mask is None:
            return keras.ops.full(keras.ops.shape(inputs)[:1], keras.ops.shape(inputs)[1], dtype="int32")
        return keras.ops.sum(keras.ops.cast(mask, "int32"), axis=1)

    def call(self, inputs, mask=None):
        lengths = self._lengths(inputs, mask)
        steps = tf.shape(inputs)[1]
        tokens = tf.where(tf.sequence_mask(lengths, steps)[:, :, None], inputs, tf.zeros_like(inputs))
        padded = tf.pad(tokens, [[0, 0], [0, 1], [0, 0]])
        at_end = tf.one_hot(lengths, steps + 1, dtype=inputs.dtype)[:, :, None]
        return padded + at_end * tf.cast(self.vector, inputs.dtype)

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        # A prefix of length + 1: position i is a token if i or i - 1 was one (or i is 0).
        mask = keras.ops.cast(mask, "bool")
        first = keras.ops.ones_like(mask[:, :1])
        tokens = keras.ops.concatenate([mask, keras.ops.logical_not(first)], axis=1)
        return keras.ops.logical_or(tokens, keras.ops.concatenate([first, mask], axis=1))

    def compute_output_shape(self, input_shape):
        steps = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], steps, input_shape[2])


@keras.saving.register_keras_serializable(package="keras_structured")
class RelationScorer(keras.layers.Layer):
    """Relation logits of every word given its head: Kiperwasser & Goldberg's arc-label classifier,

        logits(m) = W_2 tanh(W_1 [r_{h(m)} ; r_m] + b_1) + b_2,

    a one-hidden-layer perceptron on the token vectors of the word ``m`` and of its head
    ``h(m)`` (the gold head in training, the predicted one when parsing).

    Args:
        num_relations: the number of relation classes (:attr:`Vocabulary.num_relations`).
        units: hidden units of the perceptron (100 in Kiperwasser & Goldberg).

    Call arguments:
        inputs: ``[tokens, heads]``: ``(batch, n + 1, d)`` token vectors, the root first, and
            ``(batch, n + 1)`` integer heads, ``-1`` at the root and the padding (read as 0).

    Returns:
        ``(batch, n + 1, num_relations)`` logits; those of the root and the padding are
        finite and meaningless (:class:`RelationCrossEntropy` leaves them out).

    Example:
        >>> RelationScorer(5, 4)([tf.zeros([2, 3, 6]), tf.constant([[-1, 0, 1], [-1, 0, -1]])]).shape
        TensorShape([2, 3, 5])
    """

    def __init__(self, num_relations: int, units: int = 100, **kwargs):
        super().__init__(**kwargs)
        self.num_relations = check_integer("num_relations", num_relations, minimum=1)
        self.units = check_integer("units", units, minimum=1)
        self.supports_masking = True

    def build(self, input_shape):
        tokens_shape = (
            input_shape[0] if isinstance(input_shape, (list, tuple)) and len(input_shape) == 2 else None
        )
        if tokens_shape is None or len(tokens_shape) != 3 or tokens_shape[-1] is None:
            raise ValueError(
                "RelationScorer expects [tokens, heads] with (batch, tokens, features) tokens of known "
                f"features. Received: input_shape={input_shape}"
            )
        features = tokens_shape[-1]
        self.hidden = keras.layers.Dense(self.units, activation="tanh", name="hidden")
        self.output_logits = keras.layers.Dense(self.num_relations, name="output")
        self.hidden.build((None, None, 2 * features))
        self.output_logits.build((None, None, self.units))

    def call(self, inputs):
        tokens, heads = inputs
        heads = tf.maximum(tf.cast(heads, tf.int32), 0)
        head_tokens = tf.gather(tokens, heads, batch_dims=1)  # (batch, modifier, features)
        return self.output_logits(self.hidden(tf.concat([head_tokens, tokens], axis=-1)))

    def compute_mask(self, inputs, mask=None):
        return None  # the loss leaves out the positions whose relation is -1

    def compute_output_shape(self, input_shape):
        tokens_shape = input_shape[0]
        return (tokens_shape[0], tokens_shape[1], self.num_relations)

    def get_config(self):
        config = super().get_config()
        config.update(num_relations=self.num_relations, units=self.units)
        return config


def relation_cross_entropy(y_true, y_pred) -> tf.Tensor:
    """The cross-entropy of the relation logits, summed over each sentence's words.

    Args:
        y_true: ``(batch, n + 1)`` relation ids, ``-1`` at the root and the padding (left
            out); floats holding integers are accepted (Keras casts labels to floats).
        y_pred: ``(batch, n + 1, num_relations)`` logits.

    Returns:
        ``(batch,)`` losses, float32 for half-precision logits.

    Example:
        >>> round(float(relation_cross_entropy([[-1, 0, 1]], tf.zeros([1, 3, 2]))[0]), 4)  # 2 log 2
        1.3863
    """
    relations = tf.cast(tf.convert_to_tensor(y_true), tf.int32)
    logits = tf.convert_to_tensor(y_pred)
    if logits.dtype in (tf.float16, tf.bfloat16):
        logits = tf.cast(logits, tf.float32)
    words = relations >= 0
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(relations, 0), logits=logits)
    return tf.reduce_sum(tf.where(words, losses, tf.zeros_like(losses)), axis=-1)


@keras.saving.register_keras_serializable(package="keras_structured")
class RelationCrossEntropy(keras.losses.Loss):
    """The loss of the arc-label classifier: :func:`relation_cross_entropy`, summed over each
    sentence's words and reduced over the batch like the tree loss it is added to.

    Args:
        reduction, name, dtype: as for ``keras.losses.Loss``.

    Example:
        >>> round(float(RelationCrossEntropy()([[-1, 0, 1]], tf.zeros([1, 3, 2]))), 4)
        1.3863
    """

    def __init__(
        self, reduction: str = "sum_over_batch_size", name: str = "relation_cross_entropy", dtype=None
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        return relation_cross_entropy(y_true, y_pred)


def build_parser(
    num_words: int,
    num_tags: int,
    word_dim: int = 100,
    tag_dim: int = 25,
    lstm_units: int = 125,
    lstm_layers: int = 2,
    mlp_units: int = 100,
    dropout: float = 0.0,
    root: str = "token",
    arc_bias_initializer: str = "zeros",
    num_relations: int = 0,
    label_units: int = 100,
) -> keras.Model:
    """The arc-factored BiLSTM parser (Kiperwasser & Goldberg 2016's sizes by default).

    Args:
        num_words: word vocabulary size, padding (id 0) included.
        num_tags: POS tag vocabulary size, padding (id 0) included; 0 for a parser of words
            alone (no tag input, no tag embedding).
        word_dim: word embedding size.
        tag_dim: POS embedding size.
        lstm_units: units per direction of each BiLSTM layer.
        lstm_layers: number of BiLSTM layers.
        mlp_units: hidden units of the arc perceptron.
        dropout: rate of the dropout on the embeddings and on each BiLSTM layer's output,
            in training only (Kiperwasser & Goldberg use none: 0).
        root: ``"token"``: the BiLSTM reads ``ROOT w_1 ... w_n`` and the root's head
            representation comes from its vector; ``"learned"``: the BiLSTM reads
            ``BOS w_1 ... w_n EOS`` (the root token's embeddings serve as ``BOS``, a learned
            vector as ``EOS``) and the root's head representation is a learned vector (the
            SparseMAP authors' parser; :class:`ArcScorer`). The arc-label classifier reads the
            ``BOS`` vector for the words attached to the root.
        arc_bias_initializer: ``"zeros"`` or ``"random"`` (Glorot uniform, DyNet's), the
            start of the arc perceptron's bias (a key of :data:`ARC_BIAS_INITIALIZERS`).
        num_relations: the number of relation classes of the arc-label classifier
            (:class:`RelationScorer`); 0 for an unlabelled parser.
        label_units: hidden units of the arc-label classifier.

    Returns:
        A ``keras.Model`` from ``{"words": (batch, n + 1), "tags": (batch, n + 1)}`` integer
        ids (0 = padding, the root token first; no ``"tags"`` when ``num_tags`` is 0) to
        ``(batch, n + 1, n + 1)`` arc scores. A labelled parser (``num_relations > 0``) takes
        ``"heads"`` too, ``(batch, n + 1)`` integers (``-1`` at the root and the padding),
        and returns ``{"arcs": (batch, n + 1, n + 1) arc scores, "labels": (batch, n + 1,
        num_relations) relation logits}``, the relation of each word given its head in
        ``heads``.

    Example:
        >>> model = build_parser(50, 10)
        >>> model({"words": tf.constant([[2, 5, 7]]), "tags": tf.constant([[2, 3, 4]])}).shape
        TensorShape([1, 3, 3])
        >>> labelled = build_parser(50, 0, num_relations=6)
        >>> outputs = labelled({"words": tf.constant([[2, 5, 7]]), "heads": tf.constant([[-1, 2, 0]])})
        >>> outputs["arcs"].shape, outputs["labels"].shape
        (TensorShape([1, 3, 3]), TensorShape([1, 3, 6]))
    """
    for name, value in (
        ("num_words", num_words),
        ("word_dim", word_dim),
        ("tag_dim", tag_dim),
        ("lstm_units", lstm_units),
        ("lstm_layers", lstm_layers),
        ("mlp_units", mlp_units),
        ("label_units", label_units),
    ):
        check_integer(name, value, minimum=1)
    check_integer("num_tags", num_tags, minimum=0)
    check_integer("num_relations", num_relations, minimum=0)
    dropout = check_number("dropout", dropout, minimum=0.0, maximum=1.0, open_maximum=True)
    check_one_of("root", root, ROOTS)
    bias_initializer = ARC_BIAS_INITIALIZERS[
        check_one_of("arc_bias_initializer", arc_bias_initializer, ARC_BIAS_INITIALIZERS)
    ]
    inputs = {"words": keras.Input((None,), dtype="int32", name="words")}
    embedded = keras.layers.Embedding(num_words, word_dim, mask_zero=True, name="word_embedding")(
        inputs["words"]
    )
    if num_tags:
        inputs["tags"] = keras.Input((None,), dtype="int32", name="tags")
        tags = keras.layers.Embedding(num_tags, tag_dim, mask_zero=True, name="tag_embedding")(inputs["tags"])
        embedded = keras.layers.Concatenate(name="tokens")([embedded, tags])
    if root == "learned":
        embedded = EndOfSentence(name="end_of_sentence")(embedded)
    hidden = keras.layers.Dropout(dropout, name="token_dropout")(embedded) if dropout else embedded
    for layer in range(lstm_layers):
        hidden = keras.layers.Bidirectional(
            keras.layers.LSTM(lstm_units, return_sequences=True), name=f"bilstm_{layer}"
        )(hidden)
        if dropout:
            hidden = keras.layers.Dropout(dropout, name=f"bilstm_{layer}_dropout")(hidden)
    if root == "learned":
        hidden = hidden[:, :-1]  # the EOS position (or padding) after each sentence goes
    scores = ArcScorer(mlp_units, root=root, bias_initializer=bias_initializer, name="arc_scores")(hidden)
    if not num_relations:
        return keras.Model(inputs, scores, name="kg_parser")
    inputs["heads"] = keras.Input((None,), dtype="int32", name="heads")
    logits = RelationScorer(num_relations, label_units, name="relation_scores")([hidden, inputs["heads"]])
    return keras.Model(inputs, {"arcs": scores, "labels": logits}, name="kg_parser")
