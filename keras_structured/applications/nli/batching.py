"""Padded batches of encoded sentence pairs for ``tf.data``.

A batch of ``b`` pairs is padded to its own longest premise ``m`` and longest hypothesis ``n``:

==============  ==========  =======  ===========================================
tensor          shape       dtype    padding
==============  ==========  =======  ===========================================
premise         ``(b, m)``  int32    ``PAD_ID`` (0), at the end of each row
hypothesis      ``(b, n)``  int32    ``PAD_ID`` (0), at the end of each row
label           ``(b,)``    int32    none: the index in ``LABELS``
==============  ==========  =======  ===========================================

The padding masks are ``premise != 0`` and ``hypothesis != 0``: the model's embedding
(``mask_zero=True``) turns them into Keras masks, which every later layer follows, and
the sentence lengths are their row sums.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_structured.applications.nli.sick_reader import Pair
from keras_structured.applications.nli.vocabulary import PAD_ID, Vocabulary
from keras_structured.validation import check_bool, check_integer

__all__ = ["encode_pairs", "make_dataset"]


def encode_pairs(pairs: Sequence[Pair], vocabulary: Vocabulary) -> dict[str, np.ndarray]:
    """One padded batch of ``pairs``, as numpy arrays ``{"premise", "hypothesis", "label"}``.

    Example:
        >>> pair = Pair(1, ("a", "dog", "runs"), ("a", "dog"), "entailment", "train")
        >>> batch = encode_pairs([pair], Vocabulary(["a", "dog"]))
        >>> batch["premise"].tolist(), batch["hypothesis"].tolist(), batch["label"].tolist()
        ([[2, 3, 1]], [[2, 3]], [0])
    """
    if not pairs:
        raise ValueError("pairs must not be empty. Received: pairs=[]")
    batch = {}
    for side in ("premise", "hypothesis"):
        encoded = [vocabulary.encode(getattr(pair, side)) for pair in pairs]
        padded = np.full((len(pairs), max(len(ids) for ids in encoded)), PAD_ID, np.int32)
        for row, ids in enumerate(encoded):
            padded[row, : len(ids)] = ids
        batch[side] = padded
    batch["label"] = np.array([pair.label_id for pair in pairs], np.int32)
    return batch


def make_dataset(
    pairs: Sequence[Pair],
    vocabulary: Vocabulary,
    batch_size: int,
    shuffle: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """A dataset of padded batches ``({"premise": ..., "hypothesis": ...}, label)``.

    Two orders:

    * ``shuffle=False`` (evaluation): the pairs in their given order, so that batch ``k``,
      row ``r`` is pair ``k * batch_size + r`` (the last batch smaller);
    * ``shuffle=True`` (training): one permutation drawn from ``seed`` (a training loop
      passes a new seed per epoch, so a resumed run sees the same batches).

    Args:
        pairs: the pairs.
        vocabulary: the vocabulary that encodes them.
        batch_size: pairs per batch, ``>= 1``.
        shuffle: whether to shuffle.
        seed: the seed of the permutation (``shuffle=True``), or None.

    Returns:
        The finite ``tf.data.Dataset`` of one pass, with a known number of batches.

    Example:
        >>> pairs = [Pair(i, ("a",) * i, ("dog",), "neutral", "train") for i in (1, 2, 3)]
        >>> features, label = next(iter(make_dataset(pairs, Vocabulary(["a", "dog"]), 2)))
        >>> features["premise"].numpy().tolist(), label.numpy().tolist()
        ([[2, 0], [2, 2]], [1, 1])
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("pairs must not be empty. Received: pairs=[]")
    batch_size = check_integer("batch_size", batch_size, minimum=1)
    shuffle = check_bool("shuffle", shuffle)
    seed = check_integer("seed", seed, allow_none=True)
    if shuffle:
        pairs = [pairs[i] for i in np.random.default_rng(seed).permutation(len(pairs))]
    batches = [encode_pairs(pairs[k : k + batch_size], vocabulary) for k in range(0, len(pairs), batch_size)]

    def generate():
        for batch in batches:
            yield {"premise": batch["premise"], "hypothesis": batch["hypothesis"]}, batch["label"]

    signature = (
        {
            "premise": tf.TensorSpec((None, None), tf.int32),
            "hypothesis": tf.TensorSpec((None, None), tf.int32),
        },
        tf.TensorSpec((None,), tf.int32),
    )
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    # A known number of batches lets model.fit end its epochs without a "ran out of data" warning.
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches)))
