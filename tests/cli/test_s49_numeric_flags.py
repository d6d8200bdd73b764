"""Numeric flags at 0, -1, NaN, infinity and huge values: refused by argparse types of
`cvbench.cli.args` with one line naming the flag and the value (exit 2), before any work.
`download-coco --timeout inf` ended in an `OverflowError` traceback (`nan`: a line naming
neither); `build-imagenet --workers -1` / `--seed -1` and `bench-input --warmup-batches -1`
were taken; `--workers 100000` would have started as many processes as chunks in flight;
`bench-input --image-size 100000` ended in TensorFlow's out-of-memory traceback."""

from __future__ import annotations

import argparse

import pytest

from cvbench.cli import build_parser
from cvbench.cli.args import (
    MAX_IMAGE_SIDE,
    MAX_TIMEOUT_SECONDS,
    MAX_WORKERS,
    image_side,
    timeout_seconds,
    worker_count,
)


def _refusal(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err.strip()


def test_timeout_seconds_bounds():
    assert MAX_TIMEOUT_SECONDS == 24 * 60 * 60  # a day
    assert timeout_seconds("86400") == 86400.0 and timeout_seconds("1e-3") == 0.001
    for text in ("0", "-1", "nan", "inf", "-inf", "86400.5", "1e30", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"got '{text}'$"):
            timeout_seconds(text)


def test_worker_count_bounds():
    assert MAX_WORKERS == 256 and worker_count("1") == 1 and worker_count("256") == 256
    for text, shown in (("0", "0"), ("-1", "-1"), ("257", "257"), ("1.5", "'1.5'")):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"1 to 256, got {shown}$"):
            worker_count(text)


@pytest.mark.parametrize("value", ["nan", "inf", "1e30", "0", "-1"])
def test_download_coco_timeout(value, capsys):
    line = _refusal(["download-coco", "dl", f"--timeout={value}"], capsys)
    assert line == (
        f"cvbench download-coco: error: argument --timeout: expected seconds > 0 and at most "
        f"86400 (a day), got '{value}' (see cvbench download-coco --help)"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["build-imagenet", "--raw-dir", "r", "--output-dir", "o"],
        ["build-coco", "o", "--coco-dir", "c"],
        ["download-coco", "dl", "--build-tfrecords", "o"],
    ],
)
@pytest.mark.parametrize(("value", "shown"), [("0", "0"), ("-1", "-1"), ("100000", "100000")])
def test_builder_workers(argv, value, shown, capsys):
    line = _refusal([*argv, f"--workers={value}"], capsys)
    assert line.endswith(
        f"error: argument --workers: expected an integer from 1 to 256, got {shown} "
        f"(see cvbench {argv[0]} --help)"
    )
    assert build_parser().parse_args([*argv, "--workers", "3"]).workers == 3


@pytest.mark.parametrize(("value", "shown"), [("-1", "-1"), (str(2**32), str(2**32))])
def test_build_imagenet_seed_is_a_seed(value, shown, capsys):
    # as build-coco's and train's --seed: NumPy's and TensorFlow's 32-bit seeds
    line = _refusal(["build-imagenet", "--raw-dir", "r", "--output-dir", "o",
                     f"--seed={value}"], capsys)  # fmt: skip
    assert line == (
        "cvbench build-imagenet: error: argument --seed: expected an integer from 0 to "
        f"4294967295, got {shown} (see cvbench build-imagenet --help)"
    )


def test_bench_input_warmup_batches(capsys):
    line = _refusal(["bench-input", "--warmup-batches=-1"], capsys)
    assert line == (
        "cvbench bench-input: error: argument --warmup-batches: expected an integer >= 0, "
        "got -1 (see cvbench bench-input --help)"
    )
    assert build_parser().parse_args(["bench-input", "--warmup-batches", "0"]).warmup_batches == 0


def test_image_side_is_the_model_files_bound():
    from cvbench.utils.model_file import MAX_INPUT_SIDE

    assert MAX_IMAGE_SIDE == MAX_INPUT_SIDE == 8192
    assert image_side("8192") == 8192


@pytest.mark.parametrize("flag", ["--image-size", "--image-height", "--image-width"])
@pytest.mark.parametrize(("value", "shown"), [("8193", "8193"), ("0", "0"), ("nan", "'nan'")])
def test_bench_input_image_sides(flag, value, shown, capsys):
    # --image-size 100000 ended in TensorFlow's ResourceExhaustedError traceback (a 100000 x
    # 100000 x 3 float tensor)
    line = _refusal(["bench-input", f"{flag}={value}"], capsys)
    assert line == (
        f"cvbench bench-input: error: argument {flag}: expected an integer from 1 to 8192, got "
        f"{shown} (see cvbench bench-input --help)"
    )


def test_bench_input_threads(capsys):
    line = _refusal(["bench-input", "--threads=100000"], capsys)
    assert "argument --threads: expected an integer from 1 to 256, got 100000" in line
    assert build_parser().parse_args(["bench-input", "--threads", "2"]).threads == 2
