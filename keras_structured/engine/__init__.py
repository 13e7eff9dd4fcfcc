"""Framework-free SparseMAP engine (numpy): structures, solvers, Jacobians (Niculae et al., 2018)."""

from keras_structured.engine.budget import BudgetStructure
from keras_structured.engine.custom import CustomStructure
from keras_structured.engine.dependency_tree import DependencyTreeStructure
from keras_structured.engine.matching import MatchingStructure
from keras_structured.engine.options import SolverOptions
from keras_structured.engine.sequence import SequenceStructure, viterbi
from keras_structured.engine.simplex import SimplexStructure
from keras_structured.engine.solve import (
    METHODS,
    SparseMAPConvergenceWarning,
    SparseMAPSolution,
    solve,
)
from keras_structured.engine.structure import Structure, structure_from_config, structure_to_config
from keras_structured.engine.warmup import warmup

__all__ = [
    "BudgetStructure",
    "CustomStructure",
    "DependencyTreeStructure",
    "MatchingStructure",
    "METHODS",
    "SequenceStructure",
    "SimplexStructure",
    "SolverOptions",
    "SparseMAPConvergenceWarning",
    "SparseMAPSolution",
    "Structure",
    "solve",
    "structure_from_config",
    "structure_to_config",
    "viterbi",
    "warmup",
]
