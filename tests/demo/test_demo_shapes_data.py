import json

import pytest
from pycocotools.coco import COCO

from cvbench.demo import shapes_data
from cvbench.demo.shapes import SHAPE_NAMES
from cvbench.demo.shapes_data import (
    SPEC_FILE,
    write_classification_set,
    write_detection_set,
)


def _tree(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_classification_set_layout_balance_and_determinism(tmp_path):
    a = write_classification_set(tmp_path / "a", image_size=24, train_per_class=3, val_per_class=2)
    b = write_classification_set(tmp_path / "b", image_size=24, train_per_class=3, val_per_class=2)
    assert not a.reused
    for split, n in (("train", 3), ("val", 2)):
        assert sorted(p.name for p in (a.path / split).iterdir()) == sorted(SHAPE_NAMES)
        for name in SHAPE_NAMES:
            files = sorted((a.path / split / name).glob("*.JPEG"))
            assert [f.name for f in files] == [f"{name}_{k:05d}.JPEG" for k in range(n)]
    assert _tree(a.path) == _tree(b.path)  # byte-for-byte reproducible
    c = write_classification_set(
        tmp_path / "c", image_size=24, train_per_class=3, val_per_class=2, seed=5
    )
    assert _tree(c.path) != _tree(a.path)


def test_detection_set_loads_in_pycocotools(tmp_path):
    built = write_detection_set(
        tmp_path / "det", image_size=64, num_train=12, num_val=5, split_names=("tr", "va")
    )
    for split, n in (("tr", 12), ("va", 5)):
        coco = COCO(str(built.path / "annotations" / f"instances_{split}.json"))
        assert sorted(coco.getImgIds()) == list(range(1, n + 1))
        assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == list(SHAPE_NAMES)
        assert coco.getCatIds() == [1, 2, 3, 4, 5, 6]
        for img in coco.loadImgs(coco.getImgIds()):
            assert (built.path / split / img["file_name"]).is_file()
            anns = coco.loadAnns(coco.getAnnIds(imgIds=img["id"]))
            assert 1 <= len(anns) <= 4
            for ann in anns:
                x, y, w, h = ann["bbox"]
                assert x >= 0 and y >= 0 and x + w <= 64.01 and y + h <= 64.01
                assert ann["iscrowd"] == 0
                assert 0 < ann["area"] <= w * h + 0.1
                # The segmentation polygon rasterises to about `area` pixels.
                assert coco.annToMask(ann).sum() == pytest.approx(ann["area"], rel=0.25)


def test_second_call_reuses_and_other_arguments_rebuild(tmp_path):
    root = tmp_path / "det"
    first = write_detection_set(root, image_size=32, num_train=2, num_val=1)
    mtime = (root / "train" / "000000000001.jpg").stat().st_mtime_ns
    again = write_detection_set(root, image_size=32, num_train=2, num_val=1)
    assert again.reused and (root / "train" / "000000000001.jpg").stat().st_mtime_ns == mtime
    other = write_detection_set(root, image_size=32, num_train=3, num_val=1)
    assert not first.reused and not other.reused
    assert json.loads((root / SPEC_FILE).read_text())["num_train"] == 3
    assert len(list((root / "train").glob("*.jpg"))) == 3


def test_interrupted_build_leaves_nothing_and_is_cleaned_up(tmp_path, monkeypatch):
    calls = []
    real_save = shapes_data._save_jpeg

    def save_then_interrupt(image, path):
        calls.append(path)
        if len(calls) == 4:
            raise KeyboardInterrupt
        real_save(image, path)

    monkeypatch.setattr(shapes_data, "_save_jpeg", save_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_classification_set(tmp_path / "cls", image_size=16, train_per_class=2)
    assert list(tmp_path.iterdir()) == []  # neither the set nor its temporary directory

    # A temporary directory left by a hard kill is removed by the next build.
    monkeypatch.setattr(shapes_data, "_save_jpeg", real_save)
    (tmp_path / ".cls.tmp-999999").mkdir()
    built = write_classification_set(tmp_path / "cls", image_size=16, train_per_class=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cls"]
    assert (built.path / SPEC_FILE).is_file()


def test_refuses_to_overwrite_a_foreign_directory(tmp_path):
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="SHAPES_SPEC"):
        write_classification_set(tmp_path / "cls", image_size=16, train_per_class=1)
    assert (tmp_path / "cls" / "mine.txt").read_text() == "keep"


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="train_per_class=0"):
        write_classification_set(tmp_path / "x", train_per_class=0)
    with pytest.raises(ValueError, match="num_val=0"):
        write_detection_set(tmp_path / "y", num_val=0)
    with pytest.raises(ValueError, match="'a', 'a'"):
        write_detection_set(tmp_path / "z", split_names=("a", "a"))
