"""The tasks' `model_info()`: what their model files say about the model."""

from __future__ import annotations

import pytest

from cvbench.tasks import ClassificationTask, DetectionTask, TaskOptions


def test_a_90_class_detector_is_named_by_coco_category():
    info = DetectionTask(TaskOptions(model="ssd320", image_size=128)).model_info()
    assert (info.task, info.image_size, info.resize) == ("detection", (128, 128), "stretch")
    assert info.class_names[:3] == ("person", "bicycle", "car") and len(info.class_names) == 90
    assert info.class_names[11] == "coco_id_12"  # id 12 is not a COCO 2017 category
    assert info.class_names[89] == "toothbrush"  # id 90
    # the task's own decoding: multiscale_anchors' and postprocess' defaults, coder 10/10/5/5
    assert info.detection == {
        "anchors": {"min_level": 3, "max_level": 7, "anchor_scale": 4.0,
                    "aspect_ratios": [1.0, 2.0, 0.5], "scales_per_octave": 2},
        "scales": [10.0, 10.0, 5.0, 5.0],
        "postprocess": {"iou_threshold": 0.6, "score_threshold": 1e-8, "max_per_class": 100,
                        "max_total": 100},
    }  # fmt: skip


def test_an_80_class_detector_uses_the_compact_map_and_others_get_indices():
    names = DetectionTask(TaskOptions(model="ssd320", num_classes=80)).model_info().class_names
    assert names[11] == "stop sign" and names[-1] == "toothbrush"  # ids 13 and 90
    other = DetectionTask(TaskOptions(model="ssd320", num_classes=3)).model_info()
    assert other.class_names == ("0", "1", "2")


@pytest.mark.parametrize("make", [
    lambda: ClassificationTask(TaskOptions(model="resnet18", num_classes=2)),
    lambda: DetectionTask(TaskOptions(model="ssd320", num_classes=2)),
])  # fmt: skip
def test_the_dataset_class_names_win(make):
    task = make()
    assert task.model_info().class_names == ("0", "1")
    task.class_names = ("cat", "dog")  # what the dataset's metadata file names
    assert task.model_info().class_names == ("cat", "dog")


def test_a_classifier_info():
    # Inception V3's recipe (inception_v3_nvcnn) evaluates with nvcnn's central crop, then
    # resize: its files say so; ResNet-50's (DLE) resizes to 256, then crops 224
    info = ClassificationTask(TaskOptions(model="inception_v3", num_classes=3)).model_info()
    # and resizes with TF1's bilinear (no half-pixel centres)
    assert (info.task, info.image_size, info.resize, info.crop_fraction, info.model,
            info.interpolation) == (
        "classification", (299, 299), "crop_then_resize", 0.875, "inception_v3",
        "bilinear_tf1")  # fmt: skip
    info = ClassificationTask(TaskOptions(model="resnet50", num_classes=3)).model_info()
    assert (info.image_size, info.resize, info.crop_fraction, info.model,
            info.interpolation) == (
        (224, 224), "center_crop", 0.875, "resnet50", "bilinear")  # fmt: skip
