"""`cvbench predict` and `cvbench export` meeting bad model files, bad images, outputs that
would replace what they must not, and disks that refuse writes, through the real process:
one error line (no traceback), its exit code, and every earlier file byte-identical. Refusals
made before Keras is imported take a fraction of a second; the tests that load a model are
slow (TensorFlow starts in each process)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from inference_models import (
    channel_classifier,
    classifier_info,
    constant_detector,
    detector_info,
)
from PIL import Image
from small_disk import SmallDisk, read_only

from cvbench.inference import save_model
from cvbench.utils.files import OUTPUTS_LIST

ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1")


def cvbench(*argv, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cvbench", *map(str, argv)],
        cwd=cwd,
        env=env or ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )


def tree(root: Path) -> dict[str, str]:
    """Every path under `root` with the hash of its bytes (folders: "dir", links: target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = "-> " + os.readlink(path)
        elif path.is_dir():
            out[key] = "dir"
        else:
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def fails_with(run: subprocess.CompletedProcess, code: int, line: str) -> None:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.returncode == code, run.stderr[-3000:]
    assert run.stderr.strip().splitlines() == [line]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """cls.keras and det.keras (tests/inference_models.py), and crafted variants."""
    root = tmp_path_factory.mktemp("models")
    save_model(channel_classifier(), root / "cls.keras", classifier_info())
    save_model(constant_detector(), root / "det.keras", detector_info())
    info = json.loads(zipfile.ZipFile(root / "cls.keras").read("cvbench.json"))
    det_info = json.loads(zipfile.ZipFile(root / "det.keras").read("cvbench.json"))
    variants = {
        "side.keras": ("cls.keras", json.dumps(dict(info, image_size=[100000, 100000]))),
        "list.keras": ("cls.keras", "[1, 2]"),
        "null.keras": ("cls.keras", "null"),
        "lacks.keras": ("cls.keras", json.dumps({"task": "classification"})),
        "det1.keras": ("det.keras", json.dumps(dict(det_info, class_names=["circle"]))),
        # 64 MiB of JSON (trailing blanks) that deflate to 64 KiB: over the 1 MiB limit.
        "bomb.keras": ("cls.keras", json.dumps(info).ljust(64 << 20)),
    }
    for name, (source, entry) in variants.items():
        _rewrite(root / source, root / name, entry=entry)
    _rewrite(root / "cls.keras", root / "noconfig.keras", drop="config.json")
    (root / "notzip.keras").write_bytes(b"plain text, no zip archive")
    return root


def _rewrite(source: Path, dest: Path, *, entry: str | None = None, drop: str = "") -> None:
    with zipfile.ZipFile(source) as a, zipfile.ZipFile(dest, "w") as b:
        for name in a.namelist():
            if name == drop:
                continue
            if name == "cvbench.json" and entry is not None:
                b.writestr(name, entry, compress_type=zipfile.ZIP_DEFLATED)
            else:
                b.writestr(name, a.read(name))


@pytest.fixture
def work(tmp_path) -> Path:
    """A folder of two 20 x 30 images (channel means 10, 30, 20)."""
    images = tmp_path / "images"
    images.mkdir()
    for name in ("a.png", "b.png"):
        Image.fromarray(np.full((20, 30, 3), (10, 30, 20), np.uint8)).save(images / name)
    return tmp_path


@pytest.fixture
def disk(tmp_path):
    small = SmallDisk(tmp_path / "disk")
    yield small
    small.unmount()


# ------------------------------------------------------------------ bad model files (item 3, 5)
MODEL_ERRORS = {
    "side.keras": "cvbench.json image_size [100000, 100000] is over the limit of 8192 pixels "
    "per side; pass --max-input-side N to raise it",
    "bomb.keras": "archive member cvbench.json declares 67108864 bytes, over the limit of "
    "1048576 bytes",
    "list.keras": "cvbench.json is not a JSON object (got a list)",
    "null.keras": "cvbench.json is not a JSON object (got null)",
    "lacks.keras": "cvbench.json lacks class_names, image_size",
}


@pytest.mark.parametrize("name", sorted(MODEL_ERRORS))
def test_a_bad_model_file_is_one_line_and_exit_1(models, work, name):
    before = tree(work)
    run = cvbench("predict", models / name, "images", "--draw", "drawn", cwd=work)
    fails_with(run, 1, f"cvbench predict: error: {models / name}: {MODEL_ERRORS[name]}")
    assert tree(work) == before


def test_a_model_file_that_is_no_keras_archive(models, work):
    for name, reason in (
        ("noconfig.keras", "no config.json in it"),
        ("notzip.keras", "not a zip archive"),
    ):
        run = cvbench("predict", models / name, "images", cwd=work)
        fails_with(
            run, 1, f"cvbench predict: error: {models / name} is not a .keras model file ({reason})"
        )
    run = cvbench("export", models / "notzip.keras", "--output", "out", cwd=work)
    fails_with(
        run,
        1,
        f"cvbench export: error: {models / 'notzip.keras'} is not a .keras model file "
        "(not a zip archive)",
    )


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_an_ssd_with_fewer_class_names_than_outputs(models, work):
    run = cvbench("predict", models / "det1.keras", "images", cwd=work)
    fails_with(
        run,
        1,
        f"cvbench predict: error: {models / 'det1.keras'}: cvbench.json has 1 class name but "
        "the model outputs 2 classes",
    )


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_max_input_side_raises_the_limit(models, work):
    run = cvbench(
        "predict", models / "side.keras", "images", "--max-input-side", "100000", cwd=work
    )
    # Past the limit, the file is still checked against its model (an 8 x 8 input).
    fails_with(
        run,
        1,
        f"cvbench predict: error: {models / 'side.keras'}: cvbench.json image_size "
        "[100000, 100000] differs from the model's input size [8, 8]",
    )


# ------------------------------------------------------------------------ images (items 4, 9)
@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_a_corrupt_image_stops_the_run_with_exit_1_and_writes_nothing(models, work):
    (work / "images" / "c.png").write_bytes(b"not an image")
    before = tree(work)
    argv = ["predict", models / "cls.keras", "images", "--draw", "drawn", "--json"]
    run = cvbench(*argv, cwd=work)
    fails_with(
        run,
        1,
        "cvbench predict: error: images/c.png: not an image Pillow can read; pass "
        "--skip-corrupt to skip such files",
    )
    assert run.stdout == "" and tree(work) == before


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_skip_corrupt_warns_per_file_and_counts(models, work):
    (work / "images" / "c.png").write_bytes(b"not an image")
    run = cvbench(
        "predict",
        models / "cls.keras",
        "images",
        "--draw",
        "drawn",
        "--json",
        "--skip-corrupt",
        cwd=work,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.strip().splitlines() == [
        "cvbench predict: warning: skipped images/c.png: not an image Pillow can read",
        "cvbench predict: skipped 1 bad image file of 3 (--skip-corrupt)",
    ]
    assert [json.loads(x)["source"] for x in run.stdout.splitlines()] == [
        "images/a.png",
        "images/b.png",
    ]
    drawn = sorted(p.name for p in (work / "drawn").iterdir())
    assert drawn == [OUTPUTS_LIST, "a.png", "b.png"]  # with the list of what cvbench wrote


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_an_image_over_the_pixel_limit_is_refused_from_its_header(models, work):
    big = work / "big"
    big.mkdir()
    # 13000 x 13000 = 169 MP, under Pillow's own refusal (2 x 89.5 MP), over the 64 MP default.
    Image.new("1", (13000, 13000)).save(big / "huge.png")
    # The same header with its pixel data cut off: only a header-first check names the size.
    data = (big / "huge.png").read_bytes()
    (big / "cut.png").write_bytes(data[:100])
    for name in ("cut.png", "huge.png"):
        run = cvbench("predict", models / "cls.keras", f"big/{name}", cwd=work)
        fails_with(
            run,
            1,
            f"cvbench predict: error: big/{name}: image of 13000 x 13000 = 169000000 pixels is "
            "over the limit of 64000000 pixels; pass --max-image-pixels N to raise it",
        )


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_max_image_pixels_sets_the_limit(models, work):
    argv = ["predict", models / "cls.keras", "images/a.png", "--max-image-pixels"]
    fails_with(
        cvbench(*argv, "599", cwd=work),
        1,
        "cvbench predict: error: images/a.png: image of 30 x 20 = 600 pixels is over the limit "
        "of 599 pixels; pass --max-image-pixels N to raise it",
    )
    run = cvbench(*argv, "600", cwd=work)
    assert run.returncode == 0 and run.stdout.startswith("images/a.png  green 0.665"), run.stderr


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_wide_pixel_images_reach_the_model_scaled_to_255(work, tmp_path):
    """A classifier whose logit 0 is 0.1 x the red mean (the others 0): its score says what
    the model saw; a black image gives 1/3, a mid-grey one (127.5 -> 128) almost 1."""
    import keras

    model = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)]
    )
    weights = np.zeros((3, 3), "float32")
    weights[0, 0] = 0.1
    model.layers[-1].set_weights([weights, np.zeros(3, "float32")])
    path = save_model(model, tmp_path / "red.keras", classifier_info())
    wide = work / "wide"
    wide.mkdir()
    Image.fromarray(np.full((8, 8), 0.5, np.float32), mode="F").save(wide / "float.tif")
    Image.fromarray(np.full((8, 8), 128, np.int32), mode="I").save(wide / "int32.tif")
    Image.fromarray(np.full((8, 8), 128 * 257, np.uint16)).save(wide / "uint16.png")
    run = cvbench("predict", path, "wide", "--json", "--top-k", "1", cwd=work)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(x) for x in run.stdout.splitlines()]
    # Each decodes to 128: softmax of (12.8, 0, 0) = 1 / (1 + 2 e^-12.8).
    expected = 1 / (1 + 2 * np.exp(-12.8))
    assert {x["source"]: x["classes"][0]["class_name"] for x in lines} == {
        f"wide/{n}": "red" for n in ("float.tif", "int32.tif", "uint16.png")
    }
    for line in lines:
        assert line["classes"][0]["score"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_json_is_strict_when_the_model_outputs_nan(work, tmp_path):
    model = channel_classifier()
    model.get_layer("logits").set_weights([np.full((3, 3), np.nan, "float32"), np.zeros(3)])
    path = save_model(model, tmp_path / "nan.keras", classifier_info())
    run = cvbench("predict", path, "images/a.png", "--json", cwd=work)
    assert run.returncode == 0, run.stderr[-3000:]

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    (line,) = [json.loads(x, parse_constant=refuse) for x in run.stdout.splitlines()]
    # NaN logits rank no class (`classify`, since 8d9617d): strict JSON with no scores at
    # all, where they were three `null` scores ranked as classes 0, 1, 2
    assert line["classes"] == []


# ------------------------------------------------------------------ outputs of predict (item 2)
def test_draw_never_overwrites_an_input_image(models, work):
    before = tree(work)
    for extra in ([], ["--overwrite"]):
        run = cvbench(
            "predict", models / "cls.keras", "images", "--draw", "images", *extra, cwd=work
        )
        fails_with(
            run,
            2,
            "cvbench: error: the drawing images/a.png would overwrite the input image "
            "images/a.png; write it elsewhere",
        )
    # Through a link to the folder, too: the link is resolved once (files.user_output), and the
    # refusal names the target's drawing, then the link and its target.
    (work / "link").symlink_to("images")
    run = cvbench("predict", models / "cls.keras", "images/b.png", "--draw", "link", cwd=work)
    target = (work / "images").resolve()
    fails_with(
        run,
        2,
        f"cvbench: error: the drawing {target}/b.png would overwrite the input image "
        f"images/b.png; write it elsewhere (link is a link to {target})",
    )
    run = cvbench(
        "predict", models / "det.keras", "images", "--coco-json", "images/a.png", cwd=work
    )
    fails_with(
        run,
        2,
        "cvbench: error: the --coco-json file images/a.png would overwrite the input image "
        "images/a.png; write it elsewhere",
    )
    (work / "link").unlink()
    assert tree(work) == before


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_draw_replaces_existing_files_only_with_overwrite(models, work):
    drawn = work / "drawn"
    drawn.mkdir()
    (drawn / "a.png").write_bytes(b"the user's own file")
    before = tree(work)
    run = cvbench("predict", models / "cls.keras", "images", "--draw", "drawn", cwd=work)
    fails_with(
        run, 2, "cvbench: error: the drawing drawn/a.png exists; pass --overwrite to replace it"
    )
    assert tree(work) == before
    # --overwrite replaces only drawings cvbench wrote (#37 F), never the user's file.
    run = cvbench(
        "predict", models / "cls.keras", "images", "--draw", "drawn", "--overwrite", cwd=work
    )
    fails_with(
        run,
        2,
        "cvbench: error: drawn/a.png exists and was not written by cvbench; --overwrite "
        "replaces only cvbench's own outputs: move it or write elsewhere",
    )
    assert tree(work) == before
    (drawn / "a.png").unlink()
    for extra in ([], ["--overwrite"]):  # the first run writes, the second replaces its own
        run = cvbench(
            "predict", models / "cls.keras", "images", "--draw", "drawn", *extra, cwd=work
        )
        assert run.returncode == 0, run.stderr[-3000:]
    assert Image.open(drawn / "a.png").size == (30, 20)
    assert Image.open(drawn / "b.png").size == (30, 20)


# ---------------------------------------------------------------- export --overwrite (item 1)
@pytest.mark.parametrize(
    ("output", "line"),
    [
        (
            ".",
            "cvbench: error: . is the current folder, which is never replaced; nothing was deleted",
        ),
        (
            "..",
            "cvbench: error: .. is a parent of the current folder, which is never replaced; "
            "nothing was deleted",
        ),
        (
            "HOME",
            "cvbench: error: HOME is the home folder, which is never replaced; nothing was deleted",
        ),
        ("/", "cvbench: error: / is the root folder, which is never replaced; nothing was deleted"),
        (
            "images",
            "cvbench: error: the folder images is not a cvbench export; nothing was deleted",
        ),
        (
            "images/a.png",
            "cvbench: error: the file images/a.png is not a cvbench export; nothing was deleted",
        ),
        (  # a link is resolved once (files.user_output): its target is refused, and named
            "link",
            "cvbench: error: the folder WORK/images is not a cvbench export; nothing was deleted "
            "(link is a link to WORK/images)",
        ),
        ("", "cvbench: error: --output is empty: name the folder or file to write"),
    ],
)
def test_export_overwrite_replaces_only_a_previous_export(models, work, output, line):
    (work / "link").symlink_to("images")
    (work / "home").mkdir()
    (work / "home" / "notes.txt").write_text("the user's")
    env = dict(ENV, HOME=str(work / "home"))
    output = "home" if output == "HOME" else output
    before = tree(work)
    run = cvbench(
        "export", models / "det.keras", "--output", output, "--overwrite", cwd=work, env=env
    )
    line = line.replace("error: HOME", "error: home").replace("WORK", str(work.resolve()))
    fails_with(run, 2, line)
    assert tree(work) == before


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_export_overwrite_swaps_atomically(models, work, disk):
    root = disk.mount(16 << 20)
    first = cvbench("export", models / "det.keras", "--output", root / "served", cwd=work)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (root / "served" / "cvbench_export.json").is_file()
    (root / "served" / "variables").touch()  # still an export (what export writes)
    before = tree(root)
    # Room for less than a second copy beside the first: the new export fails half-way.
    used = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    disk.mount(used + 64 * 1024)
    run = cvbench(
        "export", models / "det.keras", "--output", root / "served", "--overwrite", cwd=work
    )
    fails_with(run, 1, f"cvbench export: error: {root / 'served'}: No space left on device")
    assert tree(root) == before
    disk.mount(16 << 20)
    run = cvbench(
        "export", models / "det.keras", "--output", root / "served", "--overwrite", cwd=work
    )
    # the line, the info file beside the export (59bcebb) and the record of cvbench's
    # outputs (`files.record_output`), which this test predated
    wrote = f"wrote {root / 'served'} and its info file {root / 'served_info.json'}"
    assert run.returncode == 0 and run.stdout.strip() == wrote, run.stderr
    listed = sorted(p.name for p in root.iterdir())
    assert listed == [".cvbench-outputs.json", "served", "served_info.json"]  # no temporary


# ----------------------------------------------------------------------- OSErrors (item 6)
@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_os_errors_of_predict_and_export_are_one_line(models, work, tmp_path, disk):
    ro = read_only(tmp_path / "ro")
    try:
        before = tree(work)
        cases = [
            (
                ("predict", models / "det.keras", "images", "--draw", ro / "d"),
                "predict",
                f"{ro / 'd'}: Read-only file system",
            ),
            (
                ("predict", models / "det.keras", "images", "--coco-json", ro / "c.json"),
                "predict",
                f"{ro / 'c.json'}: Read-only file system",
            ),
            (
                ("export", models / "det.keras", "--output", ro / "served"),
                "export",
                f"{ro / 'served'}: Read-only file system",
            ),
            (
                ("predict", models / "det.keras", "images", "--draw", "images/a.png/d"),
                "predict",
                "images/a.png: Not a directory",  # named as given (was made absolute)
            ),
            (
                ("predict", models / "det.keras", "images", "--draw", "images/a.png"),
                "predict",
                "images/a.png: Not a directory",
            ),
            (
                ("export", models / "det.keras", "--output", "images/a.png/served"),
                "export",
                "images/a.png: Not a directory",  # named as given (was made absolute)
            ),
        ]
        for argv, command, line in cases:
            fails_with(cvbench(*argv, cwd=work), 1, f"cvbench {command}: error: {line}")
        assert tree(work) == before
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)
    root = disk.mount(64 * 1024)
    (root / "filler").write_bytes(b"x" * (60 * 1024))
    big = work / "big"
    big.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)).save(
        big / "n.png"
    )
    before = tree(root)
    run = cvbench(
        "predict",
        models / "det.keras",
        "big",
        "--draw",
        root / "d",
        "--coco-json",
        root / "c.json",
        cwd=work,
    )
    assert "Traceback" not in run.stderr and run.returncode == 1, run.stderr[-3000:]
    assert run.stderr.strip().splitlines()[-1].endswith("No space left on device")
    assert len(run.stderr.strip().splitlines()) == 1
    after = tree(root)
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) <= {"d", "c.json", "d/n.png"}
