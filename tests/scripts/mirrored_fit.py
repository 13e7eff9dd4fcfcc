"""Train SparseMAP layers under MirroredStrategy on two logical CPU devices (run by the tests).

Logical devices must be configured before TensorFlow initialises, hence a separate process.
"""

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

import keras_structured as ks  # noqa: E402
from keras_structured.engine import SimplexStructure  # noqa: E402

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print(f"replicas={strategy.num_replicas_in_sync}")
rng = np.random.default_rng(0)
tokens = rng.integers(1, 8, size=(32, 6))
tags = tokens % 3
with strategy.scope():
    inputs = keras.Input((6,), dtype="int32")
    hidden = keras.layers.Embedding(8, 8)(inputs)
    tagged = ks.SparseMAPSequence(name="tags")(keras.layers.Dense(3)(hidden))
    pooled = ks.SparseMAP(SimplexStructure(), name="pool")(
        keras.layers.Dense(3)(keras.layers.Flatten()(hidden))
    )
    model = keras.Model(inputs, [tagged, pooled])
    model.compile(keras.optimizers.Adam(0.05), ["mse", "mse"])
history = model.fit(tokens, [np.eye(3)[tags], np.eye(3)[tags[:, 0]]], epochs=2, batch_size=8, verbose=0)
losses = history.history["loss"]
assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
print("ok", losses)
# Three examples in batches of two: the last batch leaves one replica an empty shard.
predicted = model.predict(tokens[:3], batch_size=2, verbose=0)
assert predicted[0].shape == (3, 6, 3) and np.isfinite(predicted[0]).all(), predicted
print("predict ok")
