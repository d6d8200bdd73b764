"""throughput_suite/op_profile.py: a TensorFlow profile summed by operation type (#42)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "tensorflow", reason="profiles TensorFlow's operations"
)


class _MatMuls:
    """A workload of `run(steps)` that runs one graph of 3 MatMuls and 2 Relus per step."""

    def __init__(self) -> None:
        import tensorflow as tf

        self.x = tf.constant(np.ones((8, 8), "float32"))
        self.fn = tf.function(lambda x: tf.nn.relu(x @ x) @ tf.nn.relu(x @ x))

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.fn(self.x).numpy()


def test_profile_counts_each_operation_type_per_step():
    from throughput_suite import op_profile

    work = _MatMuls()
    work.run(1)  # trace first
    best = op_profile.profile({"m": work}, steps=2, reps=2)
    ms, count = best["m"]
    # x @ x twice (grappler may dedupe them into one), then one product of the two Relus:
    # 2 or 3 MatMuls (oneDNN's `_MklMatMul` on CPU), 1 or 2 Relus, per step.
    matmul = next(k for k in count if k.endswith("MatMul"))
    relu = next(k for k in count if k.endswith("Relu"))
    assert count[matmul] in (2, 3) and count[relu] in (1, 2)
    assert ms[matmul] > 0 and all(v >= 0 for v in ms.values())
    assert not any(k.startswith(" ") or k.startswith("__inference") for k in ms)


def test_a_folder_without_a_profile_is_named(tmp_path):
    from throughput_suite import op_profile

    with pytest.raises(FileNotFoundError, match=f"no .xplane.pb under {tmp_path}"):
        op_profile.op_times(str(tmp_path))
