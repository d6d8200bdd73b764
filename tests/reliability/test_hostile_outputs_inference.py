"""#37, causes F, G, I, K for `cvbench predict` and `cvbench export`: outputs that never
replace the model file or a file cvbench did not write (`--overwrite` included), an export
folder replaced only as cvbench wrote it, a Sequential model exported, SIGTERM during an
export, read-only outputs found before predicting, control characters in file names, and a
run whose every image was skipped. Command runs start a fresh process each (`slow` where
TensorFlow loads a model)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from inference_models import channel_classifier, classifier_info, constant_detector, detector_info
from PIL import Image
from small_disk import read_only

from cvbench.inference import save_model
from cvbench.inference.export import remove_stale_serving_staging
from cvbench.utils.io import HOST_TAG

OTHER_HOST = "0" * 8 if HOST_TAG != "0" * 8 else "1" * 8  # a tag that is not this machine's
ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")


def cvbench(
    *argv, cwd: Path, sigterm_after: str | None = None, signal_name: str = "SIGTERM"
) -> subprocess.CompletedProcess:
    if sigterm_after is None:
        command = [sys.executable, "-m", "cvbench", *map(str, argv)]
        env = ENV
    else:
        from test_hostile_outputs import SIGTERM_AFTER  # this folder's module

        command = [sys.executable, "-c", SIGTERM_AFTER, *map(str, argv)]
        env = dict(ENV, SIGTERM_AFTER=sigterm_after, SIGNAL=signal_name)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def lines(run: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return [line for line in run.stderr.splitlines() if line.startswith("cvbench")]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    save_model(channel_classifier(), root / "cls.keras", classifier_info())
    save_model(constant_detector(), root / "det.keras", detector_info())
    # A Sequential built without an Input, with a batch norm to fold (predict runs it).
    seq = keras.Sequential(
        [
            keras.layers.Conv2D(4, 3, padding="same"),
            keras.layers.BatchNormalization(),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3),
        ]
    )
    seq(np.zeros((1, 8, 8, 3), np.float32))
    save_model(seq, root / "seq.keras", classifier_info())
    return root


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "images").mkdir()
    Image.fromarray(np.full((20, 30, 3), (10, 30, 20), np.uint8)).save(tmp_path / "images/a.png")
    return tmp_path


# ------------------------------------------------------------------------ F: outputs
def test_coco_json_never_replaces_the_model_file(models, work):
    model = work / "det.keras"
    model.write_bytes((models / "det.keras").read_bytes())
    before = model.read_bytes()
    run = cvbench("predict", model, "images", "--coco-json", model, "--overwrite", cwd=work)
    assert run.returncode == 2
    assert lines(run) == [
        f"cvbench: error: {model} is an input of this command ({model}); it is never "
        "overwritten: write elsewhere"
    ]
    assert model.read_bytes() == before


def test_export_overwrite_never_replaces_a_file_by_its_magic_bytes(work):
    (work / "m.keras").write_bytes(b"a model")
    text = work / "notes.tflite"
    text.write_bytes(b"abcdTFL3 the user's notes")
    run = cvbench(
        "export", "m.keras", "--format", "tflite", "--output", text.name, "--overwrite", cwd=work
    )
    assert run.returncode == 2
    assert lines(run) == [
        "cvbench: error: the file notes.tflite is not a cvbench export; nothing was deleted"
    ]
    assert text.read_bytes() == b"abcdTFL3 the user's notes"


@pytest.mark.slow  # exports in a fresh process (TensorFlow)
def test_a_sequential_model_exports_and_a_user_file_in_its_export_is_kept(models, work):
    run = cvbench("export", models / "seq.keras", "--output", "served", cwd=work)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "wrote served and its info file served_info.json"
    again = cvbench("export", models / "seq.keras", "--output", "served", "--overwrite", cwd=work)
    assert again.returncode == 0, again.stderr[-3000:]  # its own export: replaced
    (work / "served" / "assets" / "mine.txt").write_text("the user's")
    run = cvbench("export", models / "seq.keras", "--output", "served", "--overwrite", cwd=work)
    assert run.returncode == 2
    assert lines(run) == [
        "cvbench: error: the folder served is not a cvbench export; nothing was deleted"
    ]
    assert (work / "served" / "assets" / "mine.txt").read_text() == "the user's"


# ------------------------------------------------------------------ G: SIGTERM in export
def test_stale_serving_staging_of_a_killed_export_is_removed(tmp_path):
    done = subprocess.Popen(["true"])
    done.wait()
    stale = tmp_path / f".served.export-{HOST_TAG}-{done.pid}-abc"
    (stale / "saved_model").mkdir(parents=True)
    live = tmp_path / f".served.export-{HOST_TAG}-{os.getpid()}-abc"
    live.mkdir()
    # another machine's or container's export on a shared folder: its pid says nothing here
    elsewhere = tmp_path / f".served.export-{OTHER_HOST}-{done.pid}-abc"
    elsewhere.mkdir()
    (tmp_path / f".other.export-{HOST_TAG}-{done.pid}-x").mkdir()  # another output's
    assert remove_stale_serving_staging(tmp_path / "served") == [stale]
    kept = [live.name, elsewhere.name, f".other.export-{HOST_TAG}-{done.pid}-x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


@pytest.mark.slow  # exports in a fresh process (TensorFlow)
def test_sigterm_during_export_stops_with_one_line_and_leaves_nothing(models, work):
    done = subprocess.Popen(["true"])
    done.wait()
    (work / f".served.export-{HOST_TAG}-{done.pid}-x").mkdir()  # a SIGKILLed export's leftovers
    before = sorted(p.name for p in work.iterdir())
    run = cvbench(
        "export", models / "cls.keras", "--output", "served", cwd=work,
        sigterm_after="cvbench.inference.export._write_saved_model",
    )  # fmt: skip
    assert run.returncode == 143, run.stderr[-3000:]
    assert lines(run) == ["cvbench export: SIGTERM received: stopped; nothing was written"]
    assert sorted(p.name for p in work.iterdir()) == [n for n in before if ".export-" not in n]


# ------------------------------------------------------------------------ I, K: predict
def test_a_read_only_draw_folder_is_found_before_predicting(models, work, tmp_path):
    ro = read_only(tmp_path / "ro")
    try:
        for flag, path in (("--draw", ro / "d"), ("--coco-json", ro / "c.json")):
            model = models / ("cls.keras" if flag == "--draw" else "det.keras")
            run = cvbench("predict", model, "images", flag, path, cwd=work)
            assert run.returncode == 1
            assert lines(run) == [f"cvbench predict: error: {path}: Read-only file system"]
            assert run.stdout == ""  # nothing was predicted
    finally:
        subprocess.run(["umount", str(ro)])


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_control_characters_in_file_names_are_escaped(models, work):
    os.rename(work / "images/a.png", work / "images/a\nforged  red 1.000.png")
    run = cvbench("predict", models / "cls.keras", "images", cwd=work)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines() == [
        "images/a\\nforged  red 1.000.png  green 0.665 | blue 0.245 | red 0.090"
    ]


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_a_run_whose_every_image_is_skipped_fails_and_writes_nothing(models, work):
    (work / "images/a.png").write_bytes(b"not a png")
    (work / "images/b.png").write_bytes(b"not a png either")
    run = cvbench(
        "predict", models / "det.keras", "images", "--skip-corrupt", "--coco-json", "out.json",
        cwd=work,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr[-3000:]
    assert lines(run)[-1] == (
        "cvbench predict: error: all 2 image files were skipped (--skip-corrupt): nothing was "
        "predicted and no output was written"
    )
    assert len(lines(run)) == 3  # a warning per file, then the line
    assert not (work / "out.json").exists()


@pytest.mark.parametrize(("signum", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_stop_signal_while_predicting_is_one_line(models, work, signum, code):
    # Outside training, a signal used to end the process silently (rc -15) or with a
    # KeyboardInterrupt traceback; now every phase of every command stops with one line.
    run = cvbench(
        "predict", models / "cls.keras", "images", cwd=work,
        sigterm_after="cvbench.utils.model_file.require_model_info",
        signal_name=signum,
    )  # fmt: skip
    assert run.returncode == code, run.stderr[-3000:]
    assert lines(run) == [f"cvbench predict: {signum} received: stopped; nothing was written"]
    assert run.stdout == ""


@pytest.mark.slow  # loads the model in a fresh process (TensorFlow)
def test_an_error_line_naming_a_file_with_a_newline_stays_one_line(models, work):
    (work / "images/a.png").unlink()
    (work / "images/a\nforged line.png").write_bytes(b"not a png")
    run = cvbench("predict", models / "cls.keras", "images", cwd=work)
    assert run.returncode == 1, run.stderr[-3000:]
    assert lines(run) == [
        "cvbench predict: error: images/a\\nforged line.png: not an image Pillow can read; "
        "pass --skip-corrupt to skip such files"
    ]
    assert not any(line.startswith("forged") for line in run.stderr.splitlines())
