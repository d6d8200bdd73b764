"""The GPU Dockerfile: linted by hadolint (no Docker engine here), and built the shared way.

Horovod must be built in the image by scripts/build_horovod.sh, the script the CPU set-up
(scripts/bootstrap.sh) runs, so the two recipes cannot drift apart.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
LINT = ROOT / "scripts" / "lint_dockerfile.sh"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per Dockerfile instruction, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _run_lint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(LINT), *map(str, paths)], capture_output=True, text=True, timeout=60
    )


def test_dockerfile_passes_hadolint():
    result = _run_lint()
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_linter_rejects_a_bad_dockerfile(tmp_path):
    # An untagged base and an interactive apt-get: the check must be able to fail.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    result = _run_lint(bad)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3014" in result.stdout


def test_horovod_is_built_by_the_script_the_cpu_setup_uses():
    steps = _instructions((ROOT / "Dockerfile").read_text())
    runs = [args for keyword, args in steps if keyword == "RUN"]
    builds = [r for r in runs if "scripts/build_horovod.sh" in r]
    assert len(builds) == 1, runs
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in builds[0]
    copies = [args for keyword, args in steps if keyword == "COPY"]
    assert any(c.startswith("scripts/build_horovod.sh ") for c in copies), copies
    # No second, hand-written Horovod build that could drift from the script.
    for r in runs:
        if r is not builds[0]:
            assert "horovod" not in re.sub(r"horovod\.tensorflow|hvd\.", "", r).lower(), r
    assert "scripts/build_horovod.sh" in (ROOT / "scripts" / "bootstrap.sh").read_text()


def test_base_is_cuda_and_tensorflow_is_the_cuda_build():
    steps = _instructions((ROOT / "Dockerfile").read_text())
    args = dict(a.split("=", 1) for k, a in steps if k == "ARG" and "=" in a)
    assert re.fullmatch(r"nvidia/cuda:12\.\d+\.\d+-devel-ubuntu\d\d\.04", args["CUDA_IMAGE"])
    assert [a for k, a in steps if k == "FROM"] == ["${CUDA_IMAGE}"]
    assert any('"tensorflow[and-cuda]==${TF_VERSION}"' in a for k, a in steps if k == "RUN")


def _requirement_names(requirements: list[str]) -> list[str]:
    return [re.split(r"[<>=!~; \[]", r, maxsplit=1)[0] for r in requirements]


def test_one_tensorflow_distribution_and_a_gpu_extra():
    # tensorflow-cpu and tensorflow[and-cuda] both install the `tensorflow` package: requiring
    # the former would overwrite the CUDA build in the image. So the base requirement is
    # `tensorflow` on every machine and the `gpu` extra adds its CUDA wheels.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = _requirement_names(project["dependencies"])
    assert "tensorflow" in names and "tensorflow-cpu" not in names
    tf_requirement = project["dependencies"][names.index("tensorflow")]
    assert ";" not in tf_requirement, tf_requirement  # no platform marker
    gpu = project["optional-dependencies"]["gpu"]
    assert [r.split(">")[0] for r in gpu] == ["tensorflow[and-cuda]"]


def test_the_image_installs_cvbench_with_its_gpu_extra():
    runs = [a for k, a in _instructions((ROOT / "Dockerfile").read_text()) if k == "RUN"]
    installs = [r for r in runs if "pip install" in r and '".[gpu]"' in r]
    assert len(installs) == 1, runs
    assert "--no-deps" not in installs[0]
    # TensorFlow (CUDA) is installed before Horovod is built against it, cvbench after.
    order = [i for i, r in enumerate(runs) for key in ("and-cuda", "build_horovod", ".[gpu]")
             if key in r]  # fmt: skip
    assert order == sorted(order)
