"""TensorFlow's C++ start-up messages, hidden for the `cvbench` command.

Importing TensorFlow 2.21 and setting up its devices prints, on a CPU machine:

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1796125646.475549   18596 port.cc:153] oneDNN custom operations are on. ...
    I0000 00:00:1796125646.475892   18596 cudart_stub.cc:31] Could not find cuda drivers ...
    I0000 00:00:1796125646.520817   18596 cpu_feature_guard.cc:227] This TensorFlow binary ...
    To enable the following instructions: AVX2 AVX512F ..., rebuild TensorFlow with ...
    E0000 00:00:1796125649.383293   18596 cuda_platform.cc:52] failed call to cuInit: ...

(the first three lines twice: two libraries log before absl is initialized). Only some obey
`TF_CPP_MIN_LOG_LEVEL`: 1 hides `cpu_feature_guard` and its second line, 3 the cuInit error,
and no level hides absl's notice or the `port.cc` and `cudart_stub.cc` lines, which absl
writes straight to file descriptor 2 before its logging is set up.

`quiet_tensorflow_startup` therefore does two things when the user has not set
`TF_CPP_MIN_LOG_LEVEL`: it sets it to "2" (TensorFlow's C++ INFO and WARNING lines off for
the run, errors kept) and, until TensorFlow is first imported, it filters file descriptor 2
while that import and the device set-up (`tf.config.list_physical_devices()`) run: the lines
above (`is_startup_noise`) are dropped and every other line is written back. With
`TF_CPP_MIN_LOG_LEVEL` set, whatever its value, it changes nothing.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
#: INFO and WARNING off, ERROR and FATAL kept.
QUIET_LEVEL = "2"

_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    # absl / glog format: severity, MMDD hh:mm:ss.micros, thread, file:line]
    r"|[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\] .*"
    r"|E\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\] (failed call to cuInit|Unable to register cu).*"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate "
    r"compiler flags\."
)


def is_startup_noise(line: str) -> bool:
    """Whether `line` is one of TensorFlow's start-up messages (see the module docstring).

    Example:
        >>> is_startup_noise("I0000 00:00:1796125646.475892   18596 cudart_stub.cc:31] "
        ...                  "Could not find cuda drivers on your machine, GPU will not be used.")
        True
        >>> is_startup_noise("E0000 00:00:1796125649.383293   18596 cuda_platform.cc:52] "
        ...                  "failed call to cuInit: INTERNAL: CUDA error")
        True
        >>> is_startup_noise("E0000 00:00:1.0   1 file.cc:1] Out of memory")
        False
        >>> is_startup_noise("UserWarning: something else")
        False
    """
    return _NOISE.fullmatch(line.rstrip("\r\n")) is not None


@contextlib.contextmanager
def quiet_tensorflow_startup() -> Iterator[None]:
    """Hides TensorFlow's C++ start-up messages while the block runs, unless the user set
    `TF_CPP_MIN_LOG_LEVEL` (see the module docstring); both changes are undone at the end.
    """
    if LEVEL_VARIABLE in os.environ:
        yield
        return
    os.environ[LEVEL_VARIABLE] = QUIET_LEVEL
    finder = None if "tensorflow" in sys.modules else _QuietTensorFlowImport()
    if finder is not None:
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
        if os.environ.get(LEVEL_VARIABLE) == QUIET_LEVEL:
            del os.environ[LEVEL_VARIABLE]


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` once, with a loader that runs its import filtered."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once: the real finders find it (and its submodules)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _FilteredLoader(spec.loader)
        return spec


class _FilteredLoader(importlib.abc.Loader):
    """`loader`, executing the module with file descriptor 2 filtered; then puts `loader`
    back as the module's loader."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        with _filtered_stderr():
            self._loader.exec_module(module)
            module.config.list_physical_devices()  # the device set-up's messages


@contextlib.contextmanager
def _filtered_stderr() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file; at the end the lines that are not start-up
    noise are written to the real one."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable stderr: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()  # what Python wrote meanwhile
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode("utf-8", "replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not is_startup_noise(line)).encode()
            while kept:
                kept = kept[os.write(2, kept) :]
