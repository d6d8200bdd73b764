"""`cvbench train --data-backend grain --skip-corrupt` on records with a damaged record and an
undecodable JPEG in the training split: without the flag one line naming the file and record
(exit 1); with it the run completes and reports the two records; and (heavy) a real SIGKILL
mid-epoch then `--resume`, with TensorFlow blocked on JAX, gives every step's loss and the
final weights bit-identical to a run never killed, the damaged records being replaced by the
same records in both."""

from __future__ import annotations

from pathlib import Path

import pytest
from grain_runs import (
    assert_same_run,
    final_state,
    finish,
    kill_at_hold,
    start_train,
    tensorflow_blocker,
)

from cvbench.cli import main

pytestmark = pytest.mark.backend_agnostic

# 24 training records (6 classes x 4), batch 4: 6 steps an epoch, every record read each
# epoch, so both damaged records fall inside every epoch. Shard 0 position 1 is no
# tf.train.Example; shard 0 position 3 an Example whose image is not a JPEG. Validation
# record 2 (of 6) is no tf.train.Example either.
COMMON = [
    "--model", "resnet18", "--image-size", "32", "--batch-size", "4", "--seed", "1",
    "--precision", "fp32", "--eval", "none", "--no-export", "--no-progress",
    "--data-backend", "grain",
]  # fmt: skip


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    import tensorflow as tf

    from cvbench.data import build_imagenet
    from cvbench.data.grain.records import parse_example
    from cvbench.data.tfrecord import imagenet_example
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("skip_cli")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=4, val_per_class=1, seed=0
    )
    out = root / "records"
    build_imagenet(raw.path, out, train_shards=2, val_shards=1, num_workers=1, progress=False)
    shard = out / "train-00000-of-00002"
    records = list(tf.data.TFRecordDataset(str(shard)).as_numpy_iterator())
    label = parse_example(records[3])["label"] + 1  # stored 1-based
    records[1] = b"\x07\x07\x07"
    records[3] = imagenet_example(
        encoded=b"no image", height=32, width=32, label=label, synset="n0", text="t",
        filename="bad.JPEG",
    )  # fmt: skip
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in records:
            writer.write(record)
    validation = out / "validation-00000-of-00001"
    records = list(tf.data.TFRecordDataset(str(validation)).as_numpy_iterator())
    records[2] = b"\x07\x07\x07"  # of the 6 validation records, 5 remain
    with tf.io.TFRecordWriter(str(validation)) as writer:
        for record in records:
            writer.write(record)
    for index in (out / "idx").glob("*"):  # stale now: the records are scanned
        index.unlink()
    return out


def test_without_the_flag_training_stops_with_one_line_naming_the_record(damaged, tmp_path, capsys):
    argv = ["train", *COMMON, "--data-dir", str(damaged), "--epochs", "1"]
    assert main([*argv, "--log-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip()
    # on JAX a notice that TensorBoard scalars need TensorFlow comes first: not an error
    errors = [line for line in err.splitlines() if "TensorBoard" not in line]
    assert len(errors) == 1 and "Traceback" not in err
    assert "train-00000-of-00002 record" in errors[0] and "pass --skip-corrupt" in errors[0]


@pytest.mark.slow
def test_with_the_flag_train_and_eval_complete_and_report_the_records(damaged, tmp_path, capfd):
    argv = ["train", *COMMON, "--data-dir", str(damaged), "--epochs", "1", "--skip-corrupt"]
    assert main([*argv, "--log-dir", str(tmp_path / "run")]) == 0
    out, err = capfd.readouterr()
    assert "cvbench: skipped 2 corrupt records (--skip-corrupt)" in out
    skipped = sorted(line for line in err.splitlines() if "skipped corrupt input" in line)
    assert len(skipped) == 2
    assert "record 1: not an ImageNet tf.train.Example" in skipped[0]
    assert "record 3 (bad.JPEG): undecodable image" in skipped[1]
    evaluate = ["eval", *COMMON[:10], "--data-backend", "grain", "--data-dir", str(damaged)]
    evaluate += ["--checkpoint", str(tmp_path / "run")]
    assert main(evaluate) == 1
    assert "validation-00000-of-00001 record 2" in capfd.readouterr().err
    assert main([*evaluate, "--skip-corrupt"]) == 0
    out, err = capfd.readouterr()
    assert "cvbench: skipped 1 corrupt record (--skip-corrupt)" in out
    assert "validation-00000-of-00001 record 2: not an ImageNet" in err


# ---- heavy: kill -9 mid-epoch and resume, with TensorFlow blocked -----------------------

# checkpoints every 4 steps and at the epoch ends: a kill after step 5 resumes at step 4
# (batch 4 of epoch 1: the damaged records are replaced before and after that point)
RESUME = [
    "--backend", "jax", "--epochs", "2", "--checkpoint-every", "4", "--keep-checkpoints", "10",
    "--log-every", "1", "--burn-in", "0", "--deterministic", "--skip-corrupt",
]  # fmt: skip


def _train(records, log_dir, blocker, *extra, hold=None):
    argv = ["train", *COMMON, *RESUME, "--data-dir", str(records)]
    return start_train(argv, log_dir, blocker, *extra, hold=hold)


@pytest.mark.slow
@pytest.mark.heavy
def test_sigkill_mid_epoch_then_resume_past_skipped_records_is_bit_identical(damaged, tmp_path):
    blocker = tensorflow_blocker(tmp_path / "no_tf")
    reference = finish(_train(damaged, tmp_path / "reference", blocker))
    assert "cvbench: skipped 2 corrupt records (--skip-corrupt)" in reference
    kill_at_hold([_train(damaged, tmp_path / "run", blocker, hold="after_step:5")], 5)
    out = finish(_train(damaged, tmp_path / "run", blocker, "--resume"))
    assert "(step 4)" in out, out[-2000:]
    assert "cvbench: skipped 2 corrupt records (--skip-corrupt)" in out  # epoch 2 meets both
    want = final_state(tmp_path / "reference", 12)
    assert_same_run(final_state(tmp_path / "run", 12), want, 12)
