"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
from tensorflow.python.framework import config as tf_config


@pytest.fixture
def op_determinism():
    """Deterministic TensorFlow ops for one test, then the previous setting back.

    Enabling them for good would leak into later tests: Keras turns ``jit_compile=True``
    off while they are on.
    """
    was_enabled = tf_config.is_op_determinism_enabled()
    tf_config.enable_op_determinism()
    yield
    if not was_enabled:
        tf_config.disable_op_determinism()
