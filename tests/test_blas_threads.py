"""The compiled solver runs with one OpenBLAS thread, whichever thread calls it."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import threadpoolctl

from keras_structured.engine import DependencyTreeStructure, solve
from keras_structured.engine.blas_threads import single_threaded_blas


def _openblas_counts() -> list[int]:
    libraries = threadpoolctl.threadpool_info()
    return [lib["num_threads"] for lib in libraries if lib["internal_api"] == "openblas"]


def test_one_thread_inside_the_block_and_the_setting_restored_after():
    before = _openblas_counts()
    assert before, "no OpenBLAS found: numpy and SciPy wheels ship one"
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        # Single-threaded OpenBLAS builds (cvxpy's solvers load one) stay at 1 thread.
        limited = _openblas_counts()
        assert 2 in limited
        with single_threaded_blas():
            assert _openblas_counts() == [1] * len(before)
        assert _openblas_counts() == limited
    assert _openblas_counts() == before


def test_the_limit_holds_from_other_threads_and_overlapping_blocks():
    """Solves run in TensorFlow's threads, several at a time: the first block to start sets
    one thread, the last one to end restores the setting."""
    inside, release = threading.Barrier(2), threading.Event()

    def block():
        with single_threaded_blas():
            inside.wait()
            counts = _openblas_counts()
            release.wait()
            return counts

    before = _openblas_counts()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(block) for _ in range(2)]
        release.set()
        results = [future.result() for future in futures]
    assert results == [[1] * len(before)] * 2
    assert _openblas_counts() == before


def test_solving_from_a_thread_restores_the_setting():
    before = _openblas_counts()
    scores = np.random.default_rng(0).normal(size=(8, 9, 9))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(solve, DependencyTreeStructure(), scores).result()
    assert _openblas_counts() == before
