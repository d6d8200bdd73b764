"""Stage 1 of the demo: a ResNet classifier on the shapes TFRecords, top-1 on validation.

The real pieces: `imagenet_dataset` over the records `build_imagenet` wrote, the `Trainer`
(Adam with warmup + cosine, see `stage`; label smoothing; checkpoints, JSON-lines and
TensorBoard logs; Horovod when launched under horovodrun), `Trainer.evaluate` for top-1 over every
validation image. One demo-specific choice: the augmentation. NVIDIA's ImageNet crop (down to
5% of the image) would mostly cut a shape in pieces, so training uses a left-right flip only
and evaluation no central crop; the shapes themselves vary in position, size, rotation and
colour.
"""

from __future__ import annotations

import os
import time
from typing import Any

import keras

from cvbench.demo.config import DemoConfig
from cvbench.demo.data import DemoData
from cvbench.demo.model import build_classifier
from cvbench.demo.shapes import SHAPE_NAMES
from cvbench.demo.stage import StageResult, adam_optimizer, epoch_logs, per_rank_batch


def _train_preprocess(image_size: int):
    import tensorflow as tf

    from cvbench.data.preprocessing import normalize

    def preprocess(image_bytes: Any, boxes: Any, seed: Any) -> Any:
        del boxes
        image = tf.io.decode_jpeg(image_bytes, channels=3)
        image = tf.image.resize(image, [image_size, image_size], method="bilinear")
        image = tf.image.stateless_random_flip_left_right(image, seed)
        return normalize(image)

    return preprocess


def _eval_preprocess(image_size: int):
    import tensorflow as tf

    from cvbench.data.preprocessing import normalize

    def preprocess(image_bytes: Any) -> Any:
        image = tf.io.decode_jpeg(image_bytes, channels=3)
        image = tf.image.resize(image, [image_size, image_size], method="bilinear")
        return normalize(tf.ensure_shape(image, [image_size, image_size, 3]))

    return preprocess


def train_classifier(
    data: DemoData,
    config: DemoConfig,
    *,
    log_dir: str | os.PathLike | None,
    precision: str,
    distribution: Any = "auto",
) -> StageResult:
    """Trains and evaluates the classifier.

    Args:
        data: the demo's data (classification TFRecords in `data.cls_records`).
        config: sizes, epochs, learning rate, seed.
        log_dir: the Trainer's folder (checkpoints, `train_log.jsonl`, `tensorboard/`).
        precision: the Trainer's precision.
        distribution: the Trainer's distribution ("auto": Horovod under horovodrun).

    Returns:
        A `StageResult` whose metrics hold `top1` and `loss` over the validation split.
    """
    from cvbench.data import imagenet_dataset, num_examples
    from cvbench.training import TrainConfig, Trainer, get_distribution
    from cvbench.training.losses import SparseCrossEntropy

    distribution = get_distribution(distribution)
    size = config.cls_image_size
    batch = per_rank_batch(config.cls_batch_size, distribution.size)
    records = str(data.cls_records)
    global_batch = batch * distribution.size
    steps = num_examples(records, "train") // global_batch
    if steps < 1:
        raise ValueError(
            f"{records} holds fewer training images than one global batch of {global_batch}"
        )
    trainer = Trainer(
        lambda: build_classifier(config.backbone, num_classes=len(SHAPE_NAMES), image_size=size),
        SparseCrossEntropy(label_smoothing=0.1),
        adam_optimizer(
            config.cls_lr,
            global_batch=global_batch,
            steps_per_epoch=steps,
            epochs=config.cls_epochs,
            warmup_epochs=0.3,
        ),
        precision=precision,
        distribution=distribution,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="top1")],
        config=TrainConfig(
            log_dir=None if log_dir is None else str(log_dir),
            log_every=config.log_every,
            burn_in_steps=5,
            keep_checkpoints=1,
            seed=config.seed,
            export=False,
        ),
    )

    def epoch_data(epoch: int) -> Any:
        return imagenet_dataset(
            records,
            "train",
            batch_size=batch,
            image_size=size,
            training=True,
            num_shards=trainer.size,
            shard_index=trainer.rank,
            seed=config.seed + epoch,
            train_preprocess=_train_preprocess(size),
        )

    validation = imagenet_dataset(
        records,
        "validation",
        batch_size=batch,
        image_size=size,
        training=False,
        num_shards=trainer.size,
        shard_index=trainer.rank,
        eval_preprocess=_eval_preprocess(size),
    )
    start = time.perf_counter()
    history = trainer.fit(
        epoch_data, epochs=config.cls_epochs, steps_per_epoch=steps, validation_data=validation
    )
    train_seconds = time.perf_counter() - start
    epochs = epoch_logs(history)
    # The last epoch's validation pass is the final evaluation (nothing trains after it).
    metrics = {k[len("val_") :]: v for k, v in epochs[-1].items() if k.startswith("val_")}
    throughput = getattr(trainer, "throughput", None)
    return StageResult(
        model=trainer.model,
        metrics=metrics,
        epochs=epochs,
        train_seconds=train_seconds,
        eval_seconds=0.0,
        images_per_second=None if throughput is None else float(throughput.mean),
        trainer=trainer,
    )
