"""`cvbench predict`: JSON lines, the table, COCO results, drawings, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from inference_models import (
    DETECTOR_NAMES,
    channel_classifier,
    classifier_info,
    constant_detector,
    detector_info,
)
from PIL import Image

import cvbench.cli
from cvbench.inference import save_model


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    # Channel means (10, 30, 20): the classifier's logits (1, 3, 2), "green" first.
    Image.fromarray(np.full((100, 200, 3), (10, 30, 20), np.uint8)).save(
        folder / "000000000042.png"
    )
    return folder


def _main(argv, capsys):
    code = cvbench.cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_classifier_json_lines(tmp_path, images, capsys):
    model = save_model(channel_classifier(), tmp_path / "cls.keras", classifier_info())
    code, out, _ = _main(["predict", str(model), str(images), "--json", "--top-k", "2"], capsys)
    assert code == 0
    (line,) = [json.loads(x) for x in out.splitlines()]
    assert line["source"] == str(images / "000000000042.png")
    assert line["image_size"] == [100, 200]
    assert [(c["class_id"], c["class_name"]) for c in line["classes"]] == [
        (1, "green"),
        (2, "blue"),
    ]
    # softmax of (1, 3, 2): e^3 / (e + e^2 + e^3) = 0.665241
    assert line["classes"][0]["score"] == pytest.approx(0.665241, abs=1e-6)


def test_classifier_table_and_drawing(tmp_path, images, capsys):
    model = save_model(channel_classifier(), tmp_path / "cls.keras", classifier_info())
    drawn = tmp_path / "drawn"
    code, out, _ = _main(["predict", str(model), str(images), "--draw", str(drawn)], capsys)
    assert code == 0
    assert out == f"{images / '000000000042.png'}  green 0.665 | blue 0.245 | red 0.090\n"
    assert Image.open(drawn / "000000000042.png").size == (200, 100)


def test_detector_json_coco_and_table(tmp_path, images, capsys):
    model = save_model(constant_detector(), tmp_path / "det.keras", detector_info())
    coco = tmp_path / "results.json"
    argv = ["predict", str(model), str(images), "--json", "--score-threshold", "0.6"]
    code, out, _ = _main([*argv, "--box-format", "xywh", "--coco-json", str(coco)], capsys)
    assert code == 0
    (line,) = [json.loads(x) for x in out.splitlines()]
    # Boxes of tests/inference/test_detect.py: the quarters of a 100 x 200 image.
    assert line["box_format"] == "xywh"
    assert [(d["class_name"], d["box"]) for d in line["detections"]] == [
        ("square", [0.0, 0.0, 100.0, 50.0]),
        ("circle", [100.0, 50.0, 100.0, 50.0]),
    ]
    results = json.loads(coco.read_text())
    assert [(r["image_id"], r["category_id"], r["bbox"]) for r in results] == [
        (42, 2, [0.0, 0.0, 100.0, 50.0]),
        (42, 1, [100.0, 50.0, 100.0, 50.0]),
    ]
    code, out, _ = _main(["predict", str(model), str(images)], capsys)
    assert out.splitlines() == [
        f"{images / '000000000042.png'}: 2 detection(s), boxes xyxy in pixels",
        f"  {DETECTOR_NAMES[1]:<16} 0.881  [0.0, 0.0, 100.0, 50.0]",
        f"  {DETECTOR_NAMES[0]:<16} 0.731  [100.0, 50.0, 200.0, 100.0]",
    ]


def test_errors_are_one_line(tmp_path, images, capsys):
    cls = save_model(channel_classifier(), tmp_path / "cls.keras", classifier_info())
    det = save_model(constant_detector(), tmp_path / "det.keras", detector_info())
    plain = tmp_path / "plain.keras"
    channel_classifier().save(plain)
    bad = tmp_path / "notes.jpg"
    bad.write_text("not an image")
    cases = {
        ("predict", str(tmp_path / "none.keras"), str(images)): "no model file",
        ("predict", str(cls), str(tmp_path / "gone.png")): "no image file or folder",
        ("predict", str(det), str(images), "--top-k", "3"): "is a detector: --top-k",
        ("predict", str(cls), str(images), "--coco-json", "x.json"): "is a classifier: --coco",
    }
    for argv, message in cases.items():
        code, out, err = _main(list(argv), capsys)
        assert code == 2 and out == "", argv
        assert len(err.splitlines()) == 1 and err.startswith("cvbench: error: "), err
        assert message in err, err
    # A bad input file (not a bad argument): exit 1, like a corrupt record in train / eval;
    # a model file without ModelInfo too (it was exit 2).
    code, out, err = _main(["predict", str(plain), str(images)], capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"cvbench predict: error: {plain} holds no ModelInfo (no cvbench.json")
    assert len(err.splitlines()) == 1
    code, out, err = _main(["predict", str(cls), str(bad)], capsys)
    assert (code, out) == (1, "")
    assert err == (
        f"cvbench predict: error: {bad}: not an image Pillow can read; pass --skip-corrupt "
        "to skip such files\n"
    )


def test_a_bad_score_threshold_is_a_usage_error(tmp_path, images, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cvbench.cli.main(["predict", "m.keras", str(images), "--score-threshold", "2"])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == (
        "cvbench predict: error: argument --score-threshold: must be in [0, 1), got '2' "
        "(see cvbench predict --help)"
    )


def test_two_files_of_one_coco_id_are_refused_before_predicting(tmp_path, images, capsys):
    # probe p50 #9: a/1.jpg and b/1.jpg both became image 1 in --coco-json (their
    # detections merged, exit 0)
    model = save_model(constant_detector(), tmp_path / "det.keras", detector_info())
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "1.png").write_bytes((images / "000000000042.png").read_bytes())
    coco = tmp_path / "results.json"
    argv = ["predict", str(model), str(tmp_path / "a"), str(tmp_path / "b")]
    code, out, err = _main([*argv, "--coco-json", str(coco)], capsys)
    assert (code, out) == (2, "")  # refused before anything is predicted or printed
    assert err.strip() == (
        f"cvbench: error: {tmp_path / 'a' / '1.png'} and {tmp_path / 'b' / '1.png'} are both "
        "COCO image 1 by their names: a results file would give both images' detections to "
        "one; rename one, or predict them separately"
    )
    assert not coco.exists()


def test_a_name_of_unicode_digits_is_no_coco_id(tmp_path, images, capsys):
    # probe p50 #9: "².png" passed str.isdigit, then int() failed after predicting
    model = save_model(constant_detector(), tmp_path / "det.keras", detector_info())
    (images / "000000000042.png").rename(images / "².png")
    coco = tmp_path / "results.json"
    code, _, err = _main(["predict", str(model), str(images), "--coco-json", str(coco)], capsys)
    assert code == 0, err
    assert {r["image_id"] for r in json.loads(coco.read_text())} == {0}  # its position
