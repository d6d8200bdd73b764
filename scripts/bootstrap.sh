#!/usr/bin/env bash
# Create .venv and install cvbench with everything the demo and the tests need
# (TensorFlow, Keras 3, JAX for the backend-agnostic tests, Horovod built from source).
# Idempotent: a stamp keyed on pyproject.toml and the build scripts skips work already done.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY_BASE=${PYTHON_BASE:-python3}

stamp_key=$(cat pyproject.toml scripts/bootstrap.sh scripts/build_horovod.sh | sha256sum | cut -c1-16)
stamp="$VENV/.cvbench-$stamp_key"
if [ -f "$stamp" ]; then exit 0; fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "bootstrap: creating $VENV"
    "$PY_BASE" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip
# Earlier set-ups installed tensorflow-cpu; the `tensorflow` distribution now named by
# pyproject.toml installs the same package, so the old one goes first.
if "$PY" -m pip show --quiet tensorflow-cpu >/dev/null 2>&1; then
    "$PY" -m pip uninstall --quiet --yes tensorflow-cpu
fi
echo "bootstrap: installing cvbench and its dependencies"
"$PY" -m pip install --quiet -e '.[dev,jax,faster-coco-eval,dali]'
PYTHON="$PY" scripts/build_horovod.sh
rm -f "$VENV"/.cvbench-*
touch "$stamp"
echo "bootstrap: ready ($VENV)"
