"""ESIM (Chen et al. 2017) with softmax, sequential-SparseMAP or matching-SparseMAP attention.

The model of the SparseMAP paper's section 5.2, from word ids to three class scores:

1. **Input encoding.** Shared learned embeddings (no pretrained vectors here, see
   :mod:`keras_structured.applications.nli.vocabulary`) and a shared BiLSTM give ``a`` ``(m, 2u)`` for
   the premise and ``b`` ``(n, 2u)`` for the hypothesis.
2. **Alignment.** ``G = a b^T`` and the attention of the ``attention`` argument give
   ``a~ = P2H b`` and ``b~ = H2P a`` (:class:`~keras_structured.applications.nli.layers.Alignment`): the
   three variants differ in this step only.
3. **Enhancement.** ``m_a = [a; a~; a - a~; a * a~]`` (and ``m_b`` alike), projected to ``u``
   units by a shared ReLU layer, as in ESIM.
4. **Composition.** A shared BiLSTM reads ``m_a`` and ``m_b``; average and max pooling over
   the real words (:class:`~keras_structured.applications.nli.layers.MaskedPooling`) give
   ``v = [avg_a; max_a; avg_b; max_b]``.
5. **Classifier.** A ``tanh`` hidden layer and a linear layer give the logits of
   ``entailment``, ``neutral``, ``contradiction`` (the order of
   :data:`~keras_structured.applications.nli.sick_reader.LABELS`).

Dropout (ESIM's 0.5 by default) is applied to the embeddings and before both classifier
layers. Padding (id 0) is masked from the embedding on; every layer follows the masks.

The embeddings are drawn from ``N(0, 1)``, the scale of the pretrained vectors the paper
starts from (GloVe components spread about 0.4, vector norms about 6), not from Keras's
default ``U(-0.05, 0.05)``: with embeddings that small, plain SGD leaves ESIM on the
class-prior plateau (predicting ``neutral`` for every SICK pair) for epochs, at every rate of
the paper's grid and above.
"""

from __future__ import annotations

import keras

from keras_structured.applications.nli.alignments import ATTENTIONS
from keras_structured.applications.nli.layers import Alignment, MaskedPooling
from keras_structured.applications.nli.sick_reader import LABELS
from keras_structured.validation import check_integer, check_number, check_one_of

__all__ = ["ATTENTIONS", "build_esim"]


def build_esim(
    num_words: int,
    attention: str = "softmax",
    embedding_dim: int = 100,
    units: int = 100,
    dropout: float = 0.5,
    seed: int = 0,
    max_iter: int | None = None,
    embeddings_initializer=None,
    exact_jacobian: bool | None = None,
) -> keras.Model:
    """The ESIM classifier with the attention called ``attention``.

    Args:
        num_words: embedding table size, padding (id 0) and unknown (id 1) included.
        attention: ``"softmax"``, ``"sequence"`` or ``"matching"``
            (:data:`~keras_structured.applications.nli.alignments.ATTENTIONS`).
        embedding_dim: word embedding size.
        units: units per direction of both BiLSTMs, of the projection and of the hidden
            classifier layer.
        dropout: dropout rate in ``[0, 1)`` of the embeddings and the classifier inputs.
        seed: seed of the dropout layers (the training loop also reseeds them every epoch).
        max_iter: most MAP calls per SparseMAP problem (None: the library's default, 2500).
            Measured on 1,024 sequence problems of SICK test pairs: an untrained model's
            need at most 84 calls (median 13); a model after two epochs at most 228 (median
            20, 3% above 100), and one stuck at the class prior at most 418 (12% above 100).
            All finish within 1000, at most twice the solver time of a limit of 100 (about a
            millisecond a problem). A problem stopped by the limit still gets a gradient,
            from the support reached, but not the exact Jacobian.
        exact_jacobian: whether SparseMAP runs to the exact Jacobian's support (None: the
            library's default, True).
        embeddings_initializer: a Keras initializer of the embeddings (None: ``N(0, 1)``).

    Returns:
        A ``keras.Model`` from ``{"premise": (batch, m), "hypothesis": (batch, n)}`` int32
        ids (0 = padding, at the end of each row) to ``(batch, 3)`` logits. Its layer
        ``"alignment"`` is the :class:`~keras_structured.applications.nli.layers.Alignment`.

    Example:
        >>> model = build_esim(20, "matching", embedding_dim=8, units=4)
        >>> model({"premise": tf.constant([[2, 5, 7]]), "hypothesis": tf.constant([[2, 9, 0]])}).shape
        TensorShape([1, 3])
    """
    check_integer("num_words", num_words, minimum=2)
    check_one_of("attention", attention, ATTENTIONS)
    check_integer("embedding_dim", embedding_dim, minimum=1)
    check_integer("units", units, minimum=1)
    check_number("dropout", dropout, minimum=0.0, maximum=1.0, open_maximum=True)
    check_integer("seed", seed, minimum=0)

    premise_ids = keras.Input((None,), dtype="int32", name="premise")
    hypothesis_ids = keras.Input((None,), dtype="int32", name="hypothesis")
    if embeddings_initializer is None:
        embeddings_initializer = keras.initializers.RandomNormal(stddev=1.0)
    embedding = keras.layers.Embedding(
        num_words,
        embedding_dim,
        embeddings_initializer=embeddings_initializer,
        mask_zero=True,
        name="embedding",
    )
    embedding_dropout = keras.layers.Dropout(dropout, seed=seed, name="embedding_dropout")
    encoder = keras.layers.Bidirectional(keras.layers.LSTM(units, return_sequences=True), name="encoder")
    premise = encoder(embedding_dropout(embedding(premise_ids)))
    hypothesis = encoder(embedding_dropout(embedding(hypothesis_ids)))

    premise_aligned, hypothesis_aligned = Alignment(
        attention, max_iter=max_iter, exact_jacobian=exact_jacobian, name="alignment"
    )([premise, hypothesis])

    projection = keras.layers.Dense(units, activation="relu", name="projection")
    composition = keras.layers.Bidirectional(
        keras.layers.LSTM(units, return_sequences=True), name="composition"
    )
    pooling = MaskedPooling(name="pooling")
    pooled = []
    for side, (encoded, aligned) in {
        "premise": (premise, premise_aligned),
        "hypothesis": (hypothesis, hypothesis_aligned),
    }.items():
        enhanced = keras.layers.Concatenate(name=f"{side}_enhanced")(
            [
                encoded,
                aligned,
                keras.layers.Subtract(name=f"{side}_difference")([encoded, aligned]),
                keras.layers.Multiply(name=f"{side}_product")([encoded, aligned]),
            ]
        )
        pooled.append(pooling(composition(projection(enhanced))))
    features = keras.layers.Concatenate(name="features")(pooled)
    hidden = keras.layers.Dense(units, activation="tanh", name="hidden")(
        keras.layers.Dropout(dropout, seed=seed + 1, name="features_dropout")(features)
    )
    logits = keras.layers.Dense(len(LABELS), name="logits")(
        keras.layers.Dropout(dropout, seed=seed + 2, name="hidden_dropout")(hidden)
    )
    return keras.Model(
        {"premise": premise_ids, "hypothesis": hypothesis_ids}, logits, name=f"esim_{attention}"
    )
