#!/usr/bin/env bash
# ResNet-50 v1.5, 250 epochs, 8 GPUs (DLE DGX1_RN50_AMP_250E.sh).
# Usage: DATA_DIR=/data/imagenet-tfrecords [LOG_DIR=runs/rn50_250e_8gpu] resnet50_250e_8gpu.sh [flags]
set -euo pipefail
horovodrun -np 8 -H localhost:8 --gloo cvbench train --recipe resnet50_v1.5_250e \
    --data-dir "${DATA_DIR:?ImageNet TFRecords}" --log-dir "${LOG_DIR:-runs/rn50_250e_8gpu}" "$@"
