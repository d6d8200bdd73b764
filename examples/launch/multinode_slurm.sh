#!/usr/bin/env bash
# The same two-node run under Slurm: sbatch multinode_slurm.sh (one task per GPU).
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
# Usage: DATA_DIR=... sbatch multinode_slurm.sh [flags]
set -euo pipefail
srun --mpi=pmix cvbench train --recipe resnet50_v1.5_90e --data-dir "${DATA_DIR:?ImageNet TFRecords}" \
    --log-dir "${LOG_DIR:-runs/rn50_90e_2x8gpu}" "$@"
