"""`cvbench train / eval --data-backend dali --dali-device cpu|mixed`: a tiny run through
the classification task, and one-line errors."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from dali_records import NUM_CLASSES, write_records  # noqa: E402

import cvbench.cli as cli  # noqa: E402

TINY = ["--model", "resnet18", "--batch-size", "2", "--image-size", "32", "--precision", "fp32"]
TINY += ["--num-classes", str(NUM_CLASSES)]


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return write_records(tmp_path_factory.mktemp("records"))


@pytest.mark.slow
def test_train_and_eval_from_dali(records, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", *TINY, "--data-dir", str(records), "--data-backend", "dali"]
    argv += ["--epochs", "1", "--steps-per-epoch", "2", "--log-dir", str(run), "--seed", "0"]
    argv += ["--log-every", "1", "--burn-in", "1", "--no-progress", "--no-export"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "Images/sec:" in out and "top1:" in out
    argv = ["eval", *TINY, "--data-dir", str(records), "--data-backend", "dali"]
    assert cli.main([*argv, "--checkpoint", str(run)]) == 0
    assert "top1:" in capsys.readouterr().out


def test_the_task_reads_dali_batches(records):
    from cvbench.data.dali.dataset import DaliBatches
    from cvbench.tasks import ClassificationTask, TaskOptions
    from cvbench.training.distributed import SingleProcess

    options = TaskOptions(model="resnet18", data_dir=str(records), image_size=32, num_classes=11)
    task = ClassificationTask(options, data_backend="dali")
    data = task.evaluation_data(batch_size=2, distribution=SingleProcess())
    assert isinstance(data, DaliBatches) and len(data) == 3  # ceil(5 validation records / 2)
    train = task.train_data(batch_size=2, distribution=SingleProcess(), seed=1)
    assert train.steps_per_epoch == 3  # 6 training records // 2
    x, y = next(iter(train.data(0)))
    assert x.shape == (2, 32, 32, 3) and set(y.tolist()) <= set(range(6))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dali-device", "mixed"], "--dali-device needs --data-backend dali"),
        (["--data-backend", "dali", "--synthetic"], "not --synthetic data"),
    ],
)
def test_flag_combinations(extra, message, capsys):
    argv = ["train", *TINY, *extra]
    if "--synthetic" not in extra:
        argv.append("--synthetic")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_detection_models_are_refused(records, capsys):
    argv = ["eval", "--model", "ssd320", "--data-dir", str(records), "--data-backend", "dali"]
    assert cli.main([*argv, "--checkpoint", str(records)]) == 2
    assert "--data-backend dali is for classification models" in capsys.readouterr().err


def test_missing_index_names_the_file_and_the_command(tmp_path, capsys):
    data = write_records(tmp_path / "data", index=False)
    argv = ["train", *TINY, "--data-dir", str(data), "--data-backend", "dali"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"no DALI index file {data / 'idx' / 'train-00000-of-00002.idx'}" in err
    assert f"run `cvbench dali-index {data}`" in err


def test_missing_dali_names_the_extra(records, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    argv = ["train", *TINY, "--data-dir", str(records), "--data-backend", "dali"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'cvbench[dali]'" in err
