#!/usr/bin/env bash
# Inference throughput and latency (DLE: main.py --mode=inference_benchmark), synthetic data.
# Usage: [MODEL=resnet50] [BATCH_SIZE=256] inference_benchmark.sh [flags]
set -euo pipefail
cvbench benchmark --model "${MODEL:-resnet50}" --synthetic --mode inference \
    --batch-size "${BATCH_SIZE:-256}" --steps "${STEPS:-100}" --json "${JSON:-benchmark.json}" "$@"
