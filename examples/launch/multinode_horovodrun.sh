#!/usr/bin/env bash
# ResNet-50 v1.5 90 epochs on two nodes x 8 GPUs through horovodrun (ssh to the nodes; Gloo
# over NETWORK_INTERFACE). Run on node1; rank 0 (logs, checkpoints) is on node1.
# Usage: DATA_DIR=... NODE1=node1 NODE2=node2 [NETWORK_INTERFACE=eth0] multinode_horovodrun.sh [flags]
set -euo pipefail
horovodrun -np 16 -H "${NODE1:?first node}:8,${NODE2:?second node}:8" --gloo \
    --network-interface "${NETWORK_INTERFACE:-eth0}" \
    cvbench train --recipe resnet50_v1.5_90e --data-dir "${DATA_DIR:?ImageNet TFRecords}" \
    --log-dir "${LOG_DIR:-runs/rn50_90e_2x8gpu}" "$@"
