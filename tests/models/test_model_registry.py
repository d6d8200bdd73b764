"""The model registry: explicit names, unknown names, double registration."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cvbench.models import MODELS, get_model, list_models
from cvbench.models import inception_v3 as inception_module
from cvbench.models import resnet as resnet_module

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


def test_models_package_imports_no_tensorflow():
    # A fresh interpreter on the JAX backend: importing the zoo must not pull TensorFlow in.
    code = (
        "import sys, cvbench.models, cvbench.models.weights; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_ssd320_is_registered_as_a_detector_not_a_classifier():
    from cvbench.models import DETECTORS, list_classifiers, list_models
    from cvbench.training.tasks import task_for_model

    assert "ssd320" in list_models() and "ssd320" in DETECTORS
    assert "ssd320" not in list_classifiers()
    assert task_for_model("ssd320").__name__ == "DetectionTask"
    assert task_for_model("resnet50").__name__ == "ClassificationTask"
