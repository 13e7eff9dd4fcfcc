"""One BLAS thread while the compiled solver runs.

The active-set kernel rebuilds small inverses with LAPACK (``np.linalg.pinv`` in numba,
which calls the LAPACK that SciPy ships). OpenBLAS splits such calls across its own
threads, and they spin while they wait for each other: once another process holds a
core, a descheduled BLAS thread stalls the others for whole time slices. On a 2-core
machine with two busy processes beside it, trees of 80 words took a p90 of 0.5-0.8 s per
solve instead of 28-36 ms. The matrices are at most a few hundred wide, where one thread is
as fast anyway, and the solver parallelises across examples instead.

:func:`single_threaded_blas` sets every OpenBLAS loaded in the process to one thread for
the duration of a block, and restores the previous counts when the last block running in
any thread ends (solves run concurrently in TensorFlow's threads). It calls OpenBLAS's own
``openblas_set_num_threads``, which acts process-wide from any thread; the libraries are
found by ``threadpoolctl``, whose own setter ignores calls from threads other than the
first one that used it. Other BLAS implementations are left as they are.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading

import scipy.linalg.cython_lapack  # noqa: F401 - loads the LAPACK that numba's np.linalg calls
import threadpoolctl

# Symbol names of OpenBLAS builds: plain, SciPy's and NumPy's wheels, 64-bit integer builds.
_AFFIXES = [(prefix, suffix) for prefix in ("scipy_", "") for suffix in ("", "64_", "_64")]
_LOCK = threading.Lock()
_state = {"depth": 0, "restore": ()}


def _after_fork_in_child() -> None:
    """A forked child starts with a free lock and no block running (only the forking
    thread survives a fork)."""
    global _LOCK
    _LOCK = threading.Lock()
    _state.update(depth=0, restore=())


os.register_at_fork(after_in_child=_after_fork_in_child)


@functools.cache
def _openblas_threads() -> tuple:
    """``(get, set)`` of the thread count of every OpenBLAS loaded now (found once)."""
    found = []
    for library in threadpoolctl.threadpool_info():
        if library["internal_api"] != "openblas":
            continue
        dynlib = ctypes.CDLL(library["filepath"])
        for prefix, suffix in _AFFIXES:
            get = getattr(dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
            if get is not None:
                found.append((get, getattr(dynlib, f"{prefix}openblas_set_num_threads{suffix}")))
                break
    return tuple(found)


@contextlib.contextmanager
def single_threaded_blas():
    """Run the block with one OpenBLAS thread; re-entrant and safe across threads.

    Example:
        >>> with single_threaded_blas():
        ...     pass
    """
    with _LOCK:
        if _state["depth"] == 0:
            _state["restore"] = tuple((set_threads, get()) for get, set_threads in _openblas_threads())
            for set_threads, _ in _state["restore"]:
                set_threads(1)
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                for set_threads, count in _state["restore"]:
                    set_threads(count)
