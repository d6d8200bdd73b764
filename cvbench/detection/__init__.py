"""SSD320 v1.2 detection: boxes, anchors, box coder, matcher, targets, losses, model, NMS.

Boxes are `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` everywhere (see `box_ops`);
COCO `[x, y, w, h]` pixels appear only at the edges (`box_ops.coco_to_boxes`,
`box_ops.boxes_to_coco`). Nothing here imports TensorFlow at import time: `TargetEncoder`
and `tf_namespace` import it when called.
"""

from cvbench.detection import box_coder, box_ops, matcher
from cvbench.detection.anchors import anchors_per_location, feature_map_sizes, multiscale_anchors
from cvbench.detection.batchnorm import FreezableBatchNormalization
from cvbench.detection.fpn import FeaturePyramid
from cvbench.detection.heads import WeightSharedHead
from cvbench.detection.losses import (
    SSDBoxLoss,
    SSDClassLoss,
    SSDLoss,
    sigmoid_focal_loss,
    smooth_l1_loss,
)
from cvbench.detection.postprocess import multiclass_nms, nms, postprocess, predict_detections
from cvbench.detection.ssd import build_backbone, ssd320
from cvbench.detection.targets import TargetEncoder, encode_targets, tf_namespace

__all__ = [
    "FeaturePyramid",
    "FreezableBatchNormalization",
    "SSDBoxLoss",
    "SSDClassLoss",
    "SSDLoss",
    "TargetEncoder",
    "WeightSharedHead",
    "anchors_per_location",
    "box_coder",
    "box_ops",
    "build_backbone",
    "encode_targets",
    "feature_map_sizes",
    "matcher",
    "multiclass_nms",
    "multiscale_anchors",
    "nms",
    "postprocess",
    "predict_detections",
    "sigmoid_focal_loss",
    "smooth_l1_loss",
    "ssd320",
    "tf_namespace",
]
