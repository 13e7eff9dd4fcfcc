"""Budget constraints as a structure: binary vectors with (at most) ``k`` ones."""

from __future__ import annotations

import numbers

import numpy as np

from keras_structured.engine.structure import Structure, raise_for_invalid_codes


class BudgetStructure(Structure):
    """Subsets of ``d`` items of size exactly ``k`` (``exact=True``) or at most ``k``.

    ``m_s`` (shape ``(d,)``) is the subset's binary indicator vector; there is no
    higher-order part. The MAP oracle, vectorised over the batch, solves

    * ``exact=True``: ``argmax_{|S| = k} sum_{i in S} s_i``, the ``k`` best items;
    * ``exact=False``: ``argmax_{|S| <= k} sum_{i in S} s_i``, the ``k`` best items
      among those with a strictly positive score.

    Ties go to the lower index. SparseMAP over this structure returns ``u`` in the
    budget polytope ``{u in [0, 1]^d : sum(u) = k}`` (or ``<= k``) as a sparse
    combination of a few subsets.

    Optional ``lengths`` ``(batch,)`` mark the items past them as padding: they
    are never selected. With ``exact=True`` an example with fewer than ``k`` items
    selects all of them. Codes are ``(batch, d)`` int8 indicator vectors.

    Args:
        k: the budget, a positive integer, at most ``d``.
        exact: select exactly ``k`` items (True) or at most ``k`` (False).

    Example:
        >>> scores = np.array([[0.5, -1.0, 2.0, 0.1]])
        >>> BudgetStructure(2).map(scores, np.zeros((1, 0)))
        array([[1, 0, 1, 0]], dtype=int8)
        >>> BudgetStructure(3, exact=False).map(scores - 0.3, np.zeros((1, 0)))
        array([[1, 0, 1, 0]], dtype=int8)
    """

    def __init__(self, k: int, exact: bool = True):
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"k must be a positive integer. Received: k={k!r}")
        self.k, self.exact = int(k), bool(exact)

    def map(self, eta_u: np.ndarray, eta_v: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        batch, d = eta_u.shape
        positions = np.arange(d)
        budget = np.full((batch, 1), self.k)
        keys = -eta_u
        if lengths is not None:
            budget = np.minimum(budget, lengths[:, None])
            keys = np.where(positions < lengths[:, None], keys, np.inf)
        ranks = np.empty((batch, d), dtype=np.int64)
        np.put_along_axis(ranks, np.argsort(keys, axis=1, kind="stable"), positions[None, :], axis=1)
        selected = ranks < budget
        if not self.exact:
            selected &= eta_u > 0
        return selected.astype(np.int8)

    def indicators(
        self,
        codes: np.ndarray,
        u_shape: tuple[int, ...],
        v_shape: tuple[int, ...],
        lengths: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        return codes.astype(np.float64), np.zeros((codes.shape[0],) + tuple(v_shape))

    def validate_codes(
        self, codes: np.ndarray, u_shape: tuple, lengths: np.ndarray | None = None, name: str = "codes"
    ) -> None:
        d = u_shape[0]
        expected = (
            f"0/1 vectors of {d} entries with {'exactly' if self.exact else 'at most'} k={self.k} ones "
            "(or all of an example's items when it has fewer), and 0 past the example's length"
        )
        raise_for_invalid_codes(codes.shape[1:] != (d,), codes, name, expected)
        sizes = np.full(len(codes), d) if lengths is None else lengths
        binary = np.where(np.arange(d) < sizes[:, None], (codes == 0) | (codes == 1), codes == 0).all(axis=1)
        budget, count = np.minimum(sizes, self.k), (codes == 1).sum(axis=1)
        invalid = ~binary | ((count != budget) if self.exact else (count > budget))
        raise_for_invalid_codes(invalid, codes, name, expected)

    def validate_shapes(self, u_shape: tuple, v_shape: tuple) -> None:
        if len(u_shape) != 1 or (u_shape[0] is not None and self.k > u_shape[0]):
            raise ValueError(
                f"BudgetStructure(k={self.k}) expects scores of per-example shape (d,) with d >= k. "
                f"Received: eta_u per-example shape={tuple(u_shape)}"
            )
        super().validate_shapes(u_shape, v_shape)

    def validate_lengths(self, lengths: np.ndarray, u_shape: tuple) -> None:
        if lengths.ndim != 1 or np.any(lengths < 0) or np.any(lengths > u_shape[0]):
            raise ValueError(
                f"Budget lengths must have shape (batch,) with values in [0, {u_shape[0]}]. "
                f"Received: lengths={lengths.tolist()}"
            )

    def get_config(self) -> dict:
        return {"k": self.k, "exact": self.exact}
