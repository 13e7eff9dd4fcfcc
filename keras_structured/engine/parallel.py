"""Threads shared by the compiled kernels, which release the GIL: one pool per process.

The calling thread works too, so a batch needs one helper thread less than there are
cores. Work is handed out in small shares that threads take in turn (each ``next()`` of
a shared iterator is atomic under the GIL), so that a core taken by another process
holds up one small share, not a fixed half of the batch.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
from collections.abc import Callable

# Threads that work on one batch, the caller's included.
THREADS = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@functools.cache
def _pool(process_id: int) -> concurrent.futures.ThreadPoolExecutor:
    """The helper threads, started once per process (a forked child, with another
    ``process_id``, starts its own: it inherits no running threads)."""
    return concurrent.futures.ThreadPoolExecutor(max(THREADS - 1, 1), thread_name_prefix="keras_structured")


def run_on_all_threads(work: Callable[[], None]) -> None:
    """Run ``work()`` on the calling thread and on every helper thread, and wait for all.

    ``work`` takes shares of a batch from a shared iterator until it is exhausted.

    Example:
        >>> shares, done = iter(range(10)), []
        >>> run_on_all_threads(lambda: done.extend(shares))
        >>> sorted(done)
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    helpers = [_pool(os.getpid()).submit(work) for _ in range(THREADS - 1)]
    work()
    for helper in helpers:
        helper.result()
