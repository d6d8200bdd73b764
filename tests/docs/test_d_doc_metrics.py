"""What users copy scores accuracy with cvbench's metric (`cvbench.tasks.top_k_accuracy`,
`FiniteTopKAccuracy`: a row of NaN or infinite logits is wrong on every backend), the one of
`cvbench eval` and training validation, not Keras' `SparseCategoricalAccuracy` /
`SparseTopKCategoricalAccuracy` (a NaN row is class 0 on TensorFlow, a top-k hit on JAX).
Before, training.md, walkthrough.md, its notebook and examples/train_shapes.py showed Keras'."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Keras' accuracy metrics that score a non-finite row as a prediction.
KERAS_ACCURACY = re.compile(
    r"\b(SparseCategoricalAccuracy|SparseTopKCategoricalAccuracy|CategoricalAccuracy|"
    r"TopKCategoricalAccuracy|sparse_categorical_accuracy|sparse_top_k_categorical_accuracy)\b"
)

#: Files that name Keras' metrics to say why cvbench's replaces them (no example of use).
QUOTING = ("api.md", "reliability.md")


def _user_files() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    examples = sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file())
    return [ROOT / "README.md", *docs, *examples]


def test_docs_and_examples_show_cvbench_accuracy_not_keras():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _user_files()
        if path.name not in QUOTING
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if KERAS_ACCURACY.search(line)
    ]
    assert found == []


def test_the_trainer_examples_score_with_top_k_accuracy():
    for name in ("docs/training.md", "docs/walkthrough.md", "examples/train_shapes.py",
                 "examples/walkthrough.ipynb"):  # fmt: skip
        text = (ROOT / name).read_text()
        assert "top_k_accuracy(1" in text and "from cvbench.tasks import top_k_accuracy" in text
