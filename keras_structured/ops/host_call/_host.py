"""The numpy side of SparseMAP's host call, shared by the JAX and PyTorch adapters.

A :class:`HostSolve` holds what one call site needs (structure, solver options, the
per-example ranks of its arguments); its three methods are the host functions:
``values`` (the solution only), ``forward`` (the solution and handles to its active set)
and ``jacobian`` (Jacobian products from those handles). The active sets stay on the host,
in :data:`SUPPORTS`, between the forward call and the backward one: their size depends on
the data, which JAX's callbacks (static result shapes) cannot return.
"""

from __future__ import annotations

import collections
import itertools
import math
import threading

import numpy as np

from keras_structured.engine import CustomStructure, SolverOptions, Structure, solve
from keras_structured.engine.jacobian import Support, jacobian_product
from keras_structured.ops.invalid_scores import raising_invalid_scores

#: The store's default bound on the bytes of the active sets it keeps.
MAX_SUPPORT_BYTES = 256 * 2**20


def _nbytes(support: Support) -> int:
    return sum(array.nbytes for array in support)


class SupportStore:
    """Active sets kept from a forward host call to its backward one.

    :meth:`put` keeps a batch's :class:`~keras_structured.engine.jacobian.Support` and
    returns one handle per example, ``(call, example)`` as int32 (JAX without x64 has no
    int64); :meth:`take` gives back the support of a batch of handles and forgets it, since
    a training step reads it once. It is a cache, not the source of truth: when it has no
    support for the handles (dropped for space, taken already by a second backward pass,
    or handles of several calls mixed), :meth:`take` returns None and the caller solves
    the scores again, which gives the same support (the solver is deterministic).

    Supports whose backward pass never comes (a forward pass recorded for gradients that
    are never asked for) are dropped oldest first once the store holds more than
    ``max_bytes``; the newest is always kept.

    Args:
        max_bytes: the bound on the bytes of the supports kept.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> store = SupportStore()
        >>> handles = store.put(solve(SimplexStructure(), np.array([[1.0, 0.5], [0.0, 2.0]])).support)
        >>> handles[:, 1], len(store)
        (array([0, 1], dtype=int32), 1)
        >>> store.take(handles[::-1]).weight_jacobian.shape, len(store)  # examples in any order
        ((2, 2, 2), 0)
        >>> store.take(handles) is None  # taken already: the caller solves again
        True
    """

    def __init__(self, max_bytes: int = MAX_SUPPORT_BYTES):
        self.max_bytes = max_bytes
        self._supports: collections.OrderedDict[int, Support] = collections.OrderedDict()
        self._bytes = 0
        self._calls = itertools.count()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._supports)

    def put(self, support: Support) -> np.ndarray:
        """Keep ``support`` (a batch of ``B`` active sets); returns its ``(B, 2)`` int32 handles."""
        with self._lock:
            call = next(self._calls) % 2**31
            self._supports[call] = support
            self._bytes += _nbytes(support)
            while self._bytes > self.max_bytes and len(self._supports) > 1:
                _, dropped = self._supports.popitem(last=False)
                self._bytes -= _nbytes(dropped)
        batch = support.weight_jacobian.shape[0]
        handles = np.empty((batch, 2), np.int32)
        handles[:, 0], handles[:, 1] = call, np.arange(batch)
        return handles

    def take(self, handles: np.ndarray) -> Support | None:
        """The supports of ``(N, 2)`` handles of one call (in any order, repeated or not),
        forgotten by the store; None when it does not hold them all."""
        calls = handles[:, 0]
        if calls.size == 0 or np.any(calls != calls[0]):
            return None
        with self._lock:
            support = self._supports.pop(int(calls[0]), None)
            if support is not None:
                self._bytes -= _nbytes(support)
        if support is None:
            return None
        examples = handles[:, 1]
        if np.array_equal(examples, np.arange(support.weight_jacobian.shape[0])):
            return support
        return Support(*(array[examples] for array in support))


#: The store of the JAX and PyTorch adapters (TensorFlow hands the supports to its tape).
SUPPORTS = SupportStore()


class HostSolve:
    """SparseMAP's host functions for one call site.

    Each method takes numpy arrays with any leading dimensions before the per-example
    ones (the batch, and under ``jax.vmap`` the mapped dimensions, which the JAX adapter
    broadcasts to every argument), solves all their examples in one engine call, and
    returns arrays with the same leading dimensions in the dtype of the scores. The
    engine, its Jacobian factors and their products run in float64 whatever that dtype.

    Args:
        structure: the :class:`~keras_structured.engine.Structure`.
        options: the :class:`~keras_structured.engine.SolverOptions`.
        ranks: the per-example ranks of ``scores_u``, ``scores_v`` and ``lengths`` (None
            when the call has no lengths).
        key: its index in the registry of :func:`host_solve`, by which a PyTorch op names it.
    """

    def __init__(self, structure: Structure, options: SolverOptions, ranks: tuple, key: int = -1):
        self.structure, self.options = structure, options
        self.u_rank, self.v_rank, self.lengths_rank = ranks
        self.key = key

    def leading_shape(self, scores_u) -> tuple[int, ...]:
        """The dimensions of ``scores_u`` before its per-example ones."""
        return tuple(scores_u.shape[: len(scores_u.shape) - self.u_rank])

    def values(self, scores_u, scores_v, lengths=None):
        """``(u, v)``, shaped like the scores."""
        solution = self._solve(scores_u, scores_v, lengths)
        return _like(solution.u, scores_u), _like(solution.v, scores_v)

    def forward(self, scores_u, scores_v, lengths=None):
        """``(u, v, handles)``: ``(*leading, 2)`` int32 handles to the active sets, kept in
        :data:`SUPPORTS`."""
        solution = self._solve(scores_u, scores_v, lengths)
        handles = SUPPORTS.put(solution.support).reshape(self.leading_shape(scores_u) + (2,))
        return _like(solution.u, scores_u), _like(solution.v, scores_v), handles

    def jacobian(self, handles, scores_u, scores_v, x_u, x_v, lengths=None):
        """``J (x_u, x_v)`` (also the vector-Jacobian product: ``J`` is symmetric) at the
        solution that ``handles`` point to; the scores serve when the store no longer
        holds it, to solve again."""
        batch = math.prod(self.leading_shape(x_u))
        support = SUPPORTS.take(np.reshape(handles, (batch, 2)))
        if support is None:
            support = self._solve(scores_u, scores_v, lengths).support
        j_u, j_v = jacobian_product(support, np.reshape(x_u, (batch, -1)), np.reshape(x_v, (batch, -1)))
        return _like(j_u, x_u), _like(j_v, x_v)

    @raising_invalid_scores
    def _solve(self, scores_u, scores_v, lengths):
        batch = math.prod(self.leading_shape(scores_u))

        def examples(array, rank):
            return np.reshape(array, (batch,) + tuple(np.shape(array)[np.ndim(array) - rank :]))

        return solve(
            self.structure,
            examples(scores_u, self.u_rank),
            examples(scores_v, self.v_rank),
            lengths=None if lengths is None else examples(lengths, self.lengths_rank),
            options=self.options,
        )


def _like(result: np.ndarray, template) -> np.ndarray:
    return np.asarray(result, dtype=template.dtype).reshape(np.shape(template))


_HOSTS: dict[tuple, HostSolve] = {}
_HOSTS_BY_KEY: list[HostSolve] = []
_HOSTS_LOCK = threading.Lock()


def _structure_key(structure: Structure) -> tuple:
    """The library's structures are equal when their configs are (the configs serialize
    them); a custom oracle or a user's structure class is known by identity."""
    library = type(structure).__module__.startswith("keras_structured.engine.")
    if library and not isinstance(structure, CustomStructure):
        return type(structure), repr(sorted(structure.get_config().items()))
    return type(structure), id(structure)


def host_solve(structure: Structure, options: SolverOptions, ranks: tuple) -> HostSolve:
    """The one :class:`HostSolve` of these arguments, created on first use.

    One object per call site lets JAX reuse what it compiled for the callback (eager
    calls included) and lets a PyTorch op name it by an integer (:attr:`HostSolve.key`).
    The objects are kept for the process's life, with their structure (so that an
    identity stays unique): a few hundred bytes per structure object of a user's class.
    """
    key = (_structure_key(structure), options, tuple(ranks))
    with _HOSTS_LOCK:
        host = _HOSTS.get(key)
        if host is None:
            host = _HOSTS[key] = HostSolve(structure, options, ranks, key=len(_HOSTS_BY_KEY))
            _HOSTS_BY_KEY.append(host)
    return host


def host_by_key(key: int) -> HostSolve:
    """The :class:`HostSolve` whose :attr:`~HostSolve.key` is ``key``."""
    return _HOSTS_BY_KEY[key]
