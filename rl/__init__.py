"""Constrained policy optimisation with projected policies (Akrour et al. 2019) and a PPO baseline.

Modules: :mod:`rl.config` (dataclass config, defaults by env kind), :mod:`rl.env_kind`
(supported spaces, what an env is), :mod:`rl.envs` (gymnasium vector envs with checkpointable
state), :mod:`rl.policies` (Keras networks, ``tfp`` distributions),
:mod:`rl.gae`, :mod:`rl.normalization`, :mod:`rl.algorithms` (trainers), :mod:`rl.logger`,
:mod:`rl.checkpoint` (arrays, JSON and a hashed resume-only pickle), :mod:`rl.evaluation`,
:mod:`rl.export` (``.keras`` policies), :mod:`rl.upgrade` (old checkpoints), :mod:`rl.plotting`,
:mod:`rl.cli`. The entropy and KL projections of policy parameters are those of
:mod:`keras_structured.projections` (``project_categorical``, ``project_gaussian``); ``rl`` has
none of its own.

Importing ``rl`` does not import gymnasium or TensorFlow; the submodules do.
"""
