"""Run test code under each Keras backend, and compare what it computes.

Keras fixes its backend when it is first imported, and the test process runs TensorFlow. This
helper runs code under another backend in a fresh ``python`` process: the interpreter that runs
the tests (``sys.executable``), with ``KERAS_BACKEND`` set, from the repository root. So in an
environment with ``jax`` (or ``torch``) installed, ``python -m pytest`` runs the JAX (PyTorch)
checks; in one without, they are skipped and the skip reason names the missing package.

Two ways to use it:

- ``run_calls(backend, {"name": "module:function", ...}, tmp_path)`` calls module-level
  functions in one process of that backend and returns what each returned: a dict of arrays
  (saved by the child to an ``.npz`` file and read back), for the test to compare with the
  TensorFlow values it computes itself. A function may also assert; its traceback is then
  raised in the test. Arguments go as ``("module:function", {"keyword": value})`` with JSON
  values (paths as strings). With ``backend`` the test process's own backend the calls run in
  the test process. ``start_calls`` does the same without waiting, so that several backends
  run at once.
- ``run_pytest(backend, "tests/test_x.py", "-k", "y")`` runs pytest on test files in a process
  of that backend and fails with its output unless every selected test passed or was skipped.

``backend_params("jax", "torch")`` parametrizes a test by backend, each skipped (with the
missing package named) before its fixtures run; ``require_backend`` skips from inside a test.
``value_and_vjp(function, inputs, upstream)`` computes outputs and vector-Jacobian products
with the current backend's autodiff (``tf.GradientTape``, ``jax.vjp``, ``torch.autograd``),
eagerly or compiled, for the functions to return.

A test module that compares :data:`OTHER_BACKENDS` with TensorFlow builds its module-scoped
fixtures here: ``saved_directory_fixture`` (the models saved under TensorFlow, for the backends
to load) and ``backend_runs_fixture`` (one process per backend, started once for the module);
``assert_all_close`` compares what they return with :data:`FORWARD_TOL`, :data:`GRADIENT_TOL`
and :data:`FLOAT64_TOL`.

Example::

    @pytest.mark.parametrize("backend", backend_params("jax", "torch"))
    def test_probabilities(backend, tmp_path):
        results = run_calls(backend, {"values": "tests.test_backends_sparsemax:sparsemax_values"}, tmp_path)
        want = sparsemax_values()  # here, under TensorFlow
        np.testing.assert_allclose(results["values"]["plain/probs"], want["plain/probs"], atol=1e-6)
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("tensorflow", "jax", "torch")
# The package each backend imports, and the extra of keras-structured that installs it.
BACKEND_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
BACKEND_EXTRAS = {"tensorflow": "", "jax": "[jax]", "torch": "[torch]"}
# The backends compared with TensorFlow, and the tolerances of the comparisons (docs/backends.md).
OTHER_BACKENDS = ("jax", "torch")
FORWARD_TOL = 1e-6  # float32 forward values
GRADIENT_TOL = 1e-5  # float32 gradients
FLOAT64_TOL = 1e-12  # float64 values and gradients


def missing_backend(backend: str) -> str | None:
    """Why ``backend`` cannot run in this interpreter (a message naming the package), or None."""
    if backend not in BACKEND_PACKAGES:
        raise ValueError(f"backend must be one of {BACKENDS}. Received: backend={backend!r}")
    package = BACKEND_PACKAGES[backend]
    if importlib.util.find_spec(package) is not None:
        return None
    return (
        f"the {backend} backend needs the package '{package}', which this interpreter "
        f"({sys.executable}) cannot import: pip install 'keras-structured{BACKEND_EXTRAS[backend]}'"
    )


def require_backend(backend: str) -> None:
    """Skips the calling test, with the reason from :func:`missing_backend`, unless ``backend`` can run."""
    reason = missing_backend(backend)
    if reason is not None:
        import pytest

        pytest.skip(reason)


def backend_params(*backends: str) -> list:
    """``pytest.param`` per backend for ``@pytest.mark.parametrize("backend", ...)``, each marked
    to skip (the reason from :func:`missing_backend`) where it cannot run, before any fixture."""
    import pytest

    return [
        pytest.param(backend, id=backend, marks=pytest.mark.skipif(reason is not None, reason=str(reason)))
        for backend in backends
        for reason in [missing_backend(backend)]
    ]


def current_backend() -> str:
    """The Keras backend of this process (imports Keras)."""
    import keras

    return keras.backend.backend()


def backend_environment(backend: str, env: dict | None = None) -> dict:
    """The environment of a child process for ``backend``: this one, the backend and the
    repository on the path, less TensorFlow's start-up logging, then ``env``."""
    child = dict(os.environ)
    path = child.get("PYTHONPATH")
    child["PYTHONPATH"] = str(ROOT) if not path else os.pathsep.join([str(ROOT), path])
    child["KERAS_BACKEND"] = backend
    child.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    child.update(env or {})
    return child


@dataclass
class BackendResults:
    """What the functions run by :func:`run_calls` returned, by name."""

    backend: str
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    output: str = ""  # the child's stdout and stderr, for failures

    def __getitem__(self, name: str) -> dict[str, np.ndarray]:
        """The arrays returned by the call ``name``; its traceback, raised, if it failed."""
        if name in self.errors:
            raise AssertionError(f"{name} failed under the {self.backend} backend:\n{self.errors[name]}")
        if name not in self.arrays:
            raise AssertionError(
                f"{name} left no result under the {self.backend} backend. Its output:\n{self.output[-6000:]}"
            )
        return self.arrays[name]


class PendingCalls:
    """Calls running in a child process; :meth:`wait` returns their :class:`BackendResults`."""

    def __init__(self, backend: str, process: subprocess.Popen | None, out_dir: Path, names, timeout):
        self.backend, self.process, self.out_dir = backend, process, out_dir
        self.names, self.timeout = list(names), timeout
        self._results: BackendResults | None = None

    def wait(self) -> BackendResults:
        if self._results is None:
            output = ""
            if self.process is not None:
                try:
                    output, _ = self.process.communicate(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    output, _ = self.process.communicate()
                    raise AssertionError(
                        f"the {self.backend} backend process ran past {self.timeout} s. Its output:\n"
                        f"{output[-6000:]}"
                    ) from None
            self._results = _read_results(self.backend, self.out_dir, self.names, output)
        return self._results


def start_calls(
    backend: str, calls: dict, out_dir, *, env: dict | None = None, timeout: float = 600
) -> PendingCalls:
    """Starts :func:`run_calls` without waiting (the calls run at once when ``backend`` is this
    process's own); ``.wait()`` on the result returns the :class:`BackendResults`."""
    require_backend(backend)
    out_dir = Path(out_dir) / f"calls_{backend}"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = {name: _call_spec(call) for name, call in calls.items()}
    (out_dir / "calls.json").write_text(json.dumps(spec))
    if backend == current_backend() and not env:
        _run_spec(out_dir)
        return PendingCalls(backend, None, out_dir, spec, timeout)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.backend_harness", str(out_dir)],
        cwd=ROOT,
        env=backend_environment(backend, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return PendingCalls(backend, process, out_dir, spec, timeout)


def run_calls(
    backend: str, calls: dict, out_dir, *, env: dict | None = None, timeout: float = 600
) -> BackendResults:
    """Calls module-level functions under ``backend`` (in one fresh process unless it is this
    process's backend and ``env`` is empty); returns what they returned.

    Args:
        backend: ``"tensorflow"``, ``"jax"`` or ``"torch"``; the test is skipped if its package
            cannot be imported.
        calls: result name -> ``"module:function"`` or ``("module:function", kwargs)``, kwargs
            JSON-serializable. Each function returns a dict of array-likes (or None).
        out_dir: a directory for the calls and their results (pytest's ``tmp_path``).
        env: extra environment variables for the child (e.g. ``{"JAX_ENABLE_X64": "1"}``).
        timeout: seconds for the whole child process.

    Returns:
        :class:`BackendResults`: ``results[name]`` is the dict of numpy arrays that call
        returned, or raises its traceback.
    """
    return start_calls(backend, calls, out_dir, env=env, timeout=timeout).wait()


def run_pytest(backend: str, *args: str, env: dict | None = None, timeout: float = 600):
    """Runs ``python -m pytest *args`` under ``backend`` from the repository root.

    Fails with the tail of pytest's output unless it exits 0 (all selected tests passed or
    were skipped); returns the ``subprocess.CompletedProcess``.
    """
    require_backend(backend)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    try:
        completed = subprocess.run(
            command,
            cwd=ROOT,
            env=backend_environment(backend, env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f"pytest under {backend} ran past {timeout} s: {' '.join(args)}") from error
    if completed.returncode != 0:
        output = completed.stdout + completed.stderr
        raise AssertionError(
            f"pytest under the {backend} backend exited {completed.returncode}: {' '.join(args)}\n"
            f"{output[-6000:]}"
        )
    return completed


def value_and_vjp(function, inputs, upstream, *, compiled: bool = False):
    """``function(*inputs)`` and the gradients of ``<upstream, function(*inputs)>``, as numpy.

    Uses the current backend's autodiff: ``tf.GradientTape`` (``tf.function`` when
    ``compiled``), ``jax.vjp`` (of ``jax.jit(function)`` when ``compiled``), or
    ``torch.autograd`` (eager only: ``compiled`` is refused).

    Args:
        function: takes tensors (one per input) and returns one tensor.
        inputs: numpy arrays, all differentiated (close over the others, e.g. a mask).
        upstream: numpy array shaped like the output.
        compiled: run the function traced and compiled.

    Returns:
        ``(outputs, [gradient per input])``, numpy arrays.
    """
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def forward_backward(*tensors):
            with tf.GradientTape() as tape:
                tape.watch(tensors)
                outputs = function(*tensors)
            cotangent = tf.cast(tf.constant(upstream), outputs.dtype)
            return outputs, tape.gradient(outputs, list(tensors), output_gradients=cotangent)

        run = tf.function(forward_backward) if compiled else forward_backward
        outputs, gradients = run(*[tf.constant(x) for x in inputs])
    elif backend == "jax":
        import jax
        import jax.numpy as jnp

        outputs, pullback = jax.vjp(jax.jit(function) if compiled else function, *map(jnp.asarray, inputs))
        gradients = pullback(jnp.asarray(upstream, outputs.dtype))
    elif backend == "torch":
        if compiled:
            raise ValueError("value_and_vjp compiles on TensorFlow and JAX only. Received: compiled=True")
        tensors = [keras.ops.convert_to_tensor(x).detach().requires_grad_(True) for x in inputs]
        outputs = function(*tensors)
        outputs.backward(keras.ops.convert_to_tensor(upstream, outputs.dtype))
        gradients = [t.grad for t in tensors]
    else:
        raise ValueError(f"value_and_vjp supports {BACKENDS}. Received: backend={backend!r}")
    return to_numpy(outputs), [to_numpy(g) for g in gradients]


def to_numpy(x) -> np.ndarray:
    """``x``, a tensor of the current backend or an array-like, as a numpy array.

    Example::

        to_numpy(keras.ops.ones((2,)))  # array([1., 1.], dtype=float32)
    """
    import keras

    return np.asarray(keras.ops.convert_to_numpy(x))


def random_upstream(shape, dtype: str = "float32", seed: int = 1) -> np.ndarray:
    """Standard normal numbers (drawn in float64 from ``seed``, then cast to ``dtype``): an
    upstream gradient for :func:`value_and_vjp`, the same on every backend.

    Example::

        random_upstream((4, 3), "float64", seed=2).shape  # (4, 3)
    """
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def assert_all_close(
    got: dict, want: dict, forward_tol: float, gradient_tol: float, *, subset: bool = False
) -> None:
    """Each array of ``got`` equal to ``want``'s of the same key within ``rtol = atol = tol``:
    ``tol`` is ``gradient_tol`` for a gradient (a key with ``/grad``), else ``forward_tol``.

    Args:
        got, want: name -> array, e.g. a backend's results and TensorFlow's.
        forward_tol, gradient_tol: the tolerances of values and of gradients.
        subset: ``got`` may hold some of ``want``'s keys only (at least one); else the same keys.

    Example::

        assert_all_close(results["values"], tensorflow_values, FORWARD_TOL, GRADIENT_TOL)
    """
    if subset:
        assert got and set(got) <= set(want), sorted(got)
    else:
        assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for key in got:
        tol = gradient_tol if "/grad" in key else forward_tol
        np.testing.assert_allclose(got[key], want[key], rtol=tol, atol=tol, err_msg=key)


def assert_keras_files_move(
    results: BackendResults,
    load: Callable[[str], dict],
    directory: Path,
    backend: str,
    saved: str,
    *,
    same_model: bool = False,
) -> None:
    """``.keras`` files saved under TensorFlow and ``backend`` compute the same under both.

    ``load(path)`` returns what the model saved at ``path`` computes (name -> array); the
    backend ran it on ``directory/tensorflow.keras``, the file saved here, as the call
    ``load_tensorflow_model``, and saved ``directory/{backend}.keras`` in the call ``saved``,
    which returned what that model computed there (the same names, and perhaps others).
    Arrays agree to :data:`FORWARD_TOL` (absolute).

    Args:
        results: the backend's :class:`BackendResults`.
        load: the module-level function the backend ran as ``load_tensorflow_model``.
        directory: the module's ``saved_directory``.
        backend: the backend's name.
        saved: the name of the backend's call that saved its model.
        same_model: the backend saved the model saved here (the same weights): what it
            computed equals what the file saved here computes.

    Example::

        assert_keras_files_move(backend_runs[backend].wait(), load_tagger, saved_directory, backend, "fit")
    """
    tensorflow = load(str(directory / "tensorflow.keras"))
    loaded_here = load(str(directory / f"{backend}.keras"))
    for key in tensorflow:
        # Saved under TensorFlow, loaded under the backend.
        np.testing.assert_allclose(results["load_tensorflow_model"][key], tensorflow[key], atol=FORWARD_TOL)
        # Saved under the backend, loaded under TensorFlow.
        np.testing.assert_allclose(loaded_here[key], results[saved][key], atol=FORWARD_TOL)
        if same_model:
            np.testing.assert_allclose(results[saved][key], tensorflow[key], atol=FORWARD_TOL)


class BackendRuns(dict):
    """backend -> :class:`PendingCalls`, the value of the ``backend_runs`` fixture; looking up a
    backend that cannot run skips the test (:func:`require_backend`)."""

    def __getitem__(self, backend: str) -> PendingCalls:
        require_backend(backend)
        return super().__getitem__(backend)


def saved_directory_fixture(name: str, save: Callable[[Path], object]):
    """A module-scoped pytest fixture ``saved_directory``: a new directory (named after
    ``name``) holding what ``save(directory)`` writes under TensorFlow, the models the other
    backends load. Skipped, with nothing saved, when none of :data:`OTHER_BACKENDS` can run.

    Example::

        saved_directory = saved_directory_fixture(
            "backends_sparsemax", lambda directory: save_model(str(directory / "tensorflow.keras"))
        )
    """
    import pytest

    @pytest.fixture(scope="module", name="saved_directory")
    def saved_directory(tmp_path_factory) -> Path:
        reasons = [missing_backend(backend) for backend in OTHER_BACKENDS]
        if all(reasons):
            pytest.skip("; ".join(reasons))
        directory = tmp_path_factory.mktemp(name)
        save(directory)
        return directory

    return saved_directory


def backend_runs_fixture(calls: Callable[[str, Path], dict], needed_calls: dict | None = None):
    """A module-scoped pytest fixture ``backend_runs``: one process per backend of
    :data:`OTHER_BACKENDS` that can run, all started at once, running ``calls(backend,
    saved_directory)`` in the module's ``saved_directory``; a :class:`BackendRuns`. The
    processes still running when the module's tests are done are killed.

    Args:
        calls: ``(backend, directory) -> {name: call}``, the calls of :func:`start_calls`.
        needed_calls: test name -> the names of the calls it reads. Given, only the calls of the
            selected tests run (in sorted order), under the backends those tests are
            parametrized with (``backend``); else every call, under every backend that can run.

    Example::

        backend_runs = backend_runs_fixture(_calls, {"test_values_equal_tensorflow": ["values"]})
    """
    import pytest

    @pytest.fixture(scope="module", name="backend_runs")
    def backend_runs(request, saved_directory):
        backends, names = OTHER_BACKENDS, None
        if needed_calls is not None:
            selected = [item for item in request.session.items if item.path == request.path]
            names = {name for item in selected for name in needed_calls.get(item.originalname, [])}
            backends = {item.callspec.params.get("backend") for item in selected if hasattr(item, "callspec")}
        runs = BackendRuns()
        for backend in OTHER_BACKENDS:
            if backend in backends and missing_backend(backend) is None:
                backend_calls = calls(backend, saved_directory)
                if names is not None:
                    backend_calls = {name: backend_calls[name] for name in sorted(names & set(backend_calls))}
                runs[backend] = start_calls(backend, backend_calls, saved_directory)
        yield runs
        for run in runs.values():
            if run.process is not None and run.process.poll() is None:
                run.process.kill()

    return backend_runs


def _call_spec(call) -> dict:
    target, kwargs = (call, {}) if isinstance(call, str) else call
    if ":" not in target:
        raise ValueError(f"a call names 'module:function'. Received: {target!r}")
    return {"target": target, "kwargs": kwargs}


def _run_spec(out_dir: Path) -> None:
    """Runs the calls listed in ``out_dir/calls.json``; writes ``name.npz`` or ``name.error.txt``."""
    spec = json.loads((out_dir / "calls.json").read_text())
    seconds = {}
    for name, call in spec.items():
        start = time.perf_counter()
        try:
            module, function = call["target"].split(":")
            result = getattr(importlib.import_module(module), function)(**call["kwargs"]) or {}
            np.savez(out_dir / f"{name}.npz", **{key: np.asarray(value) for key, value in result.items()})
        except Exception:  # reported to the parent, which raises it in the test
            (out_dir / f"{name}.error.txt").write_text(traceback.format_exc())
        seconds[name] = time.perf_counter() - start
    (out_dir / "seconds.json").write_text(json.dumps(seconds))


def _read_results(backend: str, out_dir: Path, names, output: str) -> BackendResults:
    results = BackendResults(backend, output=output)
    seconds_file = out_dir / "seconds.json"
    if seconds_file.exists():
        results.seconds = json.loads(seconds_file.read_text())
    for name in names:
        error = out_dir / f"{name}.error.txt"
        arrays = out_dir / f"{name}.npz"
        if error.exists():
            results.errors[name] = error.read_text()
        elif arrays.exists():
            with np.load(arrays) as data:
                results.arrays[name] = {key: data[key] for key in data.files}
    return results


@contextlib.contextmanager
def jax_x64(enable: bool = True):
    """64-bit types on JAX (off by default there) for the block when ``enable``; nothing on
    other backends."""
    import keras

    if not enable or keras.backend.backend() != "jax":
        yield
        return
    import jax

    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


if __name__ == "__main__":  # the child: python -m tests.backend_harness OUT_DIR
    _run_spec(Path(sys.argv[1]))
