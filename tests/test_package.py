"""The top-level `cvbench` names: lazy, TensorFlow-free, the same objects as their homes."""

import subprocess
import sys
import textwrap

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
        import cvbench.data.coco, cvbench.data.imagenet, cvbench.detection.coco_eval
        import cvbench.detection.ssd
        homes = (cvbench.data.imagenet, cvbench.data.coco, cvbench.detection.ssd,
                 cvbench.detection.coco_eval)
        print(all(getattr(cvbench, n) is getattr(m, n) for n, m in zip(names, homes)))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "True"]
