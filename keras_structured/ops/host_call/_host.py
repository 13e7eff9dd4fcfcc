"""The numpy side of SparseMAP's host calls on JAX and PyTorch.

A :class:`HostSolve` holds what one call site needs (structure, solver options, the
per-example ranks of its arguments, which solver info it returns); its methods do the work
of SparseMAP's host functions (:mod:`._sparsemap`): ``values`` (the solution only),
``forward`` (the solution and handles to its active set), ``jacobian`` (Jacobian products
from those handles) and ``decode`` (MAP decoding). The active sets stay on the host, in
:data:`SUPPORTS`, between the forward call and the backward one: their size depends on the
data, which JAX's callbacks (static result shapes) cannot return.

The solver info (the weights and codes of the active structures, gaps, MAP calls,
convergence flags) has ``k`` structures per example. TensorFlow returns the batch's largest
support (``info="batch"``); where result shapes must be known before the call (``jax.jit``,
``torch.compile``), the host pads them to :func:`max_support`, a bound that depends on the
shapes and solver options only (``info="bound"``).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from keras_structured.engine import SolverOptions, Structure, solve
from keras_structured.engine.forbidden import finite_mass, raise_if_forbidden, replace_forbidden
from keras_structured.engine.jacobian import Support, jacobian_product
from keras_structured.ops.host_call._functions import structure_key
from keras_structured.ops.host_call._store import HandleStore
from keras_structured.ops.invalid_inputs import raising_invalid_scores

#: How many structures per example a host call's info holds: the batch's largest
#: support, or :func:`max_support` (see the module docstring).
INFO_SIZES = ("batch", "bound")


def max_support(options: SolverOptions, u_shape: tuple[int, ...]) -> int:
    """The most structures a solution of ``u_shape`` unary scores can have.

    The active set keeps the unary indicator vectors of its structures affinely
    independent, so at most ``d + 1`` of them, ``d = prod(u_shape)`` (Caratheodory); a
    Frank-Wolfe method adds at most one structure per MAP call, so at most
    ``max_iter + 1`` (the warm start included).

    Example:
        >>> max_support(SolverOptions(), (5, 3))
        16
        >>> max_support(SolverOptions("frank_wolfe", max_iter=9), (5, 3))
        10
    """
    if options.method == "active_set":
        return math.prod(u_shape) + 1
    return options.max_iter + 1


def pad_codes(structures, weights, shape: tuple, code_dtype, size: int | None = None):
    """Per-example structure codes (each of per-structure ``shape``) and weights, stacked
    into ``(batch, k, *shape)`` codes padded with -1 and ``(batch, k)`` weights padded with
    0; ``k`` is ``size``, or the largest support of the batch when None.

    Raises:
        RuntimeError: when an example has more than ``size`` structures.
    """
    k = max((len(w) for w in weights), default=0)
    if size is not None:
        if k > size:
            raise RuntimeError(f"A SparseMAP solution has {k} structures, more than the bound {size}.")
        k = size
    codes = np.full((len(weights), k) + tuple(shape), -1, dtype=code_dtype)
    padded = np.zeros((len(weights), k))
    for b, (s, w) in enumerate(zip(structures, weights, strict=False)):
        codes[b, : len(w)], padded[b, : len(w)] = s, w
    return codes, padded


def map_decode_arrays(structure: Structure, values_u, values_v, sizes=None):
    """MAP decoding of a batch: ``(codes, m, n)``, the codes in the structure's
    ``code_dtype`` and the indicator vectors in the dtype of ``values_u``.

    Raises:
        ValueError: for NaN or ``+inf`` scores, bad lengths, or ``-inf`` scores that rule
            out every structure of an example.
    """
    code_dtype = structure.code_dtype
    dtype = values_u.dtype
    batch = values_u.shape[0]
    if batch == 0:  # an empty shard of a distributed batch
        shape = structure.code_shape(values_u.shape[1:], values_v.shape[1:])
        empty_codes = np.zeros((0,) + shape, dtype=code_dtype)
        return empty_codes, values_u.astype(dtype), values_v.astype(dtype)
    flat_u, flat_v = values_u.reshape(batch, -1), values_v.reshape(batch, -1)
    mass = finite_mass(flat_u, flat_v)
    flat_u, forbidden_u = replace_forbidden("eta_u", flat_u, mass)
    flat_v, forbidden_v = replace_forbidden("eta_v", flat_v, mass)
    if sizes is not None:
        structure.validate_lengths(sizes, values_u.shape[1:])
    codes = structure.map(flat_u.reshape(values_u.shape), flat_v.reshape(values_v.shape), sizes)
    m, n = structure.indicators(codes, values_u.shape[1:], values_v.shape[1:], sizes)
    touches_u = (m.reshape(batch, -1) * forbidden_u).any(axis=1)
    raise_if_forbidden(touches_u | (n.reshape(batch, -1) * forbidden_v).any(axis=1))
    return np.asarray(codes, dtype=code_dtype), m.astype(dtype), n.astype(dtype)


#: The active sets of SparseMAP's forward calls on JAX and PyTorch (TensorFlow hands the
#: supports to its tape): a :class:`~keras_structured.engine.jacobian.Support` per batch.
SUPPORTS = HandleStore()


def _take_support(handles: np.ndarray) -> Support | None:
    """The support of ``(N, 2)`` handles, its examples in their order; None when
    :data:`SUPPORTS` no longer holds it."""
    taken = SUPPORTS.take(handles)
    if taken is None:
        return None
    support, examples = taken
    if np.array_equal(examples, np.arange(support.weight_jacobian.shape[0])):
        return support
    return Support(*(array[examples] for array in support))


class HostSolve:
    """What SparseMAP's host functions need at one call site, and their work.

    Each method takes numpy arrays with any leading dimensions before the per-example
    ones (the batch, and under ``jax.vmap`` the mapped dimensions, which the JAX adapter
    broadcasts to every argument), solves all their examples in one engine call, and
    returns arrays with the same leading dimensions in the dtype of the scores. The
    engine, its Jacobian factors and their products run in float64 whatever that dtype.
    The ``*_specs`` methods take anything with ``shape`` and ``dtype``.

    Args:
        structure: the :class:`~keras_structured.engine.Structure`.
        options: the :class:`~keras_structured.engine.SolverOptions`.
        ranks: the per-example ranks of ``scores_u``, ``scores_v`` and ``lengths`` (None
            when the call has no lengths).
        key: its index in the registry of :func:`host_solve`, by which a call names it.
        info: None, or one of :data:`INFO_SIZES`: ``values`` and ``forward`` then also
            return the solver info, with the batch's largest support or :func:`max_support`
            structures per example.
    """

    def __init__(
        self,
        structure: Structure,
        options: SolverOptions,
        ranks: tuple,
        key: int = -1,
        info: str | None = None,
    ):
        if info not in (None, *INFO_SIZES):
            raise ValueError(f"info must be None or one of {INFO_SIZES}. Received: info={info!r}")
        self.structure, self.options = structure, options
        self.u_rank, self.v_rank, self.lengths_rank = ranks
        self.key, self.info = key, info

    def leading_shape(self, scores_u) -> tuple[int, ...]:
        """The dimensions of ``scores_u`` before its per-example ones."""
        return tuple(scores_u.shape[: len(scores_u.shape) - self.u_rank])

    def _example_shapes(self, scores_u, scores_v) -> tuple[tuple, tuple]:
        u_shape = tuple(int(d) for d in scores_u.shape[len(scores_u.shape) - self.u_rank :])
        v_shape = tuple(int(d) for d in scores_v.shape[len(scores_v.shape) - self.v_rank :])
        return u_shape, v_shape

    def value_specs(self, scores_u, scores_v) -> list[tuple[tuple, object]]:
        """``(shape, dtype)`` of the results of :meth:`values`: ``u`` and ``v`` like the
        scores, then the info arrays with :func:`max_support` structures per example (the
        weights, codes, gaps, MAP calls and convergence flags) when ``info`` is set."""
        specs = [(tuple(scores_u.shape), scores_u.dtype), (tuple(scores_v.shape), scores_v.dtype)]
        if self.info is None:
            return specs
        leading = self.leading_shape(scores_u)
        u_shape, v_shape = self._example_shapes(scores_u, scores_v)
        k = max_support(self.options, u_shape)
        return [
            *specs,
            (leading + (k,), scores_u.dtype),
            (leading + (k,) + self.structure.code_shape(u_shape, v_shape), self.structure.code_dtype),
            (leading, scores_u.dtype),
            (leading, np.int32),
            (leading, bool),
        ]

    def handle_specs(self, scores_u) -> list[tuple[tuple, object]]:
        """``(shape, dtype)`` of the handles that :meth:`forward` returns."""
        return [(self.leading_shape(scores_u) + (2,), np.int32)]

    def decode_specs(self, scores_u, scores_v) -> list[tuple[tuple, object]]:
        """``(shape, dtype)`` of the results of :meth:`decode`: codes, ``m`` and ``n``."""
        code_shape = self.structure.code_shape(*self._example_shapes(scores_u, scores_v))
        return [
            (self.leading_shape(scores_u) + code_shape, self.structure.code_dtype),
            (tuple(scores_u.shape), scores_u.dtype),
            (tuple(scores_v.shape), scores_v.dtype),
        ]

    def values(self, scores_u, scores_v, lengths=None) -> tuple:
        """``(u, v)``, shaped like the scores; then the info arrays (see
        :meth:`value_specs`) when ``info`` is set."""
        solution = self._solve(scores_u, scores_v, lengths)
        return (
            _like(solution.u, scores_u),
            _like(solution.v, scores_v),
            *self._info(solution, scores_u, scores_v),
        )

    def forward(self, scores_u, scores_v, lengths=None) -> tuple:
        """:meth:`values`, then ``(*leading, 2)`` int32 handles to the active sets, kept in
        :data:`SUPPORTS`."""
        solution = self._solve(scores_u, scores_v, lengths)
        support = solution.support
        batch = support.weight_jacobian.shape[0]
        handles = SUPPORTS.put(support, batch, sum(array.nbytes for array in support))
        info = self._info(solution, scores_u, scores_v)
        u, v = _like(solution.u, scores_u), _like(solution.v, scores_v)
        return u, v, *info, handles.reshape(self.leading_shape(scores_u) + (2,))

    def jacobian(self, scores_u, scores_v, lengths, handles, x_u, x_v) -> tuple:
        """``J (x_u, x_v)`` (also the vector-Jacobian product: ``J`` is symmetric) at the
        solution that ``handles`` point to; the scores serve when the store no longer
        holds it, to solve again."""
        batch = math.prod(self.leading_shape(x_u))
        support = _take_support(np.reshape(handles, (batch, 2)))
        if support is None:
            support = self._solve(scores_u, scores_v, lengths).support
        j_u, j_v = jacobian_product(support, np.reshape(x_u, (batch, -1)), np.reshape(x_v, (batch, -1)))
        return _like(j_u, x_u), _like(j_v, x_v)

    @raising_invalid_scores
    def decode(self, scores_u, scores_v, lengths=None) -> tuple:
        """MAP decoding (:func:`map_decode_arrays`): ``(codes, m, n)``, ``m`` and ``n``
        shaped like the scores, codes ``(*leading, *code_shape)``."""
        leading = self.leading_shape(scores_u)
        codes, m, n = map_decode_arrays(self.structure, *self._examples(scores_u, scores_v, lengths))
        return codes.reshape(leading + codes.shape[1:]), _like(m, scores_u), _like(n, scores_v)

    def _examples(self, scores_u, scores_v, lengths) -> list:
        """The arguments with their leading dimensions folded into one batch dimension."""
        batch = math.prod(self.leading_shape(scores_u))

        def examples(array, rank):
            return np.reshape(array, (batch,) + tuple(np.shape(array)[np.ndim(array) - rank :]))

        folded = [examples(scores_u, self.u_rank), examples(scores_v, self.v_rank)]
        return folded if lengths is None else [*folded, examples(lengths, self.lengths_rank)]

    @raising_invalid_scores
    def _solve(self, scores_u, scores_v, lengths):
        scores_u, scores_v, *lengths = self._examples(scores_u, scores_v, lengths)
        return solve(
            self.structure,
            scores_u,
            scores_v,
            lengths=lengths[0] if lengths else None,
            options=self.options,
        )

    def _info(self, solution, scores_u, scores_v) -> tuple:
        """The info arrays of ``solution`` (see :meth:`value_specs`), or () without ``info``."""
        if self.info is None:
            return ()
        leading = self.leading_shape(scores_u)
        u_shape, v_shape = self._example_shapes(scores_u, scores_v)
        size = max_support(self.options, u_shape) if self.info == "bound" else None
        code_shape = self.structure.code_shape(u_shape, v_shape)
        code_dtype = self.structure.code_dtype
        codes, weights = pad_codes(solution.structures, solution.weights, code_shape, code_dtype, size)
        dtype = scores_u.dtype
        return (
            weights.astype(dtype).reshape(leading + weights.shape[1:]),
            codes.reshape(leading + codes.shape[1:]),
            solution.gap.astype(dtype).reshape(leading),
            solution.map_calls.astype(np.int32).reshape(leading),
            solution.converged.astype(bool).reshape(leading),
        )


def _like(result: np.ndarray, template) -> np.ndarray:
    return np.asarray(result, dtype=template.dtype).reshape(np.shape(template))


_HOSTS: dict[tuple, HostSolve] = {}
_HOSTS_BY_KEY: list[HostSolve] = []
_HOSTS_LOCK = threading.Lock()


def host_solve(
    structure: Structure, options: SolverOptions, ranks: tuple, info: str | None = None
) -> HostSolve:
    """The one :class:`HostSolve` of these arguments, created on first use.

    One object per call site, known by an integer (:attr:`HostSolve.key`), the static
    argument of SparseMAP's host functions (a PyTorch op takes no Python objects). The
    objects are kept for the process's life, with their structure (so that an identity
    stays unique): a few hundred bytes per structure object of a user's class.

    Args:
        structure, options, ranks, info: see :class:`HostSolve`.

    Example:
        >>> from keras_structured.engine import SimplexStructure
        >>> host = host_solve(SimplexStructure(), SolverOptions(), (1, 1, None), info="batch")
        >>> weights, codes = host.values(np.array([[1.0, 0.5, -1.0]]), np.zeros((1, 0)))[2:4]
        >>> weights, codes
        (array([[0.75, 0.25]]), array([[0, 1]]))
        >>> host is host_solve(SimplexStructure(), SolverOptions(), (1, 1, None), info="batch")
        True
    """
    key = (structure_key(structure), options, tuple(ranks), info)
    with _HOSTS_LOCK:
        host = _HOSTS.get(key)
        if host is None:
            host = HostSolve(structure, options, ranks, len(_HOSTS_BY_KEY), info)
            _HOSTS[key] = host
            _HOSTS_BY_KEY.append(host)
    return host


def host_by_key(key: int) -> HostSolve:
    """The :class:`HostSolve` whose :attr:`~HostSolve.key` is ``key``."""
    return _HOSTS_BY_KEY[key]
