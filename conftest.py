"""Names available to the docstring examples run by ``pytest --doctest-modules``."""

import importlib.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

# SparseMAP's JAX and PyTorch adapters import their framework: where it is not installed,
# --doctest-modules does not import them (the library itself never does on TensorFlow).
collect_ignore = [
    f"keras_structured/ops/host_call/_{package}.py"
    for package in ("jax", "torch")
    if importlib.util.find_spec(package) is None
]


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace.update(np=np, tf=tf)
