#!/usr/bin/env bash
# Build (once) and install Horovod 0.28.1 for the TensorFlow in the active Python.
#
# Horovod 0.28.1 is the newest release; it compiles against TensorFlow 2.21 only after the
# line naming xla_mpi_ops.cc is removed from horovod/tensorflow/CMakeLists.txt (that file
# includes XLA headers that moved). Its build must see the installed TensorFlow, hence
# --no-build-isolation. The built wheel is cached, keyed by Horovod, TensorFlow, Python and
# the GPU operations, so a second set-up installs it in seconds.
#
# Environment:
#   PYTHON                  interpreter to install into (default: python)
#   CVBENCH_CACHE           cache directory (default: ~/.cache/cvbench)
#   HOROVOD_GPU_OPERATIONS  set to NCCL on GPU machines (the Dockerfile does); unset = CPU/Gloo
#   HOROVOD_VERSION         default 0.28.1
# Shared by the CPU set-up (scripts/bootstrap.sh) and the GPU Dockerfile.
set -euo pipefail

PYTHON=${PYTHON:-python}
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
CACHE=${CVBENCH_CACHE:-$HOME/.cache/cvbench}
ops=${HOROVOD_GPU_OPERATIONS:-cpu}

tf_version=$("$PYTHON" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null) || {
    echo "build_horovod.sh: TensorFlow is not importable from $PYTHON; install it first" >&2
    exit 1
}
py_tag=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheel_dir="$CACHE/wheels/horovod-$HOROVOD_VERSION-tf$tf_version-$py_tag-$ops"

# An installed Horovod is kept only if it has what was asked for: NCCL for GPU operations,
# Gloo otherwise (a Gloo-only build must not satisfy HOROVOD_GPU_OPERATIONS=NCCL).
if [ "$ops" = cpu ]; then wanted=gloo_built; else wanted=nccl_built; fi
if "$PYTHON" -c "import horovod.tensorflow as h; h.init(); assert h.$wanted()" \
    >/dev/null 2>&1; then
    echo "build_horovod.sh: Horovod already installed and working"
    exit 0
fi

if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    echo "build_horovod.sh: building Horovod $HOROVOD_VERSION for TF $tf_version ($ops), ~5 min"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$work" \
        "horovod==$HOROVOD_VERSION"
    tar -xzf "$work"/horovod-"$HOROVOD_VERSION".tar.gz -C "$work"
    src="$work/horovod-$HOROVOD_VERSION"
    cml="$src/horovod/tensorflow/CMakeLists.txt"
    grep -q 'xla_mpi_ops.cc' "$cml" || { echo "build_horovod.sh: $cml changed" >&2; exit 1; }
    sed -i '/xla_mpi_ops\.cc/d' "$cml"
    # GPU builds only (the line lands inside `#if HAVE_GPU`): TensorFlow 2.21 no longer exports
    # stream_executor::gpu::AsGpuStreamValue, which mpi_ops.cc declares and calls; define it
    # from the stream's platform-specific handle.
    ops_cc="$src/horovod/tensorflow/mpi_ops.cc"
    grep -q 'GpuStreamHandle AsGpuStreamValue(Stream\* stream);' "$ops_cc" ||
        { echo "build_horovod.sh: $ops_cc changed" >&2; exit 1; }
    sed -i '/#include "tensorflow\/compiler\/xla\/stream_executor\/stream.h"/a namespace stream_executor { namespace gpu { GpuStreamHandle AsGpuStreamValue(Stream* stream) { return static_cast<GpuStreamHandle>(stream->platform_specific_handle().stream); } } }' "$ops_cc"
    "$PYTHON" -m pip install --quiet cmake packaging wheel 'setuptools<70'
    export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
    export HOROVOD_WITH_GLOO=1
    if [ "$ops" = cpu ]; then unset HOROVOD_GPU_OPERATIONS; fi
    export MAKEFLAGS="-j$(nproc)"
    mkdir -p "$work/out"
    "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$work/out" "$src"
    mkdir -p "$wheel_dir.tmp"
    cp "$work"/out/horovod-*.whl "$wheel_dir.tmp"/
    rm -rf "$wheel_dir"
    mv "$wheel_dir.tmp" "$wheel_dir"   # atomic: a killed build leaves no half cache
fi
"$PYTHON" -m pip install --quiet --no-deps "$wheel_dir"/horovod-*.whl
"$PYTHON" -m pip install --quiet cloudpickle psutil pyyaml packaging
"$PYTHON" -c 'import horovod, horovod.tensorflow as h; h.init(); print("horovod", horovod.__version__, "gloo:", h.gloo_built(), "nccl:", h.nccl_built())'
