"""SSD detection: boxes, anchors, box coder, matcher, targets, losses, model, NMS, COCO
evaluation. One concept per module:

- `box_ops` (the box format, IoU), `anchors`, `box_coder`, `matcher`, `targets` (matcher +
  coder, also inside tf.data), `losses`;
- `backbone` (a ResNet's C3-C5), `fpn`, `heads`, `batchnorm`, `ssd` (the wiring: `build_ssd`
  and its preset `ssd320`);
- `postprocess` (decode, per-class NMS), `predict` (a model's detection settings and the one
  path from its outputs to detections: `Decoder`, `predict_detections`, `predict_coco`),
  `coco_eval` (the pycocotools adapter).

Boxes are `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` everywhere (see `box_ops`);
COCO `[x, y, w, h]` pixels appear only at the edges (`box_ops.coco_to_boxes`,
`box_ops.boxes_to_coco`). Nothing here imports TensorFlow at import time (`TargetEncoder`
imports it when called). The detection task (data + model + loss + evaluation) is
`cvbench.tasks.DetectionTask`.
"""

from cvbench.detection import box_coder, box_ops, matcher
from cvbench.detection.anchors import anchors_per_location, feature_map_sizes, multiscale_anchors
from cvbench.detection.backbone import build_backbone, copy_backbone_weights
from cvbench.detection.coco_eval import evaluate_coco
from cvbench.detection.fpn import FeaturePyramid
from cvbench.detection.heads import WeightSharedHead
from cvbench.detection.losses import (
    SSDBoxLoss,
    SSDClassLoss,
    SSDLoss,
    sigmoid_focal_loss,
    smooth_l1_loss,
)
from cvbench.detection.postprocess import multiclass_nms, nms, postprocess
from cvbench.detection.predict import (
    Decoder,
    detection_settings,
    predict_coco,
    predict_detections,
)
from cvbench.detection.ssd import build_ssd, ssd320
from cvbench.detection.targets import TargetEncoder, encode_targets

__all__ = [
    "Decoder",
    "FeaturePyramid",
    "SSDBoxLoss",
    "SSDClassLoss",
    "SSDLoss",
    "TargetEncoder",
    "WeightSharedHead",
    "anchors_per_location",
    "box_coder",
    "box_ops",
    "build_backbone",
    "build_ssd",
    "copy_backbone_weights",
    "detection_settings",
    "encode_targets",
    "evaluate_coco",
    "feature_map_sizes",
    "matcher",
    "multiclass_nms",
    "multiscale_anchors",
    "nms",
    "postprocess",
    "predict_coco",
    "predict_detections",
    "sigmoid_focal_loss",
    "smooth_l1_loss",
    "ssd320",
]
