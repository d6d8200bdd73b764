"""`cvbench train / eval / benchmark`: flags, clean errors, a short synthetic run."""

import json

import pytest
from jpeg_records import write_jpeg_records

import cvbench.cli as cli
from cvbench.cli import train as train_cli

COMMANDS = ("train", "eval", "benchmark")
TINY = [
    "--model",
    "resnet18",
    "--synthetic",
    "--batch-size",
    "2",
    "--image-size",
    "32",
    "--num-classes",
    "4",
    "--precision",
    "fp32",
]


@pytest.fixture(autouse=True)
def with_train_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train", "cvbench.cli.benchmark"))


def subparser(name):
    parser = cli.build_parser()
    return parser._subparsers._group_actions[0].choices[name]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_documents_every_flag(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for action in subparser(command)._actions:
        for flag in action.option_strings:
            assert flag in text
        assert action.help, f"{command} {action.option_strings} has no help"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--synthetic"], "the following arguments are required: --model"),
        (["train", "--model", "resnet50"], "one of the arguments --data-dir --synthetic"),
        (["train", "--model", "resnet50", "--synthetic", "--data-dir", "d"], "not allowed with"),
        (["train", "--model", "resnet50", "--synthetic", "--batch-size", "0"], "positive integer"),
        (["train", "--model", "resnet50", "--synthetic", "--precision", "fp8"], "invalid choice"),
        (["train", "--model", "resnet50", "--synthetic", "--lr", "fast"], "expected a number"),
        (["benchmark", "--model", "resnet50", "--synthetic", "--steps", "-3"], "positive integer"),
        (["eval", "--model", "resnet50", "--synthetic"], "required: --checkpoint"),
    ],
)
def test_flag_errors_exit_2_without_a_traceback(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"cvbench {argv[0]}: error:")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--model", "resnet9", "--synthetic"], "unknown model 'resnet9'; known:"),
        (["train", "--model", "resnet18", "--data-dir", "/no/such/dir"], "is not a directory"),
        (["train", "--model", "resnet18", "--synthetic", "--resume"], "needs a log_dir"),
        (["train", *TINY, "--compression", "fp16"], "compression='fp16' needs precision"),
        (["train", *TINY, "--schedule", "step"], "needs boundaries_epochs"),
        (["eval", *TINY, "--checkpoint", "/no/such/ckpt"], "does not exist"),
    ],
)
def test_bad_values_give_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cvbench: error: ") and message in err


def write_tiny_imagenet(directory, *, train=8, validation=6, classes=4):
    """ImageNet-format TFRecords: one train and one validation shard of 40x40 JPEGs."""
    for split, count in (("train", train), ("validation", validation)):
        shard = directory / f"{split}-00000-of-00001"
        write_jpeg_records(shard, count, num_classes=classes, prefix=split)
    return directory


@pytest.mark.slow
def test_train_eval_and_benchmark_a_tiny_run(tmp_path, capsys):
    run = tmp_path / "run"
    argv = [
        "train",
        *TINY,
        "--epochs",
        "1",
        "--steps-per-epoch",
        "3",
        "--log-dir",
        str(run),
        "--log-every",
        "1",
        "--burn-in",
        "1",
        "--no-progress",
        "--no-export",
        "--seed",
        "0",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "  Step Epoch Img/sec   Loss   LR" in out and "Images/sec:" in out
    assert "top1:" in out and "top5" not in out  # 4 classes: top-5 is 1.0 by construction
    assert (run / "checkpoints" / "ckpt-0000000003.npz").is_file()
    assert (run / "train_log.jsonl").is_file()

    # Evaluation, and a training benchmark, on (tiny) ImageNet TFRecords.
    data = ["--data-dir", str(write_tiny_imagenet(tmp_path / "imagenet"))]
    on_records = [a for a in TINY if a != "--synthetic"] + data
    results = tmp_path / "eval.json"
    assert cli.main(["eval", *on_records, "--checkpoint", str(run), "--json", str(results)]) == 0
    scores = json.loads(results.read_text())
    # 6 validation images: top-1 is a multiple of 1/6; no top-5 of 4 classes (always right).
    assert scores["top1"] * 6 == pytest.approx(round(scores["top1"] * 6))
    assert "top5" not in scores

    bench = tmp_path / "bench.json"
    argv = ["benchmark", *on_records, "--steps", "2", "--burn-in", "1", "--mode", "inference"]
    argv += ["--json", str(bench)]
    assert cli.main(argv) == 0
    summary = json.loads(bench.read_text())
    assert summary["steps"] == 2 and summary["mean"] > 0 and summary["model"] == "resnet18"
    assert "Images/sec:" in capsys.readouterr().out


def test_register_adds_the_three_commands():
    import argparse

    from cvbench.cli import benchmark as benchmark_cli

    parser = argparse.ArgumentParser(prog="cvbench")
    subparsers = parser.add_subparsers(dest="command")
    train_cli.register(subparsers)
    benchmark_cli.register(subparsers)
    assert set(parser._subparsers._group_actions[0].choices) == set(COMMANDS)
