"""What a forward host call keeps on the host for its backward one, behind handles.

A differentiated host call whose backward pass needs more than arrays of static shapes (an
active set of data-dependent size, a face system) keeps it on the host and returns handles
to it, residuals of its :class:`~keras_structured.ops.host_call.HostFunction`; the backward
call takes it back by those handles. SparseMAP keeps its active sets this way on JAX and
PyTorch, LP-SparseMAP its solutions on every backend.

A forward call whose backward call will not come keeps nothing: the adapters call only the
function (JAX without differentiation, PyTorch without grad mode) or, on TensorFlow, whose
differentiable call always runs the forward function, run it under :func:`discarding` when
no tape records the arguments (``predict``, ``evaluate``, validation).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import sys
import threading
import types

import numpy as np

#: A store's default bound on the bytes of the batches it keeps.
MAX_STORE_BYTES = 256 * 2**20

_DISCARDING = threading.local()

# Values that refer to nothing else (:func:`held_bytes`); classes and functions are shared.
_ATOMS = (type(None), bool, int, float, complex, str, bytes, np.generic, type, types.FunctionType)


@contextlib.contextmanager
def discarding():
    """Within it, in this thread, :meth:`HandleStore.put` keeps nothing: the handles it
    returns point to no batch, and the backward call, should one come, computes the batch
    again."""
    previous = getattr(_DISCARDING, "active", False)
    _DISCARDING.active = True
    try:
        yield
    finally:
        _DISCARDING.active = previous


def held_bytes(value) -> int:
    """The bytes that ``value`` and what it refers to hold, each object counted once: numpy
    arrays (their data, or the base they view), containers, and objects with their
    attributes (scipy's sparse matrices, dataclasses), with Python's own object sizes.

    Example:
        >>> held_bytes([np.zeros(1000)]) > 8000
        True
    """
    seen: set[int] = set()
    pending = [value]
    total = 0
    while pending:
        item = pending.pop()
        if id(item) in seen or isinstance(item, _ATOMS):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, np.ndarray):
            if item.base is not None:
                pending.append(item.base)
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            pending.extend(item)
        elif hasattr(item, "__dict__"):
            pending.append(vars(item))
    return total


class HandleStore:
    """Batches kept from a forward host call to its backward one, behind handles.

    :meth:`put` keeps one batch (anything: the caller picks its examples) and returns one
    handle per example, ``(call, example)`` as int32 (JAX without x64 has no int64);
    :meth:`take` gives back the batch of a set of handles and the examples they point to,
    and forgets it, since a training step reads it once. It is a cache, not the source of
    truth: when it has no batch for the handles (dropped for space, taken already by a second
    backward pass, or handles of several calls mixed), :meth:`take` returns None and the
    caller computes it again from the scores, which gives the same batch (the solvers are
    deterministic).

    Batches whose backward pass never comes (a forward pass recorded for gradients that are
    never asked for) are dropped oldest first once the store holds more than ``max_bytes``;
    the newest is always kept. Within :func:`discarding`, :meth:`put` keeps nothing.

    Args:
        max_bytes: the bound on the bytes of the batches kept, as :meth:`put` counts them
            (by default all that a batch holds, :func:`held_bytes`).

    Example:
        >>> store = HandleStore()
        >>> handles = store.put(["first", "second"], size=2, nbytes=10)
        >>> handles[:, 1], len(store)
        (array([0, 1], dtype=int32), 1)
        >>> batch, examples = store.take(handles[::-1])  # examples in any order
        >>> [batch[e] for e in examples], len(store)
        (['second', 'first'], 0)
        >>> store.take(handles) is None  # taken already: the caller computes it again
        True
    """

    def __init__(self, max_bytes: int = MAX_STORE_BYTES):
        self.max_bytes = max_bytes
        self._batches: collections.OrderedDict[int, tuple[object, int]] = collections.OrderedDict()
        self._bytes = 0
        self._calls = itertools.count()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def nbytes(self) -> int:
        """The bytes of the batches kept, as :meth:`put` counted them."""
        return self._bytes

    def put(self, batch, size: int, nbytes: int | None = None) -> np.ndarray:
        """Keep ``batch`` of ``size`` examples, ``nbytes`` bytes (None: :func:`held_bytes`
        measures them); returns its ``(size, 2)`` int32 handles. Within :func:`discarding`
        the handles point to no batch."""
        keep = not getattr(_DISCARDING, "active", False)
        if keep and nbytes is None:
            nbytes = held_bytes(batch)
        with self._lock:
            call = next(self._calls) % 2**31
            if keep:
                self._batches[call] = (batch, nbytes)
                self._bytes += nbytes
            while self._bytes > self.max_bytes and len(self._batches) > 1:
                _, (_, dropped) = self._batches.popitem(last=False)
                self._bytes -= dropped
        handles = np.empty((size, 2), np.int32)
        handles[:, 0], handles[:, 1] = call, np.arange(size)
        return handles

    def take(self, handles: np.ndarray) -> tuple[object, np.ndarray] | None:
        """``(batch, examples)`` of ``(N, 2)`` handles of one call (in any order, repeated or
        not), the batch forgotten by the store; None when it does not hold it."""
        calls = handles[:, 0]
        if calls.size == 0 or np.any(calls != calls[0]):
            return None
        with self._lock:
            kept = self._batches.pop(int(calls[0]), None)
            if kept is not None:
                self._bytes -= kept[1]
        return None if kept is None else (kept[0], handles[:, 1])
