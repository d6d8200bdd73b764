"""examples/walkthrough.ipynb: committed clean, and it runs end to end at tiny sizes.

The notebook runs in a real Jupyter kernel (nbclient + ipykernel) started with this test's
own interpreter: a kernel spec written to a temporary `JUPYTER_PATH` points at
`sys.executable`, so the kernel sees the same virtual environment whatever kernels the
machine has installed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "walkthrough.ipynb"
KERNEL_NAME = "cvbench-test-python"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# The tiny sizes of the notebook's parameters cell (CVBENCH_NOTEBOOK_TINY=1):
# 6 classes x 16 training images = 96 = 6 batches of 16, one epoch -> 6 steps, and
# log_every = max(1, 6 // 15) = 1, so the log has one step record per step;
# 6 classes x 4 validation images = 24.
TINY_STEPS = 6
TINY_VAL_IMAGES = 24
# Figures: the sample grid, the three training curves (one figure), the confusion matrix
# and the prediction grid.
FIGURES = 4


def _read_notebook():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    return nb


def test_notebook_is_committed_without_outputs():
    nb = _read_notebook()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has no code cells"
    for i, cell in enumerate(code):
        assert cell.outputs == [], f"code cell {i} has stored outputs"
        assert cell.execution_count is None, f"code cell {i} has an execution count"
    for cell in nb.cells:
        assert set(cell.metadata) <= {"tags"}, f"cell {cell.id} metadata {dict(cell.metadata)}"
    # Only what a clean notebook needs: no widget state, no author or timing metadata.
    assert set(nb.metadata) <= {"kernelspec", "language_info"}, dict(nb.metadata)
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_notebook_sizes_come_from_one_parameters_cell():
    nb = _read_notebook()
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert "CVBENCH_NOTEBOOK_TINY" in tagged[0].source
    # No other cell sets a size: every upper-case assignment of a size name is in that cell.
    sizes = re.compile(r"^(IMAGE_SIZE|TRAIN_PER_CLASS|VAL_PER_CLASS|EPOCHS|BATCH_SIZE)\s*=", re.M)
    others = [c.id for c in nb.cells if c is not tagged[0] and sizes.search(c.source)]
    assert others == []


def _kernel_spec(root: Path) -> Path:
    """A kernel spec named KERNEL_NAME running this interpreter's ipykernel, under `root`."""
    folder = root / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "cvbench test kernel",
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    return root


def _outputs(nb) -> list:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]


def _stdout(nb) -> str:
    return "".join(
        out.get("text", "") for out in _outputs(nb) if out.get("output_type") == "stream"
    )


@pytest.mark.slow
def test_notebook_runs_end_to_end_at_tiny_sizes(tmp_path, monkeypatch):
    work = tmp_path / "work"
    monkeypatch.setenv("JUPYTER_PATH", str(_kernel_spec(tmp_path / "jupyter")))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("CVBENCH_NOTEBOOK_TINY", "1")
    monkeypatch.setenv("CVBENCH_NOTEBOOK_DIR", str(work))
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    # The kernel imports cvbench from this checkout, installed or not.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )

    nb = _read_notebook()
    client = nbclient.NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=600,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)  # raises CellExecutionError with the traceback
        # The kernel runs this interpreter (the venv's), not some other python3.
        probe = nbformat.v4.new_code_cell("import sys; print(sys.executable)")
        nb.cells.append(probe)  # execute_cell stores its outputs in nb.cells[index]
        client.execute_cell(probe, len(nb.cells) - 1)
        nb.cells.pop()
    assert probe.outputs[0]["text"].strip() == sys.executable

    text = _stdout(nb)
    summary = json.loads(re.search(r"^SUMMARY (.*)$", text, re.M).group(1))
    assert 0.0 <= summary["top1"] <= 1.0
    assert summary["val_images"] == TINY_VAL_IMAGES
    assert summary["work_dir"] == str(work)
    # The top-1 counted from the model's own predictions (padding rows dropped) is the
    # Trainer's weighted top-1: both count the same 24 images.
    counted = float(re.search(r"top-1 from the predictions: ([0-9.]+)", text).group(1))
    assert counted == pytest.approx(summary["top1"], abs=5e-4)  # printed with 3 decimals

    pngs = [
        base64.b64decode(out["data"]["image/png"])
        for out in _outputs(nb)
        if "image/png" in out.get("data", {})
    ]
    assert len(pngs) == FIGURES
    assert all(png.startswith(PNG_MAGIC) for png in pngs)

    # What the real builders and the Trainer left in the work folder.
    records = work / "records"
    assert sorted(p.name for p in records.glob("train-*")) == [
        f"train-{i:05d}-of-00004" for i in range(4)
    ]
    assert sorted(p.name for p in records.glob("validation-*")) == [
        f"validation-{i:05d}-of-00002" for i in range(2)
    ]
    log = [
        json.loads(line)
        for line in (work / "logs" / "classifier" / "train_log.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in log if r["event"] == "step"] == list(range(1, TINY_STEPS + 1))
