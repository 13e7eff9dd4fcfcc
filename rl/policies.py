"""Policy and value networks (Keras 3 MLPs) with ``tensorflow_probability`` distributions.

A policy maps normalised observations to distribution *parameters* (a tuple of tensors):

* :class:`CategoricalPolicy`: ``(probs,)`` with ``probs = softmax(logits(s))``;
* :class:`GaussianPolicy` with ``diagonal=False``: ``(mean(s), L)``, a state-independent
  full-covariance Cholesky factor ``L`` (a ``(d, d)`` variable, as in Akrour et al. 2019);
* :class:`GaussianPolicy` with ``diagonal=True``: ``(mean(s), std(s))``, state-dependent.

Parameters (not distribution objects) are what the projections interpolate, what the
trainer stores for the old policy, and what :meth:`Policy.distribution` wraps in
``tfp.distributions``. Acting during rollouts uses :meth:`Policy.act_numpy`, a numpy forward
pass of the same weights (no Keras or TF call per environment step).
"""

from __future__ import annotations

import abc
import math
from typing import NamedTuple

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from keras_structured.projections import (
    entropy,
    gaussian_entropy,
    gaussian_kl_parts,
    kl_divergence,
    project_categorical,
    project_gaussian,
)

tfd = tfp.distributions

_NUMPY_ACTIVATIONS = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}
#: range of the log standard deviation of the state-dependent diagonal Gaussian.
LOG_STD_RANGE = (-5.0, 2.0)

Params = tuple[tf.Tensor, ...]

#: the entropy bound passed to :meth:`Policy.project` while no bound is active (far below any
#: entropy): the compiled update takes the bound as a tensor, so switching it on retraces nothing.
NO_BOUND = -1e9


class ProjectionInfo(NamedTuple):
    """Where each projection changed its input: float masks of shape ``(batch,)`` (1 where it did)."""

    entropy_active: tf.Tensor
    kl_active: tf.Tensor

    @classmethod
    def from_library(cls, info) -> ProjectionInfo:
        """The boolean masks of the library's ``ProjectionInfo`` as float32 masks."""
        return cls(tf.cast(info.entropy_active, tf.float32), tf.cast(info.kl_active, tf.float32))


def mlp(
    input_dim: int,
    hidden_sizes: tuple[int, ...],
    activation: str,
    output_dim: int,
    output_gain: float,
    seed: int,
    name: str,
) -> keras.Sequential:
    """``Dense(h, activation)`` x len(hidden_sizes) then a linear ``Dense(output_dim)``.

    Orthogonal initialisation (gain ``sqrt(2)`` hidden, ``output_gain`` last), zero biases.
    """
    if activation not in _NUMPY_ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_NUMPY_ACTIVATIONS)}. Received: {activation!r}")
    layers = [keras.Input((input_dim,))]
    for i, width in enumerate(hidden_sizes):
        init = keras.initializers.Orthogonal(math.sqrt(2.0), seed=seed + i)
        layers.append(keras.layers.Dense(width, activation, kernel_initializer=init))
    init = keras.initializers.Orthogonal(output_gain, seed=seed + len(hidden_sizes))
    layers.append(keras.layers.Dense(output_dim, kernel_initializer=init))
    return keras.Sequential(layers, name=name)


def _numpy_forward(weights: list[np.ndarray], activation: str, obs: np.ndarray) -> np.ndarray:
    """The MLP of :func:`mlp` on ``obs`` from its ``[kernel, bias, ...]`` weights."""
    act = _NUMPY_ACTIVATIONS[activation]
    x = obs
    for k in range(0, len(weights) - 2, 2):
        x = act(x @ weights[k] + weights[k + 1])
    return x @ weights[-2] + weights[-1]


def preserve_first_layer(
    network: keras.Sequential,
    old_mean: np.ndarray,
    old_std: np.ndarray,
    new_mean: np.ndarray,
    new_std: np.ndarray,
) -> None:
    """Rewrites the first ``Dense`` so that ``network((s - new_mean) / new_std)`` equals
    ``network((s - old_mean) / old_std)`` for every ``s``.

    ``W' = diag(new_std / old_std) W`` and ``b' = b + ((new_mean - old_mean) / old_std) W``.
    """
    layer = network.layers[0]
    kernel, bias = (np.asarray(v, np.float64) for v in layer.get_weights())
    new_kernel = kernel * (new_std / old_std)[:, None]
    new_bias = bias + ((new_mean - old_mean) / old_std) @ kernel
    layer.set_weights([new_kernel.astype(np.float32), new_bias.astype(np.float32)])


class ValueNetwork:
    """State-value MLP ``V(s)`` (its own network, no shared layers with the policy)."""

    def __init__(self, obs_dim: int, hidden_sizes: tuple[int, ...], activation: str, seed: int):
        self.network = mlp(obs_dim, hidden_sizes, activation, 1, 1.0, seed, "value")

    @property
    def variables(self) -> list[tf.Variable]:
        """Trainable variables."""
        return self.network.trainable_variables

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        """``V(obs)``, shape ``(batch,)``."""
        return self.network(obs)[:, 0]


class Policy(abc.ABC):
    """A stochastic policy: network -> distribution parameters -> ``tfp`` distribution."""

    network: keras.Sequential
    activation: str
    #: what the first :attr:`mode_outputs` network outputs are: ``"logits"`` or ``"mean"``.
    mode_name: str

    @property
    def variables(self) -> list[tf.Variable]:
        """All trainable variables (network and any state-independent parameter)."""
        return self.network.trainable_variables

    @property
    def distill_variables(self) -> list[tf.Variable]:
        """The variables fitted by distillation (those not set exactly by :meth:`assign_exact`)."""
        return self.variables

    @property
    def max_entropy(self) -> float:
        """Supremum of the entropy (``inf`` for Gaussians)."""
        return math.inf

    @property
    @abc.abstractmethod
    def mode_outputs(self) -> int:
        """How many leading network outputs determine the deterministic action: the logits
        (whose argmax it is) or the Gaussian mean (which it is)."""

    @abc.abstractmethod
    def params(self, obs: tf.Tensor) -> Params:
        """Distribution parameters at normalised observations ``obs`` ``(batch, obs_dim)``."""

    @abc.abstractmethod
    def distribution(self, params: Params) -> tfd.Distribution:
        """The ``tfp`` distribution with batch shape ``(batch,)``."""

    @abc.abstractmethod
    def entropy(self, params: Params) -> tf.Tensor:
        """Entropy per state, ``(batch,)``."""

    @abc.abstractmethod
    def kl(self, params: Params, old_params: Params) -> tf.Tensor:
        """``KL(pi || pi_old)`` per state, ``(batch,)``."""

    @abc.abstractmethod
    def project(
        self, params: Params, old_params: Params, entropy_bound: tf.Tensor, kl_bound: float, per_state: bool
    ) -> tuple[Params, ProjectionInfo]:
        """Projects ``params`` onto ``{H >= entropy_bound, KL(. || old_params) <= kl_bound}``.

        Entropy projection, then KL projection, from :mod:`keras_structured.projections`
        (:func:`~keras_structured.projections.project_categorical`,
        :func:`~keras_structured.projections.project_gaussian`; the module
        :mod:`keras_structured.projections.policy` says why this order keeps both): per state,
        or with ``per_state=False`` on the batch means with one coefficient per step.

        Args:
            params: the network's parameters on the batch states.
            old_params: the data-generating policy's parameters on the same states.
            entropy_bound: scalar tensor, at most the entropy of ``old_params`` (per state,
                or of their mean); :data:`NO_BOUND` when inactive.
            kl_bound: ``eps > 0``.
            per_state: per-state constraints instead of batch means.

        Returns:
            ``(projected_params, info)``, ``info`` the masks of the states that each
            projection moved.
        """

    @abc.abstractmethod
    def act_numpy(
        self,
        weights: list[np.ndarray],
        obs: np.ndarray,
        rng: np.random.Generator,
        deterministic: bool = False,
    ) -> np.ndarray:
        """Actions for normalised ``obs`` ``(n, obs_dim)`` from :meth:`numpy_weights` (no TF call)."""

    def log_prob(self, params: Params, actions: tf.Tensor) -> tf.Tensor:
        """``log pi(a|s)``, ``(batch,)``."""
        return self.distribution(params).log_prob(actions)

    def select(self, params: Params, indices: tf.Tensor) -> Params:
        """The parameters of the states ``indices`` (state-independent ones are kept whole)."""
        return tuple(tf.gather(p, indices) for p in params)

    def assign_exact(self, params: Params) -> None:  # noqa: B027 (optional hook)
        """Sets the state-independent parameters to ``params`` exactly (none by default)."""

    def numpy_weights(self) -> list[np.ndarray]:
        """Current weights as numpy arrays, in the order :meth:`act_numpy` expects."""
        return [v.numpy() for v in self.variables]


class CategoricalPolicy(Policy):
    """``pi(.|s) = softmax(MLP(s))`` over ``num_actions`` actions."""

    mode_name = "logits"

    def __init__(
        self, obs_dim: int, num_actions: int, hidden_sizes: tuple[int, ...], activation: str, seed: int
    ):
        self.num_actions = num_actions
        self.activation = activation
        self.network = mlp(obs_dim, hidden_sizes, activation, num_actions, 0.01, seed, "policy")

    @property
    def max_entropy(self) -> float:
        """``log(num_actions)``."""
        return math.log(self.num_actions)

    @property
    def mode_outputs(self):
        return self.num_actions

    def params(self, obs):
        return (tf.nn.softmax(self.network(obs), axis=-1),)

    def distribution(self, params):
        return tfd.Categorical(probs=params[0])

    def entropy(self, params):
        return entropy(params[0])

    def kl(self, params, old_params):
        return kl_divergence(params[0], old_params[0])

    def project(self, params, old_params, entropy_bound, kl_bound, per_state):
        probs, info = project_categorical(
            params[0],
            old_params[0],
            min_entropy=entropy_bound,
            epsilon=kl_bound,
            average_over_batch=not per_state,
        )
        return (probs,), ProjectionInfo.from_library(info)

    def act_numpy(self, weights, obs, rng, deterministic=False):
        logits = _numpy_forward(weights, self.activation, obs)
        if deterministic:
            return np.argmax(logits, axis=-1)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        cdf = np.cumsum(probs, axis=-1)
        u = rng.random(len(obs))[:, None] * cdf[:, -1:]
        return np.minimum((cdf < u).sum(axis=-1), self.num_actions - 1)


class GaussianPolicy(Policy):
    """``N(mean(s), Sigma)``: state-independent full ``Sigma = L L^T`` or state-dependent diagonal.

    Args:
        diagonal: ``False``: a ``(d, d)`` lower-triangular variable ``L`` (initialised to
            ``init_std I``; only ``L L^T`` matters, so the sign of its diagonal is free);
            ``True``: the network also outputs ``log std(s)`` (clipped to
            :data:`LOG_STD_RANGE`, offset so that it starts near ``log init_std``).
    """

    mode_name = "mean"

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: tuple[int, ...],
        activation: str,
        seed: int,
        diagonal: bool,
        init_std: float,
    ):
        self.action_dim = action_dim
        self.activation = activation
        self.diagonal = diagonal
        outputs = 2 * action_dim if diagonal else action_dim
        self.network = mlp(obs_dim, hidden_sizes, activation, outputs, 0.01, seed, "policy")
        self.log_std_offset = math.log(init_std)
        if not diagonal:
            self.scale_tril = tf.Variable(init_std * tf.eye(action_dim), name="scale_tril")

    @property
    def variables(self):
        if self.diagonal:
            return self.network.trainable_variables
        return [*self.network.trainable_variables, self.scale_tril]

    @property
    def distill_variables(self):
        return self.network.trainable_variables

    @property
    def mode_outputs(self):
        return self.action_dim

    def params(self, obs):
        out = self.network(obs)
        if not self.diagonal:
            return out, tf.linalg.band_part(self.scale_tril, -1, 0)
        mean, log_std = out[:, : self.action_dim], out[:, self.action_dim :] + self.log_std_offset
        return mean, tf.exp(tf.clip_by_value(log_std, *LOG_STD_RANGE))

    def distribution(self, params):
        mean, scale = params
        if self.diagonal:
            return tfd.MultivariateNormalDiag(loc=mean, scale_diag=scale)
        return tfd.MultivariateNormalTriL(loc=mean, scale_tril=scale)

    def entropy(self, params):
        mean, scale = params
        return tf.broadcast_to(gaussian_entropy(scale, self.diagonal), tf.shape(mean)[:1])

    def kl(self, params, old_params):
        kl_mean, kl_cov = gaussian_kl_parts(*params, *old_params, diagonal=self.diagonal)
        return kl_mean + kl_cov

    def project(self, params, old_params, entropy_bound, kl_bound, per_state):
        """The KL bound is split evenly: ``eps / 2`` for the mean part, ``eps / 2`` for the
        covariance part, so that ``KL <= eps``."""
        half = 0.5 * kl_bound
        (mean, scale), info = project_gaussian(
            *params,
            *old_params,
            min_entropy=entropy_bound,
            epsilon_mean=half,
            epsilon_cov=half,
            average_over_batch=not per_state,
            diagonal=self.diagonal,
        )
        if not self.diagonal and scale.shape.rank == 3:
            scale = scale[0]  # per state, a shared covariance gets the same coefficient everywhere
        return (mean, scale), ProjectionInfo.from_library(info)

    def select(self, params, indices):
        if self.diagonal:
            return super().select(params, indices)
        return tf.gather(params[0], indices), params[1]

    def assign_exact(self, params):
        if not self.diagonal:
            self.scale_tril.assign(params[1])

    def numpy_weights(self):
        weights = super().numpy_weights()
        if not self.diagonal:
            weights[-1] = np.tril(weights[-1])
        return weights

    def act_numpy(self, weights, obs, rng, deterministic=False):
        d = self.action_dim
        if self.diagonal:
            out = _numpy_forward(weights, self.activation, obs)
            mean = out[:, :d]
            if deterministic:
                return mean
            std = np.exp(np.clip(out[:, d:] + self.log_std_offset, *LOG_STD_RANGE))
            return mean + std * rng.standard_normal(mean.shape)
        mean = _numpy_forward(weights[:-1], self.activation, obs)
        if deterministic:
            return mean
        return mean + rng.standard_normal(mean.shape) @ weights[-1].T


def make_policy(
    obs_dim: int,
    action_space: gym.Space,
    hidden_sizes: tuple[int, ...],
    activation: str,
    seed: int,
    gaussian: str = "full",
    init_std: float = 1.0,
) -> Policy:
    """The policy for ``action_space``: categorical for ``Discrete``, Gaussian for ``Box``."""
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalPolicy(obs_dim, int(action_space.n), hidden_sizes, activation, seed)
    return GaussianPolicy(
        obs_dim,
        action_space.shape[0],
        hidden_sizes,
        activation,
        seed,
        diagonal=gaussian == "diag",
        init_std=init_std,
    )
