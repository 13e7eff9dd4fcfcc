r"""A trace-norm bilinear dependency parser, trained by Hazan's algorithm (Frank-Wolfe).

**Model.** A sentence ``w`` of ``n`` words has token features ``Phi`` (``(n + 1) x d``, row
0 the root; :mod:`~keras_structured.applications.parsing.bilinear_features`) and the arc ``i -> j``
(head ``i``, dependent ``j``) the score

    S[i, j] = phi(w, i)^T A phi(w, j) + b^T d(i, j),   i.e.   S = Phi A Phi^T + b[D],

where ``D[i, j]`` is the index of the one distance feature of the arc and ``b`` the
distance weights (``distance_weights`` in the code; the notes this parser follows write
them ``eta``, a name the library keeps for the scores of SparseMAP). ``A`` is stored as a
list of rank-one factors ``A = sum_k c_k u_k v_k^T`` (``c_k > 0``), so the scores are
``(Phi U) diag(c) (Phi V)^T + b[D]`` and the ``d x d`` matrix is never formed.

**Problem.** Over ``m`` training sentences with gold arc indicators ``Y_s``
(``Y[h, j] = 1`` for every gold arc ``h -> j``),

    min_{A, b}  F(A, b) = (1/m) sum_s loss(S_s(A, b), Y_s)
    s.t.        ||A||_* + lam ||b||_2 <= C,

the mean of the losses (the sum divided by ``m``: same minimiser, and a minibatch's mean
estimates it without bias). The losses are the SparseMAP loss (``u* = SparseMAP(S)`` from
:func:`keras_structured.engine.solve`, gradient ``u* - Y``) and the structured hinge with
a Hamming cost (``T_hat`` the best cost-augmented tree from
:func:`~keras_structured.engine.dependency_tree.best_trees`, subgradient ``T_hat - Y``).
Both are convex in ``S``, hence in ``(A, b)``; the SparseMAP loss is smooth (its
gradient ``u* - Y`` is 1-Lipschitz in ``S``), the hinge is not.

**Frank-Wolfe (Hazan).** The feasible set is the ball of radius ``C`` of the norm
``N(A, b) = ||A||_* + lam ||b||``, whose dual norm is
``N*(G, g) = max(sigma_max(G), ||g|| / lam)``. The linear step returns a vertex of the
ball: a rank-one atom ``(-C u_1 v_1^T, 0)`` from the top singular pair of ``grad_A``, or an
``b`` atom. A step moves to ``x + gamma (s - x)`` (``gamma = 2 / (k + 2)`` or a line
search; a minibatch variant exists), so every iterate is feasible and ``A`` has at most
``k`` factors after ``k`` steps; the Frank-Wolfe gap
``<x - s, grad F(x)> >= F(x) - min F`` certifies each iterate. The baseline
:class:`BilinearModel` holds a dense ``A`` trained by :func:`train_frobenius`
(``min F + mu (||A||_F^2 + ||b||^2)`` by Adam).

Submodules:

* ``models``: :class:`TraceNormModel` (``A`` as rank-one factors, merged by a thin SVD)
  and the dense :class:`BilinearModel`;
* ``arc_batches``: :class:`ArcBatch`, sentences stacked and padded in chunks for scoring;
* ``objective``: the losses, :func:`loss_and_gradient`, :func:`objective` and
  :func:`gradient_operator` (``grad_A`` as a ``LinearOperator``);
* ``decoding``: :func:`parse` (Chu-Liu-Edmonds) and :func:`evaluate` (attachment scores);
* ``linear_step``: :func:`top_singular_triplet` and :func:`linear_minimizer` (the
  :class:`Atom` and the dual norm that gives the gap);
* ``checkpoints``: :func:`save_checkpoint` and :func:`load_checkpoint`;
* ``hazan``: :class:`HazanConfig`, :class:`HazanTrainer` and :func:`train_tracenorm`
  (step rules, line search, minibatch variant, logs and resume);
* ``frobenius``: :class:`FrobeniusConfig` and :func:`train_frobenius`, the dense baseline.
"""

from keras_structured.applications.parsing.tracenorm.arc_batches import ArcBatch
from keras_structured.applications.parsing.tracenorm.checkpoints import (
    CHECKPOINT_NAME,
    load_checkpoint,
    save_checkpoint,
)
from keras_structured.applications.parsing.tracenorm.decoding import evaluate, parse
from keras_structured.applications.parsing.tracenorm.frobenius import FrobeniusConfig, train_frobenius
from keras_structured.applications.parsing.tracenorm.hazan import (
    PROGRESS_COLUMNS,
    RESUMABLE_FIELDS,
    STEP_RULES,
    HazanConfig,
    HazanTrainer,
    train_tracenorm,
)
from keras_structured.applications.parsing.tracenorm.linear_step import (
    DENSE_SVD_MAX_DIM,
    SVD_METHODS,
    Atom,
    linear_minimizer,
    top_singular_triplet,
)
from keras_structured.applications.parsing.tracenorm.models import BilinearModel, TraceNormModel
from keras_structured.applications.parsing.tracenorm.models import Model as Model
from keras_structured.applications.parsing.tracenorm.objective import (
    LOSSES,
    LossGradient,
    gradient_operator,
    loss_and_gradient,
    objective,
)

__all__ = [
    "CHECKPOINT_NAME",
    "DENSE_SVD_MAX_DIM",
    "LOSSES",
    "PROGRESS_COLUMNS",
    "RESUMABLE_FIELDS",
    "STEP_RULES",
    "SVD_METHODS",
    "ArcBatch",
    "Atom",
    "BilinearModel",
    "FrobeniusConfig",
    "HazanConfig",
    "HazanTrainer",
    "LossGradient",
    "TraceNormModel",
    "evaluate",
    "gradient_operator",
    "linear_minimizer",
    "load_checkpoint",
    "loss_and_gradient",
    "objective",
    "parse",
    "save_checkpoint",
    "top_singular_triplet",
    "train_frobenius",
    "train_tracenorm",
]
