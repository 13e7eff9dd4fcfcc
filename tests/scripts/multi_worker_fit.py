"""Train a small SparseMAP tagger, one worker of MultiWorkerMirroredStrategy or alone (run by the tests).

    python multi_worker_fit.py OUT.npz

With ``TF_CONFIG`` set (a cluster of workers), the model is built and trained under
``tf.distribute.MultiWorkerMirroredStrategy``; without it, under the default strategy.
Either way it writes the trained weights to ``OUT.npz``. The model has a SparseMAP layer
(``SparseMAPSequence``, differentiated through its Jacobian) and is trained with the
SparseMAP loss (on the packed scores of ``SequenceScores``) plus a squared error on the
marginals; the solver runs in a ``tf.numpy_function`` on every worker.

The loop is TensorFlow's custom training loop for multi-worker training (``strategy.run``,
per-example losses averaged over the global batch, Keras's optimizer summing the
gradients across workers). Keras 3's ``model.fit`` does not run under
MultiWorkerMirroredStrategy yet: building the model, it reduces the first data batch
across workers with ``strategy.reduce``, which fails for per-replica batches
(keras-team/keras#20585). Every epoch is one step on the whole data set, the global batch,
so that the data each worker gets, whatever the sharding, adds up to the batch of the
single-worker run: the weights must then agree up to float round-off.
"""

import os
import sys

import keras
import numpy as np
import tensorflow as tf

import keras_structured as ks
from keras_structured.engine import SequenceStructure

GLOBAL_BATCH, LENGTH, TAGS, WORDS, EPOCHS = 8, 5, 3, 10, 4


def data():
    rng = np.random.default_rng(0)
    words = rng.integers(1, WORDS, size=(GLOBAL_BATCH, LENGTH))
    words[1::2, 3:] = 0  # half the sentences are padded to length 3
    tags = np.where(words > 0, words % TAGS, -1)
    one_hot = (np.eye(TAGS)[np.maximum(tags, 0)] * (tags >= 0)[..., None]).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((words, (tags, one_hot))).batch(GLOBAL_BATCH)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def build_model():
    tokens = keras.Input((LENGTH,), dtype="int32")
    hidden = keras.layers.Embedding(WORDS, 4, mask_zero=True)(tokens)
    scores = ks.SequenceScores(use_boundary=True)(keras.layers.Dense(TAGS)(hidden))
    marginals = ks.SparseMAPSequence()(scores)
    model = keras.Model(tokens, [scores, marginals])
    rng = np.random.default_rng(1)  # the same start everywhere, whatever the strategy does with seeds
    model.set_weights([rng.normal(scale=0.5, size=w.shape).astype("float32") for w in model.weights])
    return model


def per_example_loss(tags, one_hot, scores, marginals):
    """SparseMAP loss on the packed scores plus the squared error of the marginals, per sentence."""
    squared_error = tf.reduce_mean(tf.square(marginals - one_hot), axis=[1, 2])
    return ks.sparsemap_loss(tags, scores, SequenceStructure()) + squared_error


def main(out: str) -> None:
    if "TF_CONFIG" in os.environ:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    print(f"replicas={strategy.num_replicas_in_sync}", flush=True)
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(0.5)
    batches = strategy.experimental_distribute_dataset(data())

    def replica_step(words, targets):
        tags, one_hot = targets
        with tf.GradientTape() as tape:
            scores, marginals = model(words, training=True)
            losses = per_example_loss(tags, one_hot, scores, marginals)
            loss = tf.nn.compute_average_loss(losses, global_batch_size=GLOBAL_BATCH)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(batch):
        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    losses = [float(train_step(batch)) for _ in range(EPOCHS) for batch in batches]
    assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
    np.savez(out, *model.get_weights(), losses=np.array(losses))
    print("losses", losses, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
