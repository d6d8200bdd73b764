"""build_imagenet on a tiny raw folder with a PNG in disguise, a CMYK JPEG, a grayscale JPEG,
a truncated file and a text file (see imagenet_testdata)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from imagenet_testdata import (
    CLASSES,
    NUM_TRAIN_RECORDS,
    NUM_VAL_RECORDS,
    encode,
    make_raw,
    smooth_image,
)

from cvbench.data.builders import imagenet_layout
from cvbench.data.builders.imagenet_builder import build_imagenet
from cvbench.data.builders.manifest import MANIFEST_NAME
from cvbench.data.tfrecord import iter_tfrecord


def _records(out, split):
    import tensorflow as tf

    records = []
    for path in sorted(out.glob(f"{split}-*")):
        for data in iter_tfrecord(path):
            records.append(tf.train.Example.FromString(data).features.feature)
    return records


def _build(raw, out, **kwargs):
    kwargs.setdefault("train_shards", 4)
    kwargs.setdefault("val_shards", 2)
    kwargs.setdefault("num_workers", 1)
    kwargs.setdefault("progress", False)
    return build_imagenet(raw, out, **kwargs)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet")
    raw = make_raw(root / "raw")
    summary = _build(root / "raw", root / "out", validation_labels=root / "raw" / "val_labels.txt")
    return raw, root / "out", summary


def test_shard_names_and_summary(built):
    raw, out, summary = built
    assert sorted(p.name for p in out.iterdir()) == [
        MANIFEST_NAME,
        "dataset_info.json",  # the classes (tests/data/test_dataset_info.py)
        "idx",  # DALI index files (tests/data/builders/test_build_imagenet_index.py)
        "train-00000-of-00004",
        "train-00001-of-00004",
        "train-00002-of-00004",
        "train-00003-of-00004",
        "validation-00000-of-00002",
        "validation-00001-of-00002",
    ]
    assert summary.num_classes == 3
    assert summary.validation_layout == imagenet_layout.LAYOUT_FLAT
    assert summary.write.splits["train"].num_records == NUM_TRAIN_RECORDS  # 15
    assert summary.write.splits["validation"].num_records == NUM_VAL_RECORDS  # 6
    assert summary.ignored_files == 1  # notes.txt
    [skipped] = summary.write.skipped
    assert skipped.item == "train/n00000001/broken.JPEG" and skipped.reason
    text = summary.format()
    assert "classes: 3" in text and "broken.JPEG" in text and "flat validation folder" in text


def test_records_hold_the_standard_keys_labels_and_pixels(built):
    import tensorflow as tf

    raw, out, _ = built
    for split, count in (("train", NUM_TRAIN_RECORDS), ("validation", NUM_VAL_RECORDS)):
        records = _records(out, split)
        assert len(records) == count
        for f in records:
            name = f["image/filename"].bytes_list.value[0].decode()
            label = f["image/class/label"].int64_list.value[0]
            assert label == raw.labels[name]
            assert f["image/class/synset"].bytes_list.value == [CLASSES[label - 1].encode()]
            assert f["image/class/text"].bytes_list.value == [CLASSES[label - 1].encode()]
            assert f["image/colorspace"].bytes_list.value == [b"RGB"]
            assert f["image/channels"].int64_list.value == [3]
            assert f["image/format"].bytes_list.value == [b"JPEG"]
            assert len(f["image/object/bbox/xmin"].float_list.value) == 0
            image = tf.io.decode_jpeg(f["image/encoded"].bytes_list.value[0], channels=3).numpy()
            expected = raw.pixels[name]
            assert image.shape == expected.shape
            assert f["image/height"].int64_list.value == [expected.shape[0]]
            assert f["image/width"].int64_list.value == [expected.shape[1]]
            # TensorFlow reads back every image, the PNG and CMYK ones included, within a few
            # levels of the original smooth gradient.
            assert np.abs(image.astype(int) - expected.astype(int)).mean() < 6, name


def test_png_cmyk_and_gray_files_are_stored_as_rgb_jpeg(built):
    import io

    from PIL import Image

    _, out, _ = built
    encoded = {
        f["image/filename"].bytes_list.value[0].decode(): f["image/encoded"].bytes_list.value[0]
        for f in _records(out, "train")
    }
    for name in ("odd_png.JPEG", "odd_cmyk.JPEG", "odd_gray.JPEG", "n00000001_0.JPEG"):
        image = Image.open(io.BytesIO(encoded[name]))
        assert (image.format, image.mode) == ("JPEG", "RGB"), name


def test_deleting_one_shard_and_rerunning_rewrites_only_that_shard(built, tmp_path):
    import shutil

    raw, out, _ = built
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    stamps = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in copy.glob("*-of-*")}
    victim = copy / "train-00002-of-00004"
    content = victim.read_bytes()
    victim.unlink()
    summary = _build(
        raw.root,
        copy,
        validation_labels=raw.root / "val_labels.txt",
        num_workers=2,  # the worker-process path
    )
    assert summary.write.splits["train"].shards_written == 1
    assert summary.write.splits["train"].shards_reused == 3
    assert summary.write.splits["validation"].shards_reused == 2
    assert victim.read_bytes() == content  # same seed, same bytes
    for name, stamp in stamps.items():
        if name != victim.name:
            p = copy / name
            assert (p.stat().st_ino, p.stat().st_mtime_ns) == stamp
    assert len(summary.write.skipped) == 1  # broken.JPEG, remembered from the first run


def test_other_options_are_refused_without_overwrite(built, tmp_path):
    import shutil

    raw, out, _ = built
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    labels = raw.root / "val_labels.txt"
    with pytest.raises(FileExistsError, match="options.quality: 90 -> 80"):
        _build(raw.root, copy, validation_labels=labels, quality=80)
    summary = _build(raw.root, copy, validation_labels=labels, quality=80, overwrite=True)
    assert summary.write.splits["train"].shards_written == 4


def test_validation_in_class_folders_is_detected(tmp_path):
    make_raw(tmp_path / "raw", val_layout="folders")
    summary = _build(tmp_path / "raw", tmp_path / "out", train_shards=2, val_shards=1)
    assert summary.validation_layout == imagenet_layout.LAYOUT_FOLDERS
    assert "class folders" in summary.validation_source
    records = _records(tmp_path / "out", "validation")
    assert sorted(f["image/class/label"].int64_list.value[0] for f in records) == [1, 1, 2, 2, 3, 3]


def test_flat_validation_without_labels_says_what_was_looked_for(tmp_path):
    make_raw(tmp_path / "raw")
    with pytest.raises(FileNotFoundError, match="ILSVRC2012_validation_ground_truth.txt"):
        _build(tmp_path / "raw", tmp_path / "out")


def test_more_shards_than_images_says_which_option_to_change(tmp_path):
    make_raw(tmp_path / "raw", val_layout="folders")
    with pytest.raises(ValueError, match=r"6 validation images cannot fill 128 shards.*1\.\.6"):
        build_imagenet(tmp_path / "raw", tmp_path / "out", train_shards=2, progress=False)


def test_missing_raw_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _build(tmp_path / "nothing", tmp_path / "out")
    (tmp_path / "raw").mkdir()
    with pytest.raises(FileNotFoundError, match=r"train/<class>/<images>"):
        _build(tmp_path / "raw", tmp_path / "out")


def _flat_val(tmp_path, n=3):
    """A raw folder with 2 classes and `n` flat validation images."""
    raw = tmp_path / "raw"
    for cls in ("a", "b"):
        (raw / "train" / cls).mkdir(parents=True)
        (raw / "train" / cls / "x.jpg").write_bytes(encode(smooth_image(1)))
    (raw / "val").mkdir()
    for k in range(n):
        (raw / "val" / f"v{k}.JPEG").write_bytes(encode(smooth_image(10 + k)))
    return raw


def test_label_file_formats(tmp_path):
    raw = _flat_val(tmp_path)
    names = ["v0.JPEG", "v1.JPEG", "v2.JPEG"]
    per_line = tmp_path / "per_line.txt"
    per_line.write_text("b\na\nb\n")
    assert imagenet_layout.read_validation_labels(per_line, names) == ["b", "a", "b"]
    pairs = tmp_path / "LOC_val_solution.csv"
    pairs.write_text("ImageId,PredictionString\nv2,a 1 2 3 4\nv0,b 5 6 7 8\nv1,a 1 1 2 2\n")
    assert imagenet_layout.read_validation_labels(pairs, names) == ["b", "a", "a"]
    short = tmp_path / "short.txt"
    short.write_text("a\nb\n")
    with pytest.raises(ValueError, match="has 2 labels but the validation folder holds 3"):
        imagenet_layout.read_validation_labels(short, names)
    unknown = tmp_path / "unknown.txt"
    unknown.write_text("a\nzebra\nb\n")
    with pytest.raises(ValueError, match="zebra"):
        _build(raw, tmp_path / "out", validation_labels=unknown, train_shards=1, val_shards=1)


def test_devkit_ground_truth_with_meta_mat(tmp_path):
    from scipy import io as scipy_io

    raw = _flat_val(tmp_path)
    data = tmp_path / "devkit" / "data"
    data.mkdir(parents=True)
    # The devkit's synsets struct: ILSVRC2012_ID 1 = 'b', 2 = 'a' (not sorted order), plus a
    # non-leaf synset with a higher id, as in the real meta.mat.
    synsets = np.array(
        [(1, "b"), (2, "a"), (1001, "n00000000")],
        dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O")],
    )
    scipy_io.savemat(str(data / "meta.mat"), {"synsets": synsets})
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("2\n1\n1\n")
    summary = _build(
        raw,
        tmp_path / "out",
        validation_labels=data / "ILSVRC2012_validation_ground_truth.txt",
        train_shards=1,
        val_shards=1,
    )
    assert summary.validation_layout == imagenet_layout.LAYOUT_FLAT
    labels = {
        f["image/filename"].bytes_list.value[0]: f["image/class/label"].int64_list.value[0]
        for f in _records(tmp_path / "out", "validation")
    }
    # 'a' is label 1 and 'b' label 2 (sorted training folders): ids 2, 1, 1 -> a, b, b.
    assert labels == {b"v0.JPEG": 1, b"v1.JPEG": 2, b"v2.JPEG": 2}


def test_class_texts_boxes_and_resize(tmp_path):
    raw = _flat_val(tmp_path, n=1)
    (raw / "val_labels.txt").write_text("b\n")
    texts = raw / "imagenet_metadata.txt"  # found automatically under this name
    texts.write_text("a\tthe letter a\nb\tthe letter b, bee\n")
    boxes = tmp_path / "boxes.csv"
    boxes.write_text("x.jpg,0.1,0.2,0.5,0.6\nx.jpg,-0.5,0.0,0.4,2.0\nv0.JPEG,0.3,0.3,0.3,0.9\n")
    _build(
        raw,
        tmp_path / "out",
        validation_labels=raw / "val_labels.txt",
        boxes=boxes,
        resize=20,
        train_shards=1,
        val_shards=1,
    )
    train = _records(tmp_path / "out", "train")
    assert {f["image/class/text"].bytes_list.value[0] for f in train} == {
        b"the letter a",
        b"the letter b, bee",
    }
    for f in train:
        # 40 x 56 with the shorter side resized to 20: 20 x 28 (56 * 20 / 40).
        assert (f["image/height"].int64_list.value[0], f["image/width"].int64_list.value[0]) == (
            20,
            28,
        )
        # Two boxes for x.jpg, the second clipped to [0, 1].
        assert list(f["image/object/bbox/xmin"].float_list.value) == pytest.approx([0.1, 0.0])
        assert list(f["image/object/bbox/ymax"].float_list.value) == pytest.approx([0.6, 1.0])
        label = f["image/class/label"].int64_list.value[0]
        assert list(f["image/object/bbox/label"].int64_list.value) == [label, label]
    [val] = _records(tmp_path / "out", "validation")
    assert len(val["image/object/bbox/xmin"].float_list.value) == 0  # zero width: dropped


def test_cli_build_imagenet(tmp_path, capsys):
    from cvbench.cli.imagenet import register

    make_raw(tmp_path / "raw", val_layout="folders")
    parser = argparse.ArgumentParser(prog="cvbench")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "build-imagenet",
            "--raw-dir",
            str(tmp_path / "raw"),
            "--output-dir",
            str(tmp_path / "out"),
            "--train-shards",
            "2",
            "--val-shards",
            "1",
            "--resize",
            "24x24",
            "--workers",
            "1",
            "--no-progress",
        ]
    )
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "train: 15 images in 2 shards" in out and "validation: 6 images in 1 shards" in out
    manifest = json.loads((tmp_path / "out" / MANIFEST_NAME).read_text())
    assert manifest["options"] == {"resize": [24, 24], "quality": 90}
    with pytest.raises(SystemExit):
        parser.parse_args(
            ["build-imagenet", "--raw-dir", "r", "--output-dir", "o", "--resize", "x"]
        )


def test_manifest_metadata_counts_the_images_of_each_class(built):
    _, out, summary = built
    metadata = json.loads((out / MANIFEST_NAME).read_text())["metadata"]
    # n00000001: 4 regular + odd_png + broken (found, then skipped as unreadable) = 6;
    # n00000002: 4 + odd_cmyk = 5 (notes.txt is no image); n00000003: 4 + odd_gray = 5.
    assert metadata == {
        "num_classes": 3,
        "train_images_per_class": {"n00000001": 6, "n00000002": 5, "n00000003": 5},
        "validation_images_per_class": {"n00000001": 2, "n00000002": 2, "n00000003": 2},
        "empty_classes": [],
        "warnings": [],
    }
    assert summary.train_counts == {"n00000001": 6, "n00000002": 5, "n00000003": 5}
    assert summary.warnings == [] and "warning" not in summary.format()


def _raw_with_empty_class(tmp_path):
    """make_raw's three classes plus an empty class folder n00000004 (only a text file)."""
    make_raw(tmp_path / "raw", val_layout="folders")
    empty = tmp_path / "raw" / "train" / "n00000004"
    empty.mkdir()
    (empty / "README.txt").write_text("no images yet\n")
    return tmp_path / "raw", empty


def test_an_empty_class_folder_is_kept_with_a_warning(tmp_path, capsys):
    raw, empty = _raw_with_empty_class(tmp_path)
    summary = _build(raw, tmp_path / "out", train_shards=2, val_shards=1, progress=True)
    warning = (
        f"class folder {empty} holds no images; kept as class n00000004 (label 4) with 0 "
        "training images"
    )
    assert summary.warnings == [warning]
    assert summary.num_classes == 4
    assert summary.train_counts == {"n00000001": 6, "n00000002": 5, "n00000003": 5, "n00000004": 0}
    assert f"classes: 4 (labels 1..4, 0 = background)\nwarning: {warning}\n" in summary.format()
    assert f"warning: {warning}\n" in capsys.readouterr().err  # said before the build starts
    metadata = json.loads((tmp_path / "out" / MANIFEST_NAME).read_text())["metadata"]
    assert metadata["num_classes"] == 4
    assert metadata["train_images_per_class"]["n00000004"] == 0
    assert metadata["validation_images_per_class"]["n00000004"] == 0
    assert (metadata["empty_classes"], metadata["warnings"]) == (["n00000004"], [warning])
    assert summary.write.splits["train"].num_records == NUM_TRAIN_RECORDS  # 15, as without it


def test_strict_refuses_an_empty_class_folder_before_writing(tmp_path):
    raw, empty = _raw_with_empty_class(tmp_path)
    expected = (
        f"1 class folder(s) hold no images: {empty}; remove them or add images (without "
        "strict / --strict they are kept as classes with 0 images)"
    )
    with pytest.raises(ValueError) as caught:
        _build(raw, tmp_path / "out", train_shards=2, val_shards=1, strict=True)
    assert str(caught.value) == expected
    assert not (tmp_path / "out").exists()


def test_cli_strict_flag(tmp_path, capsys):
    from cvbench.cli import main

    raw, empty = _raw_with_empty_class(tmp_path)
    argv = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(tmp_path / "out")]
    argv += ["--train-shards", "2", "--val-shards", "1", "--workers", "1", "--no-progress"]
    assert main([*argv, "--strict"]) == 2
    assert capsys.readouterr().err == (
        f"cvbench: error: 1 class folder(s) hold no images: {empty}; remove them or add images "
        "(without strict / --strict they are kept as classes with 0 images)\n"
    )
    assert not (tmp_path / "out").exists()
    assert main(argv) == 0
    assert f"warning: class folder {empty} holds no images" in capsys.readouterr().out
