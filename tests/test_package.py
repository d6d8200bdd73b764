"""The top-level `cvbench` names: lazy, TensorFlow-free, the same objects as their homes."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cvbench
import cvbench.tasks
import cvbench.training
import cvbench.zoo

pytestmark = pytest.mark.backend_agnostic


def test_top_level_names_are_the_subpackages_objects():
    assert cvbench.get_model is cvbench.zoo.get_model
    assert cvbench.list_classifiers is cvbench.zoo.list_classifiers
    assert cvbench.DetectionTask is cvbench.tasks.DetectionTask
    assert cvbench.Trainer is cvbench.training.Trainer
    assert "ssd320" in cvbench.list_models() and "ssd320" not in cvbench.list_classifiers()
    for name in cvbench.__all__:
        assert getattr(cvbench, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = cvbench.no_such_name
    assert {"imagenet_dataset", "coco_dataset", "evaluate_coco", "prepare_run"} <= set(dir(cvbench))


def test_import_cvbench_imports_neither_tensorflow_nor_keras():
    code = (
        "import sys, cvbench; print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_issues_examples_in_a_fresh_process():
    # Issue 14: `import cvbench; cvbench.imagenet_dataset` (or coco_dataset, ssd320,
    # evaluate_coco) raised AttributeError and dir(cvbench) listed none of them. Each name is
    # loaded on first use, from its home module.
    code = textwrap.dedent(
        """
        import sys, cvbench
        names = ("imagenet_dataset", "coco_dataset", "ssd320", "evaluate_coco")
        print(all(n in dir(cvbench) for n in names), "cvbench.data" in sys.modules)
        import cvbench.data.read.coco, cvbench.data.read.imagenet, cvbench.detection.coco_eval
        import cvbench.detection.ssd
        homes = (cvbench.data.read.imagenet, cvbench.data.read.coco, cvbench.detection.ssd,
                 cvbench.detection.coco_eval)
        print(all(getattr(cvbench, n) is getattr(m, n) for n, m in zip(names, homes)))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "True"]


def test_keras_floor_is_a_release_without_the_published_safe_mode_bypasses():
    # CVE-2025-1550 (fixed in 3.9), CVE-2025-8747 / CVE-2025-9906 (3.11), CVE-2026-1462 and
    # the archive path traversal GHSA-hqp4-2352-xf5r (3.14.0): `keras>=3.8` allowed them all.
    from importlib.metadata import version

    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    (keras_req,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("keras")]
    floor = tuple(int(p) for p in keras_req.removeprefix("keras>=").split("."))
    assert floor >= (3, 14, 0), keras_req
    installed = tuple(int(p) for p in version("keras").split(".")[:3])
    assert installed >= floor
