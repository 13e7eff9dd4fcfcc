"""The numpy side of LP-SparseMAP's host call, shared by the TensorFlow, JAX and PyTorch adapters.

A :class:`LPHost` holds what one call site needs (the factor graph and the solver options);
its methods are the host functions, each taking numpy arrays whose last dimension is the
per-example one (``num_variables`` for ``u``, ``graph.v_size`` for the flat additional
parts) after any leading dimensions (the batch, and under ``jax.vmap`` the mapped ones,
which they fold into one batch):

* :meth:`LPHost.values`: the solution ``(u, v)`` and the solver info (converged,
  iterations, MAP calls), nothing kept;
* :meth:`LPHost.forward`: the same and per-example handles to the solutions, kept in
  :data:`SOLUTIONS` for the backward pass;
* :meth:`LPHost.backward`: the vector-Jacobian products of the solutions the handles point
  to (solved again from the scores when the store no longer holds them);
* :meth:`LPHost.gold`: the additional parts of gold variables (for the loss).

The solver, its Jacobian and the products run in float64 whatever the dtype of the arrays;
results come back in that dtype. The examples are solved one after the other by
:func:`~keras_structured.engine.lp.lp_sparsemap_batch`, the entry point of a future batched
compiled kernel.
"""

from __future__ import annotations

import collections
import itertools
import math
import threading

import numpy as np

from keras_structured.engine.lp import (
    FactorGraph,
    LPSparseMAPOptions,
    LPSparseMAPSolution,
    lp_sparsemap_batch,
)
from keras_structured.ops.invalid_inputs import raising_invalid_scores

#: The store's default bound on the bytes of the solutions it keeps.
MAX_SOLUTION_BYTES = 256 * 2**20


class SolutionStore:
    """Solutions kept from a forward host call to its backward one.

    :meth:`put` keeps a batch of solutions and returns one ``(call, example)`` int32 handle
    per example (JAX without x64 has no int64); :meth:`take` gives back the solutions of a
    batch of handles and forgets the call. It is a cache: when it no longer holds them
    (dropped for space, taken already, handles of several calls mixed), :meth:`take`
    returns None and the caller solves again, which gives the same solutions (the solver is
    deterministic). Batches whose backward pass never comes (a forward pass that no gradient
    follows) are dropped oldest first once the store holds more than ``max_bytes``; the
    newest is always kept.

    Args:
        max_bytes: the bound on the bytes of the solutions kept
            (:attr:`~keras_structured.engine.lp.kkt.FaceSystem.nbytes`).

    Example:
        >>> from keras_structured.engine.lp import Xor
        >>> graph = FactorGraph(2, [Xor([0, 1])])
        >>> store = SolutionStore()
        >>> handles = store.put(lp_sparsemap_batch(graph, np.array([[1.0, 0.5], [0.0, 2.0]])))
        >>> handles[:, 1], [s.u.tolist() for s in store.take(handles[::-1])], len(store)
        (array([0, 1], dtype=int32), [[0.0, 1.0], [0.75, 0.25]], 0)
        >>> store.take(handles) is None  # taken already: the caller solves again
        True
    """

    def __init__(self, max_bytes: int = MAX_SOLUTION_BYTES):
        self.max_bytes = max_bytes
        self._batches: collections.OrderedDict[int, tuple[list, int]] = collections.OrderedDict()
        self._bytes = 0
        self._calls = itertools.count()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._batches)

    def put(self, solutions: list[LPSparseMAPSolution]) -> np.ndarray:
        """Keep a batch of solutions; returns its ``(batch, 2)`` int32 handles."""
        size = sum(solution.system.nbytes for solution in solutions)
        with self._lock:
            call = next(self._calls) % 2**31
            self._batches[call] = (solutions, size)
            self._bytes += size
            while self._bytes > self.max_bytes and len(self._batches) > 1:
                _, (_, dropped) = self._batches.popitem(last=False)
                self._bytes -= dropped
        handles = np.empty((len(solutions), 2), np.int32)
        handles[:, 0], handles[:, 1] = call, np.arange(len(solutions))
        return handles

    def take(self, handles: np.ndarray) -> list[LPSparseMAPSolution] | None:
        """The solutions of ``(N, 2)`` handles of one call (in any order, repeated or not),
        forgotten by the store; None when it does not hold them all."""
        calls = handles[:, 0]
        if calls.size == 0 or np.any(calls != calls[0]):
            return None
        with self._lock:
            batch = self._batches.pop(int(calls[0]), None)
            if batch is not None:
                self._bytes -= batch[1]
        if batch is None:
            return None
        return [batch[0][example] for example in handles[:, 1]]


#: The store of every adapter.
SOLUTIONS = SolutionStore()

#: The info arrays that follow ``(u, v)``: name, numpy dtype.
INFO = (("converged", np.dtype(bool)), ("iterations", np.dtype(np.int32)), ("map_calls", np.dtype(np.int32)))


class LPHost:
    """LP-SparseMAP's host functions for one call site (see the module docstring).

    Args:
        graph: the :class:`~keras_structured.engine.lp.FactorGraph`.
        options: the :class:`~keras_structured.engine.lp.LPSparseMAPOptions`.
        key: its index in the registry of :func:`lp_host`, by which a PyTorch op names it.
    """

    def __init__(self, graph: FactorGraph, options: LPSparseMAPOptions, key: int = -1):
        self.graph, self.options, self.key = graph, options, key

    def leading_shape(self, eta_u) -> tuple[int, ...]:
        """The dimensions of ``eta_u`` before its last (per-example) one."""
        return tuple(eta_u.shape[:-1])

    def result_specs(self, eta_u, eta_v) -> list[tuple[tuple, np.dtype]]:
        """``(shape, dtype)`` of the results of :meth:`values`: ``u``, ``v`` and the info.

        The arguments are anything with a ``shape`` (a tuple, None for unknown dimensions)
        and a ``dtype`` (numpy's, or one whose name numpy reads, as PyTorch's).
        """
        leading = self.leading_shape(eta_u)
        return [
            (tuple(eta_u.shape), _numpy_dtype(eta_u)),
            (tuple(eta_v.shape), _numpy_dtype(eta_v)),
            *((leading, dtype) for _, dtype in INFO),
        ]

    def gold_spec(self, gold_u) -> tuple[tuple, np.dtype]:
        """``(shape, dtype)`` of the result of :meth:`gold`."""
        return self.leading_shape(gold_u) + (self.graph.v_size,), _numpy_dtype(gold_u)

    def handle_spec(self, eta_u) -> tuple[tuple, np.dtype]:
        """``(shape, dtype)`` of the handles that :meth:`forward` returns."""
        return self.leading_shape(eta_u) + (2,), np.dtype(np.int32)

    @raising_invalid_scores
    def values(self, eta_u, eta_v):
        """``(u, v, converged, iterations, map_calls)``, ``u`` and ``v`` shaped like the scores."""
        return self._results(self._solve(eta_u, eta_v), eta_u, eta_v)

    @raising_invalid_scores
    def forward(self, eta_u, eta_v):
        """``(u, v, handles, converged, iterations, map_calls)``: :meth:`values` and
        ``(*leading, 2)`` handles to the solutions, kept in :data:`SOLUTIONS`."""
        solutions = self._solve(eta_u, eta_v)
        handles = SOLUTIONS.put(solutions).reshape(self.handle_spec(eta_u)[0])
        u, v, *info = self._results(solutions, eta_u, eta_v)
        return u, v, handles, *info

    def backward(self, handles, eta_u, eta_v, g_u, g_v):
        """``(grad_eta_u, grad_eta_v)`` of ``<g_u, u> + <g_v, v>`` at the solutions of ``handles``,
        shaped and typed like the cotangents."""
        batch = math.prod(self.leading_shape(g_u))
        solutions = SOLUTIONS.take(np.reshape(handles, (batch, 2)))
        if solutions is None:
            solutions = self._solve(eta_u, eta_v)
        flat_u = np.reshape(g_u, (batch, self.graph.num_variables))
        flat_v = np.reshape(g_v, (batch, self.graph.v_size))
        grad_u, grad_v = np.zeros(flat_u.shape), np.zeros(flat_v.shape)
        for example, solution in enumerate(solutions):
            grad_u[example], parts = solution.vjp(
                flat_u[example], self.graph.split_additional(flat_v[example])
            )
            grad_v[example] = _flat(parts)
        return _like(grad_u, g_u), _like(grad_v, g_v)

    @raising_invalid_scores
    def gold(self, gold_u):
        """The flat additional parts ``(*leading, v_size)`` of gold variables ``gold_u`` (zeros
        and ones), in their dtype (:meth:`~keras_structured.engine.lp.FactorGraph.additional_parts`).

        Raises:
            ValueError: (as :class:`~keras_structured.ops.invalid_inputs.InvalidScoresError`)
                for a ``gold_u`` that is not binary or that a factor does not allow, naming the
                example.
        """
        leading = self.leading_shape(gold_u)
        flat = np.reshape(gold_u, (math.prod(leading), self.graph.num_variables))
        parts = np.zeros((flat.shape[0], self.graph.v_size))
        for example, u in enumerate(flat):
            try:
                parts[example] = _flat(self.graph.additional_parts(u))
            except ValueError as error:
                raise ValueError(f"Example {example} of the gold variables: {error}") from None
        return parts.astype(gold_u.dtype).reshape(leading + (self.graph.v_size,))

    def _solve(self, eta_u, eta_v) -> list[LPSparseMAPSolution]:
        batch = math.prod(self.leading_shape(eta_u))
        return lp_sparsemap_batch(
            self.graph,
            np.reshape(eta_u, (batch, self.graph.num_variables)),
            np.reshape(eta_v, (batch, self.graph.v_size)),
            options=self.options,
        )

    def _results(self, solutions, eta_u, eta_v) -> tuple:
        leading = self.leading_shape(eta_u)
        u = np.array([solution.u for solution in solutions]).reshape(eta_u.shape)
        v = np.array([_flat(solution.v) for solution in solutions]).reshape(eta_v.shape)
        info = (
            np.array([getattr(solution, name) for solution in solutions], dtype).reshape(leading)
            for name, dtype in INFO
        )
        return _like(u, eta_u), _like(v, eta_v), *info


def _flat(parts: list[np.ndarray]) -> np.ndarray:
    """Per-factor additional parts as one flat ``(v_size,)`` vector (a graph has a factor at least)."""
    return np.concatenate([np.ravel(part) for part in parts])


def _numpy_dtype(array) -> np.dtype:
    """The numpy dtype of a numpy, JAX or PyTorch array (``torch.float32`` is ``float32``)."""
    return np.dtype(str(array.dtype).removeprefix("torch."))


def _like(result: np.ndarray, template) -> np.ndarray:
    return np.asarray(result, dtype=template.dtype).reshape(np.shape(template))


_HOSTS: dict[tuple, LPHost] = {}
_HOSTS_BY_KEY: list[LPHost] = []
_HOSTS_LOCK = threading.Lock()


def lp_host(graph: FactorGraph, options: LPSparseMAPOptions) -> LPHost:
    """The one :class:`LPHost` of this graph object and these options, created on first use.

    One object per call site lets JAX reuse what it compiled for the callbacks and lets a
    PyTorch op name it by an integer (:attr:`LPHost.key`). The objects are kept for the
    process's life, with their graph (so that its identity stays unique): make a graph once,
    as the layer and the loss do, not in every call.

    Example:
        >>> from keras_structured.engine.lp import Xor
        >>> graph = FactorGraph(2, [Xor([0, 1])])
        >>> lp_host(graph, LPSparseMAPOptions()) is lp_host(graph, LPSparseMAPOptions())
        True
    """
    key = (id(graph), options)
    with _HOSTS_LOCK:
        host = _HOSTS.get(key)
        if host is None:
            host = LPHost(graph, options, len(_HOSTS_BY_KEY))
            _HOSTS[key] = host
            _HOSTS_BY_KEY.append(host)
    return host


def host_by_key(key: int) -> LPHost:
    """The :class:`LPHost` whose :attr:`~LPHost.key` is ``key``."""
    return _HOSTS_BY_KEY[key]
