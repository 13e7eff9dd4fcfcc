"""The contract of a compiled MAP oracle, and the batched oracle calls that use it.

A structure opts in to the compiled solver (:mod:`~keras_structured.engine.compiled_active_set`)
by implementing ``compiled_oracle()`` that returns a :class:`CompiledOracle`: a numba
function ``oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices,
n_values, code)`` that writes the MAP structure's flat indicator vectors as sparse lists and
its integer code in place and returns the numbers of nonzeros ``(count_u, count_v)``
(int64), plus the structure's integer ``params``, code shape and bounds on the nonzeros.
``scores_u`` is the caller's scratch copy, which the oracle may overwrite, in the order the
oracle asks for (``order``, e.g. a transposition). The oracle is handed over as the address
of its machine code (:mod:`~keras_structured.engine.oracle_address`).

:func:`map_compiled` and :func:`indicators_compiled` run the oracle (and its ``parts``) on a
batch: what :meth:`Structure.map` and :meth:`Structure.indicators` return for such a
structure.
"""

from __future__ import annotations

import dataclasses
import math

import numba as nb
import numpy as np

from keras_structured.engine.oracle_address import ORACLE, PARTS, address, oracle_at, parts_at


@dataclasses.dataclass(frozen=True)
class CompiledOracle:
    """A numba MAP oracle with its structure-specific parameters.

    Attributes:
        function: a ``numba.njit`` function ``oracle(scores_u, scores_v, length, params,
            m_indices, m_values, n_indices, n_values, code) -> (count_u, count_v)``: C-contiguous
            float64 scores and nonzero values, int64 ``length`` (one entry per size,
            negative for the full size), params, indices and code; two int64 counts
            (:data:`~keras_structured.engine.oracle_address.ORACLE`).
        params: int64 array of structure parameters (sizes, options).
        code_shape: shape of the integer code of one structure, as :meth:`Structure.map`
            returns it per example (the oracle writes it flattened).
        nonzeros_u: most nonzeros of a unary indicator vector.
        nonzeros_v: most nonzeros of a higher-order indicator vector.
        order: optional permutation: the oracle reads ``eta_u[order]`` (flat) and its
            unary indices refer to positions in that order. None: the flat order.
        one_hot_codes: every nonnegative code entry marks one unary part of value 1,
            a different part for a different position or entry (a tree's heads, a
            sequence's labels): the kernel then counts shared parts on the codes.
        parts: optional numba function ``parts(code, params, m_indices, m_values,
            n_indices, n_values) -> (count_u, count_v)`` that writes the sparse indicator
            vectors of a code (in the oracle's ``order``), as the oracle does for the
            code it finds (the oracle usually ends by calling it). With it,
            :meth:`Structure.indicators` needs no code of the structure's own.
    """

    function: object
    params: np.ndarray
    code_shape: tuple
    nonzeros_u: int
    nonzeros_v: int = 0
    order: np.ndarray | None = None
    one_hot_codes: bool = False
    parts: object = None

    def __post_init__(self):
        # The compiled functions take writable C-contiguous int64 arrays: one specialisation.
        object.__setattr__(self, "params", np.require(self.params, np.int64, ("C", "W")))

    @property
    def kernel_order(self) -> np.ndarray:
        """``order`` as the compiled functions take it (writable): empty for the flat order."""
        return np.zeros(0, np.int64) if self.order is None else np.require(self.order, np.int64, ("C", "W"))

    @property
    def nonzero_bounds(self) -> np.ndarray:
        """``[nonzeros_u, nonzeros_v]`` as an int64 array, as the compiled functions take it."""
        return np.array([self.nonzeros_u, self.nonzeros_v], np.int64)


@nb.njit(cache=True, nogil=True)
def _map_each(oracle, flat_u, flat_v, sizes, params, code_size, nonzeros, order):
    """The MAP structure of every example: the oracle at address ``oracle`` on each row (in
    its ``order``), as the kernel calls it. Returns the ``(batch, code_size)`` codes."""
    map_oracle = oracle_at(oracle)
    batch = flat_u.shape[0]
    codes = np.empty((batch, code_size), np.int64)
    m_indices, m_values = np.zeros(nonzeros[0], np.int64), np.zeros(nonzeros[0])
    n_indices, n_values = np.zeros(nonzeros[1], np.int64), np.zeros(nonzeros[1])
    for b in range(batch):
        scores = flat_u[b][order] if order.shape[0] > 0 else flat_u[b].copy()  # the oracle's scratch
        map_oracle(scores, flat_v[b], sizes[b], params, m_indices, m_values, n_indices, n_values, codes[b])
    return codes


@nb.njit(cache=True, nogil=True)
def _indicators_each(parts, codes, params, nonzeros, order, du, dv):
    """Dense ``(batch, du)`` and ``(batch, dv)`` indicator vectors of ``(batch, code_size)``
    codes, from the ``parts`` function at address ``parts`` (unary indices mapped back from
    the oracle's ``order``)."""
    code_parts = parts_at(parts)
    batch = codes.shape[0]
    m, n = np.zeros((batch, du)), np.zeros((batch, dv))
    m_indices, m_values = np.zeros(nonzeros[0], np.int64), np.zeros(nonzeros[0])
    n_indices, n_values = np.zeros(nonzeros[1], np.int64), np.zeros(nonzeros[1])
    for b in range(batch):
        count_u, count_v = code_parts(codes[b], params, m_indices, m_values, n_indices, n_values)
        for j in range(count_u):
            index = order[m_indices[j]] if order.shape[0] > 0 else m_indices[j]
            if index < 0 or index >= du:
                raise ValueError("a code names a part outside the scores: check the codes")
            m[b, index] = m_values[j]
        for j in range(count_v):
            if n_indices[j] < 0 or n_indices[j] >= dv:
                raise ValueError("a code names a part outside the scores: check the codes")
            n[b, n_indices[j]] = n_values[j]
    return m, n


def indicators_compiled(
    compiled: CompiledOracle, codes: np.ndarray, u_shape: tuple, v_shape: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """The indicator vectors of a batch of codes, from the structure's compiled ``parts``:
    what :meth:`Structure.indicators` returns for a structure that has them.

    Args:
        compiled: the structure's :class:`CompiledOracle`, with ``parts``.
        codes: ``(batch, *code_shape)`` integer codes.
        u_shape: per-example shape of the unary part.
        v_shape: per-example shape of the higher-order part.

    Returns:
        ``(m, n)`` of shapes ``(batch, *u_shape)`` and ``(batch, *v_shape)``.
    """
    batch = codes.shape[0]
    flat_codes = np.ascontiguousarray(codes, dtype=np.int64).reshape(batch, math.prod(codes.shape[1:]))
    du, dv = math.prod(u_shape), math.prod(v_shape)
    m, n = _indicators_each(
        address(compiled.parts, PARTS),
        flat_codes,
        compiled.params,
        compiled.nonzero_bounds,
        compiled.kernel_order,
        du,
        dv,
    )
    return m.reshape((batch,) + tuple(u_shape)), n.reshape((batch,) + tuple(v_shape))


def sizes_of(lengths, batch: int) -> np.ndarray:
    """Per-example sizes as the oracles read them: ``(batch, d)`` int64, -1 for the full size."""
    if lengths is None:
        return np.full((batch, 1), -1, np.int64)
    return np.asarray(lengths).reshape(batch, -1).astype(np.int64)


def map_compiled(compiled: CompiledOracle, eta_u: np.ndarray, eta_v: np.ndarray, lengths=None) -> np.ndarray:
    """The batched MAP of a structure with a compiled oracle: what :meth:`Structure.map`
    returns for it, from the same oracle as the solver's.

    Args:
        compiled: the structure's :class:`CompiledOracle`.
        eta_u: ``(batch, *u_shape)`` unary scores.
        eta_v: ``(batch, *v_shape)`` higher-order scores.
        lengths: optional per-example sizes.

    Returns:
        ``(batch, *code_shape)`` int64 codes.
    """
    batch = eta_u.shape[0]
    # Sizes, not -1: a batch may be empty. The oracle's signature: C-contiguous, writable rows.
    flat_u, flat_v = (
        np.require(eta, np.float64, ("C", "W")).reshape(batch, math.prod(eta.shape[1:]))
        for eta in (eta_u, eta_v)
    )
    codes = _map_each(
        address(compiled.function, ORACLE),
        flat_u,
        flat_v,
        sizes_of(lengths, batch),
        compiled.params,
        math.prod(compiled.code_shape),
        compiled.nonzero_bounds,
        compiled.kernel_order,
    )
    return codes.reshape((batch,) + tuple(compiled.code_shape))
