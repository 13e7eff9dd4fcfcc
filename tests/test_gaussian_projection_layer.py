"""GaussianProjection layer: constraints hold (checked with tfp); the shared layer checks."""

import numpy as np
import pytest
import tensorflow_probability as tfp

from keras_structured.projections import GaussianProjection
from tests.layer_checks import check_layer

tfd = tfp.distributions


def test_constraints_hold_against_tfp():
    rng = np.random.default_rng(0)
    layer = GaussianProjection(min_entropy=1.0, epsilon_mean=0.05, epsilon_cov=0.05, diagonal=True)
    mean, scale = rng.normal(size=(16, 2)) * 3, rng.uniform(0.01, 3.0, size=(16, 2))
    old_mean, old_scale = rng.normal(size=(16, 2)), rng.uniform(0.5, 1.5, size=(16, 2))
    new_mean, new_scale = layer([mean, scale, old_mean, old_scale])
    old_mean, old_scale = old_mean.astype("float32"), old_scale.astype("float32")
    new = tfd.MultivariateNormalDiag(new_mean, new_scale)
    old = tfd.MultivariateNormalDiag(old_mean, old_scale)
    assert np.all(new.entropy().numpy() >= 1.0 - 1e-5)
    mean_part = tfd.kl_divergence(tfd.MultivariateNormalDiag(new_mean, old_scale), old).numpy()
    assert np.all(mean_part <= 0.05 + 1e-5)


def lower_triangular(rng, n, d):
    scale = np.tril(rng.normal(size=(n, d, d)) * 0.3, k=-1)
    return scale + np.eye(d) * rng.uniform(0.2, 1.5, size=(n, d, 1))


# name -> (constructor arguments, whether scales are Cholesky factors)
LAYER_CASES = {
    "entropy": ({"min_entropy": 2.0, "diagonal": True}, False),
    "entropy_full_covariance": ({"min_entropy": 2.0}, True),
    "entropy_and_kl": (
        {"min_entropy": 0.5, "epsilon_mean": 0.1, "epsilon_cov": 0.1, "diagonal": True},
        False,
    ),
    "kl_full_covariance": ({"epsilon_mean": 0.05, "epsilon_cov": 0.05, "average_over_batch": True}, True),
}


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
def test_layer_checks(name, tmp_path):
    kwargs, full = LAYER_CASES[name]
    rng = np.random.default_rng(1)
    n, d = 4, 2
    if full:
        scale, old_scale = lower_triangular(rng, n, d), lower_triangular(rng, n, d)
    else:
        scale, old_scale = rng.uniform(0.1, 1.5, size=(n, d)), np.full((n, d), 0.5)
    inputs = [rng.normal(size=(n, d)), scale]
    if "epsilon_mean" in kwargs:
        inputs += [rng.normal(size=(n, d)) * 0.1, old_scale]
    check_layer(GaussianProjection, kwargs, [x.astype("float32") for x in inputs], tmp_path=tmp_path)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: epsilon_mean=0.1, epsilon_cov=None"):
        GaussianProjection(epsilon_mean=0.1)
    with pytest.raises(ValueError, match="needs min_entropy"):
        GaussianProjection()
    with pytest.raises(ValueError, match="Received: 2 input"):
        GaussianProjection(epsilon_mean=0.1, epsilon_cov=0.1)([np.zeros((1, 2)), np.ones((1, 2))])
