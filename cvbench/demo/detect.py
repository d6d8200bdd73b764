"""Stage 2 of the demo: a small SSD on the shapes COCO TFRecords, COCO AP on validation.

The real pieces, through the one task path (`cvbench.tasks.prepare_run`): `DetectionTask`
(SSD320 v1.2's training data: `coco_dataset` with the OD API crop and flip and the SSD target
encoder; its focal + smooth-L1 loss; its evaluation: every validation image once across
ranks, post-processing, pycocotools COCOeval against the `instances_val.json` the builder
copied next to the records) and the `Trainer` (Adam with warmup + cosine, see `stage`). The
model is `cvbench.detection.ssd.build_ssd` with the demo's plain arguments (`demo_ssd`), whose
backbone starts from the classifier of stage 1, with batch norms that normalize with batch
statistics in training (SSD320 freezes them, which fine-tuning from ImageNet allows; the
demo's pyramid and head start from scratch, and frozen they reached AP 0.08 where trained
ones reached 0.29 after the same 300 steps of momentum SGD).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np

from cvbench.data.read.channel_means import IMAGENET_MEAN_RGB, IMAGENET_STD_RGB
from cvbench.demo.config import DemoConfig
from cvbench.demo.data import DemoData
from cvbench.demo.shapes import SHAPE_NAMES
from cvbench.demo.stage import StageResult, prepare_stage

#: The classifier's input normalization (`shapes_preprocessing` normalizes with the ImageNet
#: mean and standard deviation), so that the SSD's backbone can start from the classifier
#: trained a minute earlier.
IMAGENET_MEAN, IMAGENET_STD = IMAGENET_MEAN_RGB, IMAGENET_STD_RGB


def demo_ssd(
    config: DemoConfig, *, num_classes: int, classifier: keras.Model | None = None
) -> keras.Model:
    """SSD320 v1.2's architecture at the demo's size: `build_ssd` with `config.backbone`,
    `config.ssd_depth` channels (SSD320: 256), `config.ssd_head_layers` tower convolutions
    (SSD320: 4), batch norms trained with batch statistics and momentum 0.9 everywhere
    (SSD320's 0.997 would leave the moving statistics at 40% of their initial values after
    the demo's few hundred steps), and the classifier's input normalization. Its backbone
    starts from `classifier`'s weights when given."""
    from cvbench.detection.backbone import copy_backbone_weights
    from cvbench.detection.ssd import build_ssd

    model = build_ssd(
        num_classes=num_classes,
        backbone=config.backbone,
        image_size=config.det_image_size,
        depth=config.ssd_depth,
        head_layers=config.ssd_head_layers,
        freeze_batchnorm=False,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        bn_momentum=0.9,
        name="demo_ssd",
    )
    if classifier is not None:
        copy_backbone_weights(classifier, model)
    return model


def detection_task(
    data: DemoData, config: DemoConfig, *, classifier: keras.Model | None = None
) -> Any:
    """The `DetectionTask` over the demo's COCO records (6 classes, ids 1..6), building the
    demo's SSD."""
    from cvbench.tasks import DetectionTask, TaskOptions

    options = TaskOptions(
        model="ssd320",
        data_dir=str(data.det_records),
        image_size=config.det_image_size,
        num_classes=len(SHAPE_NAMES),
    )
    return DetectionTask(
        options,
        per_category=True,
        build=lambda num_classes, image_size: demo_ssd(
            config, num_classes=num_classes, classifier=classifier
        ),
    )


def train_detector(
    data: DemoData,
    config: DemoConfig,
    *,
    log_dir: str | os.PathLike | None,
    precision: str,
    classifier: keras.Model | None = None,
    distribution: Any = "auto",
) -> StageResult:
    """Trains the demo SSD and evaluates COCO AP on the validation split.

    Args:
        data: the demo's data (COCO TFRecords in `data.det_records`).
        config: sizes, epochs, learning rate, SSD width, seed.
        log_dir: the Trainer's folder.
        precision: the Trainer's precision.
        classifier: a trained classifier whose weights start the backbone (None: random).
        distribution: the Trainer's distribution.

    Returns:
        A `StageResult` whose metrics are COCOeval's 12 numbers (`AP`, `AP50`, ...) and
        `AP/<class>` per class.
    """
    run = prepare_stage(
        detection_task(data, config, classifier=classifier),
        config,
        "det",
        log_dir=log_dir,
        precision=precision,
        distribution=distribution,
    )
    start = time.perf_counter()
    run.fit(epochs=config.det_epochs, evaluate="none")
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    metrics = run.evaluate()
    return StageResult.of(
        run, metrics, train_seconds=train_seconds, eval_seconds=time.perf_counter() - start
    )


def sample_detections(
    model_file: str | os.PathLike, data: DemoData, *, count: int = 8
) -> tuple[list[np.ndarray], list[dict[str, np.ndarray]], int]:
    """Runs the saved SSD (`ssd.keras`, its own resize rule, anchors and post-processing:
    `cvbench.inference.detect`, as `cvbench predict` does) on the first `count` validation
    images, keeping every detection the file's post-processing keeps.

    Returns:
        (uint8 [H, W, 3] images, one dict per image with "boxes" float32 [K, 4] as COCO
        `[x, y, width, height]` pixels, "scores" [K] and "classes" int32 [K] class indices,
        the number of ground-truth objects in those images).
    """
    import json

    from PIL import Image

    from cvbench.inference.detection import detect

    coco = json.loads(Path(data.det_val_annotations).read_text())
    infos = sorted(coco["images"], key=lambda im: im["id"])[:count]
    paths = [Path(data.det_val_images) / info["file_name"] for info in infos]
    originals = []
    for path in paths:
        with Image.open(path) as im:
            originals.append(np.asarray(im.convert("RGB")))
    ids = {info["id"] for info in infos}
    num_objects = sum(1 for ann in coco["annotations"] if ann["image_id"] in ids)
    found = detect(model_file, [str(p) for p in paths], score_threshold=0.0, box_format="xywh")
    out = [
        {"boxes": d.boxes, "scores": d.scores, "classes": d.class_ids.astype(np.int32)}
        for d in found
    ]
    return originals, out, num_objects


def top_n_threshold(detections: list[dict[str, np.ndarray]], n: int) -> float:
    """The score of the `n`-th best detection over all images (their lowest if fewer).

    Drawing the boxes that score at least this shows the `n` most confident detections: with
    `n` the number of objects in the images, as many boxes as there are objects, whatever the
    scale of the scores (focal-loss detectors trained briefly score low but rank well).
    """
    scores = np.sort(np.concatenate([np.asarray(d["scores"]) for d in detections]))[::-1]
    if n < 1 or scores.size == 0:
        raise ValueError(f"need n >= 1 and at least one detection, got n={n}, {scores.size}")
    return float(scores[min(n, scores.size) - 1])
