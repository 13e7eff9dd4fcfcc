"""Time ``keras_structured.sparsemax`` against ``tf.nn.softmax`` and ``keras.ops.sparsemax``.

Forward and forward+backward passes on a ``(batch, classes)`` float32 batch of
standard-normal scores, eagerly and inside ``tf.function``. Times are medians over
``--repeats`` calls after warm-up; since machines are noisy, each time is also
given as a ratio to ``tf.nn.softmax`` measured in the same run.

``keras.ops.sparsemax`` (TensorFlow backend) is timed as it is, but it sums the
cumulative sums over the whole support when computing the threshold, so its
outputs differ from sparsemax whenever the support has more than one element; the
script prints the largest difference.

Example:
    python benchmarks/bench_sparsemax.py --batch 1024 --classes 1000 --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

import keras_structured

FUNCTIONS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "tf.nn.softmax": tf.nn.softmax,
    "keras_structured.sparsemax": keras_structured.sparsemax,
    "keras.ops.sparsemax": keras.ops.sparsemax,
}
BASELINE = "tf.nn.softmax"
WARMUP = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="Forward and forward+backward time of sparsemax implementations vs softmax.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--batch", type=int, default=1024, help="rows of the score matrix")
    parser.add_argument("--classes", type=int, default=1000, help="columns (normalised axis)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per measurement (median kept)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the scores")
    return parser.parse_args(argv)


def forward_backward(fn: Callable[[tf.Tensor], tf.Tensor]) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """``(x, upstream) -> upstream^T d fn(x) / dx``: one forward and one backward pass."""

    def run(x: tf.Tensor, upstream: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return tape.gradient(y, x, output_gradients=upstream)

    return run


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``call()`` over ``repeats`` runs, after ``WARMUP`` untimed runs."""
    for _ in range(WARMUP):
        call()
    tf.test.experimental.sync_devices()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        tf.test.experimental.sync_devices()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(x: tf.Tensor, upstream: tf.Tensor, repeats: int) -> dict[str, dict[str, float]]:
    """Median seconds per function and mode (eager / tf.function, forward / forward+backward)."""
    results = {}
    for name, fn in FUNCTIONS.items():
        graph_fn, graph_fb = tf.function(fn), tf.function(forward_backward(fn))
        eager_fb = forward_backward(fn)
        results[name] = {
            "eager fwd": median_seconds(lambda fn=fn: fn(x), repeats),
            "eager fwd+bwd": median_seconds(lambda fb=eager_fb: fb(x, upstream), repeats),
            "graph fwd": median_seconds(lambda fn=graph_fn: fn(x), repeats),
            "graph fwd+bwd": median_seconds(lambda fb=graph_fb: fb(x, upstream), repeats),
        }
    return results


def print_table(results: dict[str, dict[str, float]]) -> None:
    """Milliseconds and ratio to the softmax baseline for every function and mode."""
    modes = list(results[BASELINE])
    print(f"{'':<28}" + "".join(f"{mode:>22}" for mode in modes))
    print(f"{'':<28}" + "".join(f"{'ms (x softmax)':>22}" for _ in modes))
    for name, times in results.items():
        cells = [f"{1e3 * times[mode]:.3f} ({times[mode] / results[BASELINE][mode]:.2f}x)" for mode in modes]
        print(f"{name:<28}" + "".join(f"{cell:>22}" for cell in cells))


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table."""
    args = parse_args(argv)
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    x = tf.constant(rng.standard_normal((args.batch, args.classes)), dtype=tf.float32)
    upstream = tf.constant(rng.standard_normal((args.batch, args.classes)), dtype=tf.float32)
    print(
        f"scores {args.batch} x {args.classes} float32 (standard normal), median of {args.repeats} calls, "
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, backend {keras.backend.backend()}"
    )
    print_table(measure(x, upstream, args.repeats))

    ours = keras_structured.sparsemax(x).numpy()
    theirs = keras.ops.convert_to_numpy(keras.ops.sparsemax(x))
    support = np.count_nonzero(ours > 0, axis=-1)
    print(
        f"note: keras.ops.sparsemax outputs differ from sparsemax when the support has more than one element "
        f"(here {np.mean(support > 1):.0%} of rows, mean support {support.mean():.1f}): "
        f"max |keras.ops.sparsemax - keras_structured.sparsemax| = {np.abs(theirs - ours).max():.3g}"
    )
    print(f"total time {time.perf_counter() - start:.1f} s (imports excluded)")


if __name__ == "__main__":
    main()
