"""A Trainer leaves no traced graph behind on TensorFlow (`training_model.
released_gradient_functions`). `tf.custom_gradient` in graph mode (TensorFlow's all-reduce
of the gradients, `FastConv2D`'s convolutions) registers its gradient function in
TensorFlow's global registry for good, holding the traced step and through it the model's
variables: each Trainer of a process kept its model's weights alive after it was gone (a
notebook training model after model, the demo's two stages; the test suite grew to 24 GiB)."""

from __future__ import annotations

import gc

import keras
import numpy as np
import pytest
from training_helpers import blobs, images, plain_trainer, tiny_mlp

from cvbench.models.layers import FastConv2D
from cvbench.training.training_model import _gradient_registry


def _custom_gradients() -> int:
    return sum(k.startswith("CustomGradient-") for k in _gradient_registry() or {})


def _graphs() -> int:
    gc.collect()
    return sum(type(o).__name__ == "FuncGraph" for o in gc.get_objects())


def _conv_net() -> keras.Model:
    # A 1x1 stride-1 FastConv2D takes the fast gradients on every CPU ("pointwise" and "all").
    inputs = keras.Input((8, 8, 3))
    x = FastConv2D(4, 1, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


@pytest.mark.parametrize(
    "build, data",
    [(tiny_mlp, blobs(36)), (_conv_net, images(36, classes=3))],  # 36 = 4 x 8 + a batch of 4
    ids=["dense", "fast_conv"],
)
def test_a_trainer_gone_leaves_no_graph_and_no_gradient_function(tmp_path, build, data):
    registered, graphs = _custom_gradients(), _graphs()
    for run in range(2):
        trainer = plain_trainer(tmp_path / str(run), build)
        # 2 epochs of 5 steps: the partial last batch traces the step again, after the first
        # trace's functions were released.
        history = trainer.fit(data, epochs=2, batch_size=8)
        assert np.isfinite(history.history["loss"]).all()
        assert _custom_gradients() == registered  # before: 1 (dense) or 2+ more per trace
        del trainer, history
        keras.backend.clear_session(free_memory=False)
        assert _graphs() == graphs  # before: the step's graphs of every Trainer so far
