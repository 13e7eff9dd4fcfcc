"""Names available to the docstring examples run by ``pytest --doctest-modules``."""

import importlib.util
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

# The host-call adapters for JAX and PyTorch (``_jax.py``, ``_torch.py``) import their
# framework: where it is not installed, --doctest-modules does not import them (the library
# itself never does on TensorFlow).
collect_ignore = [
    str(path.relative_to(Path(__file__).parent))
    for package in ("jax", "torch")
    if importlib.util.find_spec(package) is None
    for path in Path(__file__).parent.glob(f"keras_structured/**/_{package}.py")
]


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace.update(np=np, tf=tf)
