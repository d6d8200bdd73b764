#!/usr/bin/env bash
# ResNet-50 v1.5, 90 epochs, 1 GPU: DLE TensorFlow/Classification/ConvNets/resnet50v1.5/training/
# DGX1_RN50_AMP_90E.sh at one GPU (the recipe scales the rate to the global batch).
# Usage: DATA_DIR=/data/imagenet-tfrecords [LOG_DIR=runs/rn50_90e_1gpu] resnet50_90e_1gpu.sh [flags]
set -euo pipefail
cvbench train --recipe resnet50_v1.5_90e --data-dir "${DATA_DIR:?ImageNet TFRecords}" \
    --log-dir "${LOG_DIR:-runs/rn50_90e_1gpu}" "$@"
