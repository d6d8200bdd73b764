"""Raw images given where records are expected (#39 item 9, "errors that name the fix"):
`cvbench train --data-dir <folder of images>` said "no TFRecord files matching ...", never
that the records must be built first. Now one line names what the folder holds and the
builder command (`cvbench.data.read.raw_data`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cvbench import cli
from cvbench.data.read.raw_data import raw_data_message


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_class_folders_under_train_name_build_imagenet_on_the_raw_folder(tmp_path):
    raw = tmp_path / "raw"
    touch(raw / "train" / "cat" / "1.JPG")  # any case
    touch(raw / "train" / "dog" / "2.png")
    expected = (
        f"{raw} holds images in class folders ({raw}/train/<class>/), not TFRecords: build them "
        f"first with `cvbench build-imagenet --raw-dir {raw} --output-dir {raw}-records`, then "
        f"pass --data-dir {raw}-records"
    )
    assert raw_data_message(raw) == expected
    # RAW/train itself given: the same command (the builder takes RAW).
    assert raw_data_message(raw / "train") == expected.replace(
        f"{raw} holds", f"{raw}/train holds", 1
    ).replace(f"({raw}/train/<class>/)", f"({raw}/train/<class>/)")


def test_class_folders_elsewhere_are_the_training_folder(tmp_path):
    mine = tmp_path / "my photos"  # quoted in the command
    touch(mine / "cat" / "1.jpeg")
    quoted = f"'{mine}'"
    assert raw_data_message(mine) == (
        f"{mine} holds images in class folders ({mine}/<class>/), not TFRecords: build them "
        f"first with `cvbench build-imagenet --raw-dir {quoted} --train-dir {quoted} "
        f"--output-dir '{mine}-records'`, then pass --data-dir {mine}-records"
    )


def test_images_without_class_folders_say_to_make_them(tmp_path):
    flat = tmp_path / "flat"
    touch(flat / "a.jpg")
    assert raw_data_message(flat) == (
        f"{flat} holds images without class folders, not TFRecords: move them into "
        f"{flat}/train/<class>/ folders, build the records with `cvbench build-imagenet "
        f"--raw-dir {flat} --output-dir {flat}-records`, then pass --data-dir {flat}-records"
    )


def test_coco_folders_and_json_files_name_build_coco(tmp_path):
    coco = tmp_path / "coco"
    touch(coco / "annotations" / "instances_train2017.json")
    assert raw_data_message(coco) == (
        f"{coco} holds COCO annotations ({coco}/annotations/instances_train2017.json), not "
        f"TFRecords: build them first with `cvbench build-coco --coco-dir {coco} "
        f"{coco}-records`, then pass --data-dir {coco}-records"
    )
    own = tmp_path / "own"
    touch(own / "labels.json")
    touch(own / "images" / "1.jpg")
    assert raw_data_message(own) == (
        f"{own} holds a JSON file (labels.json) and images, not TFRecords: build them first "
        f"with `cvbench build-coco --annotations {own}/labels.json --images {own}/images "
        f"--split train {own}-records`, then pass --data-dir {own}-records"
    )


def test_folders_without_images_are_not_raw_data(tmp_path):
    assert raw_data_message(tmp_path) is None  # empty
    touch(tmp_path / "notes.txt")
    touch(tmp_path / "sub" / "readme.md")
    assert raw_data_message(tmp_path) is None
    assert raw_data_message(tmp_path / "missing") is None


@pytest.mark.backend_agnostic
def test_the_readers_refuse_raw_images_naming_the_builder(tmp_path):
    pytest.importorskip("tensorflow")
    from cvbench.data import imagenet_dataset

    raw = tmp_path / "raw"
    touch(raw / "train" / "cat" / "1.jpg")
    with pytest.raises(FileNotFoundError) as error:
        imagenet_dataset(raw, "train", batch_size=2, image_size=32, training=True)
    assert str(error.value) == raw_data_message(raw)
    assert "cvbench build-imagenet --raw-dir" in str(error.value)
    # A folder of neither records nor images: the reader's own message, as before.
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no TFRecord files matching 'train-"):
        imagenet_dataset(tmp_path / "empty", "train", batch_size=2, training=True)


def test_cvbench_train_on_a_folder_of_images_says_to_build_records_first(tmp_path, capsys):
    raw = tmp_path / "raw"
    for name in ("circle", "square"):
        touch(raw / "train" / name / "1.jpg")
    code = cli.main(
        ["train", "--data-dir", str(raw), "--num-classes", "2", "--model", "resnet18"]
        + ["--epochs", "1", "--log-dir", str(tmp_path / "run")]
    )
    out, err = capsys.readouterr()
    # A misuse: exit 2 and one line (the last of stderr; TensorFlow may log before it).
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"cvbench: error: {raw_data_message(raw)}"


def test_without_num_classes_the_raw_folder_is_named_before_the_class_count(tmp_path, capsys):
    # A new user's first command has no --num-classes: the task asked for it (the folder had
    # no dataset_info.json) before anything looked at what the folder holds.
    raw = tmp_path / "raw"
    for name in ("circle", "square"):
        touch(raw / "train" / name / "1.jpg")
    code = cli.main(["train", "--data-dir", str(raw), "--model", "resnet18", "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"cvbench: error: {raw_data_message(raw)}"
