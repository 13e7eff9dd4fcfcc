"""PPO-clip (Schulman et al. 2017) on the same networks, rollouts and update loop (the baseline).

Only the policy loss differs from :class:`~rl.algorithms.projected.ProjectedPolicyIteration`:
``-E[min(r A, clip(r, 1 - c, 1 + c) A)] - ent_coef E[H]`` with ``r = pi_theta / pi_old``; the
network is executed as is (no projection), and the logged constraints are measured the same
way (``constraints/eps`` and ``constraints/entropy_bound`` are empty).
"""

from __future__ import annotations

import tensorflow as tf

from rl.algorithms.base import Trainer


class PPO(Trainer):
    """Proximal policy optimisation with the clipped surrogate objective."""

    def _policy_loss(self, params, old_params, actions, old_log_prob, advantages, entropy_bound):
        ratio = tf.exp(self.policy.log_prob(params, actions) - old_log_prob)
        clip = self.config.clip_coef
        clipped = tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip)
        surrogate = tf.minimum(ratio * advantages, clipped * advantages)
        return -tf.reduce_mean(surrogate) - self.config.ent_coef * tf.reduce_mean(self.policy.entropy(params))
