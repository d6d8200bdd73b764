"""Faults seen from `cvbench train / eval / benchmark`: corrupt data (one line naming the file
and record, or `--skip-corrupt`), `--debug`, checkpoints of another kind or another plan, a
full disk; a real bug keeps its traceback."""

from __future__ import annotations

import errno
import json
import shutil

import pytest
from jpeg_records import write_jpeg_records

import cvbench.cli as cli
from cvbench.cli import train as train_cli
from cvbench.cli.errors import known_error

TINY = ["--model", "resnet18", "--batch-size", "2", "--image-size", "32", "--num-classes", "4"]
TINY += ["--precision", "fp32"]
QUIET = ["--no-progress", "--no-export", "--log-every", "0", "--seed", "0"]


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train", "cvbench.cli.benchmark"))
    monkeypatch.delenv("CVBENCH_DEBUG", raising=False)


def write_split(directory, split, count, corrupt=()):
    """`count` 40x40 JPEG records in `<split>-00000-of-00001`; the records in `corrupt` hold
    bytes that are no image."""
    shard = directory / f"{split}-00000-of-00001"
    return write_jpeg_records(shard, count, corrupt=corrupt, prefix=split)


@pytest.fixture(scope="module")
def corrupt_data(tmp_path_factory):
    """8 training and 6 validation records; record 2 of each is no image."""
    directory = tmp_path_factory.mktemp("corrupt")
    write_split(directory, "train", 8, corrupt={2})
    write_split(directory, "validation", 6, corrupt={2})
    return directory


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A run directory with the checkpoint of one synthetic training step."""
    run = tmp_path_factory.mktemp("run")
    argv = ["train", *TINY, "--synthetic", "--epochs", "1", "--steps-per-epoch", "1"]
    assert cli.main([*argv, *QUIET, "--eval", "none", "--log-dir", str(run)]) == 0
    assert (run / "checkpoints" / "ckpt-0000000001.npz").is_file()
    return run


def last_line(err):
    return err.strip().splitlines()[-1]


def undecodable(directory, split, record):
    return (
        f"undecodable image {split}_{record}.JPEG (record {record} of "
        f"{directory}/{split}-00000-of-00001); pass --skip-corrupt to skip corrupt records"
    )


# ----------------------------------------------------------------------- corrupt data
def test_corrupt_training_data_is_one_line_naming_the_file_and_record(tmp_path, capsys):
    data = tmp_path / "one"
    write_split(data, "train", 1, corrupt={0})  # the only record: the first step fails
    argv = ["train", *TINY, "--batch-size", "1", "--data-dir", str(data), "--epochs", "1"]
    assert cli.main([*argv, *QUIET, "--eval", "none"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Graph execution error" not in err
    assert last_line(err) == f"cvbench train: error: {undecodable(data, 'train', 0)}"


def test_corrupt_validation_data_in_eval_and_the_debug_traceback(
    corrupt_data, tiny_run, capsys, monkeypatch
):
    import tensorflow as tf

    argv = ["eval", *TINY, "--data-dir", str(corrupt_data), "--checkpoint", str(tiny_run)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert last_line(err) == f"cvbench eval: error: {undecodable(corrupt_data, 'validation', 2)}"

    with pytest.raises(tf.errors.InvalidArgumentError, match="undecodable image validation_2"):
        cli.main(["--debug", *argv])
    monkeypatch.setenv("CVBENCH_DEBUG", "1")
    with pytest.raises(tf.errors.InvalidArgumentError, match="skip_corrupt=True"):
        cli.main(argv)


def test_eval_skip_corrupt_counts_prints_and_records(corrupt_data, tiny_run, tmp_path, capsys):
    results = tmp_path / "eval.json"
    argv = ["eval", *TINY, "--data-dir", str(corrupt_data), "--checkpoint", str(tiny_run)]
    assert cli.main([*argv, "--skip-corrupt", "--json", str(results)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "cvbench: skipped 1 corrupt record (--skip-corrupt)"
    scores = json.loads(results.read_text())
    assert scores["corrupt_records"] == 1
    # 5 decodable validation images: top-1 is a multiple of 1/5.
    assert scores["top1"] * 5 == pytest.approx(round(scores["top1"] * 5))


@pytest.mark.slow
def test_train_skip_corrupt_counts_training_and_validation_records(corrupt_data, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", *TINY, "--data-dir", str(corrupt_data), "--epochs", "1", "--eval", "end"]
    assert cli.main([*argv, *QUIET, "--skip-corrupt", "--log-dir", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    # The last line says what the run wrote where (#39); the count is printed before it.
    assert out[-1].startswith(f"cvbench: wrote {run}/results.json")
    last = out[-2]
    # The training stream repeats its 8 records, so record 2 is met at least once there (how
    # often depends on the read-ahead); evaluation meets it exactly once.
    count = int(
        last.removeprefix("cvbench: skipped ").removesuffix(" corrupt records (--skip-corrupt)")
    )
    assert count >= 2
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert events[-2]["event"] == "corrupt_records" and events[-2]["count"] == count
    assert events[-1]["event"] == "results"


def test_benchmark_skip_corrupt_reports_the_count(monkeypatch, tmp_path, capsys):
    from cvbench.benchmark import run as run_module
    from cvbench.benchmark.results import ThroughputResult
    from cvbench.training.throughput import Throughput

    def fake(model, **kwargs):
        t = Throughput(50.0, 1.0, 2.0, (50.0,), 5, 8, 1.0, 0.5, 1, 25.0)
        return ThroughputResult(model.options.model, kwargs["mode"], "cvbench", "float32", 8, 32, t)

    monkeypatch.setattr(run_module, "benchmark_cvbench", fake)
    path = tmp_path / "bench.json"
    argv = ["benchmark", *TINY, "--synthetic", "--log-every", "0", "--skip-corrupt"]
    assert cli.main([*argv, "--json", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "cvbench: skipped 0 corrupt records (--skip-corrupt)"
    )
    assert json.loads(path.read_text())["corrupt_records"] == 0
    assert cli.main([*argv[:-1], "--json", str(path)]) == 0
    assert "corrupt_records" not in json.loads(path.read_text())


def test_a_truncated_records_file_names_the_flag(tiny_run, tmp_path, capsys):
    data = tmp_path / "cut"
    path = write_split(data, "validation", 3)
    path.write_bytes(path.read_bytes()[:-10])
    argv = ["eval", *TINY, "--data-dir", str(data), "--checkpoint", str(tiny_run)]
    assert cli.main(argv) == 1  # a bad input file (#37: it exited 2, as a bad argument)
    line = last_line(capsys.readouterr().err)
    assert line.startswith("cvbench eval: error: ") and str(path) in line
    assert "skip_corrupt" not in line
    assert line.endswith("; copy or build it again, or pass --skip-corrupt to read only its "
                         "complete records")  # fmt: skip


# ----------------------------------------------------------------------- checkpoints
def test_a_wrong_checkpoint_file_is_not_a_cvbench_checkpoint(tmp_path, capsys):
    wrong = tmp_path / "weights.npz"
    wrong.write_text("these are not weights")
    # a bad input file (a BadFileError): exit 1, the command named (#37; it was 2)
    assert cli.main(["eval", *TINY, "--synthetic", "--checkpoint", str(wrong)]) == 1
    assert capsys.readouterr().err == (
        f"cvbench eval: error: {wrong} is not a cvbench checkpoint: it is not an .npz archive "
        "(checkpoints are the ckpt-<step>.npz files the Trainer writes in <log dir>/checkpoints)\n"
    )


def test_resume_into_another_plan_is_refused_unless_forced(tiny_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    argv = ["train", *TINY, "--synthetic", "--steps-per-epoch", "1", *QUIET, "--eval", "none"]
    argv += ["--log-dir", str(run), "--resume", "--epochs", "2"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        f"cvbench: error: cannot resume from {run}/checkpoints/ckpt-0000000001.npz: this run "
        "differs from the checkpointed one (epochs 1 in the checkpoint, 2 now; "
        # the warmup is capped at half the run (#39 item 7): 0 of 1 step, 1 of 2 steps
        "schedule.warmup_steps 0 in the checkpoint, 1 now; "
        "settings.knobs.run.epochs 1 in the checkpoint, 2 now); pass "
        "--force-resume to resume anyway, or train in another log directory\n"
    )
    with pytest.warns(UserWarning, match=r"differs from the checkpointed one \(epochs 1 in"):
        assert cli.main([*argv, "--force-resume"]) == 0
    assert (run / "checkpoints" / "ckpt-0000000002.npz").is_file()


@pytest.mark.parametrize(
    "flags, difference",
    [
        (["--lr", "0.5"], "schedule.base_lr 0.256 in the checkpoint, 0.5 now"),
        (["--weight-decay", "0.001"], "optimizer.weight_decay 3.0517578125e-05 in the "
         "checkpoint, 0.001 now"),
        (["--optimizer", "lars"], 'optimizer.name "sgd" in the checkpoint, "lars" now'),
        (["--schedule", "constant"], 'schedule.decay "cosine" in the checkpoint, "constant" now'),
        (["--label-smoothing", "0.2"], "settings.knobs.loss.label_smoothing 0.1 in the "
         "checkpoint, 0.2 now"),
    ],
)  # fmt: skip
def test_resume_with_other_settings_is_refused_naming_them(
    flags, difference, tiny_run, tmp_path, capsys
):
    # Regression: only epochs, steps, batch, precision and the model were compared.
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)

    def files() -> dict:  # the lock file records each claimant: not a result of the run
        return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.suffix != ".lock"}

    before = files()
    argv = ["train", *TINY, "--synthetic", "--steps-per-epoch", "1", *QUIET, "--eval", "none"]
    argv += ["--log-dir", str(run), "--resume", "--epochs", "1", *flags]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cvbench: error: cannot resume from ")
    assert difference in err and "pass --force-resume to resume anyway" in err
    assert files() == before


def test_force_resume_needs_resume(capsys):
    assert cli.main(["train", *TINY, "--synthetic", "--force-resume"]) == 2
    assert capsys.readouterr().err == "cvbench: error: --force-resume needs --resume\n"


def test_a_full_disk_is_one_line_naming_the_checkpoints(tmp_path, monkeypatch, capsys):
    from cvbench.training import checkpoint

    def no_space(path, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint, "save_checkpoint", no_space)
    run = tmp_path / "run"
    argv = ["train", *TINY, "--synthetic", "--epochs", "1", "--steps-per-epoch", "1", *QUIET]
    assert cli.main([*argv, "--eval", "none", "--log-dir", str(run)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert err == (
        f"cvbench train: error: no space left on device writing checkpoint "
        f"{run}/checkpoints/ckpt-0000000001.npz; no earlier checkpoint was written; free space "
        "and rerun with --resume\n"
    )


# ----------------------------------------------------------------------- what stays a traceback
def test_a_bug_keeps_its_traceback(monkeypatch):
    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(train_cli, "train_command", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["train", *TINY, "--synthetic"])


def test_only_corrupt_data_errors_of_tensorflow_become_one_line():
    import tensorflow as tf

    shapes = tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [2,3] vs. [3,2]")
    assert known_error(shapes, command="train") is None
    lost = tf.errors.DataLossError(None, None, "corrupted record at 12 [Op:IteratorGetNext]")
    assert known_error(lost, command="eval") == (
        "cvbench eval: error: corrupted record at 12",
        1,
    )
    wrapped = RuntimeError("while training")
    wrapped.__cause__ = lost
    assert known_error(wrapped, command="eval") == (
        "cvbench eval: error: corrupted record at 12",
        1,
    )
    assert known_error(KeyError("x"), command="eval") is None


def test_debug_is_documented_in_the_top_level_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--debug show the full traceback of any error (also CVBENCH_DEBUG=1)" in out
