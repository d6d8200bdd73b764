"""Probe p50 #12 and #13: a validation label file that gives one image two classes, or a line
without a class, and a bounding-box file with a `nan` or `inf` coordinate, are bad input files
named with their line (they were: the last line silently won; `not enough values to unpack`;
the box clipped to 0.0 or 1.0)."""

from __future__ import annotations

import pytest
from imagenet_testdata import encode, smooth_image

from cvbench import cli
from cvbench.data.builders.imagenet_layout import read_boxes, read_validation_labels
from cvbench.utils.errors import BadFileError

NAMES = ["a.JPEG", "b.JPEG", "c.JPEG"]


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_image_with_two_classes_is_refused_naming_both_lines(tmp_path):
    labels = _file(tmp_path, "labels2.txt", "a.JPEG cat\na.JPEG dog\nb.JPEG cat\nc.JPEG dog\n")
    with pytest.raises(BadFileError) as e:
        read_validation_labels(labels, NAMES)
    assert str(e.value) == f"{labels}: a.JPEG is labelled twice: cat (line 1) and dog (line 2)"


def test_an_image_named_with_and_without_extension_with_two_classes_is_refused(tmp_path):
    header = "ImageId,PredictionString\n"
    labels = _file(tmp_path, "l.csv", header + "b,cat 1 2 3 4\n\na,dog\nc dog\na.JPEG,cat\n")
    with pytest.raises(BadFileError) as e:
        read_validation_labels(labels, NAMES)
    assert str(e.value) == f"{labels}: a.JPEG is labelled twice: dog (line 4) and cat (line 6)"


def test_the_same_class_twice_is_accepted(tmp_path):
    labels = _file(tmp_path, "l.txt", "a.JPEG cat\nb dog\na cat\nc.JPEG cat\na.JPEG cat\n")
    assert read_validation_labels(labels, NAMES) == ["cat", "dog", "cat"]


@pytest.mark.parametrize(
    ("text", "line", "got"),
    [
        ("a.JPEG cat\nb.JPEG\nc.JPEG dog\n", 2, "'b.JPEG'"),
        ("a.JPEG cat\n\nb.JPEG,\nc.JPEG dog\n", 3, "'b.JPEG,'"),
    ],
)
def test_a_line_without_a_class_is_refused_naming_it(tmp_path, text, line, got):
    labels = _file(tmp_path, "labels3.txt", text)
    with pytest.raises(BadFileError) as e:
        read_validation_labels(labels, NAMES)
    assert str(e.value) == f"{labels} line {line}: expected 'file class', got {got}"


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize("number", [1, 3])
def test_a_non_finite_box_coordinate_is_a_malformed_line(tmp_path, bad, number):
    rows = ["cat_0.JPEG,0.8,0.1,0.2,0.9", "cat_1.JPEG,-5,0.1,20,0.9"]
    rows.insert(number - 1, f"cat_2.JPEG,0.1,{bad},0.5,0.9")
    boxes = _file(tmp_path, "boxes.csv", "\n".join(rows) + "\n")
    with pytest.raises(BadFileError) as e:
        read_boxes(boxes)
    assert str(e.value) == (
        f"{boxes}:{number}: expected name,xmin,ymin,xmax,ymax (finite numbers), got "
        f"['cat_2.JPEG', '0.1', '{bad}', '0.5', '0.9']"
    )


def test_finite_boxes_are_still_clipped(tmp_path):
    boxes = _file(
        tmp_path, "b.csv", "name,xmin,ymin,xmax,ymax\nx.jpg,-5,0.1,20,0.9\ny,0.8,0,0.2,1\n"
    )
    assert read_boxes(boxes) == {"x.jpg": [(0.0, 0.1, 1.0, 0.9)]}


def _raw(root):
    for k, cls in enumerate(("cat", "dog")):
        (root / "train" / cls).mkdir(parents=True)
        (root / "train" / cls / "t.jpg").write_bytes(encode(smooth_image(k)))
    (root / "validation").mkdir()
    for k, name in enumerate(NAMES):
        (root / "validation" / name).write_bytes(encode(smooth_image(10 + k)))
    return root


@pytest.mark.parametrize(
    ("flag", "name", "text", "message"),
    [
        ("--val-labels", "labels2.txt", "a.JPEG cat\na.JPEG dog\nb.JPEG cat\nc.JPEG dog\n",
         ": a.JPEG is labelled twice: cat (line 1) and dog (line 2)"),
        ("--val-labels", "labels3.txt", "a.JPEG cat\nb.JPEG\nc.JPEG dog\n",
         " line 2: expected 'file class', got 'b.JPEG'"),
        ("--boxes", "boxes.csv", "t.jpg,0.1,0.1,0.5,0.5\nt.jpg,nan,0.1,0.5,0.9\n",
         ":2: expected name,xmin,ymin,xmax,ymax (finite numbers), got "
         "['t.jpg', 'nan', '0.1', '0.5', '0.9']"),
    ],
)  # fmt: skip
def test_the_command_prints_one_line_exit_1_and_writes_nothing(
    tmp_path, capsys, flag, name, text, message
):
    raw = _raw(tmp_path / "raw")
    path = _file(tmp_path, name, text)
    labels = _file(tmp_path, "good.txt", "a.JPEG cat\nb.JPEG cat\nc.JPEG dog\n")
    extra = [flag, path] if flag == "--val-labels" else ["--val-labels", labels, flag, path]
    out = tmp_path / "out"
    argv = ["build-imagenet", "--raw-dir", raw, "--output-dir", out, "--train-shards", "1",
            "--val-shards", "1", "--workers", "1", "--no-progress", *extra]  # fmt: skip
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [f"cvbench build-imagenet: error: {path}{message}"]
    assert code == 1
    assert not out.exists()
