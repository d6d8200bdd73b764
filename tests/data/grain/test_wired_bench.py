"""`cvbench bench-input --data-backend grain`: the grain pipeline measured beside tf.data
(and DALI CPU) on the same records, training and evaluation, per core."""

from __future__ import annotations

from cvbench.benchmark.input_bench import (
    Comparison,
    InputBenchResult,
    PipelineRate,
    run_input_benchmark,
    write_benchmark_records,
)
from cvbench.cli import main


def _rate(wall, cpu):
    return PipelineRate(wall, cpu, ((wall, cpu),))


def test_the_table_has_grains_rows_and_its_ratio_to_tf_data_per_core():
    result = InputBenchResult(
        training=Comparison("training", _rate(300.0, 200.0), None, _rate(150.0, 250.0)),
        evaluation=Comparison("evaluation", _rate(400.0, 300.0), None, _rate(120.0, 150.0)),
        threads=2,
        cores=2,
        dali_missing="no DALI",
    )
    lines = result.format().splitlines()
    assert "training    grain (1 process)     150.0         250.0" in lines
    assert "evaluation  grain (1 process)     120.0         150.0" in lines
    # per core: 250 / 200 = 1.25, 150 / 300 = 0.50
    assert "ratio grain / tf.data per core: training 1.25x, evaluation 0.50x" in lines


def test_run_input_benchmark_measures_grain_on_the_same_records(tmp_path):
    write_benchmark_records(tmp_path, num_images=8, height=60, width=80, num_shards=2)
    result = run_input_benchmark(
        tmp_path, batch_size=4, image_size=32, warmup_batches=1, batches=3, rounds=1, grain=True
    )
    for c in (result.training, result.evaluation):
        assert c.grain.images_per_s > 0 and c.grain.images_per_cpu_s > 0 and c.grain_ratio > 0
    # evaluation passes restart: 3 timed batches + 1 warm-up of 4 from 8 records is 2 passes
    assert list(tmp_path.iterdir()) and not (tmp_path / "idx").exists()  # data_dir only read


def test_cvbench_bench_input_data_backend_grain_prints_its_rows(capsys):
    argv = ["bench-input", "--num-images", "8", "--image-height", "60", "--image-width", "80"]
    argv += ["--batch-size", "4", "--image-size", "32", "--warmup-batches", "1"]
    argv += ["--batches", "2", "--rounds", "1", "--threads", "1", "--data-backend", "grain"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("grain (1 process)") == 2 and "ratio grain / tf.data per core: " in out
