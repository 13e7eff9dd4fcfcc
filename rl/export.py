"""Export of a checkpointed policy as a ``.keras`` model that runs without ``rl``.

The model maps *raw* observations ``(batch, obs_dim)`` (float32) to the quantity that determines
the deterministic action that ``python -m rl evaluate`` executes:

* discrete actions: the logits ``(batch, n_actions)``; the action is their ``argmax``;
* continuous actions: the Gaussian mean ``(batch, action_dim)``; the action is the mean
  clipped to the action space's bounds (``evaluate`` clips it before ``env.step``).

The observation normaliser of the run, if any, is the model's first layer (a Keras
``Normalization`` with the run's mean and variance), followed by the policy network's ``Dense``
layers. Only built-in Keras layers are used, so ``keras.models.load_model(path,
safe_mode=True)`` loads it without importing ``rl``. Exploration noise (the covariance or the
sampled action) is not exported.
"""

from __future__ import annotations

from pathlib import Path

import keras

from keras_structured.run_directory import save_output_file
from rl.evaluation import load_policy
from rl.normalization import RunningMeanStd
from rl.policies import Policy


def policy_model(policy: Policy, obs_rms: RunningMeanStd | None) -> keras.Model:
    """The Keras model of raw observations -> logits (discrete) or Gaussian mean (continuous).

    Args:
        policy: the policy; its network's weights are copied.
        obs_rms: the observation statistics the policy was trained with (``None``: none).

    Returns:
        A functional model named ``policy``, input ``observation``, output layer
        ``policy.mode_name`` (``logits`` or ``mean``), built-in layers only.
    """
    dense_layers = policy.network.layers
    inputs = keras.Input(policy.network.input_shape[1:], name="observation")
    x = inputs
    if obs_rms is not None:
        # Normalization divides by sqrt(variance), and the trainer by std = sqrt(var + 1e-8).
        x = keras.layers.Normalization(
            mean=obs_rms.mean, variance=obs_rms.var + 1e-8, name="observation_normalization"
        )(x)
    for i, layer in enumerate(dense_layers):
        kernel, bias = layer.get_weights()
        name = f"hidden_{i}"
        if i == len(dense_layers) - 1:  # drops the diagonal Gaussian's log-std outputs
            outputs = policy.mode_outputs
            kernel, bias, name = kernel[:, :outputs], bias[:outputs], policy.mode_name
        dense = keras.layers.Dense(kernel.shape[1], layer.get_config()["activation"], name=name)
        x = dense(x)
        dense.set_weights([kernel, bias])
    return keras.Model(inputs, x, name="policy")


def export_policy(checkpoint: str | Path, output: str | Path) -> Path:
    """Writes the policy of a checkpoint as a ``.keras`` model (:func:`policy_model`).

    Reads the checkpoint like :func:`~rl.evaluation.load_policy`: nothing is unpickled.

    Args:
        checkpoint: a checkpoint directory or a run directory (its newest checkpoint).
        output: the model file; its name must end in ``.keras``.

    Returns:
        The path written (whole: a temporary file renamed over it).

    Raises:
        ValueError: ``output`` does not end in ``.keras``.
        UnsafePathError: ``output`` or its folder is a symlink (nothing is written through it).
        CheckpointError: see :func:`~rl.evaluation.load_policy`.

    Example (a run trained with ``python -m rl train --logdir runs/rl/cp``)::

        export_policy("runs/rl/cp", "policy.keras")
        model = keras.models.load_model("policy.keras", safe_mode=True)
        action = int(np.argmax(model(obs[None])[0]))  # CartPole: logits -> action
    """
    output = Path(output)
    if output.suffix != ".keras":
        raise ValueError(
            f"The exported model's file name must end in .keras. Received: output={str(output)!r}"
        )
    _, policy, obs_rms = load_policy(checkpoint)
    # the user's path: symlinked folders followed, a symlink as the file refused
    save_output_file(output, policy_model(policy, obs_rms).save, follow_file_link=False)
    return output
