import argparse
import json

import keras
import numpy as np
import pytest

from cvbench.cli import demo as demo_cli
from cvbench.cli.errors import CLIError
from cvbench.demo import classify, detect, run
from cvbench.demo.classify import StageResult
from cvbench.demo.config import DemoConfig
from cvbench.demo.data import DemoData, prepare_data
from cvbench.demo.shapes import SHAPE_NAMES
from cvbench.utils.files import OUTPUTS_LIST


def _parse(argv):
    parser = argparse.ArgumentParser(prog="cvbench")
    demo_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def _tiny_model(size: int):
    # the stage's image size and classes: save_model refuses a file whose info says others
    # (P52 F2)
    inputs = keras.Input((size, size, 3))  # images: the classifier's file gets a normalization
    pooled = keras.layers.GlobalAveragePooling2D()(inputs)
    return keras.Model(inputs, keras.layers.Dense(len(SHAPE_NAMES))(pooled))  # one per shape


def _tiny_detector(config, anchors: int = 2):
    """A detector's outputs (`{"boxes": (B, N, 4), "classes": (B, N, C)}`) at the SSD's size."""
    inputs = keras.Input((config.det_image_size, config.det_image_size, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(inputs)
    boxes = keras.layers.Reshape((anchors, 4))(keras.layers.Dense(anchors * 4)(pooled))
    classes = keras.layers.Dense(anchors * len(SHAPE_NAMES))(pooled)
    classes = keras.layers.Reshape((anchors, len(SHAPE_NAMES)))(classes)
    return keras.Model(inputs, {"boxes": boxes, "classes": classes})


def _fake_stage(metrics, loss_key):
    def train(data, config, *, log_dir, precision, distribution, classifier=None):
        (log_dir / "checkpoints").mkdir(parents=True)
        (log_dir / "checkpoints" / "ckpt-1").write_text("weights")
        (log_dir / "tensorboard").mkdir()
        lines = [
            {"event": "step", "step": 1, "loss": 2.0},
            {"event": "step", "step": 2, "loss": 1.0},
            {"event": "epoch", "step": 2, "loss": 1.5, **({loss_key: 0.9} if loss_key else {})},
        ]
        (log_dir / "train_log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        model = _tiny_model(config.cls_image_size) if classifier is None else _tiny_detector(config)
        return StageResult(model, metrics, [{"loss": 1.5}], 1.0, 0.5, 10.0)

    return train


COCO = dict.fromkeys(run.COCO_KEYS, 0.5) | {f"AP/{n}": 0.5 for n in SHAPE_NAMES}


@pytest.fixture
def fake_stages(monkeypatch):
    monkeypatch.setattr(run, "prepare_data", lambda data_dir, config, progress: None)
    monkeypatch.setattr(
        classify, "train_classifier", _fake_stage({"top1": 0.95, "loss": 0.2}, "val_top1")
    )
    monkeypatch.setattr(detect, "train_detector", _fake_stage(COCO, None))
    image = np.zeros((16, 16, 3), np.uint8)
    det = {"boxes": np.array([[1.0, 1.0, 5.0, 5.0]]), "classes": np.array([0]), "scores": [0.9]}
    monkeypatch.setattr(detect, "sample_detections", lambda model, data: ([image], [det], 1))


def test_results_replace_the_previous_run(tmp_path, fake_stages):
    run.claim_output_dir(tmp_path)  # an earlier demo's folder: its marker
    (tmp_path / "logs" / "old").mkdir(parents=True)
    (tmp_path / "metrics.json").write_text('{"old": true}')
    lines = []
    metrics = run.run_demo(tmp_path, config=DemoConfig.quick(), precision="float32",
                           print_fn=lines.append)  # fmt: skip
    names = sorted(p.name for p in tmp_path.iterdir())
    # prepare_data is faked; the lock file stays (an flock: the file alone holds nothing)
    assert names == sorted([*run.RESULTS, "metrics.json", run.MARKER, run.LOCK])
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["classifier", "ssd"]
    assert not (tmp_path / "logs" / "ssd" / "checkpoints").exists()  # not published
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["classifier"]["top1"] == 0.95 and saved["detector"]["AP"] == 0.5
    assert saved["precision"] == "float32" and saved["config"] == metrics["config"]
    assert set(saved["timings_s"]) >= {"data", "classifier", "ssd", "coco_eval", "total"}
    detector = keras.models.load_model(tmp_path / "ssd.keras")
    outputs = detector(np.zeros((1, 64, 64, 3), "float32"))  # the quick config's 64 px
    assert {k: tuple(v.shape) for k, v in outputs.items()} == {
        "boxes": (1, 2, 4),
        "classes": (1, 2, 6),
    }
    assert any("top-1 0.950" in line for line in lines)
    assert any("COCO AP 0.500" in line for line in lines)


def test_interrupt_leaves_the_previous_results(tmp_path, fake_stages, monkeypatch):
    run.claim_output_dir(tmp_path)
    (tmp_path / "logs" / "classifier").mkdir(parents=True)
    (tmp_path / "metrics.json").write_text('{"old": true}')

    def interrupted(*args, **kwargs):
        kwargs["log_dir"].mkdir(parents=True)
        (kwargs["log_dir"] / "train_log.jsonl").write_text('{"event": "start"}\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(detect, "train_detector", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.run_demo(tmp_path, config=DemoConfig.quick(), precision="float32")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        run.MARKER, run.LOCK, "logs", "metrics.json"]  # fmt: skip
    assert (tmp_path / "metrics.json").read_text() == '{"old": true}'
    assert list((tmp_path / "logs" / "classifier").iterdir()) == []


def test_a_second_demo_into_a_folder_in_use_is_refused_and_deletes_nothing(
    tmp_path, fake_stages, capsys
):
    # probe p50 #3: the second run deleted the first's .partial/ while it trained; both
    # exited 0 and the published folder mixed the two, its logs lost
    import os

    from cvbench.training.run_dir import RunDirInUseError, hold_lock

    run.claim_output_dir(tmp_path)
    first = hold_lock(tmp_path / run.LOCK, user="demo run", instead="-")  # the first run
    (tmp_path / run.STAGING / "logs").mkdir(parents=True)
    (tmp_path / run.STAGING / "logs" / "ckpt").write_text("the first run's")
    try:
        with pytest.raises(
            RunDirInUseError, match=rf"in use by another demo run \(pid {os.getpid()}"
        ):
            run.run_demo(tmp_path, config=DemoConfig.quick(), precision="float32")
        assert (tmp_path / run.STAGING / "logs" / "ckpt").read_text() == "the first run's"
        from cvbench.cli import main  # the command: one line, exit 1

        assert main(["demo", "--quick", "--output-dir", str(tmp_path)]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("cvbench demo: error: ") and "choose another --output-dir" in line
    finally:
        os.close(first)
    run.run_demo(tmp_path, config=DemoConfig.quick(), precision="float32")  # now free
    assert (tmp_path / "metrics.json").exists() and not (tmp_path / run.STAGING).exists()


def test_a_folder_the_demo_did_not_write_is_refused(tmp_path, fake_stages):
    # #37 F: the demo replaced a user's metrics.json and deleted their logs/.
    (tmp_path / "logs" / "mine").mkdir(parents=True)
    (tmp_path / "metrics.json").write_text("the user's")
    with pytest.raises(ValueError, match=r"holds files the demo did not write \(logs, metrics"):
        run.run_demo(tmp_path, config=DemoConfig.quick(), precision="float32")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "metrics.json"]
    assert (tmp_path / "metrics.json").read_text() == "the user's"
    assert [p.name for p in (tmp_path / "logs").iterdir()] == ["mine"]


def test_second_prepare_reuses_every_file(tmp_path):
    config = DemoConfig.quick().replace(
        cls_train_per_class=2, cls_val_per_class=1, det_num_train=3, det_num_val=2
    )
    paths = prepare_data(tmp_path, config, num_workers=1, progress=False)
    assert paths == DemoData.under(tmp_path)
    files = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()}
    # 12 + 6 classification JPEGs, 3 + 2 detection JPEGs, 2 COCO JSON, 2 specs; 8 + 2 and
    # 3 + 2 shards (shard counts are capped at the image count); 8 + 2 DALI index files
    # (idx/<shard>.idx, written by build-imagenet); 2 manifests and 2 dataset_info.json;
    # instances_val.json copied next to the records by build-coco, and the
    # .cvbench-outputs.json that records that copy as cvbench's (utils/files.py), and the
    # one in imagenet/idx/ that records the index files.
    assert len(files) == 18 + 5 + 2 + 2 + 10 + 5 + 10 + 2 + 2 + 1 + 1 + 1
    assert len(list((tmp_path / "imagenet" / "idx").glob("*.idx"))) == 10
    prepare_data(tmp_path, config, num_workers=1, progress=False)
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()}
    assert set(after) == set(files)
    assert all(after[p][1] == files[p][1] for p in files)  # same bytes everywhere
    # Images and shards are not touched; only the small metadata files are rewritten.
    rewritten = {p.name for p in files if after[p][0] != files[p][0]}
    small = {"cvbench_manifest.json", "dataset_info.json", "instances_val.json", OUTPUTS_LIST}
    assert rewritten <= small


def test_cli_defaults_and_bad_values(capsys):
    args = _parse(["demo"])
    assert (args.output_dir, args.quick, args.horovod, args.precision) == (
        "demo_out", False, None, None
    )  # fmt: skip
    for bad in (["demo", "--horovod", "0"], ["demo", "--precision", "fp8"]):
        with pytest.raises(SystemExit) as e:
            _parse(bad)
        assert e.value.code == 2
    assert "expected a positive integer, got 0" in capsys.readouterr().err


def test_horovod_launch_command(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(demo_cli, "_horovodrun", lambda: "/bin/horovodrun")
    monkeypatch.setattr("cvbench.demo.data.prepare_data", lambda d, c: calls.append(("data", d)))
    monkeypatch.setattr(
        demo_cli.subprocess, "call", lambda cmd, env: calls.append(("run", cmd)) or 0
    )
    args = _parse(["demo", "--output-dir", str(tmp_path), "--quick", "--horovod", "3"])
    assert args.func(args) == 0
    assert calls[0] == ("data", tmp_path / "data")
    cmd = calls[1][1]
    assert cmd[:6] == ["/bin/horovodrun", "-np", "3", "-H", "localhost:3", "--gloo"]
    assert cmd[7:] == [
        "-m", "cvbench", "demo", "--output-dir", str(tmp_path), "--seed", "0", "--data-ready",
        "--quick",
    ]  # fmt: skip


def test_the_horovod_launch_refuses_a_users_folder_before_making_data(tmp_path, monkeypatch):
    # The launcher built out/data before any rank claimed the folder: a user's folder got a
    # data/ subfolder (and a half-built data set) before the ranks refused it.
    calls = []
    monkeypatch.setattr(demo_cli, "_horovodrun", lambda: "/bin/horovodrun")
    monkeypatch.setattr("cvbench.demo.data.prepare_data", lambda d, c: calls.append(d))
    (tmp_path / "notes.txt").write_text("mine")
    args = _parse(["demo", "--output-dir", str(tmp_path), "--quick", "--horovod", "2"])
    with pytest.raises(ValueError, match=r"holds files the demo did not write \(notes.txt\)"):
        args.func(args)
    assert calls == [] and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_horovod_missing_is_a_cli_error(monkeypatch, tmp_path):
    monkeypatch.setattr(demo_cli.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(demo_cli.shutil, "which", lambda name: None)
    with pytest.raises(CLIError, match="horovodrun"):
        demo_cli._horovodrun()


@pytest.mark.slow
def test_quick_demo_end_to_end(tmp_path, capsys):
    args = _parse(["demo", "--quick", "--output-dir", str(tmp_path), "--precision", "fp32"])
    assert args.func(args) == 0
    for name in run.RESULTS + (run.METRICS,):
        assert (tmp_path / name).exists(), name
    assert not (tmp_path / run.STAGING).exists()
    assert list((tmp_path / "logs" / "ssd" / "tensorboard").iterdir())
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert 0.0 <= metrics["classifier"]["top1"] <= 1.0
    assert set(run.COCO_KEYS) <= set(metrics["detector"])
    assert {f"AP/{n}" for n in SHAPE_NAMES} <= set(metrics["detector"])
    # Trained for real: the SSD logged finite losses.
    steps = [
        json.loads(line)
        for line in (tmp_path / "logs" / "ssd" / "train_log.jsonl").read_text().splitlines()
        if '"step"' in line
    ]
    assert len(steps) >= 2 and all(np.isfinite(s["loss"]) for s in steps)
    # Regression: the classifier's file named its classes in SHAPE_NAMES order, while its
    # labels follow build_imagenet's (sorted folder names): a star was called a diamond.
    from cvbench.data import read_dataset_info
    from cvbench.inference import read_model_info

    records = tmp_path / "data" / "imagenet"
    cls_names = read_model_info(tmp_path / "classifier.keras").class_names
    assert cls_names == read_dataset_info(records).class_names == tuple(sorted(SHAPE_NAMES))
    assert read_model_info(tmp_path / "ssd.keras").class_names == SHAPE_NAMES
    model = keras.models.load_model(tmp_path / "ssd.keras")
    out = model.predict(np.zeros((1, 64, 64, 3), np.float32), verbose=0)
    assert out["classes"].shape == (1, 516, len(SHAPE_NAMES))
    assert "COCO AP" in capsys.readouterr().out


def test_top_n_threshold_keeps_as_many_boxes_as_objects():
    dets = [{"scores": np.array([0.03, 0.01])}, {"scores": np.array([0.02])}, {"scores": []}]
    # Scores over all images, best first: 0.03, 0.02, 0.01.
    assert detect.top_n_threshold(dets, 2) == pytest.approx(0.02)
    assert detect.top_n_threshold(dets, 5) == pytest.approx(0.01)  # fewer detections than n
    with pytest.raises(ValueError, match="n=0"):
        detect.top_n_threshold(dets, 0)


def test_per_rank_batch_keeps_the_global_batch():
    from cvbench.demo.stage import per_rank_batch

    assert per_rank_batch(32, 1) == 32
    assert per_rank_batch(32, 2) == 16  # 2 x 16 = 32: same steps and rates as one process
    assert per_rank_batch(16, 3) == 5  # 3 x 5 = 15: the remainder is dropped
    assert per_rank_batch(2, 4) == 1
    with pytest.raises(ValueError, match="0, 2"):
        per_rank_batch(0, 2)


@pytest.mark.slow
def test_quick_demo_under_horovod_two_processes(tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "cvbench", "demo", "--quick", "--horovod", "2",
         "--precision", "fp32", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["ranks"] == 2
    # The quick classifier's global batch of 16 is split 8 + 8: 144 images -> 9 steps.
    log = (tmp_path / "logs" / "classifier" / "train_log.jsonl").read_text().splitlines()
    epochs = [json.loads(line) for line in log if '"epoch"' in line]
    assert [e["step"] for e in epochs if e["event"] == "epoch"] == [9]
    assert set(run.COCO_KEYS) <= set(metrics["detector"])
    # Only rank 0 printed the summary.
    assert out.stdout.count("cvbench demo: shapes") == 1


def test_curves_leave_out_the_steps_a_resume_made_again(tmp_path):
    """A demo run killed after its checkpoint of step 2 and resumed: the steps 3 and 4 the
    killed session logged are logged again; the curve has each step once (the resume's)."""
    import json

    from cvbench.demo.run import _curve_panels
    from cvbench.training.run_dir import RunFolder

    log = RunFolder(tmp_path / "classifier").log
    log.parent.mkdir(parents=True)
    events = [
        *({"event": "step", "step": s, "loss": 10.0 + s} for s in (1, 2, 3, 4)),
        {"event": "start", "resumed_step": 2, "resumed_epoch": 0},
        *({"event": "step", "step": s, "loss": 20.0 + s} for s in (3, 4)),
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    steps, losses = _curve_panels(tmp_path)["classifier: training loss"]["loss"]
    assert steps == [1, 2, 3, 4] and losses == [11.0, 12.0, 23.0, 24.0]


@pytest.mark.parametrize("name", ["data", run.STAGING, "logs", "metrics.json"])
def test_a_link_among_the_demos_entries_is_refused_and_nothing_written(tmp_path, name):
    # probe p50 #10: OUT/data -> a user's folder: the demo built its images, records and
    # manifests there (and a later demo with other settings deleted them there)
    out, victim = tmp_path / "out", tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine")
    run.claim_output_dir(out)  # an earlier demo's folder
    (out / name).symlink_to(victim, target_is_directory=True)
    with pytest.raises(ValueError, match=f"{name} is a symbolic link; the demo never writes"):
        run.run_demo(out, config=DemoConfig.quick(), precision="float32")
    assert [p.name for p in victim.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in out.iterdir()) == sorted([run.MARKER, name])


def test_a_stopped_demo_says_its_own_words(tmp_path, fake_stages, monkeypatch):
    # probe p50 #11: it printed the Trainer's "checkpoint .partial/.../ckpt-1.npz written;
    # rerun with --resume" of a checkpoint it had just deleted, and demo has no --resume
    import signal

    from cvbench.training.signals import TrainingInterruptedError

    def stopped(*args, **kwargs):
        kwargs["log_dir"].mkdir(parents=True)
        raise TrainingInterruptedError(signal.SIGTERM, 1, str(kwargs["log_dir"] / "ckpt-1.npz"))

    monkeypatch.setattr(detect, "train_detector", stopped)
    with pytest.raises(TrainingInterruptedError) as info:
        run.run_demo(tmp_path, config=DemoConfig.quick(), precision="float32")
    assert str(info.value) == (
        f"SIGTERM received: stopped; the results already in {tmp_path} are kept (this run's "
        "partial work was removed): run the demo again to start over"
    )
    assert info.value.exit_code == 143 and not (tmp_path / run.STAGING).exists()
