"""The probe of 2026-12-05 (docs/reliability.md, section L), the cases the fork-server
harness cannot make (tests/hostile/commands.py `PROBE` has the others): a full disk and a
read-only folder under an output, two builds into one folder at once, SIGINT during
`export` and `predict --draw`, a resume whose checkpoint folder is read-only. Each: the exit
code, one line naming the file, no traceback, nothing half-written, earlier files
byte-identical. Mounting needs root; elsewhere these tests skip, saying why."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from inference_models import channel_classifier, classifier_info
from small_disk import SmallDisk, read_only
from test_hostile_outputs import SIGTERM_AFTER

from cvbench.inference import save_model

ENV = {k: v for k, v in os.environ.items() if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL")}
ENV.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
F = ["--model", "resnet18", "--image-size", "32", "--num-classes", "4", "--synthetic",
     "--batch-size", "2", "--steps-per-epoch", "2", "--epochs", "2", "--precision", "fp32",
     "--no-progress", "--log-every", "0", "--seed", "0", "--eval", "none", "--no-export",
     "--checkpoint-every", "1"]  # fmt: skip


def start(*argv, cwd: Path, signal_after: str | None = None, signal: str = "SIGINT"):
    if signal_after is None:
        command, env = [sys.executable, "-m", "cvbench", *map(str, argv)], ENV
    else:
        command = [sys.executable, "-c", SIGTERM_AFTER, *map(str, argv)]
        env = dict(ENV, SIGTERM_AFTER=signal_after, SIGNAL=signal)
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def cvbench(*argv, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    proc = start(*argv, cwd=cwd, **kwargs)
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def lines(run) -> list[str]:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return [line for line in run.stderr.splitlines() if line.startswith("cvbench")]


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def work(tmp_path) -> Path:
    from PIL import Image

    save_model(channel_classifier(), tmp_path / "cls.keras", classifier_info())
    (tmp_path / "images").mkdir()
    Image.new("RGB", (30, 20), (10, 30, 20)).save(tmp_path / "images" / "a.png")
    return tmp_path


EVAL = ["eval", "--checkpoint", "cls.keras", "--synthetic", "--model", "resnet18",
        "--image-size", "8", "--num-classes", "3", "--batch-size", "2"]  # fmt: skip


@pytest.mark.slow
def test_outputs_on_a_full_disk_are_one_line_naming_them_and_leave_nothing(work):
    disk = SmallDisk(work / "full")
    try:
        full = disk.mount(64 << 10)
        (full / "filler").write_bytes(b"\0" * (64 << 10))  # every block taken
        printed = "; the results were printed above"  # eval's, on stdout before the write
        cases = {
            "x.json": ([*EVAL, "--json", "full/x.json"], printed),  # said "No space left..."
            "m.tflite": (
                ["export", "cls.keras", "--format", "tflite", "--output", "full/m.tflite"],
                "",
            ),
        }
        for name, (argv, more) in cases.items():
            run = cvbench(*argv, cwd=work)
            command = argv[0]
            assert run.returncode == 1, run.stderr[-3000:]
            assert lines(run) == [
                f"cvbench {command}: error: full/{name}: No space left on device{more}"
            ]
            assert sorted(p.name for p in full.iterdir()) == ["filler"]  # no temporaries
    finally:
        disk.unmount()


@pytest.mark.slow
def test_a_json_output_in_a_read_only_folder_names_it_not_its_temporary(work):
    # Before: "cvbench eval: error: /abs/ro/.x.json.cvbench-<host>-<pid>-<r>.tmp.json: ..."
    ro = read_only(work / "ro")
    try:
        run = cvbench(*EVAL, "--json", "ro/x.json", cwd=work)
        assert run.returncode == 1
        assert lines(run) == ["cvbench eval: error: ro/x.json: Read-only file system"]
    finally:
        subprocess.run(["umount", str(ro)], check=False)


@pytest.mark.slow
def test_eval_json_under_a_file_is_refused_before_evaluating(work):
    # Before: `cvbench: error: pfile: File exists`, exit 2, after the evaluation ran.
    (work / "pfile").write_text("a user's file")
    run = cvbench(*EVAL, "--json", "pfile/x.json", cwd=work)
    assert run.returncode == 1
    assert lines(run) == ["cvbench eval: error: pfile: Not a directory"]
    assert run.stdout == ""  # found before evaluating: no results printed


@pytest.mark.slow
def test_two_exports_to_one_path_at_once_keep_one_export_and_refuse_the_other(work):
    # Before: both said "wrote same", the second replacing the first unasked.
    argv = ["export", "cls.keras", "--format", "tflite", "--output", "same.tflite"]
    runs = [start(*argv, cwd=work) for _ in range(2)]
    results = sorted((p.wait(timeout=600), *p.communicate()) for p in runs)
    codes = [code for code, _, _ in results]
    errors = [line for _, _, err in results for line in err.splitlines() if "cvbench" in line]
    if codes == [0, 2]:  # the second found the first's export in place
        assert errors in (
            [f"cvbench: error: {work / 'same.tflite'} appeared while this export was written "
             "(another export to it at the same time?); it was left as it is: pass "
             "--overwrite to replace it, or export elsewhere"],
            ["cvbench: error: same.tflite exists; pass --overwrite to replace it"],
        ), errors  # fmt: skip
    else:  # both cannot succeed without --overwrite, nor both fail
        pytest.fail(f"exit codes {codes}: {errors}")
    assert (work / "same.tflite").read_bytes()[4:8] == b"TFL3"


@pytest.mark.slow
def test_two_builds_into_one_folder_at_once_keep_one_build_intact(tmp_path):
    from cvbench.demo.shapes_data import write_classification_set

    raw = write_classification_set(
        tmp_path / "raw", image_size=32, train_per_class=2, val_per_class=1, seed=0
    )
    build = ["build-imagenet", "--raw-dir", raw.path, "--train-shards", "2", "--val-shards",
             "1", "--workers", "1", "--no-progress", "--output-dir"]  # fmt: skip
    alone = cvbench(*build, "alone", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr[-3000:]
    first = start(*build, "same", cwd=tmp_path)
    second = start(*build, "same", cwd=tmp_path)
    runs = [(p, *p.communicate(timeout=600)) for p in (first, second)]
    codes = sorted(p.returncode for p, _, _ in runs)
    errors = [line for p, _, err in runs for line in err.splitlines() if line.startswith("cvbench")]
    if codes == [0, 2]:  # the second refused while the first writes
        assert errors == [
            "cvbench: error: same is being written by another build at this moment; wait for "
            "it to end, then rerun this one (each adds its own splits)"
        ]
    else:  # one after the other: the second found the build complete
        assert codes == [0, 0] and errors == []
    built = {k: v for k, v in tree(tmp_path / "same").items() if "manifest" not in k}
    assert built == {k: v for k, v in tree(tmp_path / "alone").items() if "manifest" not in k}


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, after, kept",
    [
        (["export", "cls.keras", "--format", "tflite", "--output", "m.tflite"],
         "cvbench.inference.export.to_tflite", "nothing was written"),
        (["predict", "cls.keras", "images", "--draw", "drawn"],
         "cvbench.inference.draw.draw_classification",
         "the files written so far are kept; none is half-written"),
    ],
)  # fmt: skip
def test_sigint_during_export_and_predict_draw_is_one_line_and_leaves_nothing(
    work, argv, after, kept
):
    before = tree(work)
    run = cvbench(*argv, cwd=work, signal_after=after)
    assert run.returncode == 130, run.stderr[-3000:]
    assert lines(run) == [f"cvbench {argv[0]}: SIGINT received: stopped; {kept}"]
    assert tree(work) == before  # no export, no drawing, no temporary


@pytest.mark.slow
def test_a_resume_into_a_read_only_checkpoint_folder_is_one_line_and_keeps_the_run(tmp_path):
    run = cvbench("train", *F, "--log-dir", "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    for step in (3, 4):  # the run stopped after step 2
        (tmp_path / f"run/checkpoints/ckpt-000000000{step}.npz").unlink()
    checkpoints = tmp_path / "run" / "checkpoints"
    kept = tree(checkpoints)
    mounted = subprocess.run(["mount", "--bind", str(checkpoints), str(checkpoints)])
    if mounted.returncode != 0:
        pytest.skip("cannot bind-mount a read-only folder here (needs root)")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(checkpoints)], check=True)
        stopped = cvbench(
            "train", *F, "--log-dir", "run", "--resume", cwd=tmp_path,
            signal_after="cvbench.training.resume.restore_checked",
        )  # fmt: skip
        assert stopped.returncode == 130, stopped.stderr[-3000:]
        assert lines(stopped)[-1] == (
            "cvbench train: SIGINT received: stopped; the checkpoints in run/checkpoints are "
            "kept (rerun with --resume to continue); nothing is left half-written"
        )
        failed = cvbench("train", *F, "--log-dir", "run", "--resume", cwd=tmp_path)
        assert failed.returncode == 1, failed.stderr[-3000:]
        assert lines(failed)[-1].startswith("cvbench train: error: run/checkpoints/ckpt-")
        assert lines(failed)[-1].endswith(".npz: Read-only file system")
    finally:
        subprocess.run(["umount", str(checkpoints)], check=False)
    assert tree(checkpoints) == kept
