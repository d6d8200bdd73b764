"""Crafted model files, checkpoints, weight files and images against the readers of inference,
evaluation and resuming (#37, causes C, D, E and K): each is refused with one line naming the
file (a `BadFileError`: exit 1 in the command), before it can hang the process or make it
allocate what the file only declares, and `--resume` falls back to the previous checkpoint.

The files are made by the `make_*` functions below (also used to measure the peak memory of
each case before and after the fix: the figures are in docs/reliability.md). The API tests take
a fraction of a second; the `cvbench` runs start TensorFlow (`slow`)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info
from PIL import Image

from cvbench.inference import save_model
from cvbench.inference.images import (
    MAX_IMAGE_BYTES,
    ImageFileError,
    iter_batches,
    read_image,
)
from cvbench.training.checkpoint import (
    CheckpointManager,
    find_checkpoint,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
)
from cvbench.utils.errors import BadFileError
from cvbench.utils.model_file import ModelInfo, read_model_info

pytestmark = pytest.mark.backend_agnostic

DEEP = b"[" * 100_000  # Python's parser recurses: RecursionError near 1000 levels
ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
ENV.setdefault("KERAS_BACKEND", "tensorflow")


# --------------------------------------------------------------------------- crafted files
def make_checkpoint(path: Path, *, meta: bytes | None = None) -> Path:
    """A checkpoint of one variable `[1.5, 1.5]`; with `meta`, its metadata replaced."""
    import keras

    save_checkpoint(path, model_variables=[keras.Variable(np.full(2, 1.5, np.float32))])
    if meta is not None:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        arrays["meta"] = np.frombuffer(meta, np.uint8)
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    return path


def make_npz_total_bomb(path: Path, *, members: int = 16, member_mib: int = 60) -> Path:
    """An `.npz` whose members each pass the per-member checks (deflate under 1032:1, headers
    matching their data) and together declare `members` x `member_mib` MiB of float32 zeros
    from about a thousandth of that in the file."""
    count = member_mib * 2**20 // 4
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (count,)}
    )
    zeros = bytes(2**20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for i in range(members):
            with archive.open(f"conv1.weight{i}.npy", "w", force_zip64=True) as member:
                member.write(header.getvalue())
                for _ in range(member_mib):
                    member.write(zeros)
    return path


def make_npz_huge_header(path: Path, *, elements: int = 2**36) -> Path:
    """An `.npz` of 12 bytes of data under a `.npy` header asking for `elements` float32
    (256 GiB by default)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (elements,)}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("conv1.weight.npy", header.getvalue() + bytes(12))
    return path


def make_keras_total_bomb(source: Path, path: Path, *, members: int = 40) -> Path:
    """`source` (a `.keras`) with `members` extra members of 60 MiB of zeros each, deflated:
    each under the per-member limits (64 MiB), together 2.4 GB from 2.4 MB."""
    with zipfile.ZipFile(source) as a, zipfile.ZipFile(path, "w") as b:
        for name in a.namelist():
            b.writestr(name, a.read(name))
        zeros = bytes(2**20)
        for i in range(members):
            entry = zipfile.ZipInfo(f"assets/pad{i}.bin")
            entry.compress_type = zipfile.ZIP_DEFLATED
            with b.open(entry, "w") as member:
                for _ in range(60):
                    member.write(zeros)
    return path


def make_keras_entry(source: Path, path: Path, entry: bytes) -> Path:
    """`source` (a `.keras`) with its `cvbench.json` replaced by `entry`."""
    with zipfile.ZipFile(source) as a, zipfile.ZipFile(path, "w") as b:
        for name in a.namelist():
            b.writestr(name, entry if name == "cvbench.json" else a.read(name))
    return path


def make_free_size_model(path: Path, *, side: int = 8192) -> Path:
    """A classifier taking `(None, None, 3)` whose `cvbench.json` says `side` x `side`: the
    model cannot say the size is wrong, the info alone sets what each image becomes."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((None, None, 3)),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3, name="logits"),
        ]
    )
    info = ModelInfo(task="classification", class_names=("r", "g", "b"), image_size=(side, side))
    return save_model(model, path, info)


def make_float_tiff(path: Path, *, side: int = 8000) -> Path:
    """A `side` x `side` float32 TIFF of 0.5 (64 MP at 8000), deflated to a few hundred KB."""
    Image.fromarray(np.full((side, side), 0.5, np.float32), mode="F").save(
        path, compression="tiff_deflate"
    )
    return path


def make_sparse_jpeg(path: Path, *, size: int = 2 << 30) -> Path:
    """A valid 20 x 30 JPEG followed by a hole: `size` bytes long, nothing on disk."""
    buffer = io.BytesIO()
    Image.fromarray(np.full((20, 30, 3), 90, np.uint8)).save(buffer, "JPEG")
    path.write_bytes(buffer.getvalue())
    os.truncate(path, size)
    return path


def make_lying_jpeg(path: Path, *, cut: bool = False) -> Path:
    """A 64 x 96 JPEG whose headers (SOI, SOF, Huffman tables, SOS) are intact and whose scan
    data is garbage (or, with `cut`, ends 40 bytes into the scan): libjpeg warns, Pillow
    decodes it without a word, filling the rest."""
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (64, 96, 3), dtype=np.uint8)).save(buffer, "JPEG")
    data = buffer.getvalue()
    scan = data.find(b"\xff\xda") + 20
    if cut:
        path.write_bytes(data[: scan + 20] + b"\xff\xd9")
    else:
        noise = rng.integers(0, 255, len(data) - scan - 2, dtype=np.uint8).tobytes()
        path.write_bytes(data[:scan] + noise.replace(b"\xff", b"\x00") + b"\xff\xd9")
    return path


def peak_rss_mib(setup: str, code: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """What a fresh Python process running `setup` (imports) then `code` holds at most
    (`ru_maxrss`, MiB) after `setup` and after `code`, and the process."""
    here = Path(__file__).resolve().parents[1]
    script = "\n".join([
        f"import resource, sys; sys.path.insert(0, {str(here)!r})",
        textwrap.dedent(setup),
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss",
        textwrap.dedent(code),
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss",
        "print(base, peak)",
    ])  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=ENV, timeout=300
    )
    base, peak = (int(v) / 1024 for v in (run.stdout.split() or ["0", "0"])[-2:])
    return base, peak, run


# ------------------------------------------------------------------------- checkpoints (C, E)
def test_deeply_nested_checkpoint_metadata_is_a_bad_file_not_a_recursion_error(tmp_path):
    path = make_checkpoint(tmp_path / "ckpt-0000000002.npz", meta=DEEP)
    why = f"{path} is not a valid checkpoint: its metadata: JSON nested 100000 levels deep"
    for read in (load_checkpoint, read_checkpoint_meta):
        with pytest.raises(BadFileError, match=f"^{why}, over the limit of 200$"):
            read(path)


def test_resume_skips_a_deep_json_and_a_fifo_checkpoint_for_the_previous_one(tmp_path):
    older = make_checkpoint(tmp_path / "ckpt-0000000001.npz")
    make_checkpoint(tmp_path / "ckpt-0000000002.npz", meta=DEEP)
    os.mkfifo(tmp_path / "ckpt-0000000003.npz")  # opened for reading, it would block forever
    with pytest.warns(UserWarning) as warned:
        found = CheckpointManager(tmp_path).latest()
    assert found[0] == older and found[2]["model/0"].tolist() == [1.5, 1.5]
    assert [str(w.message) for w in warned] == [
        f"skipping checkpoint: checkpoint {tmp_path}/ckpt-0000000003.npz is a FIFO (named "
        "pipe), not a regular file",
        f"skipping checkpoint: {tmp_path}/ckpt-0000000002.npz is not a valid checkpoint: its "
        "metadata: JSON nested 100000 levels deep, over the limit of 200",
    ]


def test_a_checkpoint_argument_that_is_a_fifo_is_refused_unopened(tmp_path):
    os.mkfifo(tmp_path / "ckpt.npz")
    for read in (find_checkpoint, load_checkpoint, read_checkpoint_meta):
        with pytest.raises(BadFileError, match="ckpt.npz is a FIFO .named pipe., not a regular"):
            read(tmp_path / "ckpt.npz")


# ------------------------------------------------------------------------ weight files (D, E)
def test_npz_weights_get_the_checkpoint_checks(tmp_path):
    from cvbench.models.torchvision_weights import read_state_dict

    huge = make_npz_huge_header(tmp_path / "huge.npz")
    with pytest.raises(BadFileError) as err:
        read_state_dict(huge)
    assert str(err.value) == (
        f"{huge} is not a valid weights file: member conv1.weight.npy has a .npy header asking "
        "for shape (68719476736,) of float32 (256.0 GiB), but holds 12 bytes of data"
    )
    # 4 members of 60 MiB, each deflated about 1000:1 (under deflate's 1032:1): 240 MiB from
    # 240 KiB, over 100 times the file (and over 64 MiB)
    bomb = make_npz_total_bomb(tmp_path / "bomb.npz", members=4)
    # 4 x (60 MiB of data + a 128-byte .npy header) = 251658752 bytes
    why = r"bomb.npz is not a valid weights file: its 4 archive members declare 251658752 bytes"
    with pytest.raises(BadFileError, match=f"{why} together, over the limit of 67108864 bytes"):
        read_state_dict(bomb)
    os.mkfifo(tmp_path / "fifo.npz")
    with pytest.raises(BadFileError, match="weights file .*fifo.npz is a FIFO"):
        read_state_dict(tmp_path / "fifo.npz")


def test_load_weights_refuses_a_crafted_npz_as_a_bad_file(tmp_path):
    from cvbench.models import load_weights, resnet18

    model = resnet18(num_classes=4, input_shape=(32, 32, 3))
    before = [v.numpy().copy() for v in model.weights[:3]]
    huge = make_npz_huge_header(tmp_path / "huge.npz")
    with pytest.raises(BadFileError, match="huge.npz is not a valid weights file: member"):
        load_weights(model, huge, match="name")
    unknown = tmp_path / "w.bin"
    unknown.write_bytes(b"not weights")
    with pytest.raises(BadFileError, match="is neither a keras.applications-style"):
        load_weights(model, unknown, match="name")
    assert all((v.numpy() == b).all() for v, b in zip(model.weights[:3], before, strict=True))


def test_a_legacy_h5_dataset_declaring_more_than_it_stores_is_refused(tmp_path):
    import h5py

    from cvbench.models import load_weights, resnet18

    path = tmp_path / "w.h5"
    with h5py.File(path, "w") as f:  # the legacy layout: layer_names, then weight_names
        f.attrs["layer_names"] = [b"conv1_conv"]
        layer = f.create_group("conv1_conv")
        layer.attrs["weight_names"] = [b"conv1_conv/kernel:0"]
        # 4 GiB declared, chunked and compressed, never written: 0 bytes stored in the file
        layer.create_dataset("conv1_conv/kernel:0", shape=(2**30,), dtype="f4",
                             chunks=(2**20,), compression="gzip")  # fmt: skip
    assert path.stat().st_size < 10_000
    model = resnet18(num_classes=4, input_shape=(32, 32, 3))
    with pytest.raises(BadFileError) as err:
        load_weights(model, path, match="name")
    assert str(err.value) == (
        f"{path}: dataset /conv1_conv/conv1_conv/kernel:0 declares 4.0 GiB of shape "
        "(1073741824,) but stores 0 bytes, more than compression can give (1032:1)"
    )


# -------------------------------------------------------------------------- model files (D, E)
@pytest.fixture(scope="module")
def cls_keras(tmp_path_factory) -> Path:
    return save_model(
        channel_classifier(), tmp_path_factory.mktemp("m") / "cls.keras", classifier_info()
    )


def test_a_keras_file_whose_members_together_declare_gigabytes_is_refused(cls_keras, tmp_path):
    bomb = make_keras_total_bomb(cls_keras, tmp_path / "bomb.keras", members=4)
    with pytest.raises(BadFileError) as err:
        read_model_info(bomb)
    members = zipfile.ZipFile(cls_keras).infolist()
    declared = 4 * 60 * 2**20 + sum(m.file_size for m in members)
    assert str(err.value) == (
        f"{bomb}: its {4 + len(members)} archive members declare {declared} bytes together, "
        f"over the limit of 67108864 bytes (100x the file's {bomb.stat().st_size}; a zip bomb?)"
    )


def test_deep_json_in_cvbench_json_is_a_bad_file(cls_keras, tmp_path):
    deep = make_keras_entry(cls_keras, tmp_path / "deep.keras", DEEP)
    with pytest.raises(BadFileError) as err:
        read_model_info(deep)
    assert str(err.value) == (
        f"{deep}: cvbench.json: JSON nested 100000 levels deep, over the limit of 200"
    )


def test_a_model_file_that_is_a_fifo_is_refused_unopened(tmp_path):
    from cvbench.utils.model_file import load_model

    os.mkfifo(tmp_path / "m.keras")
    for read in (read_model_info, load_model):
        with pytest.raises(BadFileError, match="model file .*m.keras is a FIFO"):
            read(tmp_path / "m.keras")


def test_predict_of_a_model_file_that_is_a_fifo_is_one_line_and_exit_1(tmp_path, capsys):
    # predict's `is_file()` pre-check called a FIFO "no model file" (exit 2): the file exists,
    # and the layer names what it is (a bad input file: exit 1).
    from cvbench.cli import main

    os.mkfifo(tmp_path / "m.keras")
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    assert main(["predict", str(tmp_path / "m.keras"), str(tmp_path / "a.png")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    fifo = f"{tmp_path}/m.keras is a FIFO (named pipe), not a regular file"
    assert err == [f"cvbench predict: error: model file {fifo}"]


def test_export_markers_fifos_and_deep_json_are_bad_files(tmp_path):
    from cvbench.inference.export_info import read_export_info

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "cvbench_export.json").write_bytes(DEEP)
    with pytest.raises(BadFileError, match="cvbench_export.json: JSON nested 100000 levels"):
        read_export_info(folder)
    (folder / "cvbench_export.json").unlink()
    os.mkfifo(folder / "cvbench_export.json")
    with pytest.raises(BadFileError, match="export marker .* is a FIFO"):
        read_export_info(folder)
    os.mkfifo(tmp_path / "m.tflite")
    with pytest.raises(BadFileError, match="TFLite file .*m.tflite is a FIFO"):
        read_export_info(tmp_path / "m.tflite")


# -------------------------------------------------------------------------------- images (C, K)
def test_image_files_that_are_not_regular_or_too_big_are_refused_unread(tmp_path):
    (tmp_path / "zero.jpg").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.jpg")
    sparse = make_sparse_jpeg(tmp_path / "sparse.jpg")
    expected = {
        "zero.jpg": f"image {tmp_path}/zero.jpg is a character device, not a regular file",
        "fifo.jpg": f"image {tmp_path}/fifo.jpg is a FIFO (named pipe), not a regular file",
        "sparse.jpg": f"image {sparse} has {2 << 30} bytes, over the limit of "
        f"{MAX_IMAGE_BYTES} bytes",
    }
    for name, message in expected.items():
        with pytest.raises(ImageFileError) as err:
            read_image(tmp_path / name, info=classifier_info())
        assert str(err.value) == message
    skipped = []
    batches = iter_batches(
        [str(tmp_path / n) for n in expected],
        classifier_info(),
        batch_size=2,
        skip_corrupt=True,
        on_skip=skipped.append,
    )
    assert list(batches) == [] and [str(e) for e in skipped] == list(expected.values())


@pytest.mark.parametrize("cut", [False, True], ids=["garbage scan", "scan cut short"])
def test_a_jpeg_with_a_lying_header_is_corrupt_not_classified(tmp_path, cut):
    path = make_lying_jpeg(tmp_path / "lying.jpg", cut=cut)
    with Image.open(path) as im:
        im.load()  # Pillow alone decodes it without a word
    why = "premature end of data segment" if cut else r"\d+ extraneous bytes before marker 0xd9"
    for info in (classifier_info(), None):
        with pytest.raises(ImageFileError, match=f"lying.jpg: corrupt JPEG data .Corrupt JPEG "
                           f"data: {why}.$"):  # fmt: skip
            read_image(path, info=info)


# --------------------------------------------------------------------------- memory budgets (D)
def test_a_free_size_model_with_a_huge_image_size_is_refused_before_any_image(tmp_path):
    model = make_free_size_model(tmp_path / "free.keras")
    Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(tmp_path / "a.png")
    from cvbench.inference import classify

    with pytest.raises(BadFileError) as err:
        classify(model, [str(tmp_path / "a.png")] * 2)
    assert str(err.value) == (
        "the model's input of 8192 x 8192 = 67108864 pixels (its ModelInfo image_size) is over "
        "the limit of 64000000 pixels per batch; pass max_image_pixels=N to raise it"
    )


def test_batches_hold_at_most_max_image_pixels_model_pixels():
    info = ModelInfo(task="classification", class_names=("a",), image_size=(10, 20))
    images = np.zeros((7, 10, 20, 3), np.uint8)
    sizes = [len(b.sources) for b in iter_batches(images, info, batch_size=8, max_image_pixels=600)]
    assert sizes == [3, 3, 1]  # 600 // (10 * 20) = 3 images a batch


@pytest.mark.slow  # decodes 64 megapixels in a fresh process
def test_a_64_megapixel_float_tiff_stays_within_the_stated_budget(tmp_path):
    from cvbench.inference.images import IMAGE_BYTES_PER_PIXEL, MAX_IMAGE_PIXELS

    tiff = make_float_tiff(tmp_path / "f.tif")
    assert tiff.stat().st_size < 1 << 20  # a few hundred KB on disk
    setup = """
        from cvbench.inference.images import iter_batches
        from inference_models import classifier_info
    """
    base, peak, run = peak_rss_mib(
        setup,
        f"""
        batch = next(iter_batches([{str(tiff)!r}], classifier_info(), batch_size=1))
        assert batch.images[0, 0, 0].tolist() == [128.0, 128.0, 128.0], batch.images[0, 0, 0]
    """,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    budget = IMAGE_BYTES_PER_PIXEL * MAX_IMAGE_PIXELS / 2**20  # 1221 MiB
    assert peak - base < budget, (base, peak)  # 2.5 GB before #37


# --------------------------------------------------------------------------- the command (all)
def cvbench(*argv, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cvbench", *map(str, argv)],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )


def one_line(run: subprocess.CompletedProcess, code: int) -> str:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.returncode == code, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("cvbench")]
    assert len(lines) == 1, run.stderr[-3000:]
    return lines[0]


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_predict_names_each_hostile_image_and_skip_corrupt_counts_them(cls_keras, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.full((20, 30, 3), 40, np.uint8)).save(images / "a.png")
    (images / "zero.jpg").symlink_to("/dev/zero")
    make_lying_jpeg(images / "lying.jpg")
    make_sparse_jpeg(images / "sparse.jpg")
    run = cvbench("predict", cls_keras, "images/zero.jpg", "images/a.png", cwd=tmp_path)
    assert one_line(run, 1) == (
        "cvbench predict: error: image images/zero.jpg is a character device, not a regular "
        "file; pass --skip-corrupt to skip such files"
    )
    run = cvbench("predict", cls_keras, "images/lying.jpg", cwd=tmp_path)
    assert one_line(run, 1).startswith(
        "cvbench predict: error: images/lying.jpg: corrupt JPEG data (Corrupt JPEG data: "
    )
    names = ["images/a.png", "images/lying.jpg", "images/sparse.jpg", "images/zero.jpg"]
    run = cvbench("predict", cls_keras, *names, "--json", "--skip-corrupt", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [json.loads(line)["source"] for line in run.stdout.splitlines()] == ["images/a.png"]
    lines = [line for line in run.stderr.splitlines() if line.startswith("cvbench")]
    skipped = "cvbench predict: warning: skipped"
    assert lines[0].startswith(f"{skipped} images/lying.jpg: corrupt JPEG data (Corrupt JPEG")
    assert lines[1:] == [
        f"{skipped} image images/sparse.jpg has {2 << 30} bytes, over the limit of "
        f"{MAX_IMAGE_BYTES} bytes",
        f"{skipped} image images/zero.jpg is a character device, not a regular file",
        "cvbench predict: skipped 3 bad image files of 4 (--skip-corrupt)",
    ]


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_eval_of_a_crafted_checkpoint_is_one_line_and_exit_1(tmp_path):
    deep = make_checkpoint(tmp_path / "deep.npz", meta=DEEP)
    argv = ["eval", "--model", "resnet18", "--image-size", "32", "--num-classes", "4"]
    run = cvbench(*argv, "--synthetic", "--batch-size", "2", "--checkpoint", deep, cwd=tmp_path)
    assert one_line(run, 1) == (
        f"cvbench eval: error: {deep} is not a valid checkpoint: its metadata: JSON nested "
        "100000 levels deep, over the limit of 200"
    )


@pytest.mark.slow  # two training runs of a tiny ResNet-18 (TensorFlow)
def test_resume_falls_back_past_a_fifo_and_a_deep_json_checkpoint(tmp_path):
    flags = [
        "train", "--model", "resnet18", "--image-size", "32", "--num-classes", "4",
        "--synthetic", "--batch-size", "2", "--steps-per-epoch", "2", "--epochs", "1",
        "--eval", "none", "--no-progress", "--burn-in", "0", "--seed", "0", "--precision",
        "fp32", "--no-export", "--log-dir", "run",
    ]  # fmt: skip
    first = cvbench(*flags, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoints = tmp_path / "run" / "checkpoints"
    make_checkpoint(checkpoints / "ckpt-0000000003.npz", meta=DEEP)
    os.mkfifo(checkpoints / "ckpt-0000000004.npz")
    resumed = cvbench(*flags, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Traceback" not in resumed.stderr
    fifo, deep = "run/checkpoints/ckpt-0000000004.npz", "run/checkpoints/ckpt-0000000003.npz"
    warnings = [line for line in resumed.stderr.splitlines() if "skipping checkpoint" in line]
    # cvbench's own warnings are one line each in the CLI (`cli.warning_lines`)
    assert warnings == [
        f"cvbench train: warning: skipping checkpoint: checkpoint {fifo} is a FIFO (named "
        "pipe), not a regular file",
        f"cvbench train: warning: skipping checkpoint: {deep} is not a valid checkpoint: its "
        "metadata: JSON nested 100000 levels deep, over the limit of 200",
    ]
    assert "resumed from run/checkpoints/ckpt-0000000002.npz" in resumed.stdout


@pytest.mark.slow  # starts the training command (TensorFlow)
def test_train_weights_of_a_crafted_npz_is_one_line_and_exit_1(tmp_path):
    huge = make_npz_huge_header(tmp_path / "huge.npz")
    flags = [
        "train", "--model", "resnet18", "--image-size", "32", "--num-classes", "4",
        "--synthetic", "--batch-size", "2", "--steps-per-epoch", "1", "--epochs", "1",
        "--eval", "none", "--no-progress", "--no-export",
    ]  # fmt: skip
    run = cvbench(*flags, "--weights", huge, cwd=tmp_path)
    assert one_line(run, 1) == (
        f"cvbench train: error: {huge} is not a valid weights file: member conv1.weight.npy has "
        "a .npy header asking for shape (68719476736,) of float32 (256.0 GiB), but holds 12 "
        "bytes of data"
    )
