"""LP-SparseMAP (Niculae and Martins, ICML 2020): SparseMAP over factor graphs, in numpy.

A :class:`FactorGraph` joins engine structures (:class:`StructureFactor`) and logic factors
over shared binary variables; :func:`lp_sparsemap` solves the relaxation over the local
polytope by ADMM, and :meth:`LPSparseMAPSolution.vjp` differentiates the solution exactly.
"""

from keras_structured.engine.lp.admm import (
    LPSparseMAPConvergenceWarning,
    LPSparseMAPOptions,
    LPSparseMAPSolution,
    lp_sparsemap,
    lp_sparsemap_batch,
)
from keras_structured.engine.lp.graph import Factor, FactorGraph, StructureFactor
from keras_structured.engine.lp.logic import (
    AndOut,
    AtMostOne,
    Budget,
    Imply,
    LogicFactor,
    Or,
    OrOut,
    Pair,
    Xor,
    XorOut,
)

__all__ = [
    "AndOut",
    "AtMostOne",
    "Budget",
    "Factor",
    "FactorGraph",
    "Imply",
    "LPSparseMAPConvergenceWarning",
    "LPSparseMAPOptions",
    "LPSparseMAPSolution",
    "LogicFactor",
    "Or",
    "OrOut",
    "Pair",
    "StructureFactor",
    "Xor",
    "XorOut",
    "lp_sparsemap",
    "lp_sparsemap_batch",
]
