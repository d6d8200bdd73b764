"""`write_benchmark_records` without TensorFlow (`tfrecord_frame`): the frames tf.data reads
with their checksums checked, written where TensorFlow cannot be imported (the GPU machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from cvbench.benchmark.input_bench import tfrecord_frame


def test_frames_equal_tensorflows_writer_byte_for_byte(tmp_path):
    import tensorflow as tf

    records = [b"", b"abc", bytes(range(256)) * 40]
    path = tmp_path / "tf.record"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    assert path.read_bytes() == b"".join(tfrecord_frame(r) for r in records)


@pytest.mark.slow
def test_benchmark_records_are_written_without_tensorflow_and_read_by_both_readers(tmp_path):
    blocker = tmp_path / "no_tf" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no TensorFlow here')\n")
    out = tmp_path / "records"
    code = textwrap.dedent(
        f"""
        from cvbench.benchmark.input_bench import write_benchmark_records
        write_benchmark_records({str(out)!r}, num_images=6, height=40, width=48, num_shards=2)
        """
    )
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(blocker.parent))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    from cvbench.data.grain.dataset import imagenet_grain_dataset
    from cvbench.data.read.imagenet import imagenet_dataset

    read = {"batch_size": 2, "training": False, "image_size": 16}
    theirs = list(imagenet_dataset(out, "train", **read))  # tf.data checks every CRC
    ours = list(imagenet_grain_dataset(out, "train", **read))
    assert len(ours) == len(theirs) == 3 and sum(float(b[2].sum()) for b in ours) == 6.0
