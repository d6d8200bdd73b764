"""The tasks take `num_classes` and `class_names` from the records' `dataset_info.json`."""

from __future__ import annotations

import pytest
from coco_records import build_two_image_coco

from cvbench.data.dataset_info import DATASET_INFO_NAME
from cvbench.demo.shapes import SHAPE_NAMES
from cvbench.tasks import ClassificationTask, DetectionTask, TaskOptions


@pytest.fixture(scope="module")
def coco_records(tmp_path_factory):
    """COCO records of 2 images whose categories are 1 (person), 3 (car) and 90 (bus)."""
    return build_two_image_coco(tmp_path_factory.mktemp("coco"), {1: "person", 3: "car", 90: "bus"})


def test_six_class_folder_gives_six_classes_with_names(six_class_records):
    task = ClassificationTask(
        TaskOptions(model="resnet18", data_dir=str(six_class_records), image_size=32)
    )
    # The classes are the folder names in sorted order (label i + 1 in the records).
    assert task.num_classes == 6
    assert task.class_names == tuple(sorted(SHAPE_NAMES))
    # The label check uses it too; the training pipeline is the recipe's (resnet18_cvbench's).
    assert task.dataset_options() == {"num_classes": 6}
    assert task.train_options() == {"preprocessing": task.recipe.preprocessing}
    assert task.recipe.deviation("model.num_classes").reason.startswith("the classes of the data")


def test_regression_no_silent_1000_way_head(six_class_records):
    # The bug: `options.num_classes or 1000` built a 1000-way head for 6-class records.
    task = ClassificationTask(
        TaskOptions(model="resnet18", data_dir=str(six_class_records), image_size=32)
    )
    assert task.build_model().output_shape == (None, 6)


def test_an_agreeing_num_classes_is_accepted(six_class_records):
    options = TaskOptions(model="resnet18", data_dir=str(six_class_records), num_classes=6)
    assert ClassificationTask(options).num_classes == 6


def test_a_disagreeing_num_classes_names_both_numbers_and_the_file(six_class_records):
    options = TaskOptions(model="resnet18", data_dir=str(six_class_records), num_classes=1000)
    with pytest.raises(ValueError) as e:
        ClassificationTask(options)
    message = str(e.value)
    assert message.startswith("num_classes (--num-classes) is 1000 but ")
    assert f"{six_class_records / DATASET_INFO_NAME} lists 6 classes" in message


def test_records_without_metadata_need_num_classes(tmp_path):
    with pytest.raises(ValueError, match=r"no dataset_info.json .* pass num_classes \(--num-c"):
        ClassificationTask(TaskOptions(model="resnet18", data_dir=str(tmp_path)))
    # With num_classes they are read as before, without names.
    task = ClassificationTask(TaskOptions(model="resnet18", data_dir=str(tmp_path), num_classes=4))
    assert (task.num_classes, task.class_names) == (4, None)


@pytest.mark.backend_agnostic
def test_synthetic_data_keeps_the_defaults():
    assert ClassificationTask(TaskOptions(model="resnet18")).num_classes == 1000
    assert ClassificationTask(TaskOptions(model="resnet18")).class_names is None
    assert DetectionTask(TaskOptions(model="ssd320")).num_classes == 90
    assert DetectionTask(TaskOptions(model="ssd320")).class_names is None


def test_records_of_the_other_kind_are_refused(six_class_records, coco_records):
    with pytest.raises(ValueError, match="describes imagenet records, but this task reads coco"):
        DetectionTask(TaskOptions(model="ssd320", data_dir=str(six_class_records)))
    with pytest.raises(ValueError, match="describes coco records, but this task reads imagenet"):
        ClassificationTask(TaskOptions(model="resnet18", data_dir=str(coco_records)))


def test_detection_defaults_to_index_id_minus_1_up_to_the_largest_id(coco_records):
    task = DetectionTask(TaskOptions(model="ssd320", data_dir=str(coco_records)))
    # Categories 1, 3, 90: 90 classes, index = id - 1; ids no category has are "N/A".
    assert task.num_classes == 90
    assert task.label_map.category_ids == tuple(range(1, 91))
    names = task.class_names
    assert len(names) == 90 and (names[0], names[2], names[89]) == ("person", "car", "bus")
    assert names[1] == names[3] == names[88] == "N/A"


def test_detection_num_classes_equal_to_the_categories_ranks_the_ids(coco_records):
    task = DetectionTask(TaskOptions(model="ssd320", data_dir=str(coco_records), num_classes=3))
    assert task.label_map.category_ids == (1, 3, 90)
    assert task.class_names == ("person", "car", "bus")


def test_detection_other_num_classes_names_both_choices(coco_records):
    options = TaskOptions(model="ssd320", data_dir=str(coco_records), num_classes=80)
    with pytest.raises(ValueError) as e:
        DetectionTask(options)
    assert str(e.value) == (
        f"num_classes (--num-classes) is 80 but {coco_records / DATASET_INFO_NAME} lists 3 "
        "classes; leave it unset to use the data's 90 (index = category id - 1), or pass 3 "
        "for index = rank of the id"
    )


def test_detection_records_without_metadata_keep_the_given_map(tmp_path):
    with pytest.raises(ValueError, match=r"pass num_classes \(--num-classes\)"):
        DetectionTask(TaskOptions(model="ssd320", data_dir=str(tmp_path)))
    task = DetectionTask(TaskOptions(model="ssd320", data_dir=str(tmp_path), num_classes=80))
    assert task.label_map.category_ids[11] == 13 and task.class_names is None  # coco80
