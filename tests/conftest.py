"""Fixtures shared by the test modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorflow.python.framework import config as tf_config

ROOT = Path(__file__).resolve().parents[1]
# Test modules of the applications (``keras_structured.applications``, ``rl``, the examples and
# the benchmark runners), by name prefix; a library module's single application test carries
# ``@pytest.mark.application`` itself. ``pytest -m "not application"`` runs the library's tests.
APPLICATION_MODULES = (
    "test_application_",
    "test_bench_",
    "test_examples_",
    "test_gold_tree_",
    "test_lp_examples",
    "test_nli_",
    "test_parser_",
    "test_parsing_",
    "test_polynomial_examples",
    "test_projection_examples",
    "test_rl_",
    "test_run_safety_",
    "test_step_timing",
    "test_tracenorm",
    "test_training_runs",
)
APPLICATION_PACKAGES = (ROOT / "keras_structured" / "applications", ROOT / "rl")
# Programs that tests run in subprocesses, not modules: ``--doctest-modules`` would import them,
# and one trains a model at import (4 s in every worker).
collect_ignore = ["scripts"]


def _is_application(path: Path) -> bool:
    if any(package in path.parents for package in APPLICATION_PACKAGES):  # their doctests
        return True
    return path.parent.name == "tests" and path.name.startswith(APPLICATION_MODULES)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _is_application(Path(item.path).resolve()):
            item.add_marker(pytest.mark.application)


# With ``--dist loadfile``, the first module handed to the second worker: a long one that
# needs no numba. On a fresh checkout, the first worker then compiles the SparseMAP kernel and
# the oracles (30-50 s of each worker's time) while the second runs TensorFlow tests, and the
# second later loads them from numba's disk cache instead of compiling them at the same time.
NUMBA_FREE_MODULE = "tests/test_projections.py"


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: unknown, and unused, without it
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` as usual, except for :data:`NUMBA_FREE_MODULE`'s place (only the
    order in which workers receive the modules changes)."""
    if config.getoption("dist") != "loadfile":
        return None
    try:
        from xdist.scheduler import LoadFileScheduling
    except ImportError:  # another xdist layout: its own scheduler, in the default order
        return None

    class NumbaFreeSecond(LoadFileScheduling):
        assigned = 0

        def _assign_work_unit(self, node):
            self.assigned += 1
            if self.assigned == 2 and NUMBA_FREE_MODULE in self.workqueue:
                self.workqueue.move_to_end(NUMBA_FREE_MODULE, last=False)
            super()._assign_work_unit(node)

    return NumbaFreeSecond(config, log)


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
