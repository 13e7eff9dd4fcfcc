"""GAE against a hand-computed example with a termination and a truncation."""

import numpy as np

from rl.gae import gae


def test_gae_hand_computed_with_termination_and_truncation():
    gamma, lam = 0.9, 0.5
    # one env, 4 steps: step 1 terminates, step 2 is truncated (bootstrapped), step 3 is the last one.
    rewards = np.array([[1.0], [2.0], [3.0], [4.0]])
    values = np.array([[0.5], [1.0], [1.5], [2.0]])
    next_values = np.array([[1.0], [9.0], [7.0], [3.0]])  # 9.0: value of a terminal state, ignored
    terminated = np.array([[False], [True], [False], [False]])
    done = np.array([[False], [True], [True], [False]])
    adv, ret = gae(rewards, values, next_values, terminated, done, gamma, lam)
    d3 = 4.0 + 0.9 * 3.0 - 2.0  # last step: bootstrap from next_values
    d2 = 3.0 + 0.9 * 7.0 - 1.5  # truncated: bootstrap from the final observation's value, no trace
    d1 = 2.0 - 1.0  # terminated: no bootstrap
    d0 = 1.0 + 0.9 * 1.0 - 0.5
    a3, a2, a1 = d3, d2, d1
    a0 = d0 + gamma * lam * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2, a3])
    np.testing.assert_allclose(ret, adv + values)


def test_gae_envs_are_independent():
    rng = np.random.default_rng(0)
    shape = (6, 3)
    args = [
        rng.normal(size=shape),
        rng.normal(size=shape),
        rng.normal(size=shape),
        rng.random(shape) < 0.2,
        rng.random(shape) < 0.4,
    ]
    args[4] |= args[3]
    adv, _ = gae(*args, 0.99, 0.95)
    for e in range(3):
        single, _ = gae(*(a[:, e : e + 1] for a in args), 0.99, 0.95)
        np.testing.assert_allclose(adv[:, e : e + 1], single)
