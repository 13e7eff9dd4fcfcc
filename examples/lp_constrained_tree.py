"""Dependency trees with a valency cap, by LP-SparseMAP: no word heads more than ``k`` words.

A spanning tree whose every node has at most ``k`` children is NP-hard to find in general
(``k = 1`` is a Hamiltonian path), so no MAP oracle of the library handles it. LP-SparseMAP
joins two that do: the arcs ``u[h, d]`` of a sentence of ``n`` words are the variables of a
:class:`~keras_structured.engine.lp.StructureFactor` over the trees
(``DependencyTreeStructure(single_root=True)``: one word under the root, as in UD) and of
one :class:`~keras_structured.engine.lp.Budget` per word ``h``, ``sum_d u[h, d] <= k``
(``--cap``). ``ks.lp_sparsemap`` then solves

    max_{u in L}  <eta, u> - ||u||^2 / 2,

``L`` the trees' marginal polytope cut by the caps (the local polytope of this graph).

Data: the gold trees of a CoNLL-U file (by default the 30-sentence UD English-EWT sample
bundled with the tests) and synthetic arc scores around them, a stand-in for a trained
parser's scores: ``eta[h, d] = margin [h -> d is gold] + hub b_h + noise e_hd`` with
``b_h, e_hd ~ N(0, 1)`` (``--margin``, ``--hub``, ``--noise``). The head bias ``b_h`` makes
some words attract dependents, as a parser that over-attaches to a few words.

For every sentence, the best tree (``map``, ``ks.map_decode``), SparseMAP over the trees
alone (``ks.sparsemap``) and LP-SparseMAP with the caps (``ks.lp_sparsemap``) are compared;
the head of every word is the argmax of its arc marginals (the tree itself for ``map``).
Reported: unlabelled attachment score, sentences whose heads break the cap, the largest
expected number of dependents ``sum_d u[h, d]`` of a word, the share of sentences whose
marginals are a single tree (all zeros and ones), the objective ``<eta, u> - ||u||^2 / 2``
per sentence (what the cap costs the relaxation), calls of the tree oracle (maximum
spanning tree) per sentence and the time. The share of gold trees within the cap is
printed first: the cap is a modelling choice, and gold trees above it pay for it. The rows
go to a CSV (``--out``), a markdown table to stdout, progress to stderr.

Run:  python examples/lp_constrained_tree.py [--cap 5] [--hub 1.0] [--noise 1.0] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

from _common.cli import make_parser
from _common.experiments import log, report_rows

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "en_ewt_sample.conllu"
COLUMNS = (
    "decoder",
    "uas",
    "violations",
    "max_valency",
    "integral_share",
    "objective",
    "map_calls",
    "seconds",
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    parser.add_argument("--data", type=Path, default=SAMPLE, help="CoNLL-U file of gold trees")
    parser.add_argument("--cap", type=int, default=5, help="most dependents of a word, k")
    parser.add_argument("--margin", type=float, default=3.0, help="score bonus of the gold arcs")
    parser.add_argument("--hub", type=float, default=1.0, help="standard deviation of the head bias")
    parser.add_argument("--noise", type=float, default=1.0, help="standard deviation of the arc noise")
    parser.add_argument("--max-sentences", type=int, default=None, help="use the first sentences only")
    parser.add_argument("--max-length", type=int, default=None, help="skip longer sentences")
    parser.add_argument("--seed", type=int, default=0, help="seed of the score noise")
    parser.add_argument("--out", type=Path, default=Path("runs/lp_constrained_tree.csv"), help="results CSV")
    args = parser.parse_args(argv)
    if args.cap < 1 or min(args.hub, args.noise) < 0:
        parser.error(
            f"needs --cap >= 1, --hub >= 0 and --noise >= 0. "
            f"Received: --cap={args.cap}, --hub={args.hub}, --noise={args.noise}"
        )
    if not args.data.is_file():
        parser.error(f"no CoNLL-U file at {args.data}: set --data")
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_structured as ks  # noqa: E402
from keras_structured.applications.parsing.conllu_reader import read_conllu  # noqa: E402
from keras_structured.engine import DependencyTreeStructure  # noqa: E402
from keras_structured.engine.lp import Budget, FactorGraph, StructureFactor  # noqa: E402

TREES = DependencyTreeStructure(single_root=True)


def capped_tree_graph(length: int, cap: int) -> FactorGraph:
    """The ``(n + 1) x (n + 1)`` arc variables (``u[h, d]`` is variable ``h * (n + 1) + d``) of
    a sentence of ``length`` words: the trees, and a budget of ``cap`` on every word's dependents."""
    arcs = np.arange((length + 1) ** 2).reshape(length + 1, length + 1)
    factors = [StructureFactor(TREES, arcs)]
    for head in range(1, length + 1):
        dependents = [d for d in range(1, length + 1) if d != head]
        if cap < len(dependents):  # otherwise the budget cannot bind
            factors.append(Budget(arcs[head, dependents], cap))
    return FactorGraph(arcs.size, factors)


def arc_scores(heads: np.ndarray, args: argparse.Namespace, rng) -> np.ndarray:
    """``(n + 1, n + 1)`` scores: ``margin`` on the gold arcs plus a Gaussian bias per head and
    Gaussian noise per arc ``h -> d`` (``d >= 1``, ``h != d``); zero where no arc can be."""
    size = len(heads)
    scores = args.hub * rng.normal(size=(size, 1)) + args.noise * rng.normal(size=(size, size))
    scores[heads[1:], np.arange(1, size)] += args.margin
    scores[:, 0] = 0.0
    np.fill_diagonal(scores, 0.0)
    return scores


def dependents(heads: np.ndarray) -> np.ndarray:
    """Number of dependents of every word ``1..n`` given ``(n + 1,)`` heads (``heads[0]`` ignored)."""
    return np.bincount(heads[1:], minlength=len(heads))[1:]


def evaluate(gold: np.ndarray, heads: np.ndarray, u: np.ndarray, scores: np.ndarray, cap: int) -> dict:
    """Per sentence: correct heads, cap broken by the heads, largest expected number of
    dependents, integral marginals, objective."""
    heads = np.concatenate([[-1], heads[1:]])
    return {
        "correct": int((heads[1:] == gold[1:]).sum()),
        "broken": bool(dependents(heads).max() > cap),
        "valency": float(u[1:, 1:].sum(axis=1).max()),
        "integral": bool(np.all((u == 0) | (u == 1))),
        "objective": float((scores * u).sum() - (u * u).sum() / 2),
    }


def solve_sentence(scores: np.ndarray, cap: int) -> dict[str, tuple]:
    """The three decoders on one sentence: ``(heads, marginals, tree oracle calls, seconds)``; the
    best tree's marginals are its arc indicators."""
    batch = scores[None]
    start = time.perf_counter()
    codes, tree, _ = ks.map_decode(TREES, batch)
    map_seconds = time.perf_counter() - start
    map_heads, tree = keras.ops.convert_to_numpy(codes)[0], keras.ops.convert_to_numpy(tree)[0]
    start = time.perf_counter()
    u, _, info = ks.sparsemap(TREES, batch, return_info=True)
    sparsemap_seconds = time.perf_counter() - start
    u = keras.ops.convert_to_numpy(u)[0]
    graph = capped_tree_graph(len(scores) - 1, cap)
    start = time.perf_counter()
    lp, _, lp_info = ks.lp_sparsemap(graph, scores.reshape(1, -1), return_info=True)
    lp_seconds = time.perf_counter() - start
    lp = keras.ops.convert_to_numpy(lp)[0].reshape(scores.shape)
    return {
        "map": (map_heads, tree, 1, map_seconds),
        "sparsemap": (u.argmax(axis=0), u, int(info["map_calls"][0]), sparsemap_seconds),
        "lp_sparsemap": (lp.argmax(axis=0), lp, int(lp_info["map_calls"][0]), lp_seconds),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, dict]:
    """Scores every sentence and decodes it three ways; returns the result row of every
    decoder, by name (also in ``--out``)."""
    args = parse_args(argv)
    sentences = read_conllu(args.data, single_root=True)
    sentences = [s for s in sentences if args.max_length is None or s.length <= args.max_length]
    sentences = sentences[: args.max_sentences]
    within = np.mean([dependents(np.asarray(s.heads)).max() <= args.cap for s in sentences])
    log(
        f"{len(sentences)} sentences; {100 * within:.0f}% of the gold trees give no word more than "
        f"{args.cap} dependents"
    )
    rng = np.random.default_rng(args.seed)
    totals: dict[str, list] = {}
    for number, sentence in enumerate(sentences, 1):
        gold = np.asarray(sentence.heads)
        scores = arc_scores(gold, args, rng)
        for name, (heads, u, calls, seconds) in solve_sentence(scores, args.cap).items():
            row = evaluate(gold, heads, u, scores, args.cap)
            row.update(map_calls=calls, seconds=seconds)
            totals.setdefault(name, []).append(row)
        log(f"sentence {number}/{len(sentences)}: {sentence.length} words")
    words = sum(s.length for s in sentences)
    rows = []
    for name, per_sentence in totals.items():
        rows.append(
            {
                "decoder": name,
                "uas": sum(r["correct"] for r in per_sentence) / words,
                "violations": sum(r["broken"] for r in per_sentence),
                "max_valency": max(r["valency"] for r in per_sentence),
                "integral_share": float(np.mean([r["integral"] for r in per_sentence])),
                "objective": float(np.mean([r["objective"] for r in per_sentence])),
                "map_calls": float(np.mean([r["map_calls"] for r in per_sentence])),
                "seconds": sum(r["seconds"] for r in per_sentence),
            }
        )
    report_rows(args.out, rows, COLUMNS)
    return {row["decoder"]: row for row in rows}


if __name__ == "__main__":
    main()
