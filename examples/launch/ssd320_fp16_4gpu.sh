#!/usr/bin/env bash
# SSD320 v1.2, 4 GPU(s), mixed float16: DLE TensorFlow/Detection/SSD/examples/SSD320_FP16_4GPU.sh
# (12,500 steps at 8 x 32, scaled by the recipe to the images of the global batch; the
# backbone starts from ImageNet weights as the seed's fine_tune_checkpoint).
# Usage: DATA_DIR=/data/coco-tfrecords [LOG_DIR=runs/ssd320_4gpu] ssd320_fp16_4gpu.sh [flags]
set -euo pipefail
horovodrun -np 4 -H localhost:4 --gloo cvbench train --recipe ssd320_v1.2 --precision fp16 \
    --data-dir "${DATA_DIR:?COCO TFRecords}" --backbone-weights "${BACKBONE_WEIGHTS:-imagenet}" \
    --eval-count "${EVAL_COUNT:-1}" --log-dir "${LOG_DIR:-runs/ssd320_4gpu}" "$@"
