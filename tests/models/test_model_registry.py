"""The model registry: explicit names, unknown names, double registration."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cvbench.models import inception_v3 as inception_module
from cvbench.models import resnet as resnet_module
from cvbench.zoo import MODELS, get_model, list_models, register, task_of

pytestmark = pytest.mark.backend_agnostic


def test_registered_builders_are_the_module_functions():
    assert MODELS.get("resnet50") is resnet_module.resnet50
    assert MODELS.get("inception_v3") is inception_module.inception_v3
    for depth in (18, 34, 50, 101, 152):
        assert MODELS.get(f"resnet{depth}") is getattr(resnet_module, f"resnet{depth}")
    assert list_models() == sorted(list_models())


def test_unknown_name_raises_listing_known_names():
    with pytest.raises(ValueError, match=r"unknown model 'resnet51'; known: .*resnet50"):
        get_model("resnet51")


def test_registering_a_name_twice_raises():
    with pytest.raises(ValueError, match="'resnet50' is already registered"):
        MODELS.register("resnet50", resnet_module.resnet50)
    assert MODELS.get("resnet50") is resnet_module.resnet50


def test_builders_are_keyword_only():
    with pytest.raises(TypeError):
        resnet_module.resnet18(10)  # a positional argument is refused


def _loaded_after(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules named `prefixes` (or below them) that a fresh JAX-backend interpreter has
    loaded after running `code`."""
    probe = f"{code}; import sys; print(sorted(m for m in sys.modules if m.startswith({prefixes})))"
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    return eval(result.stdout.strip().splitlines()[-1])  # a printed list of names


def test_models_package_imports_no_tensorflow():
    # A fresh interpreter on the JAX backend: importing the builders must not pull TensorFlow in.
    assert _loaded_after("import cvbench.models, cvbench.models.weights", ("tensorflow",)) == []


def test_ssd320_is_registered_as_a_detector_not_a_classifier():
    from cvbench.detection.ssd import ssd320
    from cvbench.tasks import task_for_model
    from cvbench.zoo import list_classifiers

    assert "ssd320" in list_models() and MODELS.get("ssd320") is ssd320
    assert list_models(task="detection") == ["ssd320"] and task_of("ssd320") == "detection"
    assert "ssd320" not in list_classifiers()
    assert list_classifiers() == list_models(task="classification")
    # 5 ResNets + Inception V3 + SSD320: every registered name is in exactly one task.
    assert len(list_classifiers()) == 6 and len(list_models()) == 7
    assert task_for_model("ssd320").__name__ == "DetectionTask"
    assert task_for_model("resnet50").__name__ == "ClassificationTask"


def test_register_checks_the_task_and_unknown_tasks_are_named():
    with pytest.raises(ValueError, match="task must be 'classification' or 'detection'"):
        register("my_net", resnet_module.resnet18, task="segmentation")
    assert "my_net" not in list_models()
    with pytest.raises(ValueError, match=r"unknown task 'segmentation'; known: classification"):
        list_models(task="segmentation")
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        task_of("nope")


def test_models_package_does_not_import_detection_or_the_table():
    # The classification builders sit below the model table: importing them must not load
    # cvbench.detection or cvbench.zoo (that was an import circle).
    assert _loaded_after("import cvbench.models", ("cvbench.detection", "cvbench.zoo")) == []
