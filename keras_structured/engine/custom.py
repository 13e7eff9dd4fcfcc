"""User-defined structures: SparseMAP over any set that has a MAP oracle."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from keras_structured.engine.structure import Structure


class CustomStructure(Structure):
    """A structure defined by a user's MAP oracle.

    The structures are the vectors ``m_s`` (any shape ``u_shape``, usually 0/1
    indicators but any reals work) that ``oracle`` can return; there is no
    higher-order part. ``oracle(scores)`` must return ``argmax_s <scores, m_s>``
    for scores of shape ``u_shape`` (or, with ``batched=True``, one maximiser per
    example for scores of shape ``(batch, *u_shape)``). SparseMAP then returns
    ``u``, the point of the convex hull of those vectors solving
    ``max_u <eta_u, u> - ||u||^2 / 2``, as a sparse combination of a few of them.
    The solvers rely on the oracle being exact: an approximate one gives a wrong
    answer. The oracle gets a copy of the scores.

    Codes are the returned vectors themselves (float64), so equal structures are
    recognised by value. Lengths are not supported. :meth:`get_config` can only
    serialize an oracle registered with ``keras.saving.register_keras_serializable``;
    it raises ``ValueError`` for any other callable (a lambda, a local function).

    Args:
        oracle: callable ``scores -> best m_s``, a numpy array of the scores' shape.
        batched: whether ``oracle`` takes the whole batch at once (faster) or one
            example at a time.

    Example: choose one item from each of two groups (a product of two simplices,
    so SparseMAP is a sparsemax per group):

        >>> def one_per_group(scores):
        ...     best = np.zeros_like(scores)
        ...     best[np.argmax(scores[:2])] = 1.0
        ...     best[2 + np.argmax(scores[2:])] = 1.0
        ...     return best
        >>> from keras_structured.engine import solve
        >>> solution = solve(CustomStructure(one_per_group), np.array([[1.0, 0.8, 0.0, 2.0]]))
        >>> solution.u
        array([[0.6, 0.4, 0. , 1. ]])
        >>> solution.structures[0]
        array([[1., 0., 0., 1.],
               [0., 1., 0., 1.]])
    """

    code_dtype = np.float64

    def __init__(self, oracle: Callable[[np.ndarray], np.ndarray] | dict, batched: bool = False):
        if isinstance(oracle, dict):
            import keras

            oracle = keras.saving.deserialize_keras_object(oracle)
        if not callable(oracle):
            raise ValueError(f"oracle must be callable. Received: oracle={oracle!r}")
        self.oracle, self.batched = oracle, bool(batched)

    def code_shape(self, u_shape: tuple, v_shape: tuple) -> tuple[int, ...] | None:
        """The codes are the structures' vectors themselves: shape ``u_shape`` (no oracle call)."""
        return None if None in tuple(u_shape) else tuple(int(d) for d in u_shape)

    def map(self, eta_u: np.ndarray, eta_v: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        if self.batched:
            return self._checked(self.oracle(eta_u.copy()), eta_u.shape)
        best = np.empty(eta_u.shape)
        for b in range(eta_u.shape[0]):
            best[b] = self._checked(self.oracle(eta_u[b].copy()), eta_u.shape[1:])
        return best

    def _checked(self, best, shape: tuple[int, ...]) -> np.ndarray:
        """The oracle's output as a float64 array, after checking its shape and values."""
        best = np.array(best, dtype=np.float64)
        if best.shape != shape:
            raise ValueError(
                f"CustomStructure's oracle must return an array shaped like its scores, {shape}. "
                f"Received: an output of shape {best.shape}"
            )
        if not np.isfinite(best).all():
            raise ValueError(f"CustomStructure's oracle must return finite values. Received: {best.tolist()}")
        return best

    def indicators(
        self,
        codes: np.ndarray,
        u_shape: tuple[int, ...],
        v_shape: tuple[int, ...],
        lengths: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        batch = codes.shape[0]
        return codes.reshape((batch,) + tuple(u_shape)).astype(np.float64), np.zeros(
            (batch,) + tuple(v_shape)
        )

    def get_config(self) -> dict:
        """``{"oracle": <serialized oracle>, "batched": ...}``; the oracle must be registered.

        Raises:
            ValueError: when the oracle is not registered with
                ``keras.saving.register_keras_serializable``.
        """
        import keras

        registered = hasattr(self.oracle, "__name__") and (
            keras.saving.get_registered_object(keras.saving.get_registered_name(self.oracle)) is self.oracle
        )
        if not registered:
            raise ValueError(
                "CustomStructure can only serialize an oracle registered with "
                "@keras.saving.register_keras_serializable(). "
                f"Received: oracle={self.oracle!r}"
            )
        return {"oracle": keras.saving.serialize_keras_object(self.oracle), "batched": self.batched}
