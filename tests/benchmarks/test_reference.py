"""Reference builders: keras.applications under a precision, PyTorch's absence explained;
the plain `fit` / `predict` workloads step as often as asked."""

from __future__ import annotations

import importlib

import keras
import pytest
from tiny_keras import tiny_batch, tiny_classifier

from throughput_suite import reference
from throughput_suite.torch_workload import TorchWorkload, import_torch


@pytest.mark.backend_agnostic
def test_which_models_have_references():
    assert reference.has_reference("resnet50", "keras")
    assert reference.has_reference("inception_v3", "torch")
    assert not reference.has_reference("ssd320", "keras")
    with pytest.raises(ValueError, match="'tf'"):
        reference.has_reference("resnet50", "tf")
    with pytest.raises(ValueError, match="'resnet18'"):
        reference.keras_application("resnet18", image_size=64, num_classes=10, precision="fp32")


# Not backend_agnostic only for time: building ResNet50's 25M random weights eagerly takes
# over a minute on JAX CPU here; the builder is backend-independent Keras code.
def test_keras_resnet50_is_built_under_the_precision():
    model = reference.keras_application("resnet50", image_size=32, num_classes=10, precision="bf16")
    # keras.applications ResNet50 (conv biases): 25,636,712 parameters at 1000 classes;
    # the classifier shrinks from 2048 x 1000 + 1000 to 2048 x 10 + 10:
    # 25,636,712 - 2,049,000 + 20,490 = 23,608,202.
    assert model.count_params() == 23_608_202
    assert model.get_layer("conv1_conv").dtype_policy.name == "mixed_bfloat16"
    reference.compile_plain(model, reference.OptimizerConfig(momentum=0.875), learning_rate=0.1)
    assert model.optimizer.momentum == 0.875


@pytest.mark.backend_agnostic
def test_torch_absent_is_explained(monkeypatch):
    real_import = importlib.import_module

    def no_torch(name, *args):
        if name.split(".")[0] in ("torch", "torchvision"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_torch)
    with pytest.raises(ImportError, match="pip install torch torchvision"):
        import_torch()
    with pytest.raises(ImportError, match="pip install torch"):
        TorchWorkload("resnet50", batch_size=2, image_size=32, num_classes=10,
                      policy="mixed_float16", training=True)  # fmt: skip


@pytest.mark.backend_agnostic
def test_fit_reference_runs_exactly_the_steps_asked():
    model = tiny_classifier()
    workload = reference.FitReference(model, tiny_batch(), images_per_step=4)
    workload.first_step()
    workload.run(3)
    workload.run(2)
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 6  # 1 + 3 + 2


@pytest.mark.backend_agnostic
def test_predict_reference_runs():
    model = tiny_classifier()
    images = keras.ops.convert_to_tensor(tiny_batch()[0])
    predict = reference.PredictReference(model, images)
    predict.first_step()
    predict.run(2)
    assert predict.images_per_step == 4
