"""The probability simplex as a structure: SparseMAP over it is sparsemax."""

from __future__ import annotations

import numba as nb
import numpy as np

from keras_structured.engine.compiled_oracle import CompiledOracle
from keras_structured.engine.structure import Structure, raise_for_invalid_codes


@nb.njit(cache=True, nogil=True)
def _argmax_oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
    """Compiled simplex MAP: the vertex of the largest score (see :class:`CompiledOracle`)."""
    code[0] = np.argmax(scores_u)
    return _vertex_parts(code, params, m_indices, m_values, n_indices, n_values)


@nb.njit(cache=True, nogil=True)
def _vertex_parts(code, params, m_indices, m_values, n_indices, n_values):
    """The one part of vertex ``code[0]`` (see :class:`CompiledOracle`)."""
    m_indices[0], m_values[0] = code[0], 1.0
    return np.int64(1), np.int64(0)


class SimplexStructure(Structure):
    """The ``K`` vertices of the simplex, ``m_s = e_s``; no higher-order part.

    SparseMAP over this structure solves ``max_{u in simplex} <eta, u> - ||u||^2 / 2``,
    the Euclidean projection onto the simplex, i.e. sparsemax.

    Example:
        >>> s = SimplexStructure()
        >>> s.map(np.array([[0.1, 2.0, -1.0]]), np.zeros((1, 0)))
        array([1])
    """

    def validate_codes(self, codes, u_shape, lengths=None, name="codes"):
        expected = f"one class index in [0, {u_shape[0]}) per example"
        raise_for_invalid_codes(codes.shape[1:] != (), codes, name, expected)
        raise_for_invalid_codes((codes < 0) | (codes >= u_shape[0]), codes, name, expected)

    def compiled_oracle(self, u_shape, v_shape):
        return CompiledOracle(
            _argmax_oracle, np.zeros(0, dtype=np.int64), (), 1, one_hot_codes=True, parts=_vertex_parts
        )

    def validate_shapes(self, u_shape, v_shape):
        if len(u_shape) != 1:
            raise ValueError(
                "SimplexStructure expects scores of per-example shape (K,). "
                f"Received: eta_u per-example shape={tuple(u_shape)}"
            )
        super().validate_shapes(u_shape, v_shape)
