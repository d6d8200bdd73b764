"""Split names, output paths and seeds from a hostile probe (F1).

1. A split name becomes file names (`coco_<split>.record-*`, `<split>-NNNNN-of-NNNNN`,
   `instances_<split>.json`): `--split 'a/../../b'` wrote shards outside build-coco's output
   and a reader's `split='../x'` read another folder's shards. One check
   (`cvbench.data.safe_paths.check_split_name`) now refuses such names in the CLI (one line,
   exit 2), the COCO builder, the shard writer and the readers, before anything is written.
2. `--val-shards` / `--train-shards` with `--annotations` (and `--split` / `--num-shards` with
   `--coco-dir`) were silently ignored: now one line naming the flag and what to use.
3. An empty OUT / `--output-dir` wrote into the current folder.
4. A bad `--seed` failed late, naming neither the flag nor the value.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from cvbench.cli import main
from cvbench.data.builders.coco_builder import build_coco, build_coco_splits
from cvbench.data.builders.sharded_writer import SplitSpec, write_sharded
from cvbench.data.coco_schema import record_prefix
from cvbench.data.read.coco import list_record_files
from cvbench.data.read.splits import every_split_files, list_split_files
from cvbench.data.safe_paths import MAX_SPLIT_NAME_BYTES, check_split_name
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic

HOSTILE = ["a/../../b", "../x", "", ".", "..", "a\nb", "-x", " a", "a ", "a\\b", "a\0b"]
RULES = (
    "is not one plain file name: it may not be empty, '.' or '..', hold '/', '\\' or a "
    "control character, start with '-', or start or end with a space (such as 'train' or 'val')"
)


def refusal(name: str) -> str:
    """The start of `check_split_name`'s message for `name`, as a regular expression."""
    return "^" + re.escape(f"split name {name!r} is not one plain file name: ")


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` -> its SHA-256, every folder -> 'folder'."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = "folder"
        for name in filenames:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def coco_set(root: Path) -> tuple[Path, Path]:
    """ann.json naming one 8 x 8 JPEG with one box, in `root`."""
    from PIL import Image

    images = root / "img"
    images.mkdir(parents=True)
    Image.new("RGB", (8, 8), (200, 10, 10)).save(images / "0.jpg")
    doc = {
        "images": [{"id": 1, "file_name": "0.jpg", "width": 8, "height": 8}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4], "area": 16,
             "iscrowd": 0}
        ],
        "categories": [{"id": 1, "name": "x"}],
    }  # fmt: skip
    (root / "ann.json").write_text(json.dumps(doc))
    return root / "ann.json", images


def refused(argv: list[str], capsys) -> str:
    """The one line `cvbench ARGV` prints on stderr, exit 2 (argparse's or a handler's)."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1, captured.err
    return captured.err.rstrip("\n")


# --- 1. split names -------------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE)
def test_check_split_name_refuses_a_name_that_is_no_plain_file_name(name):
    with pytest.raises(ValueError) as caught:
        check_split_name(name)
    assert str(caught.value) == f"split name {name!r} {RULES}"
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["train", "val", "validation", "train2017", "my.split_1-a"])
def test_check_split_name_keeps_plain_names(name):
    assert check_split_name(name) == name


def test_check_split_name_refuses_a_name_too_long_for_a_shard_file():
    # coco_<split>.record-00000-of-00010 adds 33 bytes: 200 + 33 <= 255, the file-name limit
    assert check_split_name("a" * MAX_SPLIT_NAME_BYTES) == "a" * 200
    with pytest.raises(ValueError, match=r"^split name 'a{32}'\.\.\. is 201 bytes long in UTF-8"):
        check_split_name("a" * 201)
    with pytest.raises(ValueError, match="must be a string"):
        check_split_name(None)


@pytest.mark.parametrize("name", HOSTILE[:-1])  # argv cannot hold a NUL byte
def test_build_coco_refuses_a_hostile_split_before_writing(tmp_path, monkeypatch, capsys, name):
    annotations, images = coco_set(tmp_path)
    work = tmp_path / "w"
    work.mkdir()
    monkeypatch.chdir(work)
    before = tree(tmp_path)
    argv = ["build-coco", "o", "--annotations", str(annotations), "--images", str(images),
            f"--split={name}", "--workers", "1", "--no-progress"]  # fmt: skip
    line = refused(argv, capsys)
    assert line == (
        f"cvbench build-coco: error: argument --split: split name {name!r} {RULES} "
        "(see cvbench build-coco --help)"
    )
    assert tree(tmp_path) == before  # nothing written, inside the output or beside it


@pytest.mark.parametrize("name", ["a/../../b", "../x", "", "."])
def test_build_coco_splits_refuses_a_hostile_split_before_writing(tmp_path, name):
    annotations, images = coco_set(tmp_path)
    out = tmp_path / "w" / "o"
    before = tree(tmp_path)
    with pytest.raises(ValueError, match=refusal(name)):
        build_coco_splits(out, {name: (annotations, images)}, num_workers=1, progress=False)
    with pytest.raises(ValueError, match=refusal(name)):
        build_coco(annotations, images, out, split=name, num_workers=1, progress=False)
    assert tree(tmp_path) == before


def _never_called(item):
    raise AssertionError("no item is encoded for a refused split")


@pytest.mark.parametrize("name", ["a/../../b", "../x", "", "a\nb"])
def test_the_shard_writer_refuses_a_hostile_split_before_writing(tmp_path, name):
    out = tmp_path / "w" / "o"
    spec = SplitSpec(name, [b"x"], 1)
    with pytest.raises(ValueError, match=refusal(name)):
        write_sharded(out, [spec], _never_called, dataset="t", num_workers=1, progress=False)
    assert tree(tmp_path) == {}


@pytest.mark.parametrize("name", HOSTILE)
def test_the_readers_refuse_a_hostile_split(tmp_path, name):
    data = tmp_path / "data"
    data.mkdir()
    # What `split='../x'` read before: another folder's shards, beside the data folder.
    (tmp_path / "x-00000-of-00001").write_bytes(b"records")
    (tmp_path / "coco_x.record-00000-of-00001").write_bytes(b"records")
    for read in (lambda: list_split_files(data, name), lambda: list_record_files(data, name)):
        with pytest.raises(ValueError, match=refusal(name)):
            read()
    with pytest.raises(ValueError, match=refusal(name)):
        record_prefix(name)


@pytest.mark.parametrize("name", ["-x", " a", "a\\b"])  # "a\nb-..." is no shard name at all
def test_every_split_files_names_a_folder_whose_shard_has_no_plain_split_name(tmp_path, name):
    # What `cvbench dali-index` lists: such a file is named (exit 1), never read as a split.
    (tmp_path / "train-00000-of-00001").write_bytes(b"records")
    (tmp_path / f"{name}-00000-of-00001").write_bytes(b"records")
    with pytest.raises(BadFileError) as caught:
        every_split_files(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path}: split name {name!r} {RULES}; rename or remove its shard files"
    )


def test_a_file_pattern_is_the_callers_choice_not_a_split_name(tmp_path):
    (tmp_path / "a.tfrecord").write_bytes(b"records")
    assert list_split_files(tmp_path, "", "*.tfrecord") == [str(tmp_path / "a.tfrecord")]


# --- 2. flags of the other way of naming the input -----------------------------------------


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (["--val-shards", "2"],
         "--val-shards goes with --coco-dir, not --annotations: use --num-shards, once or once "
         "per --split"),
        (["--train-shards", "2"],
         "--train-shards goes with --coco-dir, not --annotations: use --num-shards, once or "
         "once per --split"),
        (["--splits", "val"],
         "--splits goes with --coco-dir, not --annotations: use --split, once per "
         "--annotations"),
    ],
)  # fmt: skip
def test_coco_dir_flags_with_annotations_are_refused(tmp_path, monkeypatch, capsys, extra, line):
    annotations, images = coco_set(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    argv = ["build-coco", "o", "--annotations", str(annotations), "--images", str(images),
            "--split", "val", "--workers", "1", "--no-progress", *extra]  # fmt: skip
    assert refused(argv, capsys) == f"cvbench: error: {line}"
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (["--split", "val"], "--split goes with --annotations, not --coco-dir: use --splits"),
        (["--images", "i"],
         "--images goes with --annotations, not --coco-dir: it reads COCO_DIR/train2017/ and "
         "val2017/"),
        (["--num-shards", "2"],
         "--num-shards goes with --annotations, not --coco-dir: use --train-shards and "
         "--val-shards"),
    ],
)  # fmt: skip
def test_annotations_flags_with_coco_dir_are_refused(tmp_path, monkeypatch, capsys, extra, line):
    monkeypatch.chdir(tmp_path)
    argv = ["build-coco", "o", "--coco-dir", "c", "--no-progress", *extra]
    assert refused(argv, capsys) == f"cvbench: error: {line}"
    assert tree(tmp_path) == {}


# --- 3. an empty output path ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["build-coco", "", "--coco-dir", "c"], "out"),
        (["demo", "--output-dir", ""], "--output-dir"),
    ],
)
def test_an_empty_output_path_is_refused(tmp_path, monkeypatch, capsys, argv, flag):
    monkeypatch.chdir(tmp_path)
    command = argv[0]
    assert refused(argv, capsys) == (
        f"cvbench {command}: error: argument {flag}: the path is empty: name the folder to "
        f"write (. for the current one) (see cvbench {command} --help)"
    )
    assert tree(tmp_path) == {}


# --- 4. seeds ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "value", "shown"),
    [
        (["train", "--synthetic"], "-1", "-1"),
        (["eval", "--checkpoint", "c", "--synthetic"], "99999999999999999999999",
         "99999999999999999999999"),
        (["demo"], "4294967296", "4294967296"),
        (["build-coco", "o", "--coco-dir", "c"], "x", "'x'"),
    ],
)  # fmt: skip
def test_a_bad_seed_names_the_flag_and_the_value(tmp_path, monkeypatch, capsys, command, value,
                                                 shown):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    name = command[0]
    assert refused([*command, "--seed", value], capsys) == (
        f"cvbench {name}: error: argument --seed: expected an integer from 0 to 4294967295, "
        f"got {shown} (see cvbench {name} --help)"
    )
    assert tree(tmp_path) == {}
