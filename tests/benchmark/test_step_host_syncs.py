"""What the benchmarked training step costs besides its arithmetic, measurable on a CPU (#41):
one host sync per timed window, none per step, and on JAX the step's state donated to it
(updated in place, no second copy of the weights and optimizer slots)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from cvbench.benchmark import workloads
from cvbench.benchmark.steps import TrainStepRunner
from cvbench.benchmark.workloads import TrainSteps


def _tiny_model() -> keras.Model:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(3)(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    return model


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("steps", [1, 5])
def test_a_window_syncs_with_the_host_once_whatever_its_steps(monkeypatch, steps):
    syncs = []
    monkeypatch.setattr(workloads, "block", lambda logs: syncs.append(logs))
    batch = (np.ones((8, 4), "float32"), np.zeros((8, 2), "float32"))
    model = _tiny_model()
    train = TrainSteps(model, iter([batch] * (steps + 1)), images_per_step=8)
    train.first_step()
    train.run(steps)
    assert len(syncs) == 1  # the window's last logs, not one per step
    train.close()
    # every step ran: 1 first step + `steps`
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 1 + steps


_JAX_CHECK = textwrap.dedent(
    """
    import numpy as np, keras, jax
    from jax._src import array
    from cvbench.benchmark.steps import TrainStepRunner

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(3)(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    x, y = np.ones((8, 4), "float32"), np.zeros((8, 2), "float32")
    model.train_on_batch(x, y)
    runner = TrainStepRunner(model)
    runner.step(x, y)
    before = jax.tree_util.tree_leaves(runner._state)
    to_host = []
    original = array.ArrayImpl.__array__
    def counted(self, *args, **kwargs):
        to_host.append(self.shape)
        return original(self, *args, **kwargs)
    array.ArrayImpl.__array__ = counted
    for _ in range(4):
        logs = runner.step(x, y)
    array.ArrayImpl.__array__ = original
    print("donated", sum(a.is_deleted() for a in before), "of", len(before))
    print("to_host", len(to_host))
    runner.sync()
    print("iterations", int(keras.ops.convert_to_numpy(model.optimizer.iterations)))
    """
)


def test_on_jax_the_step_takes_its_state_by_donation_and_never_reads_it_back():
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", _JAX_CHECK], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    donated, total = lines["donated"].split(" of ")
    # every buffer of the state (2 kernels, 2 biases, their 4 momenta, the optimizer's
    # iteration counter and learning rate..., the metrics') was handed to the step
    assert int(total) >= 8 and donated == total
    assert lines["to_host"] == "0"  # 4 steps, no array copied to the host
    assert lines["iterations"] == "6"  # train_on_batch + 5 runner steps


@pytest.mark.backend_agnostic
def test_the_runner_leaves_the_logs_on_the_device():
    model = _tiny_model()
    x, y = np.ones((8, 4), "float32"), np.zeros((8, 2), "float32")
    model.train_on_batch(x, y)
    with TrainStepRunner(model) as runner:
        logs = runner.step(x, y)
    assert all(not isinstance(v, (float, np.ndarray, np.generic)) for v in logs.values())
