"""The compiled kernel is cached on disk, says when it compiles, and can be warmed up."""

import json
import logging
import os
import subprocess
import sys

import numba as nb
import numpy as np
import pytest

from keras_structured import engine
from keras_structured.engine import compiled_active_set

_FIRST_CALL = r"""
import json, time
import numba as nb
import numpy as np
from keras_structured import engine
from keras_structured.engine.compiled_active_set import kernel
structure = engine.SimplexStructure()
start = time.perf_counter()
engine.solve(structure, np.ones((2, 4)))
seconds = time.perf_counter() - start
stats = kernel(structure.compiled_oracle((4,), (0,)).function).stats
print(json.dumps({"seconds": seconds, "hits": sum(stats.cache_hits.values())}))
"""


def _first_call_in_new_process() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    completed = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_a_new_process_loads_the_kernel_from_the_disk_cache():
    _first_call_in_new_process()  # compiles it, unless an earlier process did
    again = _first_call_in_new_process()
    assert again["hits"] == 1, again
    assert again["seconds"] < 5.0, again


def test_each_oracle_gets_its_own_cached_kernel():
    tree = engine.DependencyTreeStructure().compiled_oracle((4, 4), (0,)).function
    sequence = engine.SequenceStructure().compiled_oracle((3, 2), (2, 2, 2)).function
    assert compiled_active_set.kernel(tree) is compiled_active_set.kernel(tree)
    assert compiled_active_set.kernel(tree) is not compiled_active_set.kernel(sequence)
    names = {compiled_active_set.kernel(f).py_func.__qualname__ for f in (tree, sequence)}
    assert all("_tree_oracle" in name or "_viterbi_oracle" in name for name in names), names


def test_the_first_call_of_a_process_is_logged(caplog, monkeypatch):
    structure = engine.SimplexStructure()
    engine.solve(structure, np.ones((1, 3)))  # compiled, so on disk
    fresh = compiled_active_set._bind.__wrapped__  # a new dispatcher: as in a new process
    monkeypatch.setattr(compiled_active_set, "_bind", fresh)
    with caplog.at_level(logging.DEBUG, logger="keras_structured.engine.compiled_active_set"):
        solution = engine.solve(structure, np.array([[1.0, 0.5, -1.0], [0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(solution.u[0], [0.75, 0.25, 0.0])
    messages = [
        record.getMessage() for record in caplog.records if record.name == compiled_active_set.__name__
    ]
    assert len(messages) == 1 and "_argmax_oracle" in messages[0], messages
    assert "disk cache" in messages[0]


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
        return 1, 0

    return oracle


def test_oracles_sharing_a_name_are_not_cached_on_disk():
    """A disk cache keyed by name would hand one closure's kernel to the other."""
    oracles = [_shifted_argmax_oracle(shift) for shift in (0, 1)]
    kernels = [compiled_active_set.kernel(oracle) for oracle in oracles]
    assert [type(k._cache).__name__ for k in kernels] == ["NullCache", "NullCache"]
    built_in = engine.SimplexStructure().compiled_oracle((3,), (0,)).function
    assert type(compiled_active_set.kernel(built_in)._cache).__name__ == "FunctionCache"
    scores = np.array([[3.0, 0.0, 0.0]])
    for shift, oracle in zip((0, 1), oracles, strict=True):
        compiled = compiled_active_set.CompiledOracle(oracle, np.zeros(0, np.int64), (), 1)
        codes = compiled_active_set.map_compiled(compiled, scores, np.zeros((1, 0)))
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
