"""The tree-CRF benchmark's baseline and score generator do what its report says."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from benchmarks import bench_tree_crf as bench
from keras_structured.ops import tree_crf_log_partition


def test_the_slogdet_baseline_is_the_matrix_tree_log_partition_on_benign_scores():
    scores = tf.constant(np.random.default_rng(0).normal(size=(3, 6, 6)))
    np.testing.assert_allclose(
        bench.slogdet_log_partition(scores).numpy(), tree_crf_log_partition(scores).numpy(), atol=1e-10
    )


def test_confident_scores_break_slogdet_but_not_the_elimination():
    scores = tf.constant(bench.confident_scores(np.random.default_rng(1), 8, 20))
    reference = tree_crf_log_partition(tf.cast(scores, tf.float64)).numpy()
    assert np.max(np.abs(tree_crf_log_partition(scores).numpy() - reference)) < 1e-3
    assert np.nanmax(np.abs(bench.slogdet_log_partition(scores).numpy() - reference)) > 1.0


def test_one_long_sentence_takes_megabytes_not_a_tape_of_every_step():
    # The pure-TensorFlow elimination's gradient took 222 MiB here (it stores every step).
    assert 0 <= bench.peak_memory_increase("ours", 300) < 50
