# cvbench for NVIDIA GPU machines: CUDA 12 (devel: nvcc and the NCCL headers Horovod builds
# against), TensorFlow with its CUDA wheels (tensorflow[and-cuda]), Horovod built with NCCL for
# GPU allreduce by scripts/build_horovod.sh -- the same script the CPU set-up runs -- plus
# OpenMPI and SSH for horovodrun across nodes. See docs/gpu.md.
#
#   docker build -t cvbench:gpu .
#   docker run --gpus all --rm -it --ipc=host --ulimit memlock=-1 -v /data:/data cvbench:gpu
#   horovodrun -np 8 -H localhost:8 cvbench train ...    (inside the container)
#
# TensorFlow 2.21 is built against CUDA 12.5 and cuDNN 9.3 and brings both as pip wheels; the
# base image only has to match the CUDA major version and provide the compiler and NCCL.
ARG CUDA_IMAGE=nvidia/cuda:12.5.1-devel-ubuntu22.04
FROM ${CUDA_IMAGE}

ARG TF_VERSION=2.21.0
# GPU generations to compile Horovod's CUDA kernels for: Volta, Turing, Ampere, Ada, Hopper.
ARG HOROVOD_CUDA_CC_LIST=70,75,80,86,89,90

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Distribution packages follow the base image's release; pinning each would only break rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 python3-dev python3-venv \
        g++ make git ca-certificates \
        openmpi-bin libopenmpi-dev openssh-client openssh-server \
    && rm -rf /var/lib/apt/lists/*

# A virtual environment keeps pip away from the distribution's Python packages.
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHON=/opt/venv/bin/python

RUN python -m pip install --upgrade "pip>=24" \
    && python -m pip install "tensorflow[and-cuda]==${TF_VERSION}"

# Horovod, built once per image by the shared script, then checked to have NCCL. The CUDA
# driver stubs are on the loader path only for this step: no GPU is visible during
# `docker build`, and the script imports what it built.
COPY scripts/build_horovod.sh /opt/cvbench/scripts/build_horovod.sh
RUN ldconfig /usr/local/cuda/lib64/stubs \
    && HOROVOD_GPU_OPERATIONS=NCCL \
       HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_CUDA_CC_LIST} \
       CVBENCH_CACHE=/tmp/cvbench-cache \
       /opt/cvbench/scripts/build_horovod.sh \
    && python -c "import horovod.tensorflow as hvd; assert hvd.nccl_built(), 'built without NCCL'" \
    && rm -rf /tmp/cvbench-cache \
    && ldconfig

# cvbench itself, last so that editing it does not rebuild Horovod. Its `gpu` extra names
# tensorflow[and-cuda], already installed above, so pip keeps that TensorFlow.
WORKDIR /opt/cvbench
COPY pyproject.toml README.md ./
COPY cvbench ./cvbench
# DL3013 (pin versions): this installs the local project, whose requirements pyproject.toml states.
# hadolint ignore=DL3013
RUN python -m pip install --no-cache-dir ".[gpu]" \
    && python -c "import tensorflow as tf; assert tf.test.is_built_with_cuda(), 'CPU-only TensorFlow'" \
    && python -c "import cvbench, cvbench.cli; cvbench.cli.build_parser()"

WORKDIR /workspace
CMD ["bash"]
