"""Stage 1 of the demo: a ResNet classifier on the shapes TFRecords, top-1 on validation.

The real pieces, through the one task path (`cvbench.tasks.prepare_run`): `ClassificationTask`
(`imagenet_dataset` over the records `build_imagenet` wrote, cross-entropy with label
smoothing 0.1, top-1/top-5 over every validation image after each epoch) and the `Trainer`
(Adam with warmup + cosine, see `stage`; checkpoints, JSON-lines and TensorBoard logs;
Horovod when launched under horovodrun). One demo-specific choice: the augmentation
(`shapes_preprocessing`). NVIDIA's ImageNet crop (down to 5% of the image) would mostly cut a
shape in pieces, so training uses a left-right flip only and evaluation no central crop; the
shapes themselves vary in position, size, rotation and colour.
"""

from __future__ import annotations

import os
import time
from typing import Any

from cvbench.demo.config import DemoConfig
from cvbench.demo.data import DemoData
from cvbench.demo.shapes import SHAPE_NAMES
from cvbench.demo.stage import StageResult, prepare_stage


def shapes_preprocessing(image_size: int) -> tuple[Any, Any]:
    """The (train, eval) preprocessing functions that `imagenet_dataset` accepts.

    Train: `(image_bytes, boxes, seed[2]) -> float32 [S, S, 3]`: decode, bilinear resize to
    S x S, random left-right flip, ImageNet mean/std normalization. Eval:
    `image_bytes -> [S, S, 3]`, the same without the flip.
    """
    import tensorflow as tf

    from cvbench.data.read.preprocessing import normalize

    def decode(image_bytes: Any) -> Any:
        image = tf.io.decode_jpeg(image_bytes, channels=3)
        image = tf.image.resize(image, [image_size, image_size], method="bilinear")
        return tf.ensure_shape(image, [image_size, image_size, 3])

    def train(image_bytes: Any, boxes: Any, seed: Any) -> Any:
        del boxes  # the shapes records carry no boxes
        return normalize(tf.image.stateless_random_flip_left_right(decode(image_bytes), seed))

    def evaluate(image_bytes: Any) -> Any:
        return normalize(decode(image_bytes))

    return train, evaluate


def classification_task(data: DemoData, config: DemoConfig) -> Any:
    """The `ClassificationTask` over the demo's records (6 classes, flip-only augmentation),
    scored by the top-1 of eval and training validation (`top_k_accuracy(1, "top1")`)."""
    from cvbench.tasks import ClassificationTask, TaskOptions
    from cvbench.tasks.classification import top_k_accuracy

    train, evaluate = shapes_preprocessing(config.cls_image_size)
    options = TaskOptions(
        model=config.backbone,
        data_dir=str(data.cls_records),
        image_size=config.cls_image_size,
        num_classes=len(SHAPE_NAMES),
        label_smoothing=0.1,
    )
    return ClassificationTask(
        options,
        train_preprocess=train,
        eval_preprocess=evaluate,
        # eval's and training validation's top-1 (a non-finite logit row is wrong on every
        # backend); no top-5 of 6 classes
        metrics=lambda: [top_k_accuracy(1, "top1")],
    )


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
    run = prepare_stage(
        classification_task(data, config),
        config,
        "cls",
        log_dir=log_dir,
        precision=precision,
        distribution=distribution,
    )
    start = time.perf_counter()
    # The last epoch's validation pass is the final evaluation (nothing trains after it).
    metrics = run.fit(epochs=config.cls_epochs, evaluate="epoch")
    return StageResult.of(run, metrics, train_seconds=time.perf_counter() - start)
