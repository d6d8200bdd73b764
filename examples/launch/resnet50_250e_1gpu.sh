#!/usr/bin/env bash
# ResNet-50 v1.5, 250 epochs (label smoothing 0.1, mixup 0.2), 1 GPU: DLE DGX1_RN50_AMP_250E.sh
# at one GPU.
# Usage: DATA_DIR=/data/imagenet-tfrecords [LOG_DIR=runs/rn50_250e_1gpu] resnet50_250e_1gpu.sh [flags]
set -euo pipefail
cvbench train --recipe resnet50_v1.5_250e --data-dir "${DATA_DIR:?ImageNet TFRecords}" \
    --log-dir "${LOG_DIR:-runs/rn50_250e_1gpu}" "$@"
