"""`cvbench train / eval` and the classes of the data: from `dataset_info.json`, one-line
errors naming `--num-classes` or both class counts."""

from __future__ import annotations

import pytest
from jpeg_records import write_jpeg_records

import cvbench.cli as cli

TINY = ["--model", "resnet18", "--image-size", "32", "--batch-size", "2", "--precision", "fp32"]


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))


@pytest.fixture(scope="module")
def six_class_records(tmp_path_factory):
    """The demo's 6 shapes, 2 train + 1 val image each, through `build_imagenet`."""
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("six_cli")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=2, val_per_class=1, seed=0
    )
    build_imagenet(raw.path, root / "records", train_shards=1, val_shards=1, num_workers=1,
                   progress=False)  # fmt: skip
    return root / "records"


def _four_class_records(directory):
    """Records without dataset_info.json (written directly, as another tool would)."""
    for split, count in (("train", 4), ("validation", 4)):
        write_jpeg_records(directory / f"{split}-00000-of-00001", count, prefix=split)
    return directory


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_records_without_metadata_and_no_num_classes_name_the_flag(tmp_path, capsys):
    data = _four_class_records(tmp_path / "records")
    assert cli.main(["train", *TINY, "--data-dir", str(data)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"cvbench: error: {data} has no dataset_info.json")
    assert line.endswith("pass num_classes (--num-classes)")


def test_a_disagreeing_num_classes_is_one_line_naming_both(six_class_records, capsys):
    argv = ["train", *TINY, "--data-dir", str(six_class_records), "--num-classes", "1000"]
    assert cli.main(argv) == 2
    assert _one_line(capsys) == (
        f"cvbench: error: num_classes (--num-classes) is 1000 but "
        f"{six_class_records / 'dataset_info.json'} lists 6 classes; leave it unset to use the "
        "data's 6"
    )


@pytest.mark.slow
def test_train_without_num_classes_trains_the_datas_6_classes_and_eval_refuses_others(
    six_class_records, tmp_path, capsys
):
    # Regression: this trained a 1000-way head (loss ln 1000 = 6.9) and eval failed with a
    # shape message about (512, 1000).
    from cvbench.training.checkpoint import find_checkpoint, load_checkpoint

    run = tmp_path / "run"
    argv = ["train", *TINY, "--data-dir", str(six_class_records), "--epochs", "1"]
    argv += ["--steps-per-epoch", "1", "--eval", "end", "--no-progress", "--no-export"]
    assert cli.main([*argv, "--log-dir", str(run), "--log-every", "0", "--seed", "0"]) == 0
    meta, arrays = load_checkpoint(find_checkpoint(run))
    assert meta["model"][-1]["shape"] == [6]  # the classifier's bias
    capsys.readouterr()

    # The same checkpoint, evaluated on its own data without --num-classes: works.
    assert cli.main(["eval", *TINY, "--data-dir", str(six_class_records), "--checkpoint",
                     str(run)]) == 0  # fmt: skip
    assert "top1:" in capsys.readouterr().out

    # On 4-class records: one line naming both counts and the flag that would fit.
    other = _four_class_records(tmp_path / "four")
    argv = ["eval", *TINY, "--data-dir", str(other), "--num-classes", "4", "--checkpoint"]
    assert cli.main([*argv, str(run)]) == 2
    line = _one_line(capsys)
    assert line == (
        f"cvbench: error: {find_checkpoint(run)} holds a model for 6 classes but the task has "
        "4; pass --num-classes 6"
    )


def test_eval_of_a_keras_model_for_other_classes_is_one_line(six_class_records, tmp_path, capsys):
    import keras

    inputs = keras.Input((32, 32, 3))
    outputs = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(inputs))
    path = tmp_path / "four.keras"
    keras.Model(inputs, outputs).save(path)
    argv = ["eval", *TINY, "--data-dir", str(six_class_records), "--checkpoint", str(path)]
    assert cli.main(argv) == 2
    assert _one_line(capsys) == (
        f"cvbench: error: {path} holds a model for 4 classes but the data in "
        f"{six_class_records} has 6 (its dataset_info.json); evaluate it on the data it was "
        "trained on"
    )


def test_num_classes_help_says_where_the_classes_come_from(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: the classes in --data-dir's dataset_info.json" in text
    assert "1000 for ImageNet" not in text


def test_benchmark_on_records_builds_the_datas_head(six_class_records, monkeypatch):
    # Regression: `cvbench benchmark --data-dir` without --num-classes built a 1000-way head
    # while the task read 6 classes from dataset_info.json.
    from cvbench.benchmark import run as run_module

    seen = {}

    def fake(model, **kwargs):
        seen.update(kwargs, num_classes=model.num_classes)  # the task the command made
        raise SystemExit(0)

    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.benchmark",))
    monkeypatch.setattr(run_module, "benchmark_cvbench", fake)
    argv = ["benchmark", *TINY, "--data-dir", str(six_class_records), "--steps", "1"]
    with pytest.raises(SystemExit):
        cli.main(argv)
    assert seen["num_classes"] == 6
