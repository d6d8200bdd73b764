"""The evaluation model loop: an SSD model over a COCO evaluation stream -> COCO results.

`predict_coco` runs the model batch by batch, post-processes (`cvbench.detection.postprocess`)
and converts the detections of the real (not padding) images to COCO result dicts with
`cvbench.detection.coco_eval.detections_to_coco`; `coco_eval.evaluate_coco` scores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cvbench.detection.coco_eval import detections_to_coco


def predict_coco(
    model: Any,
    dataset: Any,
    coco_category_ids: Sequence[int],
    *,
    anchors: np.ndarray | None = None,
    **postprocess_kwargs: Any,
) -> tuple[list[dict[str, Any]], list[int]]:
    """Runs an SSD model over an evaluation stream and returns COCO result dicts.

    Args:
        model: a model built by `cvbench.detection.ssd.ssd320` (dict outputs).
        dataset: `(images, meta)` batches of `cvbench.data.coco_dataset(training=False)`
            (meta: `image_id` [B], `image_size` [B, 2], `valid` [B]).
        coco_category_ids: the label map (the COCO id of each class index).
        anchors: the model's anchors; default `multiscale_anchors` of its input size.
        **postprocess_kwargs: thresholds for `postprocess.postprocess`.

    Returns:
        `(detections, image_ids)`: the result dicts of the real (not padding) images, in
        original pixels and COCO ids, and the ids of every image seen.
    """
    import keras

    from cvbench.detection.anchors import multiscale_anchors
    from cvbench.detection.postprocess import postprocess

    if anchors is None:
        anchors = multiscale_anchors(tuple(model.input_shape[1:3]))
    detections: list[dict[str, Any]] = []
    image_ids: list[int] = []
    for images, meta in dataset:
        outputs = model.predict_on_batch(keras.ops.convert_to_numpy(images))
        dets = postprocess(outputs["boxes"], outputs["classes"], anchors, **postprocess_kwargs)
        valid = np.asarray(meta["valid"], bool)
        ids = np.asarray(meta["image_id"])
        detections += detections_to_coco(
            ids,
            dets["boxes"],
            dets["scores"],
            dets["classes"],
            dets["num_detections"],
            np.asarray(meta["image_size"]),
            coco_category_ids,
            valid=valid,
        )
        image_ids += ids[valid].tolist()
    return detections, image_ids
