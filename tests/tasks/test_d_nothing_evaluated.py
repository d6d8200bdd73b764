"""An evaluation that scored no record is refused, on both tasks: every record skipped as
corrupt (`--skip-corrupt`) or a split that holds none. Before, `cvbench eval --skip-corrupt`
over a split of damaged images printed loss 0, top-1 0 (SSD320: AP -1) and exited 0,
writing `--json` and `results.json` as if the model had been measured."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from coco_records import build_two_image_coco
from inference_models import channel_classifier, classifier_info
from jpeg_records import write_jpeg_records

import cvbench.cli as cli
from cvbench.inference import save_model
from cvbench.tasks import ClassificationTask, DetectionTask, TaskOptions
from cvbench.tasks.evaluation import checkpoint_trainer
from cvbench.training.distribution_base import SingleProcess
from cvbench.training.evaluation import evaluated_rows
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic


def damage_images(path) -> None:
    """Rewrites the TFRecord file `path` with every record's image bytes zeroed (a whole,
    CRC-valid record whose image cannot be decoded)."""
    import tensorflow as tf

    records = []
    for raw in tf.data.TFRecordDataset(str(path)):
        example = tf.train.Example.FromString(raw.numpy())
        encoded = example.features.feature["image/encoded"].bytes_list
        encoded.value[0] = bytes(len(encoded.value[0]))
        records.append(example.SerializeToString())
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """Records of 3 classes whose 3 validation images are no images."""
    data = tmp_path_factory.mktemp("damaged")
    write_jpeg_records(data / "validation-00000-of-00001", 3, num_classes=3, corrupt={0, 1, 2})
    return data


@pytest.fixture(scope="module")
def empty_split(tmp_path_factory):
    """Records built by `build_imagenet` whose validation images the builder all skipped
    (unreadable): a well-formed, empty validation split."""
    from PIL import Image

    from cvbench.data import build_imagenet

    root = tmp_path_factory.mktemp("empty")
    for name in ("a", "b", "c"):  # the 3 classes of `tiny_model` (eval compares the names)
        (root / "raw" / "train" / name).mkdir(parents=True)
        (root / "raw" / "validation" / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(root / "raw" / "train" / name / "x.jpg")
        (root / "raw" / "validation" / name / "bad.jpg").write_bytes(b"not a jpeg")
    build_imagenet(root / "raw", root / "records", train_shards=1, val_shards=1,
                   num_workers=1, progress=False)  # fmt: skip
    return root / "records"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A `.keras` 3-class classifier of 8x8 images (`channel_classifier`), of the classes
    a, b, c (those of `empty_split`: eval refuses a model of other class names)."""
    path = tmp_path_factory.mktemp("model") / "m.keras"
    info = dataclasses.replace(classifier_info(), class_names=("a", "b", "c"))
    return save_model(channel_classifier(), path, info)


def _classifier_evaluation(model, data, **options):
    task = ClassificationTask(
        TaskOptions(model="resnet18", data_dir=str(data), image_size=8, **options)
    )
    return task, checkpoint_trainer(task, model, precision="fp32")


def test_classification_refuses_when_every_record_was_skipped(tiny_model, damaged):
    task, trainer = _classifier_evaluation(tiny_model, damaged, num_classes=3, skip_corrupt=True)
    with pytest.raises(BadFileError) as error:
        task.evaluate(trainer, batch_size=2)  # before: {"loss": 0, "top1": 0, "top5": 0}
    assert str(error.value) == (
        f"all 3 records of the validation split of {damaged} were skipped as corrupt "
        "(--skip-corrupt): nothing was evaluated"
    )


def test_classification_refuses_an_empty_split(tiny_model, empty_split):
    task, trainer = _classifier_evaluation(tiny_model, empty_split)
    with pytest.raises(BadFileError) as error:
        task.evaluate(trainer, batch_size=2)
    assert str(error.value) == (
        f"the validation split of {empty_split} holds no records: nothing was evaluated"
    )


def test_an_evaluation_with_one_record_left_is_measured(tiny_model, tmp_path):
    write_jpeg_records(tmp_path / "validation-00000-of-00001", 3, num_classes=3, corrupt={0, 2})
    task, trainer = _classifier_evaluation(tiny_model, tmp_path, num_classes=3, skip_corrupt=True)
    results = task.evaluate(trainer, batch_size=2)
    assert "top1" in results and task.corrupt_records() == 2
    assert evaluated_rows(trainer.training_model) == 1


class _StubSSD:
    """What `predict_coco` asks of a model: its input shape, and outputs for the one
    padding batch (every image skipped)."""

    input_shape = (None, 320, 320, 3)

    def __init__(self, anchors: int, classes: int) -> None:
        self.anchors, self.classes = anchors, classes

    def predict_on_batch(self, images):
        rows = len(images)
        return {
            "boxes": np.zeros((rows, self.anchors, 4), "float32"),
            "classes": np.zeros((rows, self.anchors, self.classes), "float32"),
        }


def _coco_with_an_empty_val_split(root):
    """COCO records whose one val image the builder skipped (not an image): a well-formed,
    empty val split (its empty shard recorded in the builder's manifest)."""
    import json

    from PIL import Image

    from cvbench.data import build_coco_splits

    (root / "img").mkdir(parents=True)
    Image.new("RGB", (30, 20)).save(root / "img" / "1.jpg")
    (root / "img" / "2.jpg").write_bytes(b"not a jpeg")
    for split, image in (("train", 1), ("val", 2)):
        box = {"id": image, "image_id": image, "category_id": 1, "bbox": [1, 1, 5, 5],
               "iscrowd": 0}  # fmt: skip
        annotations = {
            "images": [{"id": image, "file_name": f"{image}.jpg", "height": 20, "width": 30}],
            "annotations": [box],
            "categories": [{"id": 1, "name": "person"}],
        }
        (root / f"{split}.json").write_text(json.dumps(annotations))
    sources = {split: (root / f"{split}.json", root / "img") for split in ("train", "val")}
    build_coco_splits(root / "records", sources, num_workers=1, progress=False)
    return root / "records"


def _detection_evaluation(records, *, skip_corrupt):
    from cvbench.detection.predict import Decoder

    task = DetectionTask(TaskOptions(model="ssd320", data_dir=str(records),
                                     skip_corrupt=skip_corrupt))  # fmt: skip
    anchors = len(Decoder.for_model(_StubSSD(0, 0), task.detection_settings).anchors)

    class Trainer:
        distribution, is_chief = SingleProcess(), True
        model = _StubSSD(anchors, task.num_classes + 1)

    return task, Trainer()


def test_detection_refuses_when_every_record_was_skipped(tmp_path):
    records = build_two_image_coco(tmp_path, {1: "person", 3: "car", 90: "bus"})
    for path in sorted(records.glob("coco_val*")):
        damage_images(path)
    task, trainer = _detection_evaluation(records, skip_corrupt=True)
    with pytest.raises(BadFileError) as error:
        task.evaluate(trainer, batch_size=2)  # before: the 12 COCO numbers, each -1
    assert str(error.value) == (
        f"all 2 records of the val split of {records} were skipped as corrupt "
        "(--skip-corrupt): nothing was evaluated"
    )


def test_detection_refuses_an_empty_split(tmp_path):
    records = _coco_with_an_empty_val_split(tmp_path)
    task, trainer = _detection_evaluation(records, skip_corrupt=False)
    with pytest.raises(BadFileError) as error:
        task.evaluate(trainer, batch_size=2)
    assert str(error.value) == (
        f"the val split of {records} holds no records: nothing was evaluated"
    )


def test_cvbench_eval_refuses_and_writes_nothing(tiny_model, damaged, tmp_path, capsys):
    model = tiny_model
    out, folder = tmp_path / "r.json", tmp_path / "ev"
    argv = ["eval", "--checkpoint", str(model), "--data-dir", str(damaged), "--batch-size", "2",
            "--model", "resnet18", "--num-classes", "3", "--image-size", "8",
            "--precision", "fp32", "--skip-corrupt", "--json", str(out),
            "--log-dir", str(folder)]  # fmt: skip
    assert cli.main(argv) == 1  # before: 0, "top1: 0", both files written
    printed, err = capsys.readouterr()
    assert "top1" not in printed and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"cvbench eval: error: all 3 records of the validation split of {damaged} were "
        "skipped as corrupt (--skip-corrupt): nothing was evaluated"
    )
    assert not out.exists() and not (folder / "results.json").exists()
