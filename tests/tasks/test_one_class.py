"""A classifier of one class is refused (probe p49, finding 12): its softmax is 1 for any
image, so a run trained with `loss 0.0000  top1 1.0000` and looked perfect, whether the
class count came from `--num-classes 1` or from records built of one class folder."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from cvbench.data import build_imagenet
from cvbench.tasks import ClassificationTask, TaskOptions


@pytest.mark.parametrize("model", ["resnet18", "resnet50"])
def test_num_classes_1_is_refused_naming_it(model):
    expected = r"a classifier needs at least 2 classes; got 1 \(num_classes=1\)"
    with pytest.raises(ValueError, match=expected):
        ClassificationTask(TaskOptions(model=model, num_classes=1))


def test_records_of_one_class_are_refused_naming_them(tmp_path):
    for split in ("train", "val"):
        folder = tmp_path / "raw" / split / "only"
        folder.mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(folder / f"{i}.jpg")
    out = tmp_path / "records"
    build_imagenet(tmp_path / "raw", out, train_shards=1, val_shards=1, num_workers=1,
                   progress=False)  # fmt: skip
    with pytest.raises(ValueError, match=rf"got 1 \(the records in {out} hold 1 class\)"):
        ClassificationTask(TaskOptions(model="resnet18", data_dir=str(out)))


def test_two_classes_are_a_classifier():
    assert ClassificationTask(TaskOptions(model="resnet18", num_classes=2)).num_classes == 2
