"""`cvbench eval` evaluates a model as its run trained it: the image size and preprocessing
come from the checkpoint's run settings or the `.keras` file's `ModelInfo`, without flags
(regression: a 64-px run was evaluated at 224 px, top-1 0.333 instead of 0.5)."""

from __future__ import annotations

import json
import re

import pytest
from jpeg_records import write_jpeg_records

import cvbench.cli as cli
from cvbench.cli.errors import CLIError
from cvbench.tasks.evaluation import saved_run

SIZE = "48"  # the run's image size, not the recipe's 224


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A 48-px resnet18 run on 4-class records (12 train, 6 validation images), evaluated at
    its end; returns (records, run folder, the printed training-time results)."""
    root = tmp_path_factory.mktemp("saved_run")
    records = root / "records"
    for split, count in (("train", 12), ("validation", 6)):
        write_jpeg_records(records / f"{split}-00000-of-00001", count, num_classes=4,
                           prefix=split)  # fmt: skip
    run = root / "run"
    argv = ["train", "--model", "resnet18", "--data-dir", str(records), "--image-size", SIZE,
            "--num-classes", "4", "--batch-size", "4", "--precision", "fp32", "--epochs", "1",
            "--steps-per-epoch", "3", "--log-dir", str(run), "--no-progress", "--seed", "0",
            "--label-smoothing", "0.2"]  # fmt: skip
    return records, run, argv


def printed_results(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"^(loss|top1|top5): (\S+)$", text, re.M)}


@pytest.mark.slow
def test_eval_of_the_run_and_of_its_export_gives_the_training_time_results(
    trained_run, tmp_path, capsys
):
    records, run, argv = trained_run
    assert cli.main(argv) == 0
    trained = printed_results(capsys.readouterr().out)
    assert set(trained) == {"loss", "top1"}  # 4 classes: no top-5
    for checkpoint in (run, run / "checkpoints", run / "export" / "model.keras"):
        out = tmp_path / "eval.json"
        code = cli.main(["eval", "--data-dir", str(records), "--precision", "fp32",
                         "--checkpoint", str(checkpoint), "--json", str(out)])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        scores = json.loads(out.read_text())
        # The same weights through the same 48-px evaluation pipeline: the same numbers
        # (printed to 6 digits by train; the JSON holds the full values).
        assert scores["top1"] == pytest.approx(trained["top1"], abs=1e-6), checkpoint
        # The .keras file takes [0, 255] pixels: eval puts a denormalize layer in front, and
        # the file normalizes again (float32 round trip: 1.38190 vs 1.38244 measured here).
        tolerance = 1e-3 if checkpoint.suffix == ".keras" else 1e-5
        assert scores["loss"] == pytest.approx(trained["loss"], rel=tolerance), checkpoint
    saved = saved_run(run)
    assert saved["model"] == "resnet18"
    recipe = saved["recipe"]
    assert recipe.value("model.image_size") == int(SIZE)
    assert recipe.value("loss.label_smoothing") == 0.2
    assert recipe.deviation("model.image_size").reason == f"the run of {run}"


@pytest.mark.slow
def test_flags_still_override_the_saved_run(trained_run):
    from cvbench.cli.evaluate import use_saved_run
    from cvbench.cli.task_args import task_from_args

    records, run, argv = trained_run
    if not (run / "checkpoints").is_dir():
        assert cli.main(argv) == 0

    def task(*flags):
        args = cli.build_parser().parse_args(
            ["eval", "--data-dir", str(records), "--checkpoint", str(run), *flags]
        )
        use_saved_run(args, run)
        return task_from_args(args)

    assert task().image_size == int(SIZE)
    assert task().recipe.loss.label_smoothing == 0.2
    assert task("--image-size", "32").image_size == 32  # with a warning naming both sizes
    # Another model contradicts the checkpoint: refused, naming both (not a class mismatch).
    with pytest.raises(CLIError, match=r"^--model resnet34: .* holds a resnet18 model"):
        task("--model", "resnet34", "--num-classes", "4")
    # An explicit recipe: the saved run is not used.
    assert (
        task("--recipe", "resnet18_cvbench", "--num-classes", "4").recipe.loss.label_smoothing
        == 0.1
    )


def test_a_file_recording_no_run_gives_nothing(tmp_path):
    import keras

    inputs = keras.Input((4,))
    path = tmp_path / "plain.keras"
    keras.Model(inputs, keras.layers.Dense(2)(inputs)).save(path)
    assert saved_run(path) == {}
