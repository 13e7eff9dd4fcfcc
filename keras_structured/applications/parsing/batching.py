"""Padded batches of encoded sentences for ``tf.data``, bucketed by length for training.

Every example is a sentence of ``n`` words encoded with the root first, so ``n + 1``
positions. A batch of ``b`` sentences is padded to its own longest sentence,
``m = max(n) + 1`` positions:

==========  ==========  =======  ====================================================
tensor      shape       dtype    padding
==========  ==========  =======  ====================================================
words       ``(b, m)``  int32    ``PAD_ID`` (0); position 0 is ``ROOT_ID`` (2)
tags        ``(b, m)``  int32    ``PAD_ID`` (0); position 0 is ``ROOT_ID`` (2)
heads       ``(b, m)``  int32    ``-1``; position 0 (the root) holds ``-1`` too
relations   ``(b, m)``  int32    ``-1``; position 0 (the root) holds ``-1`` too
==========  ==========  =======  ====================================================

The heads use the convention of the dependency-tree structure (``-1`` exactly at the
root and the padding), so a loss reads each sentence's length from its gold heads. A
vocabulary without tags (``tag_column="none"``) gives no ``tags``; the relations are
there for a labelled parser only (``labels=True``), whose inputs hold the heads too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_structured.applications.parsing.conllu_reader import Sentence
from keras_structured.applications.parsing.vocabulary import PAD_ID, Vocabulary, word_dropout
from keras_structured.validation import check_bool, check_integer, check_number

__all__ = ["make_dataset"]


def make_dataset(
    sentences: Sequence[Sentence],
    vocabulary: Vocabulary,
    batch_size: int,
    shuffle: bool = False,
    seed: int | None = None,
    word_dropout_alpha: float = 0.0,
    bucket_width: int = 10,
    labels: bool = False,
    heads: Sequence[np.ndarray] | None = None,
) -> tf.data.Dataset:
    """A dataset of padded batches ``({"words": words, "tags": tags}, heads)``.

    Shapes (``b`` sentences in the batch, ``m`` = one plus the batch's longest sentence):
    ``words``, ``tags`` and ``heads`` are ``(b, m)`` int32; words and tags are padded
    with 0, heads with -1, and every row starts with the root (word and tag id 2, head -1).
    A vocabulary without tags (``tag_column="none"``) gives ``{"words": words}`` alone.

    With ``labels=True`` (a labelled parser, which reads each word's head to classify its
    relation), the batches are ``({"words", "tags", "heads"}, {"arcs": heads, "labels":
    relations})``: the heads are an input as well as the target of the tree loss, and
    ``relations`` holds the relation ids (:meth:`Vocabulary.encode_relations`), ``-1`` at
    the root and the padding.

    Two orders:

    * ``shuffle=False`` (evaluation): the sentences in their given order, ``batch_size``
      consecutive sentences a batch (the last one smaller), so that batch ``k``, row ``r``
      is sentence ``k * batch_size + r``. No length bucketing.
    * ``shuffle=True`` (training): the sentences are reshuffled at every iteration (every
      epoch of ``model.fit``) and grouped by length: a batch holds sentences whose word
      counts ``n`` share the bucket ``n // bucket_width`` (a bucket's last batch of an
      epoch may be smaller). Every sentence appears exactly once per epoch.

    Word dropout (:func:`~keras_structured.applications.parsing.vocabulary.word_dropout`) is applied
    when ``word_dropout_alpha > 0``, with a new mask for every batch of every epoch.

    Given a ``seed`` and TensorFlow's global seed (``keras.utils.set_random_seed``), the
    whole sequence of epochs (order and dropout masks) is the same from run to run; with
    ``seed=None`` it is not. TensorFlow derives the shuffling and the dropout masks from the
    two seeds together, as for every seeded op: a process that has no global seed yet (a
    run resumed in a new process) draws other batches than one where it is set, so set it
    before calling this function.

    Args:
        sentences: the sentences, with their gold heads.
        vocabulary: the vocabulary that encodes them.
        batch_size: the number of sentences a batch, ``>= 1``.
        shuffle: whether to shuffle and bucket by length (training).
        seed: the seed of the shuffling and of the word dropout (with the global seed), or None.
        word_dropout_alpha: the word dropout constant ``alpha >= 0``; 0 for none.
        bucket_width: the width of the length buckets, in words, ``>= 1``
            (``shuffle=True`` only).
        labels: the batches of a labelled parser (above).
        heads: one head vector ``(n + 1,)`` per sentence to use instead of the sentences'
            own (the predicted trees, whose relations a labelled parser then classifies).

    Returns:
        The ``tf.data.Dataset``, finite (one epoch per iteration) and prefetched.

    Raises:
        ValueError: if ``sentences`` is empty, an argument is out of range, or ``heads``
            does not hold one head vector per sentence.

    Example:
        >>> s = Sentence(("Dogs", "bark"), ("NOUN", "VERB"), np.array([-1, 2, 0]), ("nsubj", "root"))
        >>> t = Sentence(("Hi",), ("INTJ",), np.array([-1, 0]), ("root",))
        >>> vocabulary = Vocabulary.from_sentences([s, t])
        >>> features, heads = next(iter(make_dataset([s, t], vocabulary, batch_size=2)))
        >>> features["words"].numpy().tolist(), heads.numpy().tolist()
        ([[2, 3, 4], [2, 5, 0]], [[-1, 2, 0], [-1, 0, -1]])
    """
    sentences = list(sentences)
    if not sentences:
        raise ValueError("sentences must not be empty. Received: sentences=[]")
    batch_size = check_integer("batch_size", batch_size, minimum=1)
    shuffle = check_bool("shuffle", shuffle)
    seed = check_integer("seed", seed, allow_none=True)
    word_dropout_alpha = check_number("word_dropout_alpha", word_dropout_alpha, minimum=0.0)
    bucket_width = check_integer("bucket_width", bucket_width, minimum=1)
    labels = check_bool("labels", labels)
    if heads is None:
        heads = [sentence.heads for sentence in sentences]
    elif len(heads) != len(sentences) or any(
        np.shape(h) != (s.length + 1,) for h, s in zip(heads, sentences, strict=False)
    ):
        raise ValueError(
            "heads must hold one head vector of shape (n + 1,) per sentence. "
            f"Received: {len(heads)} head vectors for {len(sentences)} sentences"
        )

    # All sentences concatenated: sentence i is flat[starts[i] : starts[i] + sizes[i]].
    encoded = [vocabulary.encode(sentence) for sentence in sentences]
    sizes = np.array([sentence.length + 1 for sentence in sentences], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = {"words": np.concatenate([words for words, _ in encoded])}
    if vocabulary.num_tags:
        flat["tags"] = np.concatenate([tags for _, tags in encoded])
    if labels:
        flat["heads"] = np.concatenate(heads).astype(np.int32)
    flat = {name: tf.constant(ids) for name, ids in flat.items()}
    flat_heads = tf.constant(np.concatenate(heads).astype(np.int32))
    if labels:
        relations = [vocabulary.encode_relations(sentence) for sentence in sentences]
        flat_relations = tf.constant(np.concatenate(relations))
    starts, sizes_tensor = tf.constant(starts), tf.constant(sizes)

    def example(index):
        rows = tf.range(starts[index], starts[index] + sizes_tensor[index])
        features = {name: tf.gather(ids, rows) for name, ids in flat.items()}
        if labels:
            return features, {"arcs": tf.gather(flat_heads, rows), "labels": tf.gather(flat_relations, rows)}
        return features, tf.gather(flat_heads, rows)

    feature_padding = {name: -1 if name == "heads" else PAD_ID for name in flat}
    padding_values = (feature_padding, {"arcs": -1, "labels": -1} if labels else -1)
    dataset = tf.data.Dataset.range(len(sentences))
    if shuffle:
        dataset = dataset.shuffle(len(sentences), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # Bucket k holds sizes n + 1 in [k * width + 1, (k + 1) * width + 1), i.e. n // width = k.
    num_buckets = int(sizes.max() - 1) // bucket_width + 1
    if shuffle and num_buckets > 1:
        per_bucket = np.bincount((sizes - 1) // bucket_width, minlength=num_buckets)
        batches = int(np.sum(-(-per_bucket // batch_size)))
        dataset = dataset.bucket_by_sequence_length(
            element_length_func=lambda features, targets: tf.shape(features["words"])[0],
            bucket_boundaries=[k * bucket_width + 1 for k in range(1, num_buckets)],
            bucket_batch_sizes=[batch_size] * num_buckets,
            padding_values=padding_values,
        )
    else:
        batches = -(-len(sentences) // batch_size)
        dataset = dataset.padded_batch(batch_size, padding_values=padding_values)
    # Known batch counts let model.fit end its epochs without a "ran out of data" warning.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))

    if word_dropout_alpha > 0.0:
        counts = tf.constant(vocabulary.counts)
        # One random int64 per batch, a new stream at every iteration: a seed per batch and epoch.
        batch_seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)

        def drop_words(batch, batch_seed):
            features, targets = batch
            dropout_seed = tf.stack([batch_seed, tf.constant(0, tf.int64)])
            words = word_dropout(features["words"], counts, word_dropout_alpha, seed=dropout_seed)
            return {**features, "words": words}, targets

        dataset = tf.data.Dataset.zip((dataset, batch_seeds)).map(drop_words)
    return dataset.prefetch(tf.data.AUTOTUNE)
