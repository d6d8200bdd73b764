#!/usr/bin/env bash
# The same two-node run through Open MPI (Horovod built with MPI, or Gloo under mpirun).
# Usage: DATA_DIR=... NODE1=node1 NODE2=node2 multinode_mpirun.sh [flags]
set -euo pipefail
mpirun -np 16 -H "${NODE1:?first node}:8,${NODE2:?second node}:8" --bind-to none -map-by slot \
    -x PATH -x LD_LIBRARY_PATH -x NCCL_DEBUG=INFO \
    cvbench train --recipe resnet50_v1.5_90e --data-dir "${DATA_DIR:?ImageNet TFRecords}" \
    --log-dir "${LOG_DIR:-runs/rn50_90e_2x8gpu}" "$@"
