"""MuJoCo (Hopper-v5) smoke tests: constraints every update and identical resume (``-m slow``)."""

import math
import shutil

import numpy as np
import pytest

from rl.algorithms import make_trainer
from rl.checkpoint import checkpoint_dirs
from rl.config import default_config
from rl.logger import read_progress

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("algo", ["projected", "ppo"])
def test_hopper_constraints_and_resume(tmp_path, algo):
    def config(name):
        return default_config(
            "Hopper-v5",
            algo,
            num_steps=512,
            total_steps=2048,
            update_epochs=2,
            distill_epochs=2,
            entropy_activation_fraction=1.0,
            checkpoint_every=2,
            logdir=str(tmp_path / name),
        )

    reference = make_trainer(config("reference"))
    reference.train()
    shutil.copytree(tmp_path / "reference", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "iter_000004")
    resumed = make_trainer(config("resumed"))
    resumed.restore(checkpoint_dirs(tmp_path / "resumed")[-1])
    resumed.train()
    rows, expected = read_progress(tmp_path / "resumed"), read_progress(tmp_path / "reference")
    for key in ("charts/episodic_return", "losses/value_loss", "constraints/kl"):
        np.testing.assert_array_equal([r[key] for r in rows], [r[key] for r in expected])
    if algo == "projected":
        for row in rows:
            assert row["constraints/kl"] <= row["constraints/eps"] * (1 + 1e-5)
            if not math.isnan(row["constraints/entropy_bound"]):
                assert row["constraints/entropy"] >= row["constraints/entropy_bound"] - 1e-5
