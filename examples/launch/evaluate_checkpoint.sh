#!/usr/bin/env bash
# Evaluation of a run (its newest valid checkpoint) or a checkpoint file over the whole
# validation set (DLE: main.py --mode=evaluate); the model, image size and preprocessing come
# from the run.
# Usage: DATA_DIR=/data/imagenet-tfrecords CHECKPOINT=runs/rn50_90e_8gpu evaluate_checkpoint.sh [flags]
set -euo pipefail
cvbench eval --data-dir "${DATA_DIR:?validation TFRecords}" --checkpoint "${CHECKPOINT:?run or checkpoint}" \
    --json "${JSON:-eval.json}" "$@"
