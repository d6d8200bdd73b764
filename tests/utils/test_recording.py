"""`io.when_replaced` / `files.recording`: a file a command leaves is recorded as
cvbench's, also when a signal stops the command right after the file's rename, so a rerun
with `--overwrite` may replace it; and every writer of a recorded output goes through it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from replace_helpers import interrupted_replace

import cvbench
import cvbench.cli
from cvbench.utils import io
from cvbench.utils.files import recording, written_by_cvbench
from cvbench.utils.io import atomic_open, when_replaced, write_json_atomic


def interrupt_after_rename(monkeypatch, target: Path) -> None:
    """`os.replace` onto `target` raises KeyboardInterrupt right after it renamed (a
    Ctrl-C between the rename and whatever the writer does next)."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if Path(dst) == target:
            raise KeyboardInterrupt

    monkeypatch.setattr(io.os, "replace", replace)


def test_when_replaced_calls_once_after_a_write(tmp_path):
    target, seen = tmp_path / "a.json", []
    with when_replaced(target, seen.append):
        write_json_atomic(target, [1])
    assert seen == [target]


def test_when_replaced_calls_on_a_signal_right_after_the_rename(tmp_path, monkeypatch):
    target, seen = tmp_path / "a.json", []
    interrupt_after_rename(monkeypatch, target)
    with pytest.raises(KeyboardInterrupt), when_replaced(target, seen.append):
        write_json_atomic(target, [1])
    assert seen == [target] and target.read_text() == "[\n  1\n]\n"


def test_when_replaced_calls_nothing_when_nothing_new_is_there(tmp_path):
    target, seen = tmp_path / "a.json", []
    target.write_text("the user's")
    with pytest.raises(OSError), when_replaced(target, seen.append), atomic_open(target) as f:
        f.write("half")
        raise OSError(28, "No space left on device")  # before the rename
    with when_replaced(target, seen.append):
        pass  # a writer that refused
    assert seen == [] and target.read_text() == "the user's"


def test_an_error_of_then_on_the_signal_path_keeps_the_signal(tmp_path, monkeypatch):
    target = tmp_path / "a.json"
    interrupt_after_rename(monkeypatch, target)

    def full_disk(path):
        raise OSError(28, "No space left on device")

    with pytest.raises(KeyboardInterrupt), when_replaced(target, full_disk):
        write_json_atomic(target, [1])


@pytest.mark.parametrize("existing", [False, True])
def test_recording_a_replaced_file_records_the_new_one(tmp_path, monkeypatch, existing):
    target = tmp_path / "r.json"
    if existing:  # a rerun with --overwrite replacing the first run's file
        with recording(target):
            write_json_atomic(target, [0])
    interrupt_after_rename(monkeypatch, target)
    with pytest.raises(KeyboardInterrupt), recording(target):
        write_json_atomic(target, [1, 2])
    assert written_by_cvbench(target) and "2" in target.read_text()


def test_the_info_file_of_an_export_is_recorded_on_a_signal_after_its_rename(tmp_path, monkeypatch):
    from cvbench.utils.model_file import ModelInfo, info_file_path, write_info_file

    model = tmp_path / "m.keras"
    info = ModelInfo(task="classification", image_size=(32, 32), class_names=("a", "b"))
    interrupt_after_rename(monkeypatch, info_file_path(model))
    with pytest.raises(KeyboardInterrupt):
        write_info_file(info, model)
    assert written_by_cvbench(info_file_path(model))


def test_predict_coco_json_is_recorded_on_a_signal_after_its_rename(tmp_path, monkeypatch, capsys):
    from inference_models import constant_detector, detector_info

    from cvbench.inference import save_model

    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.full((20, 30, 3), 90, np.uint8)).save(images / "a.png")
    model = save_model(constant_detector(), tmp_path / "det.keras", detector_info())
    coco = tmp_path / "results.json"
    argv = ["predict", str(model), str(images), "--coco-json", str(coco)]
    with monkeypatch.context() as patch:
        interrupt_after_rename(patch, coco)
        assert cvbench.cli.main(argv) == 130  # Ctrl-C's exit status
    capsys.readouterr()
    assert written_by_cvbench(coco)
    assert cvbench.cli.main([*argv, "--overwrite"]) == 0, capsys.readouterr().err


#: The only places that may call `record_output` itself: `recording` (every writer of one
#: file; its fallback for a writer other than `atomic_path`) and `record_tree` (a
#: SavedModel's files, recorded in its staging folder before the swap).
RECORDERS = {"utils/files.py": {"recording", "record_in_place", "record_tree"}}


def _record_output_callers() -> dict[str, set[str]]:
    """Module path -> the functions of it that name `record_output` (a call or a value)."""
    root = Path(cvbench.__file__).parent
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Name) and node.id == "record_output":
                    found.setdefault(path.relative_to(root).as_posix(), set()).add(func.name)
    return found


def test_every_writer_of_a_recorded_output_records_through_recording():
    callers = _record_output_callers()
    assert "recording" in callers.get("utils/files.py", ())  # the scan sees the one owner
    assert callers == RECORDERS


def test_a_record_that_cannot_be_written_leaves_the_old_file_and_no_new_one(tmp_path):
    """The probe's case: `.cvbench-outputs.json` cannot be written (here a folder in its
    place; a full disk alike). The record comes before the rename, so the write fails as a
    whole: the user's earlier file stays, and nothing unrecorded is left to block a rerun."""
    target = tmp_path / "r.json"
    with recording(target):
        write_json_atomic(target, ["first"])
    (tmp_path / ".cvbench-outputs.json").unlink()
    (tmp_path / ".cvbench-outputs.json").mkdir()
    with pytest.raises(OSError), recording(target):
        write_json_atomic(target, ["second"])
    assert "first" in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".cvbench-outputs.json", "r.json"]


def test_predict_draw_on_a_disk_too_full_for_the_record_can_be_rerun(tmp_path, monkeypatch, capsys):
    """The probe's case: the disk fills before `.cvbench-outputs.json` is written. The
    drawing is not left in place unrecorded (which refused every rerun, even with
    --overwrite); the rerun on a freed disk writes and records it."""
    import errno

    from inference_models import channel_classifier, classifier_info

    import cvbench.utils.files as files
    from cvbench.inference import save_model

    modules = tuple(cvbench.cli._COMMAND_MODULES)
    if "cvbench.cli.predict" not in modules:
        monkeypatch.setattr(cvbench.cli, "_COMMAND_MODULES", (*modules, "cvbench.cli.predict"))
    Image.fromarray(np.full((20, 30, 3), 90, np.uint8)).save(tmp_path / "a.png")
    model = save_model(channel_classifier(), tmp_path / "cls.keras", classifier_info())
    out = tmp_path / "drawn"
    argv = ["predict", str(model), str(tmp_path / "a.png"), "--draw", str(out)]

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(files, "_record", full)
        assert cvbench.cli.main(argv) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert not (out / "a.png").exists()
    assert cvbench.cli.main(argv) == 0, capsys.readouterr().err
    assert written_by_cvbench(out / "a.png")


def test_a_staged_file_is_recorded_before_its_swap(tmp_path, monkeypatch):
    """The review's finding: an export renamed into place by its writer (not `atomic_path`)
    was recorded after the rename, so a disk too full for the record left it unrecorded and
    the next `export --overwrite` refused it. Recorded from the staged file first, a full
    disk fails before the swap, and the old export stays."""
    import errno

    import cvbench.utils.files as files

    target = tmp_path / "m.tflite"
    with recording(target):
        write_json_atomic(target, ["old"])
    staged = tmp_path / "staged"
    staged.write_text("new model")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(files, "_record", full)
        with pytest.raises(OSError), recording(target, staged=staged):
            os.replace(staged, target)
    assert "old" in target.read_text() and written_by_cvbench(target)
    with recording(target, staged=staged):
        os.replace(staged, target)
    assert target.read_text() == "new model" and written_by_cvbench(target)


def test_a_write_stopped_between_its_record_and_its_rename_keeps_the_old_record(
    tmp_path, monkeypatch
):
    """The review's finding: the record before the rename replaced the old file's entry; a
    Ctrl-C before the rename left the old file cvbench wrote under a hash that no longer
    matched, and `--overwrite` refused it. The old entry is given back."""
    target = tmp_path / "results.json"
    with recording(target):
        write_json_atomic(target, {"top1": 0.5})
    with (
        interrupted_replace(monkeypatch, target),
        pytest.raises(KeyboardInterrupt),
        recording(target),
    ):
        write_json_atomic(target, {"top1": 0.7})
    assert "0.5" in target.read_text() and written_by_cvbench(target)
