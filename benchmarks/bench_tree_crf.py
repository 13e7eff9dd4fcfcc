"""Tree-CRF log-partition: the subtraction-free elimination against ``tf.linalg.slogdet``.

``keras_structured.ops.tree_crf_log_partition`` eliminates the Laplacian word by word,
adding only nonnegative numbers (accurate for any scores), in a compiled float64 kernel
with a hand-written backward pass. The baseline is the textbook matrix-tree
computation, ``tf.linalg.slogdet`` of Koo et al.'s Laplacian with the arc scores into
each word shifted by their maximum: fast, and wrong once confident heads form cycles.
Both run forward and backward (the CRF loss's work) inside ``tf.function`` on the same
float32 scores, called alternately; the printed ratio (ours / slogdet) is the median of
the per-pair ratios, and the error column is each method's largest ``|log Z|`` error
against a float64 run of ours on the same scores. Last, the memory of one forward and
backward pass on a single ``--memory-words``-word sentence: how much it raises the
resident set size of a fresh process at its peak (after a warm-up on 5 words; Linux).

Example:
    python benchmarks/bench_tree_crf.py --batch 32 --words 20 50 100
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from keras_structured.ops import tree_crf_log_partition


def slogdet_log_partition(scores: tf.Tensor) -> tf.Tensor:
    """``log Z`` of multi-root trees as ``slogdet`` of the column-shifted Laplacian (no lengths)."""
    n = tf.shape(scores)[1] - 1
    into = scores[:, :, 1:]
    arcs_mask = ~tf.eye(n, dtype=tf.bool)[None]
    masked = tf.concat([into[:, :1], tf.where(arcs_mask, into[:, 1:], -np.inf)], axis=1)
    shift = tf.stop_gradient(tf.reduce_max(masked, axis=1))
    weights = tf.exp(masked - shift[:, None, :])
    root, arcs = weights[:, 0], weights[:, 1:]
    laplacian = tf.linalg.diag(root + tf.reduce_sum(arcs, axis=1)) - arcs
    return tf.linalg.slogdet(laplacian)[1] + tf.reduce_sum(shift, axis=-1)


def forward_backward(log_partition):
    @tf.function(reduce_retracing=True)
    def run(scores):
        with tf.GradientTape() as tape:
            tape.watch(scores)
            log_z = log_partition(scores)
        return log_z, tape.gradient(log_z, scores)

    return run


def peak_memory_increase(method: str, words: int) -> float:
    """MiB by which one forward and backward pass of ``method`` (``"ours"`` or ``"slogdet"``) on
    one ``words``-word sentence raises the peak resident set size of a fresh process."""
    command = [sys.executable, __file__, "--memory-of", method, "--memory-words", str(words)]
    return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``: the peak since reset), in KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def _measure_memory(method: str, words: int) -> float:
    """:func:`peak_memory_increase`, inside the fresh process (Linux)."""
    run = forward_backward(METHODS[method])
    rng = np.random.default_rng(0)
    run(tf.constant(confident_scores(rng, 1, 5)))[1].numpy()  # compile, trace, allocate the pools
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to VmRSS
    before = _status_kib("VmRSS")
    run(tf.constant(confident_scores(rng, 1, words)))[1].numpy()
    return (_status_kib("VmHWM") - before) / 1024


def confident_scores(rng: np.random.Generator, batch: int, words: int) -> np.ndarray:
    """Confident scores: every word has a favourite head among the words (cycles are then
    likely), and the root arcs are 20 lower, as when a parser is sure of local attachments."""
    scores = rng.normal(size=(batch, words + 1, words + 1)) * 3
    for m in range(1, words + 1):
        scores[np.arange(batch), rng.integers(1, words + 1, size=batch), m] += 15.0
    scores[:, 0, 1:] -= 20.0
    return scores.astype(np.float32)


METHODS = {"ours": tree_crf_log_partition, "slogdet": slogdet_log_partition}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--words", type=int, nargs="+", default=[20, 50, 100])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--memory-words", type=int, default=300, help="0 skips the memory measurement")
    parser.add_argument("--memory-of", choices=sorted(METHODS), help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.memory_of:
        print(_measure_memory(args.memory_of, args.memory_words))
        return
    rng = np.random.default_rng(0)
    ours, baseline = forward_backward(METHODS["ours"]), forward_backward(METHODS["slogdet"])
    print("words | ours (ms) | slogdet (ms) | ratio | ours max error | slogdet max error")
    for words in args.words:
        scores = tf.constant(confident_scores(rng, args.batch, words))
        reference = tree_crf_log_partition(tf.cast(scores, tf.float64)).numpy()
        errors = [np.nanmax(np.abs(f(scores)[0].numpy() - reference)) for f in (ours, baseline)]
        times: dict[str, list[float]] = {"ours": [], "slogdet": []}
        for _ in range(args.repeats):
            for name, f in (("ours", ours), ("slogdet", baseline)):
                start = time.perf_counter()
                f(scores)[1].numpy()
                times[name].append(time.perf_counter() - start)
        ratio = float(np.median(np.array(times["ours"]) / np.array(times["slogdet"])))
        print(
            f"{words} | {1e3 * np.median(times['ours']):.1f} | {1e3 * np.median(times['slogdet']):.1f} | "
            f"{ratio:.2f} | {errors[0]:.2g} | {errors[1]:.2g}",
            flush=True,
        )
    if args.memory_words:
        memory = {name: peak_memory_increase(name, args.memory_words) for name in METHODS}
        print(
            f"peak memory of one {args.memory_words}-word sentence, forward + backward: "
            f"ours {memory['ours']:.0f} MiB, slogdet {memory['slogdet']:.0f} MiB"
        )


if __name__ == "__main__":
    main()
