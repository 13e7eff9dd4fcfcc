"""SparseMAP layers and losses under MultiWorkerMirroredStrategy: two local worker processes.

Each worker is a process with ``TF_CONFIG`` naming both on 127.0.0.1 (free ports). The
weights they train must equal, up to float round-off, those of one process trained on
the same global batch (``tests/scripts/multi_worker_fit.py``, a custom training loop: Keras 3's
``model.fit`` does not run under this strategy yet). On a cluster the same script
runs with each machine's address in ``TF_CONFIG`` (see docs/performance.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent / "scripts" / "multi_worker_fit.py"
ROOT = Path(__file__).resolve().parents[1]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def environment(tf_config: dict | None = None) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files) - 1)]


def run_workers(count: int, tmp_path: Path) -> list[subprocess.CompletedProcess]:
    """Runs ``count`` workers of one cluster to the end; their output goes to files (no pipe fills up)."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(count)]
    processes, logs = [], []
    try:
        for index in range(count):
            config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            logs.append(open(tmp_path / f"worker{index}.log", "w+"))  # noqa: SIM115 (closed below)
            processes.append(
                subprocess.Popen(
                    [sys.executable, str(SCRIPT), str(tmp_path / f"worker{index}.npz")],
                    env=environment(config),
                    stdout=logs[-1],
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        for process in processes:
            process.wait(timeout=600)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    results = []
    for process, log in zip(processes, logs, strict=True):
        log.seek(0)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, log.read(), ""))
        log.close()
    return results


def train_alone(out: Path) -> None:
    """The same script's training in this process, under the default strategy (no ``TF_CONFIG``)."""
    spec = importlib.util.spec_from_file_location("multi_worker_fit", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert "TF_CONFIG" not in os.environ
    script.main(str(out))


@pytest.mark.slow  # 18 s: three TensorFlow processes
def test_two_workers_train_the_weights_of_one(tmp_path):
    train_alone(tmp_path / "single.npz")
    for worker in run_workers(2, tmp_path):
        assert worker.returncode == 0, worker.stdout[-3000:]
        assert "replicas=2" in worker.stdout, worker.stdout[-3000:]
    expected = weights(tmp_path / "single.npz")
    for index in range(2):
        got = weights(tmp_path / f"worker{index}.npz")
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=f"worker {index}")
    initial = np.random.default_rng(1).normal(scale=0.5, size=expected[0].shape)
    assert not np.allclose(expected[0], initial, atol=1e-3)  # training moved the weights
