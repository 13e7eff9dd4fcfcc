"""Compile (or load from numba's disk cache) the SparseMAP kernel and oracles before they are needed."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import numpy as np

from keras_structured.engine.dependency_tree import DependencyTreeStructure
from keras_structured.engine.matching import MatchingStructure
from keras_structured.engine.sequence import SequenceStructure
from keras_structured.engine.simplex import SimplexStructure
from keras_structured.engine.solve import solve
from keras_structured.engine.structure import Structure

_LOGGER = logging.getLogger(__name__)

# A small unary shape for each built-in structure with a compiled oracle.
_SHAPES = {
    SequenceStructure: (3, 2),
    DependencyTreeStructure: (4, 4),
    MatchingStructure: (3, 4),
    SimplexStructure: (3,),
}


def warmup(structures: Iterable[Structure | tuple[Structure, tuple[int, ...]]] | None = None) -> dict:
    """Compile the SparseMAP kernels of ``structures`` now rather than at their first use.

    The first solve of a process compiles the SparseMAP kernel, shared by every
    structure, and the first solve of each structure its MAP oracle (about 20 s and
    0.2-5 s the first time on a machine), or loads them from numba's disk cache (a
    fraction of a second). Calling this once, for example before ``model.fit``, pays
    that cost up front: it solves one small problem of each structure and takes its
    Jacobian product, which compiles the forward and the backward.

    Args:
        structures: structure instances, or ``(structure, u_shape)`` pairs for
            structures other than the built-in sequence, dependency tree, matching and
            simplex (whose small shapes are known). None: all four built-ins.

    Returns:
        Seconds spent per structure, keyed by class name.

    Raises:
        ValueError: for a structure that is not built in and comes without its shape.

    Example:
        >>> from keras_structured.engine import SequenceStructure
        >>> list(warmup([SequenceStructure()]))
        ['SequenceStructure']
    """
    if structures is None:
        structures = [structure_class() for structure_class in _SHAPES]
    seconds = {}
    for entry in structures:
        structure, u_shape = entry if isinstance(entry, tuple) else (entry, _SHAPES.get(type(entry)))
        if u_shape is None:
            raise ValueError(
                "warmup() needs a (structure, u_shape) pair for structures that are not built in. "
                f"Received: structures entry={entry!r}"
            )
        start = time.perf_counter()
        rng = np.random.default_rng(0)
        eta_u = rng.normal(size=(1, *u_shape))
        eta_v = rng.normal(size=(1, *structure.v_shape(tuple(u_shape))))
        solution = solve(structure, eta_u, eta_v)
        solution.jacobian_product(np.ones_like(eta_u), np.ones_like(eta_v))
        name = type(structure).__name__
        seconds[name] = time.perf_counter() - start
        _LOGGER.info("SparseMAP solver for %s ready in %.1f s.", name, seconds[name])
    return seconds
