"""Hostile data files against the data commands and readers (#37, causes A, C, E, F, K):
folder names that look like glob patterns, FIFOs and devices where files are read, deeply
nested JSON, a user's file where a builder writes, duplicate names in an archive, bad
TFRecord files. Each case: one line naming the file and the documented exit code (1 for a
bad input file, 2 for a refused plan), or the documented skip, no hang, and nothing outside
the output changed.

The commands run in this process (`cvbench.cli.main`), under a timeout: a FIFO that is
opened for reading would block forever, and the timeout turns that into a failure.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import stat
import struct
import tarfile
from pathlib import Path

import pytest
from test_data_faults import coco_set, jpeg, raw_folder, tar_bytes

from cvbench import cli
from cvbench.utils.errors import BadFileError

NESTED = "[" * 100000  # Python's JSON parser recurses: RecursionError near depth 1000
NESTED_LINE = "JSON nested 100000 levels deep, over the limit of 200"
BUILD = ["--train-shards", "1", "--workers", "1", "--no-progress"]


def tree(root: Path) -> dict[str, str]:
    """Every entry under `root`: file -> SHA-256, link -> target, folder, or the kind of a
    special file (a FIFO is never opened: that would block)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                out[rel] = "link " + os.readlink(path)
            elif stat.S_ISDIR(mode):
                out[rel] = "folder"
            elif stat.S_ISREG(mode):
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = f"special {stat.S_IFMT(mode)}"
    return out


def run_cli(capsys, *argv: str | Path) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `cvbench ARGV`, run in this process."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def build(raw: Path, out: Path) -> None:
    from cvbench.data.builders.imagenet_builder import build_imagenet

    build_imagenet(raw, out, train_shards=1, num_workers=1, progress=False)


# --- A. folder names are never patterns ---------------------------------------------------


@pytest.mark.timeout(300)
def test_an_output_folder_named_like_a_glob_leaves_the_folders_it_matches(tmp_path, capsys):
    # The fault: --output-dir 'gl/out[12]' --overwrite deleted the shards of gl/out1 and
    # gl/out2 (glob.glob of "gl/out[12]/train-*-of-*" matched their shards).
    raw = raw_folder(tmp_path / "raw")
    for name in ("out1", "out2"):
        build(raw, tmp_path / "gl" / name)
    before = tree(tmp_path / "gl")
    target = tmp_path / "gl" / "out[12]"
    code, _, err = run_cli(
        capsys, "build-imagenet", "--raw-dir", raw, "--output-dir", target, "--overwrite", *BUILD
    )
    assert code == 0, err
    after = tree(tmp_path / "gl")
    assert {k: v for k, v in after.items() if not k.startswith("out[12]")} == before
    assert (target / "train-00000-of-00001").is_file()


@pytest.mark.timeout(300)
def test_dali_index_of_a_folder_named_like_a_glob_reads_only_that_folder(tmp_path, capsys):
    # The fault: `dali-index 'gl/rd[12]'` indexed the shards of gl/rd1, writing gl/rd1/idx.
    raw = raw_folder(tmp_path / "raw")
    build(raw, tmp_path / "gl" / "rd1")
    shutil.rmtree(tmp_path / "gl" / "rd1" / "idx")
    (tmp_path / "gl" / "rd[12]").mkdir()
    before = tree(tmp_path / "gl")
    code, _, err = run_cli(capsys, "dali-index", tmp_path / "gl" / "rd[12]", "--no-progress")
    assert code == 2
    assert one_line(err) == (
        f"cvbench: error: no TFRecord shards named <split>-NNNNN-of-NNNNN in {tmp_path}/gl/rd[12]"
    )
    assert tree(tmp_path / "gl") == before


@pytest.mark.backend_agnostic
def test_a_data_dir_named_like_a_glob_reads_only_its_own_shards(tmp_path):
    # The fault: --data-dir 'x[12]' silently read the records of x1 and x2.
    from cvbench.data.read.reader import list_split_files

    for name in ("x1", "x2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train-00000-of-00001").write_bytes(b"x")  # not 0 bytes
    (tmp_path / "x[12]").mkdir()
    looked_for = re.escape("no TFRecord files matching 'train-?????-of-?????'")
    with pytest.raises(FileNotFoundError, match=looked_for):
        list_split_files(tmp_path / "x[12]", "train")
    (tmp_path / "x[12]" / "train-00000-of-00001").write_bytes(b"x")
    assert list_split_files(tmp_path / "x[12]", "train") == [
        f"{tmp_path}/x[12]/train-00000-of-00001"
    ]
    # A file pattern may name a sub-folder; that part is literal too.
    (tmp_path / "x[12]" / "s[ab]").mkdir()
    (tmp_path / "x[12]" / "sa").mkdir()
    (tmp_path / "x[12]" / "sa" / "t.rec").write_bytes(b"")
    with pytest.raises(FileNotFoundError):
        list_split_files(tmp_path / "x[12]", "train", "s[ab]/*.rec")


# --- C. inputs are regular files read with a bound ----------------------------------------


def special_file(path: Path, kind: str) -> Path:
    """`path` made a FIFO or a link to /dev/zero."""
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


KIND_TEXT = {"fifo": "a FIFO (named pipe)", "dev-zero": "a character device"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_an_image_that_is_a_fifo_or_a_device_is_skipped_and_listed(tmp_path, capsys, kind):
    # The fault: a FIFO named *.JPEG hung build-imagenet; a link to /dev/zero was read until
    # MemoryError (6-7 GB) and a traceback.
    raw = raw_folder(tmp_path / "raw")
    bad = special_file(raw / "train" / "a" / "z.JPEG", kind)
    code, out, err = run_cli(
        capsys, "build-imagenet", "--raw-dir", raw, "--output-dir", tmp_path / "out", *BUILD
    )
    assert code == 0, err
    assert (
        f"  skipped: 1\n    train: train/a/z.JPEG: cannot read file: {bad} is {KIND_TEXT[kind]}, "
        "not a regular file\n" in out
    )


@pytest.mark.timeout(120)
def test_an_image_file_over_the_byte_limit_is_skipped_naming_the_flag(tmp_path):
    from cvbench.data.builders.imagenet_builder import build_imagenet

    raw = raw_folder(tmp_path / "raw")
    limit = max(p.stat().st_size for p in raw.glob("train/*/*.jpg"))
    big = raw / "train" / "a" / "big.jpg"
    big.write_bytes(jpeg(0) + b"\0" * limit)  # over the limit: the largest of the others
    size = big.stat().st_size
    summary = build_imagenet(
        raw, tmp_path / "out", train_shards=1, num_workers=1, progress=False,
        max_image_bytes=limit,
    )  # fmt: skip
    assert summary.write.splits["train"].num_records == 4  # every image but big.jpg
    assert (
        f"train/a/big.jpg: cannot read file: {big} has {size} bytes, over the limit of "
        f"{limit} bytes; pass --max-image-bytes N to raise it"
    ) in summary.format()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_class_texts_that_are_no_regular_file_are_one_line_and_exit_1(tmp_path, capsys, kind):
    # The fault: --class-texts linked to /dev/zero reached MemoryError with a traceback.
    raw = raw_folder(tmp_path / "raw")
    texts = special_file(tmp_path / "texts.txt", kind)
    before = tree(tmp_path)
    code, _, err = run_cli(capsys, "build-imagenet", "--raw-dir", raw, "--output-dir",
                           tmp_path / "out", "--class-texts", texts, *BUILD)  # fmt: skip
    assert code == 1
    assert one_line(err) == (
        f"cvbench build-imagenet: error: class text file {texts} is {KIND_TEXT[kind]}, not a "
        "regular file"
    )
    assert tree(tmp_path) == before


@pytest.mark.timeout(120)
def test_a_coco_image_that_is_a_fifo_is_skipped_and_listed(tmp_path, capsys):
    # The fault: a COCO file_name naming a FIFO hung build-coco.
    annotations, images = coco_set(tmp_path / "coco")
    (images / "a.jpg").unlink()
    os.mkfifo(images / "a.jpg")
    code, out, err = run_cli(capsys, "build-coco", tmp_path / "out", "--annotations",
                             annotations, "--images", images, "--split", "val", "--workers",
                             "1", "--no-progress")  # fmt: skip
    assert code == 0, err
    assert (
        f"val: a.jpg (id 1): cannot read file: {images}/a.jpg is a FIFO (named pipe), not a "
        "regular file" in out
    )


@pytest.mark.timeout(120)
def test_coco_annotations_that_are_a_fifo_are_one_line_and_exit_1(tmp_path, capsys):
    annotations, images = coco_set(tmp_path / "coco")
    annotations.unlink()
    os.mkfifo(annotations)
    code, _, err = run_cli(capsys, "build-coco", tmp_path / "out", "--annotations",
                           annotations, "--images", images, "--split", "val", "--workers", "1",
                           "--no-progress")  # fmt: skip
    assert code == 1
    assert one_line(err) == (
        f"cvbench build-coco: error: annotations file {annotations} is a FIFO (named pipe), "
        "not a regular file"
    )
    assert not (tmp_path / "out").exists()


# --- E. deeply nested JSON ----------------------------------------------------------------


@pytest.mark.timeout(120)
def test_deeply_nested_coco_annotations_are_one_line_and_exit_1(tmp_path, capsys):
    # The fault: '[' * 100000 raised RecursionError with a traceback.
    annotations, images = coco_set(tmp_path / "coco")
    annotations.write_text(NESTED)
    before = tree(tmp_path)
    code, _, err = run_cli(capsys, "build-coco", tmp_path / "out", "--annotations",
                           annotations, "--images", images, "--split", "val", "--workers", "1",
                           "--no-progress")  # fmt: skip
    assert code == 1
    assert one_line(err) == f"cvbench build-coco: error: {annotations}: {NESTED_LINE}"
    assert tree(tmp_path) == before


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("which", ["detections", "groundtruth"])
def test_deeply_nested_coco_eval_files_are_a_bad_file_error(tmp_path, which):
    from cvbench.detection.coco_eval import evaluate_coco

    gt = {"images": [{"id": 1, "width": 10, "height": 10}], "annotations": [],
          "categories": [{"id": 1, "name": "a"}]}  # fmt: skip
    files = {"detections": tmp_path / "d.json", "groundtruth": tmp_path / "g.json"}
    files["detections"].write_text("[]")
    files["groundtruth"].write_text(json.dumps(gt))
    files[which].write_text(NESTED)
    with pytest.raises(BadFileError) as raised:
        evaluate_coco(files["detections"], files["groundtruth"], print_fn=None)
    assert str(raised.value) == f"{files[which]}: {NESTED_LINE}"


@pytest.mark.backend_agnostic
def test_a_ground_truth_file_that_is_no_coco_dict_is_a_bad_file_error(tmp_path):
    from cvbench.detection.coco_eval import evaluate_coco

    (tmp_path / "g.json").write_text('["images", "annotations", "categories"]')
    with pytest.raises(BadFileError, match=r"g.json is not a COCO annotation file: it needs"):
        evaluate_coco([], tmp_path / "g.json", print_fn=None)


@pytest.mark.backend_agnostic
def test_the_detections_file_is_never_written_over_an_input(tmp_path):
    from cvbench.detection.coco_eval import evaluate_coco

    gt = {"images": [{"id": 1, "width": 10, "height": 10}], "annotations": [],
          "categories": [{"id": 1, "name": "a"}]}  # fmt: skip
    (tmp_path / "g.json").write_text(json.dumps(gt))
    before = tree(tmp_path)
    with pytest.raises(ValueError, match=r"g.json is an input of this command"):
        evaluate_coco([], tmp_path / "g.json", detections_path=tmp_path / "g.json")
    assert tree(tmp_path) == before


@pytest.mark.backend_agnostic
def test_a_deeply_nested_manifest_is_a_bad_file(tmp_path):
    from cvbench.data.builders.manifest import MANIFEST_NAME, prepare_out_dir

    (tmp_path / MANIFEST_NAME).write_text(NESTED)
    with pytest.raises(BadFileError, match=NESTED_LINE):
        prepare_out_dir(tmp_path, {"format": 1}, [], overwrite=False)


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("stamp", [NESTED, "[1]", "fifo"])
def test_a_bad_download_stamp_counts_as_no_stamp(tmp_path, stamp):
    from cvbench.data.acquire import download

    dest = tmp_path / "a.zip"
    dest.write_bytes(b"data")
    if stamp == "fifo":
        os.mkfifo(tmp_path / "a.zip.verified")
    else:
        (tmp_path / "a.zip.verified").write_text(stamp)
    assert download._has_valid_stamp(dest, None, None) is False


# --- F. outputs never replace a user's file -----------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_build_coco_never_replaces_a_users_instances_json(tmp_path, capsys, overwrite):
    # The fault: build-coco replaced the user's OUT/instances_val.json, without --overwrite.
    annotations, images = coco_set(tmp_path / "coco")
    out = tmp_path / "out"
    out.mkdir()
    (out / "instances_val.json").write_text("my notes")
    before = tree(tmp_path)
    code, _, err = run_cli(capsys, "build-coco", out, "--annotations", annotations, "--images",
                           images, "--split", "val", "--workers", "1", "--no-progress",
                           *overwrite)  # fmt: skip
    assert code == 2
    assert one_line(err) == (
        f"cvbench: error: {out}/instances_val.json exists and was not written by cvbench; "
        "--overwrite replaces only cvbench's own outputs: move it or write elsewhere"
    )
    assert tree(tmp_path) == before


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["build-imagenet", "build-coco"])
def test_a_users_dataset_info_json_is_never_replaced(tmp_path, capsys, command):
    # The fault: --overwrite deleted, and every build replaced, a dataset_info.json the user
    # kept in a folder that holds no cvbench data set.
    out = tmp_path / "out"
    out.mkdir()
    (out / "dataset_info.json").write_text("my notes")
    if command == "build-imagenet":
        raw = raw_folder(tmp_path / "raw")
        argv = ["build-imagenet", "--raw-dir", raw, "--output-dir", out, *BUILD]
    else:
        annotations, images = coco_set(tmp_path / "coco")
        argv = ["build-coco", out, "--annotations", annotations, "--images", images,
                "--split", "val", "--workers", "1", "--no-progress"]  # fmt: skip
    before = tree(tmp_path)
    for extra in ([], ["--overwrite"]):
        code, _, err = run_cli(capsys, *argv, *extra)
        assert code == 2
        assert one_line(err) == (
            f"cvbench: error: {out}/dataset_info.json exists and was not written by cvbench; "
            "--overwrite replaces only cvbench's own outputs: move it or write elsewhere"
        )
    assert tree(tmp_path) == before


@pytest.mark.timeout(120)
def test_build_coco_replaces_its_own_instances_json_on_a_rerun(tmp_path):
    from cvbench.data.builders.coco_builder import build_coco

    annotations, images = coco_set(tmp_path / "coco")
    out = tmp_path / "out"
    build_coco(annotations, images, out, split="val", num_workers=1, progress=False)
    assert (out / "instances_val.json").read_bytes() == annotations.read_bytes()
    build_coco(annotations, images, out, split="val", num_workers=1, progress=False)
    build_coco(annotations, images, out, split="val", num_workers=1, progress=False, overwrite=True)
    assert (out / "instances_val.json").read_bytes() == annotations.read_bytes()


@pytest.mark.timeout(120)
def test_build_coco_leaves_the_annotation_file_in_place_when_it_is_the_copy(tmp_path):
    from cvbench.data.builders.coco_builder import build_coco

    annotations, images = coco_set(tmp_path / "coco")
    content = annotations.read_bytes()
    build_coco(annotations, images, annotations.parent, split="val", num_workers=1,
               progress=False)  # fmt: skip
    assert annotations.read_bytes() == content


# --- K. duplicate names in an archive -----------------------------------------------------


def tar_of(members: list[tuple[str, bytes]]) -> bytes:
    """A tar whose members may repeat a name (`tar_bytes` takes a dict)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("second", ["n01440764_1.JPEG", "sub/n01440764_1.JPEG"])
def test_duplicate_names_in_a_class_tar_are_refused(tmp_path, capsys, second):
    # The fault: the second member silently overwrote the first (and a member in a
    # sub-folder reduces to the same file name).
    inner = tar_of([("n01440764_1.JPEG", jpeg(1)), (second, jpeg(2))])
    tar = tmp_path / "train.tar"
    tar.write_bytes(tar_bytes({"n01440764.tar": inner}))
    code, _, err = run_cli(capsys, "extract-imagenet", tmp_path / "out", "--train-tar", tar,
                           "--no-progress")  # fmt: skip
    assert code == 1
    assert one_line(err) == (
        f"cvbench extract-imagenet: error: {tar} (member n01440764.tar): members "
        f"'n01440764_1.JPEG' and '{second}' are both the image 'n01440764_1.JPEG'; an "
        "ImageNet archive holds each image once: download it again"
    )
    assert not (tmp_path / "out" / "train" / "n01440764").exists()


@pytest.mark.timeout(120)
def test_duplicate_names_in_the_val_tar_are_refused(tmp_path):
    from cvbench.data.acquire.extract_imagenet import extract_val

    name = "ILSVRC2012_val_00000001.JPEG"
    tar = tmp_path / "val.tar"
    tar.write_bytes(tar_of([(name, jpeg(1)), (name, jpeg(2))]))
    labels = {"ILSVRC2012_val_00000001": "n01440764"}
    with pytest.raises(BadFileError) as raised:
        extract_val(tar, tmp_path / "out", labels, progress=False)
    assert str(raised.value) == (
        f"{tar}: members '{name}' and '{name}' are both the image '{name}'; an ImageNet "
        "archive holds each image once: download it again"
    )


# --- bad TFRecord and index files are bad input files (exit 1) ----------------------------


@pytest.mark.backend_agnostic
def test_a_malformed_dali_index_is_a_bad_file_error(tmp_path):
    from cvbench.data.dali_index import index_path, read_index

    shard = tmp_path / "train-00000-of-00001"
    shard.write_bytes(b"")
    index = index_path(shard)
    index.parent.mkdir()
    index.write_bytes(b"0 \xff\n")  # not ASCII: was a UnicodeDecodeError traceback
    with pytest.raises(BadFileError, match=r"DALI index file .* line 1 is not 'offset size'"):
        read_index(shard)


def test_a_truncated_tfrecord_file_is_a_bad_file_error(tmp_path):
    from cvbench.data.read.reader import scan_files

    shard = tmp_path / "train-00000-of-00001"
    shard.write_bytes(b"\x05" + b"\0" * 7)  # a length header, then nothing
    with pytest.raises(BadFileError, match=f"{shard} is truncated"):
        scan_files([str(shard)], skip_corrupt=False, counter=None)


# --- K. names and corrupt data behind a valid header --------------------------------------


def lying_jpeg(seed: int) -> bytes:
    """A JPEG whose headers (SOI ... SOS) are those of a valid image, then garbage scan data
    (no 0xFF byte in it) and the end marker: Pillow decodes it without a word."""
    data = jpeg(seed, (40, 40))
    sos = data.index(b"\xff\xda")
    (length,) = struct.unpack(">H", data[sos + 2 : sos + 4])
    garbage = bytes(range(1, 255)) * 3
    return data[: sos + 2 + length] + garbage + b"\xff\xd9"


@pytest.mark.timeout(120)
def test_a_jpeg_with_garbage_behind_a_valid_header_is_skipped_and_listed(tmp_path):
    # The fault: Pillow filled the scan from garbage and the builders stored it as an image.
    from cvbench.data.builders.imagenet_builder import build_imagenet

    raw = raw_folder(tmp_path / "raw")
    (raw / "train" / "a" / "lying.jpg").write_bytes(lying_jpeg(3))
    summary = build_imagenet(raw, tmp_path / "out", train_shards=1, num_workers=1,
                             progress=False)  # fmt: skip
    assert summary.write.splits["train"].num_records == 4
    [skipped] = summary.write.skipped
    assert skipped.item == "train/a/lying.jpg"
    assert skipped.reason.startswith("corrupt or truncated image: Corrupt JPEG data: ")


@pytest.mark.timeout(120)
def test_file_names_with_a_newline_or_no_utf8_are_built_and_listed_on_one_line(tmp_path):
    # The faults: a name that is not UTF-8 stopped the build (UnicodeEncodeError, exit 2); a
    # newline in a skipped file's name forged a line of the summary.
    from cvbench.data.builders.imagenet_builder import build_imagenet

    raw = raw_folder(tmp_path / "raw")
    (raw / "train" / "a" / os.fsdecode(b"caf\xe9\x80.jpg")).write_bytes(jpeg(5))
    (raw / "train" / "a" / "x\nforged 1.000.jpg").write_bytes(b"no image")
    summary = build_imagenet(raw, tmp_path / "out", train_shards=1, num_workers=1,
                             progress=False)  # fmt: skip
    assert summary.write.splits["train"].num_records == 5
    text = summary.format()
    assert not any(line.startswith("forged") for line in text.splitlines())
    assert "    train: train/a/x\\nforged 1.000.jpg: not an image Pillow can read" in text


@pytest.mark.timeout(120)
def test_build_coco_refuses_an_output_folder_that_is_the_image_folder(tmp_path, capsys):
    annotations, images = coco_set(tmp_path / "coco")
    before = tree(tmp_path)
    code, _, err = run_cli(capsys, "build-coco", images, "--annotations", annotations,
                           "--images", images, "--split", "val", "--workers", "1",
                           "--no-progress")  # fmt: skip
    assert code == 2
    assert one_line(err) == (
        f"cvbench: error: the output folder {images} is the image folder {images} of split "
        "'val': the records would be written among the images; choose an output folder "
        "outside it"
    )
    assert tree(tmp_path) == before


# --- the content of an input file is a bad input file (exit 1), named ---------------------


@pytest.mark.timeout(120)
def test_a_malformed_box_file_is_one_line_and_exit_1(tmp_path, capsys):
    raw = raw_folder(tmp_path / "raw")
    boxes = tmp_path / "boxes.csv"
    boxes.write_text("a0.jpg,0.1,0.1,0.5,0.5\na1.jpg,left,0.1,0.5,0.5\n")
    code, _, err = run_cli(capsys, "build-imagenet", "--raw-dir", raw, "--output-dir",
                           tmp_path / "out", "--boxes", boxes, *BUILD)  # fmt: skip
    assert code == 1  # was 2, as for a bad argument
    assert one_line(err) == (
        f"cvbench build-imagenet: error: {boxes}:2: expected name,xmin,ymin,xmax,ymax, got "
        "['a1.jpg', 'left', '0.1', '0.5', '0.5']"
    )


@pytest.mark.backend_agnostic
def test_a_malformed_detection_in_a_file_is_a_bad_file_error_naming_it(tmp_path):
    from cvbench.detection.coco_eval import evaluate_coco

    gt = {"images": [{"id": 1, "width": 10, "height": 10}], "annotations": [],
          "categories": [{"id": 1, "name": "a"}]}  # fmt: skip
    (tmp_path / "g.json").write_text(json.dumps(gt))
    (tmp_path / "d.json").write_text('[{"image_id": 1}]')
    with pytest.raises(BadFileError, match=r"d.json: malformed detection \{'image_id': 1\}: "):
        evaluate_coco(tmp_path / "d.json", tmp_path / "g.json", print_fn=None)
    (tmp_path / "d.json").write_text('"g.json"')  # a JSON string is no path to follow
    with pytest.raises(BadFileError, match=r"d.json: detections must be a list of dicts, got s"):
        evaluate_coco(tmp_path / "d.json", tmp_path / "g.json", print_fn=None)


@pytest.mark.timeout(120)
def test_a_class_tar_twice_in_the_train_tar_is_refused(tmp_path, capsys):
    # The fault: the second n01440764.tar was skipped as "already done", silently.
    inner = tar_bytes({"n01440764_1.JPEG": jpeg(1)})
    tar = tmp_path / "train.tar"
    tar.write_bytes(tar_of([("n01440764.tar", inner), ("x/n01440764.tar", inner)]))
    code, _, err = run_cli(capsys, "extract-imagenet", tmp_path / "out", "--train-tar", tar,
                           "--no-progress")  # fmt: skip
    assert code == 1
    assert one_line(err) == (
        f"cvbench extract-imagenet: error: {tar}: members 'n01440764.tar' and "
        "'x/n01440764.tar' are both the class tar 'n01440764.tar'; an ImageNet archive holds "
        "each class tar once: download it again"
    )
