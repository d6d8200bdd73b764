"""A checkpoint whose state has a field of the wrong type or range (crafted: the arrays'
checksum does not cover the metadata) is refused on resume with a `BadFileError` naming the
file and the field, before anything is restored or written (`resume.check_state`, the one
check; `TrainState.from_dict` applies the same `check_fields`)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from training_helpers import images, make_trainer

import cvbench.cli as cli
from cvbench.training.checkpoint import check_state, read_checkpoint_meta
from cvbench.training.epoch_loop import RANK_SUMS, TrainState, check_fields
from cvbench.utils.errors import BadFileError

CKPT = "ckpt-0000000002.npz"  # 8 images, batch 4: 2 steps in the one epoch


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished one-epoch run of the tests' tiny trainer (its checkpoint after step 2)."""
    directory = tmp_path_factory.mktemp("run")
    make_trainer(directory).fit(images(8), epochs=1, batch_size=4)
    assert (directory / "checkpoints" / CKPT).is_file()
    return directory


def rewrite_meta(path, change):
    """Rewrites the checkpoint at `path` with `change(meta)` applied to its metadata (the
    arrays, and so their checksum, unchanged)."""
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(arrays.pop("meta").tobytes())
    change(meta)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def setter(field, value):
    """A `change` setting `field` of the state (`a.b`: `b` of the dict `a`) to `value`."""

    def change(meta):
        target, *inner = field.split(".")
        if inner:
            meta["state"][target][inner[0]] = value
        else:
            meta["state"][target] = value

    return change


def snapshot(directory):
    """Every file under `directory` with its bytes, but the run folder's lock (which each
    claim of the folder rewrites with its process and time, before the resume)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {p: p.read_bytes() for p in files if p.name != ".cvbench-run.lock"}


# (field, crafted value, what the message says it should be)
CASES = [
    ("step", "2", "'2' (str), not an int at least 0"),
    ("step", 2.0, "2.0 (float), not an int at least 0"),
    ("epoch", math.nan, "nan (float), not an int at least 0"),
    ("epoch", -1, "-1 (int), not an int at least 0"),
    ("batch_in_epoch", True, "True (bool), not an int at least 0"),
    ("consumed", None, "None (NoneType), not an int at least 0"),
    ("data_seed", -2, "-2 (int), not an int at least -1"),
    ("skipped_steps", math.inf, "inf (float), not an int at least 0"),
    ("epoch_applied", -3, "-3 (int), not an int at least 0"),
    ("epoch_skipped", [1], "[1] (list), not an int at least 0"),
    ("epoch_sums", [1.0], "[1.0] (list), not a dict of sums by log name"),
    ("epoch_sums", {"loss": "0.5"}, "'loss' is '0.5' (str), not a number"),
    (RANK_SUMS, {"loss": 1.0}, "{'loss': 1.0} (dict), not a list of the 1 ranks' epoch sums"),
    (
        RANK_SUMS,
        [{"loss": 1.0}, {"loss": 2.0}],  # 2 ranks' sums, the plan says 1 rank
        "[{'loss': 1.0}, {'loss': 2.0}] (list), not a list of the 1 ranks' epoch sums",
    ),
    ("global_batch", "4", "'4' (str), not an int at least 1 or None"),
    ("ranks", 0, "0 (int), not an int at least 1 or None"),
    ("epochs", 1.5, "1.5 (float), not an int at least 0 or None"),
    ("planned_steps", -2, "-2 (int), not an int at least 0 or None"),
    ("steps_per_epoch", {}, "{} (dict), not an int at least 0 or None"),
    ("precision", 32, "32 (int), not a string"),
    ("model", ["m"], "['m'] (list), not a string"),
    ("settings", "x", "'x' (str), not a dict"),
    ("settings.class_names", "abc", "'abc' (str), not a list of strings"),
    ("settings.class_names", [0, 1, 2], "[0, 1, 2] (list), not a list of strings"),
    ("settings.seed", "0", "'0' (str), not an int"),
]


@pytest.mark.parametrize("field, value, says", CASES, ids=[f"{c[0]}={c[1]!r}" for c in CASES])
def test_a_crafted_state_field_is_a_bad_file_naming_it_and_nothing_is_written(
    run, tmp_path, field, value, says
):
    crafted = tmp_path / "run"
    shutil.copytree(run, crafted)
    path = crafted / "checkpoints" / CKPT
    rewrite_meta(path, setter(field, value))
    before = snapshot(crafted)
    trainer = make_trainer(crafted, resume=True)
    with pytest.raises(BadFileError) as raised:
        trainer.fit(images(8), epochs=1, batch_size=4)
    assert str(raised.value) == f"{path} is not a valid checkpoint: field {field!r}: {says}"
    assert snapshot(crafted) == before  # nothing written, the checkpoint kept as it was
    assert trainer.state["step"] == 0  # nothing restored


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda meta: meta.update(state=[1]), "field 'state': [1] (list), not a dict"),
        (
            lambda meta: meta["model"][0].update(shape="3"),
            "field 'model[0]': {'path': ",
        ),
        (
            lambda meta: meta["optimizer"][0].update(path=None),
            "field 'optimizer[0]': {'path': None, ",
        ),
    ],
    ids=["state-not-a-dict", "model-shape-a-string", "optimizer-path-none"],
)
def test_a_crafted_metadata_outside_the_counters_is_a_bad_file_too(run, tmp_path, change, says):
    crafted = tmp_path / "run"
    shutil.copytree(run, crafted)
    path = crafted / "checkpoints" / CKPT
    rewrite_meta(path, change)
    before = snapshot(crafted)
    with pytest.raises(BadFileError, match="^" + str(path).replace(".", r"\.")) as raised:
        make_trainer(crafted, resume=True).fit(images(8), epochs=1, batch_size=4)
    assert f"is not a valid checkpoint: {says}" in str(raised.value)
    assert snapshot(crafted) == before


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    "values",
    [
        # What the Trainer writes: one process, then a Horovod checkpoint of 2 ranks.
        {"step": 3, "epoch": 0, "data_seed": -1, "epoch_sums": {"loss": 1.5}, "ranks": 1},
        {"step": 3, "epoch_sums": {"loss": math.nan}, RANK_SUMS: [{"loss": 1}, {}], "ranks": 2},
        {"epoch_sums": {}, RANK_SUMS: [{"loss": 1.0}] * 3},  # no ranks recorded: any number
    ],
)
def test_the_fields_the_trainer_writes_pass_the_check(values):
    check_fields(values)
    check_state("c.npz", {"state": values, "model": [{"path": "d/k", "shape": [3, 0]}]})
    assert TrainState.from_dict(values).step == values.get("step", 0)


@pytest.mark.backend_agnostic
def test_from_dict_refuses_a_wrong_field_as_a_value_error_naming_it():
    # The Trainer's `state` setter takes the same check (a ValueError: a bad argument).
    with pytest.raises(ValueError, match=r"^field 'consumed': '7' \(str\), not an int at least 0$"):
        TrainState.from_dict({"consumed": "7"})


CLI_ARGS = ["--model", "resnet18", "--batch-size", "2", "--image-size", "32", "--num-classes"]
CLI_ARGS += ["4", "--precision", "fp32", "--synthetic", "--epochs", "1", "--steps-per-epoch"]
CLI_ARGS += ["1", "--no-progress", "--no-export", "--log-every", "0", "--seed", "0"]
CLI_ARGS += ["--eval", "none"]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """A run folder of `cvbench train` (one step of a tiny ResNet-18), its checkpoint after
    step 1."""
    run = tmp_path_factory.mktemp("cli") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))
        assert cli.main(["train", *CLI_ARGS, "--log-dir", str(run)]) == 0
    return run


@pytest.mark.parametrize(
    "change, says",
    [
        (setter("epoch_applied", -1), "field 'epoch_applied': -1 (int), not an int at least 0"),
        # The CLI reads the recorded recipe knobs before the Trainer resumes.
        (setter("settings.knobs", ["x"]), "field 'settings.knobs': ['x'] (list), not a dict"),
        (lambda meta: meta.update(state=[1]), "field 'state': [1] (list), not a dict"),
    ],
    ids=["counter", "knobs", "state"],
)
def test_the_cli_prints_one_line_and_exits_1_leaving_the_log_dir_unchanged(
    cli_run, tmp_path, capsys, monkeypatch, change, says
):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))
    monkeypatch.delenv("CVBENCH_DEBUG", raising=False)
    run = tmp_path / "run"
    shutil.copytree(cli_run, run)
    path = run / "checkpoints" / "ckpt-0000000001.npz"
    rewrite_meta(path, change)
    before = snapshot(run)
    capsys.readouterr()
    assert cli.main(["train", *CLI_ARGS, "--log-dir", str(run), "--resume"]) == 1
    assert capsys.readouterr().err == (
        f"cvbench train: error: {path} is not a valid checkpoint: {says}\n"
    )
    assert snapshot(run) == before


def test_the_readers_of_a_checkpoints_settings_get_the_same_check(run, tmp_path):
    # `cvbench eval --checkpoint` and the CLI's recorded knobs read the metadata alone.
    path = tmp_path / CKPT
    shutil.copyfile(run / "checkpoints" / CKPT, path)
    rewrite_meta(path, setter("settings.recipe", 50))
    with pytest.raises(BadFileError) as raised:
        read_checkpoint_meta(path)
    assert str(raised.value) == (
        f"{path} is not a valid checkpoint: field 'settings.recipe': 50 (int), not a string"
    )
