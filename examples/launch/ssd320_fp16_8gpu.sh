#!/usr/bin/env bash
# SSD320 v1.2, 8 GPU(s), mixed float16: DLE TensorFlow/Detection/SSD/examples/SSD320_FP16_8GPU.sh
# (12,500 steps at 8 x 32, scaled by the recipe to the images of the global batch; the
# backbone starts from ImageNet weights as the seed's fine_tune_checkpoint).
# Usage: DATA_DIR=/data/coco-tfrecords [LOG_DIR=runs/ssd320_8gpu] ssd320_fp16_8gpu.sh [flags]
set -euo pipefail
horovodrun -np 8 -H localhost:8 --gloo cvbench train --recipe ssd320_v1.2 --precision fp16 \
    --data-dir "${DATA_DIR:?COCO TFRecords}" --backbone-weights "${BACKBONE_WEIGHTS:-imagenet}" \
    --eval-count "${EVAL_COUNT:-1}" --log-dir "${LOG_DIR:-runs/ssd320_8gpu}" "$@"
