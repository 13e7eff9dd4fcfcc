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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("tensorflow", "jax", "torch")
# The package each backend imports, and the extra of keras-structured that installs it.
BACKEND_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
BACKEND_EXTRAS = {"tensorflow": "", "jax": "[jax]", "torch": "[torch]"}


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
    to_numpy = keras.ops.convert_to_numpy
    return to_numpy(outputs), [to_numpy(g) for g in gradients]


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


if __name__ == "__main__":  # the child: python -m tests.backend_harness OUT_DIR
    _run_spec(Path(sys.argv[1]))


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
