"""train/eval/benchmark flag seams (a hostile probe's findings): an output inside --data-dir,
an --image-size no memory holds, --schedule step with --boundaries, eval flags that
contradict the checkpoint's run, Keras' raw call errors and Python's warning format."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import pytest

import cvbench.cli as cli
import cvbench.cli.train as train_cli
from cvbench.cli.errors import CLIError, known_error
from cvbench.tasks.recipes import resolve_recipe

SHARD = "validation-00000-of-00002"


@pytest.fixture
def rec(tmp_path: Path) -> Path:
    """A data folder with one shard's name in it (nothing is read: the refusal comes
    first)."""
    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "train-00000-of-00001").write_bytes(b"")
    return folder


def _error(capsys) -> str:
    return capsys.readouterr().err.strip()


# 1. No output of train/eval/benchmark in the data folder it reads.


def test_eval_json_named_as_a_shard_of_the_data_is_refused_before_any_work(rec, capsys):
    out = rec / SHARD
    argv = ["eval", "--checkpoint", "missing", "--data-dir", str(rec), "--json", str(out)]
    assert cli.main(argv) == 2
    assert _error(capsys) == (
        f"cvbench: error: --json {out} would be read as part of the data in --data-dir {rec}: "
        "cvbench never writes what its readers read; choose another name or folder"
    )
    assert not out.exists()


def test_train_log_dir_that_is_the_data_folder_is_refused(rec, capsys):
    argv = ["train", "--model", "resnet18", "--data-dir", str(rec), "--log-dir", str(rec)]
    assert cli.main(argv) == 2
    assert _error(capsys) == (
        f"cvbench: error: --log-dir {rec} is the --data-dir folder {rec}: cvbench never "
        "writes into the data it reads; write elsewhere"
    )
    assert sorted(p.name for p in rec.iterdir()) == ["train-00000-of-00001"]


@pytest.mark.parametrize(
    "command, dest, name",
    [("eval", "log_dir", "dataset_info.json"), ("benchmark", "json", "idx"),
     ("eval", "json", "instances_val.json"), ("train", "log_dir", "cvbench_manifest.json")],
)  # fmt: skip
def test_outputs_the_readers_would_read_are_refused(rec, command, dest, name):
    args = argparse.Namespace(command=command, data_dir=str(rec), log_dir=None, json=None)
    setattr(args, dest, str(rec / name))
    with pytest.raises(cli.CLIError, match="would be read as part of the data"):
        cli.refuse_outputs_in_data(args)


def test_an_output_link_to_the_data_folder_is_refused(rec, tmp_path, capsys):
    link = tmp_path / "run"
    link.symlink_to(rec)
    argv = ["train", "--model", "resnet18", "--data-dir", str(rec), "--log-dir", str(link)]
    assert cli.main(argv) == 2
    assert f"is the --data-dir folder {rec}" in _error(capsys)


@pytest.mark.parametrize(
    "log_dir, json_name",
    [("runs/r1", "results.json"), ("e", "rec-00000.json"), ("../e", "../recx.json")],
)
def test_sub_folders_and_other_names_in_or_beside_the_data_folder_are_allowed(
    rec, log_dir, json_name
):
    """The review's finding: `--data-dir . --log-dir runs/r1` (a run folder below the data)
    was refused, though the readers never read a sub-folder."""
    args = argparse.Namespace(command="eval", data_dir=str(rec), log_dir=str(rec / log_dir),
                              json=str(rec / json_name))  # fmt: skip
    cli.refuse_outputs_in_data(args)


def test_data_dir_dot_with_a_run_folder_below_it_is_allowed(rec, monkeypatch):
    monkeypatch.chdir(rec)
    cli.refuse_outputs_in_data(
        argparse.Namespace(command="train", data_dir=".", log_dir="runs/r1", json=None)
    )
    with pytest.raises(cli.CLIError, match="is the --data-dir folder"):
        cli.refuse_outputs_in_data(
            argparse.Namespace(command="train", data_dir=".", log_dir=".", json=None)
        )


# 2. --image-size is bounded as predict's --max-input-side.


def test_train_image_size_over_the_bound_is_one_line_naming_the_flag(capsys):
    argv = ["train", "--model", "resnet18", "--synthetic", "--image-size", "8193",
            "--batch-size", "2", "--steps-per-epoch", "1"]  # fmt: skip
    assert cli.main(argv) == 2
    assert _error(capsys).splitlines()[-1] == (
        "cvbench: error: --image-size 8193 is over 8192, the largest image side cvbench "
        "trains or evaluates at"
    )


def test_the_bound_holds_for_the_python_api_and_allows_8192():
    with pytest.raises(ValueError, match=r"^image_size 8193 is over 8192"):
        resolve_recipe("resnet18", settings={"image_size": 8193})
    recipe = resolve_recipe("resnet18", settings={"image_size": 8192})
    assert recipe.value("model.image_size") == 8192


# 3. --schedule step with its --boundaries: the overrides of a part are validated together.


def test_step_schedule_with_boundaries_resolves_with_each_flag_as_its_reason():
    recipe = resolve_recipe(
        "resnet18",
        settings={"schedule": "step", "boundaries": (5.0, 8.0), "epochs": 10},
        reasons={"schedule": "--schedule", "boundaries": "--boundaries", "epochs": "--epochs"},
    )
    assert recipe.schedule.decay == "step"
    assert recipe.schedule.boundaries_epochs == (5.0, 8.0)
    assert recipe.deviation("schedule.decay").reason == "--schedule"
    assert recipe.deviation("schedule.boundaries_epochs").reason == "--boundaries"
    assert recipe.deviation("run.epochs").reason == "--epochs"


def test_step_schedule_from_the_command_line_reaches_the_task():
    from cvbench.cli.task_args import task_from_args

    args = cli.build_parser().parse_args(
        [
            "train",
            "--model",
            "resnet18",
            "--synthetic",
            "--image-size",
            "32",
            "--epochs",
            "10",
            "--schedule",
            "step",
            "--boundaries",
            "5,8",
        ]  # fmt: skip
    )
    schedule = task_from_args(args).recipe.schedule
    assert (schedule.decay, schedule.boundaries_epochs) == ("step", (5.0, 8.0))


@pytest.mark.parametrize(
    ("boundaries", "shown"), [("5,2", "(5.0, 2.0)"), ("nan", "(nan,)"), ("5,inf", "(5.0, inf)")]
)
def test_bad_boundaries_are_one_line_naming_the_value(capsys, boundaries, shown):
    argv = ["train", "--model", "resnet18", "--synthetic", "--image-size", "32", "--epochs",
            "10", "--schedule", "step", "--boundaries", boundaries]  # fmt: skip
    assert cli.main(argv) == 2
    assert _error(capsys).splitlines()[-1] == (
        "cvbench: error: ScheduleConfig.boundaries_epochs must be positive, finite and "
        f"increasing, got {shown}"
    )


# 4. eval's flags against what the checkpoint records of its run.


def _saved(size: int = 32) -> dict:
    return {
        "model": "resnet18",
        "recipe": resolve_recipe("resnet18", settings={"image_size": size}),
    }


def test_eval_model_other_than_the_checkpoints_is_refused_naming_both():
    from cvbench.cli.evaluate import check_saved_flags

    args = argparse.Namespace(model="resnet34", image_size=None)
    with pytest.raises(CLIError) as error:
        check_saved_flags(args, _saved(), Path("run1/checkpoints/ckpt-6.npz"))
    assert str(error.value) == (
        "--model resnet34: run1/checkpoints/ckpt-6.npz holds a resnet18 model; drop --model "
        "(eval takes the model from the checkpoint)"
    )


def test_eval_image_size_other_than_a_keras_models_is_refused():
    from cvbench.cli.evaluate import check_saved_flags

    args = argparse.Namespace(model=None, image_size=64)
    with pytest.raises(CLIError) as error:
        check_saved_flags(args, _saved(), Path("m.keras"))
    assert (
        str(error.value)
        == "--image-size 64: the model in m.keras takes 32x32 images; drop --image-size"
    )


def test_eval_image_size_other_than_the_checkpoints_run_warns_naming_both(capsys):
    from cvbench.cli.evaluate import check_saved_flags

    check_saved_flags(argparse.Namespace(model="resnet18", image_size=32), _saved(), Path("c.npz"))
    assert capsys.readouterr().err == ""
    check_saved_flags(argparse.Namespace(model=None, image_size=64), _saved(), Path("c.npz"))
    assert capsys.readouterr().err == (
        "cvbench eval: warning: evaluating at --image-size 64, not at 32, the image size the "
        "run of c.npz trained at\n"
    )


def test_keras_call_error_is_a_run_error_of_its_first_line_without_colour_codes():
    message = (
        "Exception encountered when calling TrainingModel.call().\n\n\x1b[1mInput 0 with name "
        "'images' of layer 'resnet18' is incompatible with the layer: expected shape=(None, "
        "32, 32, 3), found shape=(256, 64, 64, 3)\x1b[0m\n\nArguments received by "
        "TrainingModel.call():\n  \u2022 inputs=tf.Tensor(shape=(256, 64, 64, 3))"
    )
    assert known_error(ValueError(message), command="eval") == (
        "cvbench eval: error: TrainingModel.call(): Input 0 with name 'images' of layer "
        "'resnet18' is incompatible with the layer: expected shape=(None, 32, 32, 3), found "
        "shape=(256, 64, 64, 3)",
        1,
    )
    assert known_error(ValueError("a \x1b[1mbold\x1b[0m word"), command="eval") == (
        "cvbench: error: a bold word",
        2,
    )


# 5. cvbench's own warnings are one line in the command; others keep Python's format.


@pytest.fixture
def shown_on_stderr(monkeypatch):
    """Warnings shown as Python shows them outside pytest (pytest records them)."""
    monkeypatch.setattr(warnings, "showwarning", warnings._showwarning_orig)
    monkeypatch.setattr(
        warnings, "_showwarnmsg_impl", lambda msg: sys.stderr.write(warnings._formatwarnmsg(msg))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        yield


def test_a_commands_own_warning_is_one_line(monkeypatch, capsys, shown_on_stderr):
    from cvbench.training import trainer

    def command(args):
        message = "resuming from c.npz\nanyway, as force_resume=True asks"
        warnings.warn_explicit(message, UserWarning, trainer.__file__, 425)
        return 0

    monkeypatch.setattr(train_cli, "train_command", command)
    python_format = warnings.formatwarning
    assert cli.main(["train", "--model", "resnet18", "--synthetic"]) == 0
    assert capsys.readouterr().err == (
        "cvbench train: warning: resuming from c.npz\\nanyway, as --force-resume asks\n"
    )
    assert warnings.formatwarning is python_format  # put back after the command


def test_another_librarys_warning_keeps_pythons_format(capsys, shown_on_stderr):
    with cli.warning_lines("train"):
        warnings.warn_explicit("theirs", UserWarning, "/elsewhere/keras/x.py", 7)
    assert capsys.readouterr().err == "/elsewhere/keras/x.py:7: UserWarning: theirs\n"


def test_pytest_warns_still_records_a_commands_warning(monkeypatch):
    from cvbench.training import trainer

    def command(args):
        warnings.warn_explicit("resuming", UserWarning, trainer.__file__, 425)
        return 0

    monkeypatch.setattr(train_cli, "train_command", command)
    with pytest.warns(UserWarning, match="resuming"):
        assert cli.main(["train", "--model", "resnet18", "--synthetic"]) == 0
