"""A data flag given where it has no effect is refused (exit 2, one line naming the flag and
the --data-backend it applies to): `cvbench.cli.task_args.DATA_FLAGS` is the one table.

Before: `--data-workers 4` with the tf.data reader (the default) ran with no worker
process and said nothing; `--dali-device cpu` with tf.data was accepted silently.
"""

from __future__ import annotations

import argparse

import pytest

from cvbench import cli
from cvbench.cli.errors import CLIError
from cvbench.cli.task_args import DATA_FLAGS, check_data_flags

# flag -> a value that is not its default
_VALUES = {"--data-workers": "2", "--dali-device": "mixed", "--max-pixels": "100"}
_ALL_READERS = ("tf", "grain", "dali", None)  # None: --synthetic data


def _args(flag, backend):
    args = argparse.Namespace(
        data_backend=backend, data_workers=None, dali_device=None, max_pixels=None
    )
    setattr(args, flag[2:].replace("-", "_"), _VALUES[flag])
    return args


def test_the_table_names_every_data_flag_of_the_commands():
    assert set(DATA_FLAGS) == set(_VALUES)
    assert DATA_FLAGS == {
        "--data-workers": ("grain",),
        "--dali-device": ("dali",),
        "--max-pixels": ("tf", "grain"),
    }


@pytest.mark.parametrize("flag", sorted(_VALUES))
@pytest.mark.parametrize("reader", _ALL_READERS)
def test_each_flag_is_accepted_only_with_its_readers(flag, reader):
    args = _args(flag, reader)
    if reader in DATA_FLAGS[flag]:
        check_data_flags(args, reader)  # applies: no error
        return
    with pytest.raises(CLIError) as e:
        check_data_flags(args, reader)
    wanted = " or ".join(DATA_FLAGS[flag])
    used = {"tf": "tf.data", "grain": "grain", "dali": "DALI", None: "--synthetic data"}[reader]
    assert str(e.value) == f"{flag} needs --data-backend {wanted}: it has no effect with {used}"


def test_no_data_flag_given_is_never_refused():
    args = argparse.Namespace(
        data_backend=None, data_workers=None, dali_device=None, max_pixels=None
    )
    for reader in _ALL_READERS:
        check_data_flags(args, reader)


_TINY = ["--model", "resnet18", "--image-size", "32", "--batch-size", "2", "--num-classes", "3"]


@pytest.mark.parametrize("command", ["train", "eval"])
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # The default reader on TensorFlow is tf.data: grain's worker count does nothing.
        (["--data-workers", "4"], "--data-workers needs --data-backend grain: it has no "
         "effect with tf.data (the default reader)"),
        (["--data-workers", "0", "--data-backend", "tf"], "--data-workers needs --data-backend "
         "grain: it has no effect with tf.data"),
        (["--dali-device", "cpu", "--data-backend", "tf"], "--dali-device needs --data-backend "
         "dali: it has no effect with tf.data"),
        (["--dali-device", "mixed"], "--dali-device needs --data-backend dali: it has no "
         "effect with tf.data (the default reader)"),
    ],
)  # fmt: skip
def test_the_commands_refuse_a_flag_without_effect(tmp_path, capsys, command, extra, message):
    # the data beside the run folder, not around it (an output inside --data-dir is refused)
    (tmp_path / "data").mkdir()
    argv = [command, *_TINY, "--data-dir", str(tmp_path / "data"), *extra]
    argv += ["--log-dir", str(tmp_path / "run")] if command == "train" else []
    argv += ["--checkpoint", str(tmp_path)] if command == "eval" else []
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"cvbench: error: {message}\n"
    assert not (tmp_path / "run").exists()


def test_synthetic_data_refuses_the_grain_worker_count(tmp_path, capsys):
    argv = ["train", *_TINY, "--synthetic", "--data-workers", "2"]
    assert cli.main([*argv, "--log-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err == (
        "cvbench: error: --data-workers needs --data-backend grain: it has no effect with "
        "--synthetic data\n"
    )


@pytest.mark.parametrize("workers", ["0", "3"])
def test_the_worker_count_reaches_grain_when_it_is_the_default_reader(
    tmp_path, monkeypatch, workers
):
    # On JAX without TensorFlow the default reader is grain (tests/data/grain/
    # test_wired_cli.py runs it); here the task says so without leaving TensorFlow.
    from cvbench.cli import build_parser
    from cvbench.cli.task_args import task_from_args
    from cvbench.tasks.base import RecordTask

    monkeypatch.setattr(RecordTask, "reader", lambda self: "grain")
    args = build_parser().parse_args(
        ["train", *_TINY, "--data-dir", str(tmp_path), "--data-workers", workers]
    )
    task = task_from_args(args)
    assert task.options.data_workers == int(workers)
