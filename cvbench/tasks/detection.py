"""`DetectionTask`: SSD on COCO TFRecords (or synthetic data) for the Trainer and
`cvbench train/eval/benchmark`.

It wires the pieces that do the work:

- model: `cvbench.detection.ssd.ssd320` (90 classes at 320 by default), or any builder;
- data: `cvbench.data.coco_dataset` with the SSD target encoder
  (`cvbench.detection.targets.TargetEncoder` over `anchors.multiscale_anchors`);
- loss: `cvbench.detection.losses.SSDLoss` (focal + smooth L1); the L2 weight decay (4e-4) is
  a kernel regularizer of the model, so the optimizer adds none;
- evaluation: every validation image once across all ranks, detections gathered to every rank
  (`Distribution.allgather_rows`), COCOeval on rank 0 (`cvbench.detection.coco_eval`), the
  12 numbers sent back to every rank.

Recipe: the task's (`TaskOptions.recipe`, `ssd320_v1.2` unless named: momentum SGD 0.9, 0.16
per 256 images, cosine after a warmup of 8% of the run from 0.43332 x the peak, 3,200,000
images). Its backbone weights are only the ones asked for (`backbone_weights`, the CLI's
`--backbone-weights`): nothing downloads unasked.

Class ids: records built by `cvbench build-coco` carry `dataset_info.json`
(`cvbench.data.dataset_info`), which lists their categories. By default index = COCO id - 1
for as many classes as the largest category id (SSD320's 90-class map for COCO 2017; 6 for
categories 1..6), named after the categories ("N/A" for an id no category has);
`num_classes` equal to the number of categories selects index = rank of the id (80 for COCO
2017: `CocoLabelMap.coco80`); any other `num_classes` is an error naming both numbers. Records
without the file need `num_classes` (index = COCO id - 1, except that 80 selects
`CocoLabelMap.coco80`). Synthetic data: 90 classes (SSD320's map) by default.

Ground truth for evaluation: `annotations_file` when given, else `instances_val2017.json` or
`instances_val.json` found in `data_dir` or `data_dir/annotations`, else rebuilt from the
validation records (`groundtruth_from_records`; the official numbers need the official file).
Boxes are `[ymin, xmin, ymax, xmax]` normalized inside, COCO `[x, y, w, h]` pixels in the
detections handed to COCOeval.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np

from cvbench.data.coco_labels import CocoLabelMap
from cvbench.detection.coco_eval import BACKENDS
from cvbench.tasks.base import (
    DATA_CLASSES_REASON,
    SYNTHETIC_EVAL_BATCHES,
    RecordTask,
    TaskOptions,
    class_count_error,
    records_info,
)
from cvbench.tasks.recipes import fit_classes
from cvbench.tasks.recipes.plan import builder_arguments
from cvbench.utils.model_file import DetectionSettings, InputSettings, ModelInfo, NmsSettings
from cvbench.zoo import DETECTION, get_model, list_models

_ANNOTATION_NAMES = ("instances_val2017.json", "instances_val.json")
_DETECTION_COLUMNS = 7  # image_id, category_id, x, y, w, h, score


class DetectionTask(RecordTask):
    """SSD on COCO TFRecords (or synthetic data); see the module docstring.

    Args:
        options: the task options: `model` ("ssd320"), `data_dir` (COCO TFRecords from
            `cvbench build-coco`, or None for synthetic data), `image_size` (default 320),
            `num_classes` (default: the records' categories, see the module docstring;
            90 on synthetic data), `synthetic_steps`.
        annotations_file: the validation annotation JSON for COCOeval (default: looked for in
            `data_dir`, else rebuilt from the records).
        backend: "pycocotools" or "faster" (faster-coco-eval, same numbers).
        per_category: also report `AP/<category>`.
        detections_path: where rank 0 writes the detections JSON (default: none).
        backbone_weights: the backbone's starting point: "imagenet" (keras.applications'
            ResNet-50 `_notop` file, fetched and cached), a weight file, or None: the
            resolved recipe's (None unless asked for: random initialization, which
            `prepare_run` refuses to train with frozen batch norms, `check_trainable`).
        backbone: the backbone name; None: the recipe's ("resnet50_v1").
        build: a function `(num_classes, image_size) -> keras.Model` with SSD320's outputs
            and anchors, instead of `ssd320` (e.g. the demo's small `ssd`).

    `num_classes`, `label_map` and `class_names` (model index -> category name; None without
    the records' `dataset_info.json`) follow the rules of the module docstring.

    Raises:
        ValueError: an unknown model or backend; records without metadata and no
            `num_classes`; a `num_classes` that fits neither map of the metadata (naming both
            numbers and the file).

    Example:
        >>> task = DetectionTask(TaskOptions(model="ssd320", data_dir=None, image_size=128))
        >>> task.num_classes, task.anchors.shape
        (90, (2046, 4))
    """

    name = DETECTION
    evaluation_split = "val"
    #: What can read its records: tf.data only.
    data_backends = ("tf",)

    @classmethod
    def models(cls) -> list[str]:
        return list_models(task=DETECTION)

    def __init__(
        self,
        options: TaskOptions,
        *,
        annotations_file: str | os.PathLike | None = None,
        backend: str = "pycocotools",
        per_category: bool = False,
        detections_path: str | os.PathLike | None = None,
        backbone_weights: str | os.PathLike | None = None,
        backbone: str | None = None,
        build: Callable[[int, int], keras.Model] | None = None,
    ) -> None:
        if options.model not in self.models():
            known = ", ".join(self.models())
            raise ValueError(f"unknown detection model {options.model!r}; known: {known}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.options = options
        self.label_map, self.class_names = _label_map(options)
        self.num_classes = self.label_map.num_classes
        recipe = fit_classes(options.recipe, self.num_classes, reason=DATA_CLASSES_REASON)
        changes = {"detection.backbone_weights": backbone_weights, "detection.backbone": backbone}
        for knob, value in changes.items():
            if value is not None:
                recipe = recipe.with_overrides({knob: value}, reason=knob.split(".")[1])
        self.recipe = recipe
        self.image_size = recipe.detection.image_size
        self.annotations_file = annotations_file
        self.backend = backend
        self.per_category = per_category
        self.detections_path = detections_path
        self._build = build
        self._anchors: np.ndarray | None = None

    @property
    def detection_settings(self) -> DetectionSettings:
        """How this task's SSD outputs become boxes (`ModelInfo.detection`): the recipe's
        box-coder scales and post-processing knobs, SSD320 v1.2's anchors. Training targets,
        evaluation and every model file use these (`cvbench.detection.predict`)."""
        from cvbench.detection.predict import ssd_detection_settings

        d = self.recipe.detection
        nms = NmsSettings(
            iou_threshold=d.iou_threshold,
            score_threshold=d.score_threshold,
            max_per_class=d.max_per_class,
            max_total=d.max_total,
        )
        return ssd_detection_settings(scales=d.box_coder_scales, nms=nms)

    @property
    def anchors(self) -> np.ndarray:
        """float32 [N, 4] anchors of `image_size`, `[ymin, xmin, ymax, xmax]` normalized."""
        if self._anchors is None:
            from cvbench.detection.predict import Decoder

            size = (self.image_size, self.image_size)
            self._anchors = Decoder(self.detection_settings, size).anchors
        return self._anchors

    def model_kwargs(self) -> dict[str, Any]:
        """The builder's arguments: the recipe's backbone, its weights, batch-norm freezing
        and L2 weight, and the task's classes and size (`builder_arguments`). Without the
        backbone's weights when a checkpoint restores every weight (`restoring`): their
        file may have moved since the run began."""
        return builder_arguments(self.recipe, starting_weights=not self.restoring)

    def check_trainable(self) -> None:
        """Refuses to train an SSD whose every batch norm is frozen on a random backbone.

        Raises:
            ValueError: `freeze_batchnorm` (the recipe's, the builder's default) without
                backbone weights, saying why and what to pass.
        """
        if self._build is not None:
            return  # a builder of its own (the demo's small SSD) chooses for itself
        kwargs = builder_arguments(self.recipe)  # the run's start, restored or not
        if kwargs.get("freeze_batchnorm", True) and kwargs.get("backbone_weights") is None:
            raise ValueError(frozen_backbone_message(self.options.model))

    def build_model(self) -> keras.Model:
        if self._build is not None:
            return self._build(self.num_classes, self.image_size)
        return get_model(self.options.model, **self.model_kwargs())

    def loss(self) -> Callable:
        from cvbench.detection.losses import SSDLoss

        return SSDLoss()

    def metrics(self) -> list:
        return []

    # ----------------------------------------------------------------- data
    def _encoder(self) -> Any:
        from cvbench.detection.targets import TargetEncoder

        scales = self.detection_settings.scales
        return TargetEncoder(self.anchors, num_classes=self.num_classes, scales=scales)

    def synthetic_batch(self, batch_size: int, seed: int) -> tuple[np.ndarray, dict]:
        """Pixels uniform in [0, 255] and two random boxes per image with random classes,
        encoded as real targets: NumPy `(images [B, S, S, 3], {"boxes": [B, N, 5],
        "classes": [B, N, C + 1]})`."""
        rng = np.random.default_rng(seed)
        images = rng.uniform(0, 255, (batch_size, self.image_size, self.image_size, 3))
        corners = np.sort(rng.uniform(0, 1, (batch_size, 2, 2, 2)), axis=2)  # y/x pairs
        boxes = corners.transpose(0, 1, 3, 2).reshape(batch_size, 2, 4)[..., [0, 2, 1, 3]]
        labels = rng.integers(0, self.num_classes, (batch_size, 2)).astype(np.int32)
        from cvbench.detection.targets import encode_targets  # keras.ops: any backend

        scales = self.detection_settings.scales
        per_image = [
            encode_targets(
                self.anchors,
                boxes[i].astype(np.float32),
                labels[i],
                num_classes=self.num_classes,
                scales=scales,
            )
            for i in range(batch_size)
        ]
        targets = {
            key: np.stack([keras.ops.convert_to_numpy(t[key]) for t in per_image])
            for key in ("boxes", "classes")
        }
        return images.astype(np.float32), targets

    def dataset_fn(self) -> Callable[..., Any]:
        from cvbench.data import coco_dataset

        return coco_dataset

    def count_records(self, split: str) -> int:
        from cvbench.data.read.coco import num_examples

        return num_examples(self.options.data_dir, split, skip_corrupt=self.options.skip_corrupt)

    def split_files(self, split: str) -> list[str]:
        """The shard files of `split` (`coco_<split>.record-NNNNN-of-NNNNN`)."""
        from cvbench.data.coco_schema import record_prefix
        from cvbench.data.read.splits import list_split_files

        return list_split_files(self.options.data_dir, record_prefix(split))

    def dataset_options(self) -> dict[str, Any]:
        return {"label_map": self.label_map}

    def train_options(self) -> dict[str, Any]:
        """`coco_dataset`'s training options: the SSD target encoder and the recipe's
        augmentation knobs (`detection.flip`, `detection.crop_*`, `detection.color_jitter`)."""
        from cvbench.data.read.coco_augment import DetectionAugmentation

        d = self.recipe.detection
        augmentation = DetectionAugmentation(
            flip=d.flip,
            crop_aspect_range=d.crop_aspect_range,
            crop_area_range=d.crop_area_range,
            crop_min_object_covered=d.crop_min_object_covered,
            color_jitter=d.color_jitter,
        )
        return {"target_encoder": self._encoder(), "augmentation": augmentation}

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, trainer: Any, *, batch_size: int) -> dict[str, float]:
        """COCO box AP/AR over the whole validation split; identical on every rank.

        Every rank runs the model over its share of the images; detections are gathered,
        rank 0 runs COCOeval (printing the 12-line table) and writes the detections JSON;
        the numbers are then broadcast. On synthetic data (no COCO ground truth) it reports
        `detections_per_image` over two random batches instead.
        """
        from cvbench.detection.coco_eval import evaluate_coco
        from cvbench.detection.predict import predict_coco

        if self.options.data_dir is None:
            batch = self.synthetic_batch(batch_size, 1)[0]
            meta = {
                "image_id": np.arange(batch_size),
                "image_size": np.full((batch_size, 2), self.image_size),
                "valid": np.ones(batch_size, bool),
            }
            dets, _ = predict_coco(
                trainer.model,
                [(batch, meta)] * SYNTHETIC_EVAL_BATCHES,
                self.label_map.category_ids,
                settings=self.detection_settings,
            )
            per_image = len(dets) / (SYNTHETIC_EVAL_BATCHES * batch_size)
            return {"detections_per_image": float(per_image)}

        dist = trainer.distribution
        data = self.read(
            self.evaluation_split, batch_size=batch_size, distribution=dist, training=False
        )
        dets, image_ids = predict_coco(
            trainer.model, data, self.label_map.category_ids, settings=self.detection_settings
        )
        rows = dist.allgather_rows(_detections_to_rows(dets))
        all_ids = dist.allgather_rows(np.asarray(image_ids, np.float64).reshape(-1, 1))
        self.check_evaluated(len(all_ids), self.evaluation_split, dist)  # not AP -1 over no image
        metrics: dict[str, float] | None = None
        if dist.is_chief:
            ids = all_ids[:, 0].astype(np.int64)
            if len(np.unique(ids)) != len(ids):
                raise RuntimeError("an evaluation image was seen twice across ranks (a bug)")
            metrics = evaluate_coco(
                _rows_to_detections(rows),
                self._groundtruth(),
                image_ids=ids.tolist(),
                backend=self.backend,
                per_category=self.per_category,
                detections_path=self.detections_path,
            )
        return dist.broadcast_object(metrics)

    # ----------------------------------------------------------------- model files
    def model_info(self) -> ModelInfo:
        """What inference needs: class names (the dataset's, else COCO's category names for
        80 or 90 classes, else `"0"`, `"1"`, ...), the input size (stretched to, as the
        data pipeline does), and the anchors, box-coder scales and post-processing settings
        this task trains and evaluates with (`detection_settings`)."""
        from cvbench.data.coco_labels import COCO_2017_CATEGORIES

        names = getattr(self, "class_names", None)
        if not names and self.num_classes in (80, 90):
            coco = dict(COCO_2017_CATEGORIES)
            names = [coco.get(i, f"coco_id_{i}") for i in self.label_map.category_ids]
        names = names or [str(i) for i in range(self.num_classes)]
        return ModelInfo.of(
            task="detection",
            class_names=names,
            inputs=InputSettings(image_size=(self.image_size, self.image_size), resize="stretch"),
            detection=self.detection_settings,
            model=self.options.model,
        )

    def user_model(self, model: keras.Model) -> keras.Model:
        """The trained `model` as users get it: built-in Keras layers only
        (`to_plain_keras`; the SSD normalizes its `[0, 255]` input itself)."""
        from cvbench.utils.plain_keras import to_plain_keras

        return to_plain_keras(model)

    def postprocess(self) -> Any:
        """`outputs -> detections` of this task's SSD: decoding over the anchors and per-class
        NMS with `detection_settings` (`cvbench.detection.predict.Decoder`)."""
        from cvbench.detection.predict import Decoder

        return Decoder(self.detection_settings, (self.image_size, self.image_size))

    def from_user_model(self, model: keras.Model) -> keras.Model:
        """A model taking `[0, 255]` RGB (a model file's) as this task's evaluation pipeline
        feeds it: as it is (the detection pipeline hands out `[0, 255]` RGB)."""
        return model

    def _groundtruth(self) -> Any:
        """The annotation file (given or found in data_dir), else a dict from the records."""
        if self.annotations_file is not None:
            return self.annotations_file
        data_dir = Path(self.options.data_dir)
        for folder in (data_dir, data_dir / "annotations"):
            for name in _ANNOTATION_NAMES:
                if (folder / name).is_file():
                    return folder / name
        from cvbench.data.coco_schema import groundtruth_from_records
        from cvbench.data.read.coco import list_record_files

        print(
            f"cvbench: no {_ANNOTATION_NAMES[0]} in {data_dir}: ground truth rebuilt from the "
            "validation records (pass annotations_file for the official numbers)",
            flush=True,
        )
        return groundtruth_from_records(list_record_files(data_dir, "val"))


def frozen_backbone_message(model: str) -> str:
    """Why an SSD with frozen batch norms needs backbone weights, and what to pass."""
    return (
        f"{model} freezes every batch norm (freeze_batchnorm, as the reference), so without "
        "backbone weights it would train a random ResNet-50 backbone whose batch norms stay at "
        "their initial statistics: pass --backbone-weights imagenet or --backbone-weights PATH "
        "(a keras.applications ResNet-50 _notop file; Python: backbone_weights=...)"
    )


def _label_map(options: TaskOptions) -> tuple[CocoLabelMap, tuple[str, ...] | None]:
    """The class index <-> COCO id map and the class names (see the module docstring)."""
    info = records_info(options, kind="coco")
    if info is None:
        num_classes = options.recipe.detection.num_classes
        if num_classes == 80:
            return CocoLabelMap.coco80(), None
        return CocoLabelMap(tuple(range(1, num_classes + 1))), None
    ids = info.category_ids
    if options.num_classes in (None, max(ids)):  # index = id - 1
        names = dict(zip(ids, info.class_names, strict=True))
        width = max(ids)
        return (
            CocoLabelMap(tuple(range(1, width + 1))),
            tuple(names.get(i, "N/A") for i in range(1, width + 1)),
        )
    if options.num_classes == info.num_classes:  # index = rank of the id
        return CocoLabelMap(ids), info.class_names
    raise class_count_error(
        options,
        info,
        default=max(ids),
        note=""
        if max(ids) == info.num_classes
        else f" (index = category id - 1), or pass {info.num_classes} for index = rank of the id",
    )


def _detections_to_rows(dets: list[dict[str, Any]]) -> np.ndarray:
    rows = [(d["image_id"], d["category_id"], *d["bbox"], d["score"]) for d in dets]
    return np.asarray(rows, np.float64).reshape(-1, _DETECTION_COLUMNS)


def _rows_to_detections(rows: np.ndarray) -> list[dict[str, Any]]:
    return [
        {
            "image_id": int(r[0]),
            "category_id": int(r[1]),
            "bbox": [float(v) for v in r[2:6]],
            "score": float(r[6]),
        }
        for r in rows
    ]
