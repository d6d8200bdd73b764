"""`ProcessWorkload`: a workload built and stepped in a child process that imports no runtime
of the parent; the child's errors and death come back as one `WorkloadProcessError`; and
`import_torch` with PyPI's torchvision on a CPU build of torch (its C++ operators fail)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from throughput_suite import reference
from throughput_suite.torch_workload import TorchWorkload, import_torch
from throughput_suite.workload_process import ProcessWorkload, WorkloadProcessError

FAKE = f"{Path(__file__).with_name('fake_workload.py')}:CountingWorkload"


@pytest.mark.backend_agnostic
def test_the_workload_runs_in_a_child_that_imports_no_runtime():
    import keras  # noqa: F401 - the parent has Keras (and its backend) loaded

    workload = ProcessWorkload(FAKE, {"images_per_step": 3}, name="fake")
    assert workload.images_per_step == 3 and workload.pid != os.getpid()
    workload.first_step()
    workload.run(4)
    workload.call()
    workload.run(0)
    report = workload.close()
    # 1 (first_step) + 4 + 1 (call) + 0 steps, in the child, which imported none of them
    assert report == {"pid": workload.pid, "steps": 6, "heavy": []}


@pytest.mark.backend_agnostic
def test_errors_in_the_child_are_raised_in_the_parent_and_the_child_keeps_serving():
    with pytest.raises(WorkloadProcessError, match=r"fake process failed in 'build': "
                       r"ValueError: cannot build with images_per_step=2"):  # fmt: skip
        ProcessWorkload(FAKE, {"images_per_step": 2, "fail": "build"}, name="fake")
    workload = ProcessWorkload(FAKE, {"images_per_step": 2}, name="fake")
    with pytest.raises(WorkloadProcessError, match="ValueError: steps must be >= 0, got -1"):
        workload.run(-1)
    workload.run(2)  # a failed command leaves the workload as it was
    assert workload.close()["steps"] == 2
    with pytest.raises(WorkloadProcessError, match="'<file.py>:<callable>', got 'nofile'"):
        ProcessWorkload("nofile", {}, name="fake")


@pytest.mark.backend_agnostic
def test_a_child_that_dies_is_named_with_its_exit_code_and_stderr():
    workload = ProcessWorkload(FAKE, {"images_per_step": 1, "fail": "die"}, name="fake")
    with pytest.raises(WorkloadProcessError) as e:
        workload.run(1)
    assert "the fake process exited with 3 during 'run': the workload dies here" in str(e.value)
    workload.close()  # closing a dead workload is quiet


def _fake_torch(root: Path, meta_error: str) -> None:
    """torch (empty) and a torchvision whose `_meta_registrations` raises `meta_error`, as
    PyPI's wheel does on a CPU build of torch (`torchvision::nms` does not exist)."""
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text("")
    tv = root / "torchvision"
    tv.mkdir()
    (tv / "__init__.py").write_text(
        "from torchvision import _meta_registrations\nfrom torchvision import models\n"
    )
    (tv / "_meta_registrations.py").write_text(f"raise RuntimeError({meta_error!r})\n")
    (tv / "models.py").write_text("def resnet50(**kwargs):\n    return kwargs\n")


@pytest.fixture
def clean_torch_modules():
    def drop():
        for name in [m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision")]:
            del sys.modules[name]

    drop()
    yield
    drop()


@pytest.mark.backend_agnostic
def test_torchvision_without_its_cpp_operators_still_gives_the_models(
    tmp_path, monkeypatch, clean_torch_modules
):
    _fake_torch(tmp_path, "operator torchvision::nms does not exist")
    monkeypatch.syspath_prepend(str(tmp_path))
    torch, torchvision = import_torch()
    assert torchvision.models.resnet50(num_classes=3) == {"num_classes": 3}
    assert not hasattr(sys.modules["torchvision._meta_registrations"], "__file__")  # stand-in


@pytest.mark.backend_agnostic
def test_any_other_torchvision_failure_is_raised_as_it_is(
    tmp_path, monkeypatch, clean_torch_modules
):
    _fake_torch(tmp_path, "CUDA driver too old")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="CUDA driver too old"):
        import_torch()


@pytest.mark.backend_agnostic
def test_no_torch_is_explained_before_any_process_starts(monkeypatch):
    monkeypatch.setattr(reference.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(reference, "ProcessWorkload", None)  # calling it would fail
    kwargs = dict(batch_size=2, image_size=32, num_classes=10, precision="fp16", training=True)
    with pytest.raises(ImportError, match="pip install torch torchvision .*torch, torchvision"):
        reference.torch_reference("resnet50", **kwargs)
    with pytest.raises(ValueError, match="no torchvision reference for 'ssd320'"):
        reference.torch_reference("ssd320", **kwargs)
    with pytest.raises(ValueError, match="policy must be one of"):
        TorchWorkload("resnet50", batch_size=2, image_size=32, num_classes=10, policy="fp16",
                      training=True)  # fmt: skip
