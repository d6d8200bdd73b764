"""The per-channel RGB statistics the models are trained with, defined once (no TensorFlow).

* `IMAGENET_MEAN_RGB`, `IMAGENET_STD_RGB`: the classifiers' input normalization
  `(pixel - mean) / std` (the NVIDIA ResNet-50 v1.5 recipe; `cvbench.data.read.preprocessing`).
* `CAFFE_MEAN_RGB`: the VGG/Caffe means SSD320 v1.2 subtracts, no scaling
  (`cvbench.detection.ssd.CHANNEL_MEANS` inside the model, or `cvbench.data.read.coco` with
  `subtract_mean=True`).

Pixel values are RGB in [0, 255].
"""

from __future__ import annotations

IMAGENET_MEAN_RGB: tuple[float, float, float] = (123.68, 116.28, 103.53)
IMAGENET_STD_RGB: tuple[float, float, float] = (58.395, 57.12, 57.385)
CAFFE_MEAN_RGB: tuple[float, float, float] = (123.68, 116.779, 103.939)
