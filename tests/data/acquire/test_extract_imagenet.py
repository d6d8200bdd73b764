"""extract_imagenet on small fake archives built like the official ILSVRC2012 ones.

Fake train tar: 3 classes, each an inner `<synset>.tar` of tiny JPEGs. Fake val tar: 6 flat
`ILSVRC2012_val_0000000k.JPEG`. Fake devkit: the ground-truth text file (ILSVRC2012_IDs) and a
meta.mat written with scipy.io.savemat in the devkit's layout (a `synsets` struct array with
ILSVRC2012_ID and WNID, plus a non-leaf synset with a higher id, as in the real file).
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from cvbench.data.acquire import extract_imagenet as ei

SYNSETS = ["n01440764", "n01443537", "n01484850"]  # ILSVRC2012_ID 1, 2, 3 in the fake meta
TRAIN_PER_CLASS = {"n01440764": 2, "n01443537": 3, "n01484850": 1}
# Validation image k (1-based) has ILSVRC2012_ID VAL_IDS[k-1].
VAL_IDS = [3, 1, 1, 2, 3, 3]


def _jpeg(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (seed * 40 % 256, 10, 200)).save(buf, format="JPEG")
    return buf.getvalue()


def _tar_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _train_member(synset: str, i: int) -> str:
    return f"{synset}_{i}.JPEG"


def _train_tar(path: Path) -> Path:
    inner = {
        f"{s}.tar": _tar_bytes({_train_member(s, i): _jpeg(i) for i in range(n)})
        for s, n in TRAIN_PER_CLASS.items()
    }
    path.write_bytes(_tar_bytes(inner))
    return path


def _val_name(k: int) -> str:
    return f"ILSVRC2012_val_{k:08d}.JPEG"


def _val_tar(path: Path) -> Path:
    path.write_bytes(_tar_bytes({_val_name(k): _jpeg(k) for k in range(1, len(VAL_IDS) + 1)}))
    return path


def _devkit(path: Path) -> Path:
    # The real meta.mat: 1860 synsets, the 1000 leaves have ILSVRC2012_ID 1..1000.
    dtype = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")]
    synsets = np.array(
        [(i + 1, w, f"class {i + 1}", 0) for i, w in enumerate(SYNSETS)]
        + [(1001, "n00001740", "entity", 3)],
        dtype=dtype,
    )
    meta = io.BytesIO()
    scipy.io.savemat(meta, {"synsets": synsets})
    ground_truth = "".join(f"{i}\n" for i in VAL_IDS).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (
            ("ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", ground_truth),
            ("ILSVRC2012_devkit_t12/data/meta.mat", meta.getvalue()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path


def _layout(root: Path) -> dict[str, list[str]]:
    return {
        str(d.relative_to(root)): sorted(p.name for p in d.iterdir())
        for split in ("train", "val")
        if (root / split).exists()
        for d in sorted((root / split).iterdir())
    }


EXPECTED_TRAIN = {
    f"train/{s}": sorted(_train_member(s, i) for i in range(n)) for s, n in TRAIN_PER_CLASS.items()
}
# From VAL_IDS: id 1 (n01440764) -> images 2, 3; id 2 (n01443537) -> 4; id 3 -> 1, 5, 6.
EXPECTED_VAL = {
    "val/n01440764": [_val_name(2), _val_name(3)],
    "val/n01443537": [_val_name(4)],
    "val/n01484850": [_val_name(1), _val_name(5), _val_name(6)],
}


def test_devkit_labels_map_ground_truth_ids_to_wnids(tmp_path):
    labels = ei.load_val_labels_from_devkit(_devkit(tmp_path / ei.DEVKIT))
    assert labels == {
        "ILSVRC2012_val_00000001": "n01484850",
        "ILSVRC2012_val_00000002": "n01440764",
        "ILSVRC2012_val_00000003": "n01440764",
        "ILSVRC2012_val_00000004": "n01443537",
        "ILSVRC2012_val_00000005": "n01484850",
        "ILSVRC2012_val_00000006": "n01484850",
    }


def test_extracts_train_and_val_into_synset_folders(tmp_path):
    out = tmp_path / "imagenet"
    stats = ei.extract_imagenet(
        out,
        train_tar=_train_tar(tmp_path / ei.TRAIN_TAR),
        val_tar=_val_tar(tmp_path / ei.VAL_TAR),
        devkit=_devkit(tmp_path / ei.DEVKIT),
        progress=False,
    )
    assert _layout(out) == {**EXPECTED_TRAIN, **EXPECTED_VAL}
    # 2 + 3 + 1 training images in 3 classes; 6 validation images.
    assert stats["train"] == ei.ExtractStats(written=6, classes_written=3)
    assert stats["val"] == ei.ExtractStats(written=6)
    # Bytes are the originals (image 4 is the one labelled n01443537).
    assert (out / "val" / "n01443537" / _val_name(4)).read_bytes() == _jpeg(4)
    assert (out / "train" / "n01443537" / "n01443537_2.JPEG").read_bytes() == _jpeg(2)
    # The class texts of ILSVRC2012_IDs 1..3, in id order; the ancestor synset (id 1001) is not
    # a class.
    assert (out / "imagenet_metadata.txt").read_text() == (
        "n01440764\tclass 1\nn01443537\tclass 2\nn01484850\tclass 3\n"
    )
    # No inner tar ever lands on disk, and the staging area is gone.
    assert not list(out.rglob("*.tar"))
    assert not (out / ".cvbench-extract" / "staging").exists()


def test_rerun_skips_finished_work(tmp_path):
    out = tmp_path / "imagenet"
    kwargs = dict(
        train_tar=_train_tar(tmp_path / ei.TRAIN_TAR),
        val_tar=_val_tar(tmp_path / ei.VAL_TAR),
        devkit=_devkit(tmp_path / ei.DEVKIT),
        progress=False,
    )
    ei.extract_imagenet(out, **kwargs)
    stats = ei.extract_imagenet(out, **kwargs)
    assert stats["train"] == ei.ExtractStats(classes_skipped=3)
    assert stats["val"] == ei.ExtractStats(skipped=6)
    assert _layout(out) == {**EXPECTED_TRAIN, **EXPECTED_VAL}


def test_rerun_after_a_kill_redoes_partial_classes_and_missing_images(tmp_path):
    out = tmp_path / "imagenet"
    train, val = _train_tar(tmp_path / ei.TRAIN_TAR), _val_tar(tmp_path / ei.VAL_TAR)
    devkit = _devkit(tmp_path / ei.DEVKIT)
    ei.extract_imagenet(out, train_tar=train, val_tar=val, devkit=devkit, progress=False)
    state = out / ".cvbench-extract"
    # As if killed: class n01443537 moved into place but not marked, with a stray half file;
    # a stale staging folder; val not marked done and one image missing.
    (state / "train" / "n01443537.done").unlink()
    (out / "train" / "n01443537" / "n01443537_0.JPEG").write_bytes(b"half")
    (out / "train" / "n01443537" / "stray.JPEG").write_bytes(b"x")
    (state / "staging" / "n01484850").mkdir(parents=True)
    (state / "val.done").unlink()
    (out / "val" / "n01440764" / _val_name(3)).unlink()
    stats = ei.extract_imagenet(out, train_tar=train, val_tar=val, devkit=devkit, progress=False)
    assert stats["train"] == ei.ExtractStats(written=3, classes_written=1, classes_skipped=2)
    assert stats["val"] == ei.ExtractStats(written=1, skipped=5)
    assert _layout(out) == {**EXPECTED_TRAIN, **EXPECTED_VAL}
    assert (out / "train" / "n01443537" / "n01443537_0.JPEG").read_bytes() == _jpeg(0)


def test_labels_file_instead_of_the_devkit(tmp_path):
    wnids = [SYNSETS[i - 1] for i in VAL_IDS]
    labels = tmp_path / "imagenet_2012_validation_synset_labels.txt"
    labels.write_text("\n".join(wnids) + "\n")
    out = tmp_path / "imagenet"
    ei.extract_imagenet(
        out, val_tar=_val_tar(tmp_path / ei.VAL_TAR), val_labels=labels, progress=False
    )
    assert _layout(out) == EXPECTED_VAL
    assert not (out / "imagenet_metadata.txt").exists()  # no devkit, no class texts


def test_kaggle_solution_csv_is_read(tmp_path):
    csv = tmp_path / "LOC_val_solution.csv"
    csv.write_text(
        "ImageId,PredictionString\n"
        "ILSVRC2012_val_00008726,n02119789 255 142 454 329 n02119789 44 21 322 295 \n"
        "ILSVRC2012_val_00000001,n01751748 124 12 412 350 \n"
    )
    assert ei.load_val_labels_file(csv) == {
        "ILSVRC2012_val_00008726": "n02119789",
        "ILSVRC2012_val_00000001": "n01751748",
    }


def test_wrong_labels_are_refused(tmp_path):
    val = _val_tar(tmp_path / ei.VAL_TAR)
    short = tmp_path / "short.txt"
    short.write_text("n01440764\n" * 4)  # labels for 4 of the 6 images
    with pytest.raises(ValueError, match="no label for 'ILSVRC2012_val_00000005.JPEG'"):
        ei.extract_imagenet(tmp_path / "a", val_tar=val, val_labels=short, progress=False)
    long = tmp_path / "long.txt"
    long.write_text("n01440764\n" * 7)
    with pytest.raises(ValueError, match="labels name 7 validation images but .* holds 6"):
        ei.extract_imagenet(tmp_path / "b", val_tar=val, val_labels=long, progress=False)
    bad = tmp_path / "bad.txt"
    bad.write_text("tench\n")
    with pytest.raises(ValueError, match=r"expected WNIDs like n01440764, got \['tench'\]"):
        ei.load_val_labels_file(bad)


def test_val_tar_given_as_train_tar_is_refused(tmp_path):
    val = _val_tar(tmp_path / ei.VAL_TAR)
    with pytest.raises(ValueError, match="expected one <synset>.tar per class"):
        ei.extract_train(val, tmp_path / "out", progress=False)


def test_devkit_without_scipy_says_what_to_do(tmp_path, monkeypatch):
    devkit = _devkit(tmp_path / ei.DEVKIT)
    monkeypatch.setitem(sys.modules, "scipy.io", None)  # makes `import scipy.io` fail
    with pytest.raises(ValueError, match="needs scipy .* --val-labels"):
        ei.load_val_labels_from_devkit(devkit)


def test_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="give train_tar and/or val_tar"):
        ei.extract_imagenet(tmp_path)
    with pytest.raises(ValueError, match="needs devkit or val_labels"):
        ei.extract_imagenet(tmp_path, val_tar=tmp_path / "v.tar")
    with pytest.raises(FileNotFoundError, match="no such file: .*missing.tar"):
        ei.extract_imagenet(tmp_path, train_tar=tmp_path / "missing.tar")


def _cli(argv):
    from cvbench.cli import acquire

    parser = argparse.ArgumentParser(prog="cvbench")
    acquire.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_finds_the_archives_by_their_official_names(tmp_path, capsys):
    archives = tmp_path / "downloads"
    archives.mkdir()
    _train_tar(archives / ei.TRAIN_TAR)
    _val_tar(archives / ei.VAL_TAR)
    _devkit(archives / ei.DEVKIT)
    out = tmp_path / "imagenet"
    assert _cli(["extract-imagenet", str(out), "--archives", str(archives), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "train: 3 classes (6 images) extracted, 0 already done" in printed
    assert "val: 6 images extracted, 0 already in place" in printed
    assert _layout(out) == {**EXPECTED_TRAIN, **EXPECTED_VAL}


def test_cli_with_nothing_to_extract_is_a_user_error(tmp_path):
    from cvbench.cli import CLIError

    with pytest.raises(CLIError, match="nothing to extract"):
        _cli(["extract-imagenet", str(tmp_path / "out"), "--archives", str(tmp_path)])


def test_the_layout_is_what_build_imagenet_reads(tmp_path):
    from cvbench.data.builders import imagenet_layout

    out = tmp_path / "imagenet"
    ei.extract_imagenet(
        out,
        train_tar=_train_tar(tmp_path / ei.TRAIN_TAR),
        val_tar=_val_tar(tmp_path / ei.VAL_TAR),
        devkit=_devkit(tmp_path / ei.DEVKIT),
        progress=False,
    )
    found = imagenet_layout.discover(out)
    assert found.classes == SYNSETS
    assert len(found.train) == 6 and len(found.validation) == 6  # 2 + 3 + 1; 6 val images
    assert found.validation_layout == imagenet_layout.LAYOUT_FOLDERS
    val_classes = {Path(path).name: cls for path, cls in found.validation}
    assert val_classes == {  # VAL_IDS = [3, 1, 1, 2, 3, 3] through the fake meta.mat
        _val_name(k): SYNSETS[i - 1] for k, i in enumerate(VAL_IDS, start=1)
    }
    assert found.ignored == []  # the hidden bookkeeping folder is not mistaken for data
    texts = imagenet_layout.read_class_texts(imagenet_layout.find_class_texts(out))
    assert texts == {"n01440764": "class 1", "n01443537": "class 2", "n01484850": "class 3"}
