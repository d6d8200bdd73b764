"""The input benchmark (`cvbench bench-input`, benchmarks/input_pipeline.py) on a few images."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from cvbench.data.input_bench import (
    InputBenchResult,
    PipelineRate,
    describe_records,
    photo_view_jpeg,
    run_input_benchmark,
    sample_photos,
    write_benchmark_records,
)

ARGS = ["--num-images", "8", "--image-height", "60", "--image-width", "80", "--batch-size", "4"]
ARGS += ["--image-size", "32", "--warmup-batches", "1", "--batches", "2", "--rounds", "1"]


def test_result_lines_and_ratios():
    result = InputBenchResult(
        fused=PipelineRate(300.0, 200.0, ((300.0, 200.0),)),
        baseline=PipelineRate(150.0, 125.0, ((150.0, 125.0),)),
        decode_ms=(2.0, 3.0),
        cores=2,
        nvidia_decode_ms=(2.0, 2.8),
    )
    assert result.ratio == 1.6  # 200 / 125 images per CPU-second
    assert result.wall_ratio == 2.0  # 300 / 150 images per second
    text = result.format()
    assert "ratio fused / baseline: 1.60x per core, 2.00x img/s" in text
    assert "300.0 img/s" in text and "125.0 img/s per core" in text
    assert "one image at a time: fused 2.00 ms/img, whole image 3.00 ms/img (1.50x)" in text
    assert "no fancy upscaling): fused 2.00 ms/img, whole image 2.80 ms/img (1.40x)" in text


def test_generated_records(tmp_path):
    from cvbench.data.tfrecord import iter_tfrecord

    total = write_benchmark_records(tmp_path, num_images=8, height=60, width=80, num_shards=2)
    shards = sorted(tmp_path.glob("train-*-of-00002"))
    assert len(shards) == 2
    assert sum(len(list(iter_tfrecord(p))) for p in shards) == 8
    assert total > 8 * 1000  # photo-like noise does not compress to nothing
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        run_input_benchmark(tmp_path, rounds=0)
    with pytest.raises(ValueError, match="source must be one of .* got 'noise'"):
        write_benchmark_records(tmp_path, num_images=1, source="noise")


def test_photo_views_are_distinct_crops_of_real_photos(tmp_path):
    import tensorflow as tf

    from cvbench.data.tfrecord import iter_tfrecord

    photos = sample_photos()
    assert photos["grace_hopper"].shape == (600, 512, 3)  # matplotlib's sample photograph

    # Views of one photograph have the requested size and differ (random scale, position and
    # mirroring), so the records are not copies of one image.
    rng = np.random.default_rng(0)
    views = [photo_view_jpeg(rng, photos["grace_hopper"], 60, 80, 90) for _ in range(3)]
    decoded = [tf.io.decode_jpeg(v).numpy() for v in views]
    assert all(d.shape == (60, 80, 3) for d in decoded)
    assert len(set(views)) == 3

    total = write_benchmark_records(
        tmp_path, num_images=4, height=60, width=80, num_shards=1, source="photos"
    )
    records = list(iter_tfrecord(tmp_path / "train-00000-of-00001"))
    assert len(records) == 4 and len(set(records)) == 4
    assert total > 4 * 500
    line = describe_records(4, total, 60, 80, source="photos")
    assert line.startswith("4 JPEGs 80x60 cut from photographs (grace_hopper")


def test_cli_and_script_print_both_pipelines(capsys):
    from cvbench.cli.imagenet import register

    parser = argparse.ArgumentParser(prog="cvbench")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench-input", *ARGS])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "records: 8 generated JPEGs 80x60" in out
    assert "fused decode-and-crop (cvbench):" in out and "decode whole image, then crop:" in out
    assert "ratio fused / baseline:" in out

    script = Path(__file__).parents[2] / "benchmarks" / "input_pipeline.py"
    spec = importlib.util.spec_from_file_location("input_pipeline_benchmark", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])  # the same options as `cvbench bench-input`
    assert exit_info.value.code == 0
    assert "--data-dir" in capsys.readouterr().out


def test_script_benchmarks_photo_records(capsys):
    script = Path(__file__).parents[2] / "benchmarks" / "input_pipeline.py"
    spec = importlib.util.spec_from_file_location("input_pipeline_benchmark", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([*ARGS, "--source", "photos"]) == 0
    out = capsys.readouterr().out
    assert "records: 8 JPEGs 80x60 cut from photographs (grace_hopper" in out
    assert "ratio fused / baseline:" in out and "decode-and-crop step alone" in out
    assert "NVIDIA's decoder options" in out
