"""The compiled kernel is one function for every structure, cached on disk; it says when
it compiles, and can be warmed up."""

import json
import logging
import os
import subprocess
import sys

import numba as nb
import numpy as np
import pytest

from keras_structured import engine
from keras_structured.engine import compiled_active_set, oracle_address
from keras_structured.engine.compiled_oracle import CompiledOracle

_FIRST_CALL = r"""
import json, time
import numba as nb
import numpy as np
from keras_structured import engine
from keras_structured.engine.compiled_active_set import _solve_one
structure = engine.SimplexStructure()
start = time.perf_counter()
engine.solve(structure, np.ones((2, 4)))
seconds = time.perf_counter() - start
stats = _solve_one.stats
print(json.dumps({"seconds": seconds, "hits": sum(stats.cache_hits.values())}))
"""


def _first_call_in_new_process() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    completed = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_a_new_process_loads_the_kernel_from_the_disk_cache():
    # This process compiles the kernel and writes it to the disk cache, unless an earlier
    # process did (then it loaded it from there): either way, the cache holds it now.
    engine.solve(engine.SimplexStructure(), np.ones((2, 4)))
    again = _first_call_in_new_process()
    assert again["hits"] == 1, again
    assert again["seconds"] < 5.0, again


def test_one_kernel_serves_every_structure():
    rng = np.random.default_rng(0)
    for structure, u_shape in [
        (engine.DependencyTreeStructure(), (5, 5)),
        (engine.DependencyTreeStructure(projective=True), (5, 5)),
        (engine.SequenceStructure(), (4, 3)),
        (engine.MatchingStructure(), (3, 4)),
    ]:
        v_shape = tuple(structure.v_shape(u_shape))
        engine.solve(structure, rng.normal(size=(2, *u_shape)), rng.normal(size=(2, *v_shape)))
    assert len(compiled_active_set._solve_one.signatures) == 1
    assert type(compiled_active_set._solve_one._cache).__name__ == "FunctionCache"


def test_compilation_is_announced_once_with_what_is_compiled(caplog):
    logger = "keras_structured.engine.oracle_address"
    # A new dispatcher of the kernel's function finds the kernel on disk, as a new process does.
    fresh = nb.njit(cache=True, nogil=True)(compiled_active_set._solve_one.py_func)
    engine.solve(engine.SimplexStructure(), np.ones((1, 3)))  # compiled, so on disk
    with caplog.at_level(logging.DEBUG, logger=logger):
        oracle_address.announce_compilation(fresh, "the SparseMAP solver")
        oracle = _shifted_argmax_oracle(0)  # a new function: compiled here
        solution = engine.solve(_ShiftedSimplex(oracle), np.array([[1.0, 0.5, -1.0], [0.0, 0.0, 0.0]]))
        engine.solve(_ShiftedSimplex(oracle), np.ones((1, 3)))  # compiled: no second message
    np.testing.assert_allclose(solution.u[0], [0.75, 0.25, 0.0])
    messages = [record.getMessage() for record in caplog.records if record.name == logger]
    assert len(messages) == 2, messages
    assert "Loading the SparseMAP solver from numba's disk cache" in messages[0]
    assert "Compiling the MAP oracle" in messages[1] and "oracle" in messages[1] and "once" in messages[1]


def test_an_oracle_that_does_not_fit_the_contract_gets_a_clear_error():
    with pytest.raises(TypeError, match="must be a numba.njit function. Received: function="):
        oracle_address.address(lambda *args: (0, 0), oracle_address.ORACLE)

    @nb.njit
    def three_arguments(scores_u, scores_v, length):
        return 0, 0

    with pytest.raises(TypeError, match="does not compile for the arguments"):
        oracle_address.address(three_arguments, oracle_address.ORACLE)

    @nb.njit
    def literal_counts(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
        return 1, 0

    with pytest.raises(
        TypeError, match=r"two int64 counts, e.g. `return np.int64\(1\).*Received: .*literal_counts"
    ):
        oracle_address.address(literal_counts, oracle_address.ORACLE)


def test_warmup_compiles_the_built_in_structures_and_named_ones():
    assert set(engine.warmup()) == {
        "SequenceStructure",
        "DependencyTreeStructure",
        "MatchingStructure",
        "SimplexStructure",
    }
    seconds = engine.warmup([(engine.DependencyTreeStructure(single_root=True), (5, 5))])
    assert list(seconds) == ["DependencyTreeStructure"]


def test_warmup_needs_the_shape_of_other_structures():
    with pytest.raises(ValueError, match=r"\(structure, u_shape\) pair.*Received: structures entry="):
        engine.warmup([engine.BudgetStructure(2)])


def _shifted_argmax_oracle(shift: int):
    """A simplex oracle that picks the entry ``shift`` places after the best one: one name
    (``...<locals>.oracle``) for as many functions as shifts."""

    @nb.njit(nogil=True)
    def oracle(scores_u, scores_v, length, params, m_indices, m_values, n_indices, n_values, code):
        code[0] = (np.argmax(scores_u) + shift) % scores_u.shape[0]
        m_indices[0], m_values[0] = code[0], 1.0
        return np.int64(1), np.int64(0)

    return oracle


class _ShiftedSimplex(engine.SimplexStructure):
    """The simplex with another compiled oracle."""

    def __init__(self, oracle):
        self.oracle = oracle

    def compiled_oracle(self, u_shape, v_shape):
        return CompiledOracle(self.oracle, np.zeros(0, np.int64), (), 1)


def test_oracles_sharing_a_name_stay_apart():
    """One name (``...<locals>.oracle``) for two functions: each keeps its own code."""
    oracles = [_shifted_argmax_oracle(shift) for shift in (0, 1)]
    scores = np.array([[3.0, 0.0, 0.0]])
    for shift, oracle in zip((0, 1), oracles, strict=True):
        codes = _ShiftedSimplex(oracle).map(scores, np.zeros((1, 0)))
        assert codes.tolist() == [shift]


@pytest.mark.parametrize(
    "structure, u_shape",
    [
        (engine.SequenceStructure(), (4, 3)),
        (engine.DependencyTreeStructure(), (5, 5)),
        (engine.MatchingStructure(), (3, 4)),
        (engine.SimplexStructure(), (3,)),
    ],
)
def test_map_and_indicators_of_an_empty_batch(structure, u_shape):
    v_shape = tuple(structure.v_shape(u_shape))
    codes = structure.map(np.zeros((0, *u_shape)), np.zeros((0, *v_shape)))
    assert codes.shape == (0, *structure.code_shape(u_shape, v_shape))
    m, n = structure.indicators(codes, u_shape, v_shape)
    assert m.shape == (0, *u_shape) and n.shape == (0, *v_shape)
