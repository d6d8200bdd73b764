"""The input benchmark (`cvbench bench-input`, benchmarks/input_pipeline.py) on a few images."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from cvbench.benchmark.input_bench import (
    Comparison,
    InputBenchResult,
    PipelineRate,
    describe_records,
    photo_view_jpeg,
    run_input_benchmark,
    sample_photos,
    write_benchmark_records,
)
from cvbench.utils.cpu import describe_cpu

ARGS = ["--num-images", "8", "--image-height", "60", "--image-width", "80", "--batch-size", "4"]
ARGS += ["--image-size", "32", "--warmup-batches", "1", "--batches", "2", "--rounds", "1"]


def test_result_lines_and_ratios():
    def rate(wall, cpu):
        return PipelineRate(wall, cpu, ((wall, cpu),))

    result = InputBenchResult(
        training=Comparison("training", rate(300.0, 200.0), rate(150.0, 250.0)),
        evaluation=Comparison("evaluation", rate(400.0, 300.0), rate(400.0, 200.0)),
        threads=2,
        cores=2,
    )
    assert result.training.ratio == 0.8  # 200 / 250 images per CPU-second
    assert result.training.wall_ratio == 2.0  # 300 / 150 images per second
    assert result.evaluation.ratio == 1.5  # 300 / 200
    text = result.format()
    assert "same records and recipe, 2 threads each, 2 cores" in text
    assert "training    tf.data (cvbench)     300.0         200.0" in text
    assert "evaluation  DALI CPU              400.0         200.0" in text
    assert text.endswith(
        "ratio cvbench / DALI CPU: training 0.80x per core (2.00x img/s), "
        "evaluation 1.50x per core (1.00x img/s)"
    )
    missing = InputBenchResult(
        Comparison("training", rate(1.0, 1.0), None),
        Comparison("evaluation", rate(1.0, 1.0), None),
        threads=1,
        cores=1,
        dali_missing="no DALI",
    )
    assert missing.training.ratio is None
    assert missing.format().endswith("DALI CPU: not measured (no DALI)")


@pytest.mark.parametrize("num_images, shards", [(1, 1), (3, 3), (4, 4), (9, 4)])
def test_fewer_images_than_shards_write_no_empty_shard(tmp_path, num_images, shards):
    # Regression (review of stop 47): 3 images in 4 shards left a 0-byte shard, which the one
    # listing refuses as a truncated copy: `bench-input --num-images 3` failed on its own data.
    from cvbench.data.read.splits import list_split_files

    write_benchmark_records(tmp_path, num_images=num_images, height=16, width=16, num_shards=4)
    files = list_split_files(tmp_path, "train")
    assert len(files) == shards  # min(4, num_images)
    assert all(os.path.getsize(f) > 0 for f in files)


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
    assert out.startswith(f"cpu: {describe_cpu()}\nrecords: 8 generated JPEGs 80x60")
    for mode in ("training", "evaluation"):
        assert f"{mode:11s} tf.data (cvbench) " in out and f"{mode:11s} DALI CPU " in out
    assert "ratio cvbench / DALI CPU: training " in out and "x per core" in out

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
    assert module.main([*ARGS, "--source", "photos", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "records: 8 JPEGs 80x60 cut from photographs (grace_hopper" in out
    assert "1 threads each" in out and "ratio cvbench / DALI CPU: training " in out


def test_without_dali_only_tf_data_is_measured(tmp_path, monkeypatch):
    import sys

    write_benchmark_records(tmp_path, num_images=8, height=60, width=80, num_shards=2)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    result = run_input_benchmark(
        tmp_path, batch_size=4, image_size=32, warmup_batches=1, batches=2, rounds=1
    )
    assert result.training.dali_cpu is None and result.evaluation.tf_data.images_per_s > 0
    assert "pip install 'cvbench[dali]'" in result.format()
    assert list(tmp_path.iterdir()) and not (tmp_path / "idx").exists()  # data_dir only read
