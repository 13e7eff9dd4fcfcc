"""One BLAS thread while the compiled solver runs.

The active-set kernel rebuilds small inverses with LAPACK (``np.linalg.pinv`` in numba,
which calls the BLAS that SciPy ships). OpenBLAS splits such calls across its own
threads, and they spin while they wait for each other: once another process holds a
core, a descheduled BLAS thread stalls the others for whole time slices. On a 2-core
machine that is not otherwise busy, trees of 80 words then took a p90 of 350 ms per
solve instead of 33 ms. The matrices are at most a few hundred wide, where one thread
is as fast anyway, and the solver parallelises across examples instead.

:func:`single_threaded_blas` limits every BLAS library loaded in the process to one
thread for the duration of a block, and restores the previous limits when the last
block running in any thread ends (solves may run concurrently in TensorFlow's threads).
"""

from __future__ import annotations

import contextlib
import functools
import threading

import scipy.linalg.cython_lapack  # noqa: F401 - loads the LAPACK that numba's np.linalg calls
import threadpoolctl

_LOCK = threading.Lock()
_state = {"depth": 0, "restore": None}


@functools.cache
def _blas_libraries() -> threadpoolctl.ThreadpoolController:
    """The BLAS libraries loaded now, numpy's and SciPy's (found once)."""
    return threadpoolctl.ThreadpoolController().select(user_api="blas")


@contextlib.contextmanager
def single_threaded_blas():
    """Run the block with one BLAS thread; re-entrant and safe across threads.

    Example:
        >>> with single_threaded_blas():
        ...     pass
    """
    with _LOCK:
        if _state["depth"] == 0:
            _state["restore"] = _blas_libraries().limit(limits=1)
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                _state["restore"].restore_original_limits()
                _state["restore"] = None
