"""`--weights` / `load_weights` with cvbench's own files: a `.keras` model file (a training
export wraps the network in its input normalization) fine-tunes a model of the same
architecture, to the same or other classes; a training checkpoint is refused naming
`--resume` and the run's exported model."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest

from cvbench.models.weights import load_weights
from cvbench.utils.model_file import save_model
from cvbench.zoo import get_model

pytestmark = pytest.mark.backend_agnostic


def exported(tmp_path, name: str, num_classes: int):
    """A model file shaped as a training export: images -> Rescaling -> the network."""
    keras.utils.set_random_seed(1)
    net = get_model(name, num_classes=num_classes, input_shape=(32, 32, 3))
    images = keras.Input((32, 32, 3), name="images")
    x = keras.layers.Rescaling(1 / 58.0, name="input_normalization")(images)
    wrapper = keras.Model(images, net(x), name=name)
    return net, save_model(wrapper, tmp_path / "model.keras")


def values(layer):
    return [keras.ops.convert_to_numpy(v) for v in layer.weights]


@pytest.mark.parametrize("name", ["resnet18", "resnet34"])
def test_a_cvbench_model_file_loads_every_layer_by_name(tmp_path, name):
    source, path = exported(tmp_path, name, num_classes=5)
    keras.utils.set_random_seed(2)  # other initial weights
    model = get_model(name, num_classes=5, input_shape=(32, 32, 3))
    load_weights(model, path, match="name")
    for ours, theirs in zip(model.layers, source.layers, strict=True):
        for a, b in zip(values(ours), values(theirs), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=ours.name)


def test_fine_tuning_to_other_classes_keeps_the_new_head(tmp_path):
    source, path = exported(tmp_path, "resnet18", num_classes=5)
    keras.utils.set_random_seed(2)
    model = get_model("resnet18", num_classes=3, input_shape=(32, 32, 3))
    head = values(model.get_layer("predictions"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_weights(model, path, match="name")
    assert any("5" in str(w.message) and "3" in str(w.message) for w in caught)
    for a, b in zip(values(model.get_layer("predictions")), head, strict=True):
        np.testing.assert_array_equal(a, b)  # as initialised: the new head
    np.testing.assert_array_equal(
        values(model.get_layer("conv1_conv"))[0], values(source.get_layer("conv1_conv"))[0]
    )


def test_another_architecture_is_refused_naming_the_layers(tmp_path):
    _, path = exported(tmp_path, "resnet18", num_classes=5)
    model = get_model("resnet34", num_classes=5, input_shape=(32, 32, 3))
    with pytest.raises(ValueError, match="does not fit model 'resnet34'"):
        load_weights(model, path, match="name")


def test_a_training_checkpoint_is_refused_naming_resume(tmp_path):
    path = tmp_path / "ckpt-0000000006.npz"
    np.savez(path, **{"model/0": np.zeros(3, np.float32), "model/1": np.ones(2, np.float32)})
    model = get_model("resnet18", num_classes=5, input_shape=(32, 32, 3))
    with pytest.raises(ValueError, match="is a cvbench training checkpoint: continue its run"):
        load_weights(model, path, match="name")
