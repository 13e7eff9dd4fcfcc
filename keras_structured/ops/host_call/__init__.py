"""The host call: numpy code (SparseMAP's and LP-SparseMAP's solvers, the tree CRF's kernel,
the losses' gold structures) run from a model, on every Keras backend.

One layer. :func:`host_function` declares a :class:`HostFunction`: a numpy function of
arrays whose results have shapes and dtypes known from the arguments', optionally with a
vector-Jacobian product (itself a host function, differentiable again if it declares a VJP
of its own), a ``forward`` function that also returns *residuals* for it (arrays that never
reach the model: handles to what the host keeps, with :class:`HandleStore`), and results
that get no cotangent (integer info, flags). :func:`call` calls it on tensors of the
backend, :func:`values` without gradient. A small adapter per backend makes the calls,
imported with this package (the one of the backend Keras runs on, no other: the library
imports without JAX and PyTorch):

* TensorFlow (:mod:`._tf`): ``tf.numpy_function`` under ``tf.custom_gradient``, whose
  gradient is a second call; XLA cannot compile it (see :mod:`keras_structured.ops.xla`).
* JAX (:mod:`._jax`): ``jax.pure_callback`` inside ``jax.custom_vjp`` with the
  ``vmap_method`` the function declares, so it runs under ``jax.jit`` (the Keras JAX trainer
  jits its steps) and ``jax.vmap``.
* PyTorch (:mod:`._torch`): ``torch.library.custom_op`` with ``register_autograd`` and
  ``register_fake``, registered when the function is declared, so it runs eagerly and under
  ``torch.compile(fullgraph=True)``.

SparseMAP (:func:`solve`, :func:`decode`, in :mod:`._sparsemap`) goes through it on JAX and
PyTorch: one host call per batch for the solution, one for the backward pass, which applies
the closed-form Jacobian of the final active set (Niculae et al., 2018, Prop. 1) in float64.
The active sets, whose size depends on the data, stay on the host (:data:`SUPPORTS`), and
the forward call passes handles to them to the backward one, which also receives the scores
and solves them again when the store no longer holds their support. For the same reason the
solver's info comes padded to a static bound, :func:`max_support`, where shapes must be
known before the call: under JAX transformations (``jax.jit``, ``jax.grad``, ``jax.vmap``)
and ``torch.compile``; eager calls return it as TensorFlow does, with the batch's largest
support. On TensorFlow SparseMAP keeps its own calls (:mod:`._tf`), whose forward call returns
the active set's factors as tensors of data-dependent shapes. LP-SparseMAP
(:mod:`keras_structured.ops.lp_sparsemap_host`), the tree CRF
(:mod:`keras_structured.ops.matrix_tree_host`) and the gold structures
(:mod:`keras_structured.losses._gold`) are host functions on every backend.
"""

from __future__ import annotations

from keras_structured.ops.host_call._call import call, host_function, values
from keras_structured.ops.host_call._functions import HostFunction
from keras_structured.ops.host_call._host import SUPPORTS, HostSolve, host_solve, max_support
from keras_structured.ops.host_call._sparsemap import decode, solve
from keras_structured.ops.host_call._store import HandleStore

__all__ = [
    "SUPPORTS",
    "HandleStore",
    "HostFunction",
    "HostSolve",
    "call",
    "decode",
    "host_function",
    "host_solve",
    "max_support",
    "solve",
    "values",
]
