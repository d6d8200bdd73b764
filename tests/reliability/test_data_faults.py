"""Bad raw data and bad disks seen by the real `cvbench` data commands (`build-imagenet`,
`build-coco`, `extract-imagenet`, `dali-index`, `eval`): one error line naming the file (and
the entry, link or limit), the exit status (1 for bad input files and `OSError`s, 2 for bad
arguments), no traceback, and every file that was there before byte for byte the same.

Read-only folders are read-only tmpfs mounts and full disks small tmpfs mounts (we run as
root, which ignores permission bits); without root those tests are skipped, saying why.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from small_disk import SmallDisk

# cvbench quiets TensorFlow's start-up messages itself unless TF_CPP_MIN_LOG_LEVEL is set.
ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1")


def cvbench(*argv: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cvbench", *map(str, argv)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )


def error_line(run: subprocess.CompletedProcess, code: int) -> str:
    """The only line of stderr, checked: exit status `code`, no traceback."""
    assert run.returncode == code, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def tree(root: Path) -> dict[str, str]:
    """Every entry under `root` (itself included): file -> SHA-256, link -> target, folder."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "link " + os.readlink(path)
            elif path.is_dir():
                out[rel] = "folder"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def jpeg(seed: int, size: tuple[int, int] = (8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (seed * 40 % 256, 20, 200)).save(buf, format="JPEG")
    return buf.getvalue()


def raw_folder(root: Path) -> Path:
    """train/a and train/b, two tiny JPEGs each."""
    for cls in ("a", "b"):
        folder = root / "train" / cls
        folder.mkdir(parents=True)
        for i in range(2):
            (folder / f"{cls}{i}.jpg").write_bytes(jpeg(i))
    return root


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims `width` x `height` pixels but holds 4 rows: refused by the pixel
    limit from its header, else 'corrupt or truncated' once decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compressobj()
    rows = pixels.compress(b"\0" * (3 * width + 1) * 4) + pixels.flush(zlib.Z_SYNC_FLUSH)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows)


BUILD = ["--train-shards", "1", "--workers", "1", "--no-progress"]


@pytest.fixture
def disk(tmp_path):
    """A tmpfs at tmp_path/mnt: `disk.mount(size)`; unmounted at the end."""
    small = SmallDisk(tmp_path / "mnt")
    try:
        yield small
    finally:
        small.unmount()


def read_only(disk: SmallDisk) -> Path:
    """Remounts the mounted tmpfs read-only (after the test wrote its files there)."""
    result = subprocess.run(["mount", "-o", "remount,ro", str(disk.path)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot remount a tmpfs read-only here: {result.stderr!r}")
    with pytest.raises(OSError):  # the premise: it is read-only, also for root
        (disk.path / "probe").write_bytes(b"")
    return disk.path


# --- 1. build-imagenet: symbolic links and an output folder inside the raw data ----------


def test_a_class_folder_linking_to_its_own_folder_is_refused(tmp_path):
    # The fault: train/x -> . became a class holding a second copy of every image.
    raw = raw_folder(tmp_path / "raw")
    (raw / "train" / "x").symlink_to(".")
    before = tree(tmp_path)
    run = cvbench("build-imagenet", "--raw-dir", raw, "--output-dir", tmp_path / "out", *BUILD)
    assert error_line(run, 1) == (
        f"cvbench build-imagenet: error: {raw}/train/x is a symbolic link to {raw}/train, a "
        "folder that holds it (a loop: every image would be read again); remove it"
    )
    assert tree(tmp_path) == before  # nothing written, not even the output folder


def test_a_class_folder_linking_into_the_raw_data_is_refused(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    (raw / "train" / "c").symlink_to(raw / "train" / "a")  # a second copy of class a
    run = cvbench("build-imagenet", "--raw-dir", raw, "--output-dir", tmp_path / "out", *BUILD)
    assert error_line(run, 1) == (
        f"cvbench build-imagenet: error: {raw}/train/c is a symbolic link to {raw}/train/a, "
        f"inside the raw data folder {raw} (its images would be read twice); remove it (a "
        "class folder may link to a folder outside the raw data)"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("inside", ["train/out", "out", "."])
def test_an_output_folder_inside_the_raw_folder_is_refused(tmp_path, inside):
    # The fault: --output-dir RAW/train/out was accepted; the next run found a class "out".
    raw = raw_folder(tmp_path / "raw")
    out = raw / inside
    before = tree(tmp_path)
    run = cvbench("build-imagenet", "--raw-dir", raw, "--output-dir", out, *BUILD)
    where = "" if inside == "." else "inside "
    assert error_line(run, 2) == (
        f"cvbench: error: the output folder {out} is {where}the raw folder {raw}: what it "
        "writes would become raw data of the next build (a class folder, or images); choose "
        "an output folder outside it"
    )
    assert tree(tmp_path) == before


# --- 2, 3. build-coco: malformed annotation files; eval's category range ------------------


def coco_set(root: Path, **change) -> tuple[Path, Path]:
    """One 16 x 12 image with one box; `change` replaces top-level keys of the JSON."""
    images = root / "images"
    images.mkdir(parents=True)
    (images / "a.jpg").write_bytes(jpeg(1, (16, 12)))
    doc = {
        "images": [{"id": 1, "file_name": "a.jpg", "height": 12, "width": 16}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4], "area": 16}
        ],
        "categories": [{"id": 1, "name": "thing"}],
        **change,
    }
    path = root / "instances_val.json"
    path.write_text(json.dumps(doc))
    return path, images


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"categories": [{"id": 10**9, "name": "thing"}]},
            "categories[0]: category id 1000000000 is not an integer in 1..10000 (the largest "
            "id sets a detector's width: its class index is id - 1); renumber the categories",
        ),
        ({"categories": None}, "'categories' must be a list, got null"),
        ({"categories": [{"name": "thing"}]}, 'categories[0]: no \'id\' in {"name": "thing"}'),
        ({"annotations": None}, "'annotations' must be a list, got null"),
        (
            {"images": [{"file_name": "a.jpg", "height": 12, "width": 16}]},
            'images[0]: no \'id\' in {"file_name": "a.jpg", "height": 12, "width": 16}',
        ),
        (
            {"images": [{"id": 1, "file_name": "../../a.jpg", "height": 12, "width": 16}]},
            'images[0] (id 1): file_name "../../a.jpg" is not a relative path inside the '
            "image folder",
        ),
    ],
    ids=["id-1e9", "categories-null", "category-without-id", "annotations-null",
         "image-without-id", "file-name-outside"],
)  # fmt: skip
def test_a_malformed_coco_file_is_one_line_and_exit_1(tmp_path, change, message):
    annotations, images = coco_set(tmp_path / "coco", **change)
    out = tmp_path / "out"
    before = tree(tmp_path)
    run = cvbench("build-coco", out, "--annotations", annotations, "--images", images,
                  "--split", "val", "--workers", "1", "--no-progress")  # fmt: skip
    assert error_line(run, 1) == f"cvbench build-coco: error: {annotations}: {message}"
    assert tree(tmp_path) == before


@pytest.mark.slow  # imports TensorFlow and builds the detection task
def test_eval_refuses_a_category_id_above_the_limit_before_building_its_range(tmp_path):
    # The fault: a dataset_info.json with category id 1e9 made the detection task build
    # range(1, 1e9 + 1) (index = id - 1). 10001 is just above the limit.
    info = {"format": 1, "kind": "coco", "classes": [{"id": 1}, {"id": 10001}]}
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    run = cvbench("eval", "--model", "ssd320", "--data-dir", tmp_path, "--checkpoint", tmp_path)
    assert error_line(run, 1) == (
        f"cvbench eval: error: {tmp_path}/dataset_info.json is not a valid dataset metadata "
        "file: COCO classes must have int category ids in 1..10000 in increasing order, got "
        "[1, 10001]"
    )


# --- 4. the pixel limit of the builders ---------------------------------------------------


def test_an_image_over_the_pixel_limit_is_skipped_from_its_header(tmp_path):
    # The fault: a 13000 x 13000 PNG (below Pillow's limit) cost 4.6 GB to decode. The file
    # claims that size but holds 4 rows: decoded, it would be skipped as truncated instead.
    raw = raw_folder(tmp_path / "raw")
    (raw / "train" / "a" / "huge.png").write_bytes(png_header(13000, 13000))
    run = cvbench("build-imagenet", "--raw-dir", raw, "--output-dir", tmp_path / "out", *BUILD)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        "  skipped: 1\n    train: train/a/huge.png: image of 13000 x 13000 = 169,000,000 "
        "pixels, over the limit of 64,000,000 (max_pixels, --max-pixels)\n" in run.stdout
    )
    raised = cvbench("build-imagenet", "--raw-dir", raw, "--output-dir", tmp_path / "out2",
                     *BUILD, "--max-pixels", "170000000")  # fmt: skip
    assert raised.returncode == 0, raised.stderr[-3000:]
    assert "train/a/huge.png: corrupt or truncated image" in raised.stdout


def test_build_coco_has_the_pixel_limit_too(tmp_path):
    annotations, images = coco_set(tmp_path / "coco")
    run = cvbench("build-coco", tmp_path / "out", "--annotations", annotations, "--images",
                  images, "--split", "val", "--workers", "1", "--no-progress",
                  "--max-pixels", "100")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        "val: a.jpg (id 1): image of 16 x 12 = 192 pixels, over the limit of 100 "
        "(max_pixels, --max-pixels)" in run.stdout
    )


# --- 5, 6. extract-imagenet: crafted devkits, truncated archives --------------------------


def tar_bytes(members: dict[str, bytes], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def devkit(path: Path, wnids: list[str], ground_truth: list[int]) -> Path:
    """The devkit's layout: data/meta.mat (written with scipy) and the ground-truth ids."""
    import scipy.io

    dtype = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")]
    synsets = np.array([(i + 1, w, f"class {i + 1}", 0) for i, w in enumerate(wnids)], dtype)
    meta = io.BytesIO()
    scipy.io.savemat(meta, {"synsets": synsets})
    data = "ILSVRC2012_devkit_t12/data/"
    members = {
        data + "ILSVRC2012_validation_ground_truth.txt": "".join(
            f"{i}\n" for i in ground_truth
        ).encode(),
        data + "meta.mat": meta.getvalue(),
    }
    path.write_bytes(tar_bytes(members, "w:gz"))
    return path


def val_tar(path: Path, count: int) -> Path:
    names = {f"ILSVRC2012_val_{k:08d}.JPEG": jpeg(k) for k in range(1, count + 1)}
    path.write_bytes(tar_bytes(names))
    return path


def train_tar(path: Path, per_class: dict[str, list[bytes]]) -> Path:
    inner = {
        f"{synset}.tar": tar_bytes({f"{synset}_{i}.JPEG": d for i, d in enumerate(images)})
        for synset, images in per_class.items()
    }
    path.write_bytes(tar_bytes(inner))
    return path


@pytest.mark.parametrize("wnid", ["../../../evil", "/tmp/evil", "n0144076\n"])
def test_a_devkit_wnid_that_is_no_wnid_is_refused_before_writing(tmp_path, wnid):
    # The fault: a meta.mat naming WNID ../../../evil wrote validation images there.
    out = tmp_path / "a" / "b" / "out"
    out.mkdir(parents=True)
    kit = devkit(tmp_path / "devkit.tar.gz", [wnid, "n01443537"], [1, 2])
    tar = val_tar(tmp_path / "val.tar", 2)
    before = tree(tmp_path)
    run = cvbench("extract-imagenet", out, "--val-tar", tar, "--devkit", kit, "--no-progress")
    assert error_line(run, 1) == (
        f"cvbench extract-imagenet: error: {kit}: data/meta.mat: ILSVRC2012_ID 1 has WNID "
        f"{wnid!r}, not a WNID like n01440764"
    )
    assert tree(tmp_path) == before


def test_a_truncated_train_tar_stops_and_keeps_what_was_extracted(tmp_path):
    out = tmp_path / "out"
    tar = train_tar(tmp_path / "train.tar", {"n01440764": [jpeg(1)], "n01443537": [jpeg(2)]})
    assert cvbench("extract-imagenet", out, "--train-tar", tar, "--no-progress").returncode == 0
    # A new archive with a third class, cut in the middle of its class tar.
    data = train_tar(tmp_path / "full.tar", {"n01484850": [jpeg(3, (64, 64))]}).read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:1600])
    before = tree(out)
    run = cvbench("extract-imagenet", out, "--train-tar", cut, "--no-progress")
    assert error_line(run, 1) == (
        f"cvbench extract-imagenet: error: {cut} (member n01484850.tar): not a complete tar "
        "archive (unexpected end of data); download it again"
    )
    assert tree(out) == before  # the two classes, and no partial third one


@pytest.mark.parametrize("kind", ["truncated", "not a tar"])
def test_a_bad_val_tar_is_one_line_and_keeps_earlier_output(tmp_path, kind):
    out = tmp_path / "out"
    tar = train_tar(tmp_path / "train.tar", {"n01440764": [jpeg(1)]})
    assert cvbench("extract-imagenet", out, "--train-tar", tar, "--no-progress").returncode == 0
    labels = tmp_path / "labels.txt"
    labels.write_text("n01440764\nn01440764\n")
    bad = tmp_path / "val.tar"
    if kind == "truncated":
        bad.write_bytes(val_tar(tmp_path / "full.tar", 2).read_bytes()[:700])
        reason = "unexpected end of data"
    else:
        bad.write_bytes(b"<html>not found</html>\n")
        reason = "truncated header"
    before = tree(out)
    run = cvbench("extract-imagenet", out, "--val-tar", bad, "--val-labels", labels,
                  "--no-progress")  # fmt: skip
    assert error_line(run, 1) == (
        f"cvbench extract-imagenet: error: {bad}: not a complete tar archive ({reason}); "
        "download it again"
    )
    after = tree(out)
    assert {k: v for k, v in after.items() if k != "val"} == before  # no staging left either
    assert after.get("val") in (None, "folder") and not list((out / "val").rglob("*"))


def test_a_truncated_devkit_is_one_line(tmp_path):
    kit = devkit(tmp_path / "devkit.tar.gz", ["n01440764"], [1])
    kit.write_bytes(kit.read_bytes()[:100])
    tar = val_tar(tmp_path / "val.tar", 1)
    run = cvbench("extract-imagenet", tmp_path / "out", "--val-tar", tar, "--devkit", kit,
                  "--no-progress")  # fmt: skip
    assert error_line(run, 1) == (
        f"cvbench extract-imagenet: error: {kit}: not a complete tar archive (Compressed file "
        "ended before the end-of-stream marker was reached); download it again"
    )


# --- 7. OSErrors: a file where a folder should be, read-only folders, full disks ----------


def shards(root: Path) -> Path:
    """A built ImageNet-format folder (one train shard) to index."""
    from cvbench.data.builders.imagenet_builder import build_imagenet

    raw = raw_folder(root / "raw")
    out = root / "records"
    build_imagenet(raw, out, train_shards=1, num_workers=1, progress=False)
    return out


@pytest.mark.parametrize("command", ["build-imagenet", "extract-imagenet", "dali-index"])
@pytest.mark.parametrize("what", ["file", "dangling link"])
def test_a_file_where_the_output_folder_should_be(tmp_path, command, what):
    target = tmp_path / "target"
    if what == "file":
        target.write_text("mine\n")
    else:
        target.symlink_to(tmp_path / "nowhere")
    if command == "build-imagenet":
        raw = raw_folder(tmp_path / "raw")
        argv = ["build-imagenet", "--raw-dir", raw, "--output-dir", target, *BUILD]
    elif command == "extract-imagenet":
        tar = train_tar(tmp_path / "train.tar", {"n01440764": [jpeg(1)]})
        argv = ["extract-imagenet", target, "--train-tar", tar, "--no-progress"]
    else:
        argv = ["dali-index", shards(tmp_path), "--index-dir", target, "--no-progress"]
    before = tree(tmp_path)
    is_what = "a file" if what == "file" else "a symbolic link to nothing"
    line = error_line(cvbench(*argv), 1)
    assert line == f"cvbench {command}: error: {target}: is {is_what}, not a folder"
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", ["build-imagenet", "extract-imagenet", "dali-index"])
def test_a_read_only_output_folder(tmp_path, disk, command):
    mnt = disk.mount(1 << 20)
    if command == "dali-index":
        records = shards(tmp_path)
        for p in records.glob("train-*"):
            (mnt / p.name).write_bytes(p.read_bytes())
        argv, failing = ["dali-index", mnt, "--no-progress"], mnt / "idx"
    elif command == "extract-imagenet":
        tar = train_tar(tmp_path / "train.tar", {"n01440764": [jpeg(1)]})
        argv, failing = ["extract-imagenet", mnt, "--train-tar", tar], mnt / ".cvbench-extract"
    else:
        raw = raw_folder(tmp_path / "raw")
        argv = ["build-imagenet", "--raw-dir", raw, "--output-dir", mnt / "out", *BUILD]
        failing = mnt / "out"
    read_only(disk)
    before = tree(mnt)
    line = error_line(cvbench(*argv, "--no-progress"), 1)
    assert line == f"cvbench {command}: error: {failing}: Read-only file system"
    assert tree(mnt) == before


def test_a_full_disk_in_extract_imagenet_names_the_file_and_keeps_finished_classes(tmp_path, disk):
    small = [jpeg(i) for i in range(2)]  # a page each
    noise = np.random.default_rng(0).integers(0, 255, (300, 300, 3), dtype=np.uint8)
    big = io.BytesIO()
    Image.fromarray(noise).save(big, "JPEG", quality=95)  # about 100 KB: it cannot fit
    tar = train_tar(tmp_path / "train.tar", {"n01440764": small, "n01443537": [big.getvalue()]})
    mnt = disk.mount(64 << 10)
    run = cvbench("extract-imagenet", mnt / "out", "--train-tar", tar, "--no-progress")
    partial = mnt / "out" / ".cvbench-extract" / "staging" / "n01443537" / "n01443537_0.JPEG"
    assert error_line(run, 1) == (
        f"cvbench extract-imagenet: error: {partial}: No space left on device"
    )
    first = mnt / "out" / "train" / "n01440764"
    assert [p.read_bytes() for p in sorted(first.iterdir())] == small  # whole and in place
    assert not (mnt / "out" / "train" / "n01443537").exists()
    assert not partial.parent.exists()  # the partial class is gone
    disk.mount(4 << 20)  # space is back: the rerun extracts the rest
    rerun = cvbench("extract-imagenet", mnt / "out", "--train-tar", tar, "--no-progress")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "train: 1 classes (1 images) extracted, 1 already done" in rerun.stdout
    second = mnt / "out" / "train" / "n01443537" / "n01443537_0.JPEG"
    assert second.read_bytes() == big.getvalue()


def test_a_full_disk_in_dali_index_names_the_index_file(tmp_path, disk):
    records = shards(tmp_path)
    mnt = disk.mount(8 << 10)  # two pages: the shard, then the disk is full
    shard = mnt / "train-00000-of-00001"
    shard.write_bytes((records / shard.name).read_bytes())
    assert shard.stat().st_size <= 8 << 10
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # fill what is left
        while os.write(fd, b"x" * 512):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    before = tree(mnt)
    run = cvbench("dali-index", mnt, "--no-progress")
    assert error_line(run, 1) == (
        f"cvbench dali-index: error: {mnt}/idx/{shard.name}.idx: No space left on device"
    )
    after = tree(mnt)
    assert after == {**before, "idx": "folder"}  # no partial index file
