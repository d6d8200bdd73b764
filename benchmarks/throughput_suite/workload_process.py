"""A benchmark workload built and run in a process of its own.

Two runtimes in one process fight over the cores: torchvision measured inside the process that
runs TensorFlow trained at a fraction of what PyTorch does alone, because both keep thread
pools sized to the machine. `ProcessWorkload` starts a fresh Python (this file run as a
script: it imports nothing but the standard library and the workload's own file), builds the
workload there and drives it step by step over two pipes, so that the suite's alternating
windows stay exactly as they are while each runtime has the machine to itself when it runs.

The workload is named by its file and class (`"/path/torch_workload.py:TorchWorkload"`),
loaded from the file, not through a package, so no package `__init__` (which might import
Keras or TensorFlow) runs in the child. It has `images_per_step`, `first_step()`,
`run(steps)`, `call()` and `close()`, the protocol of the suite's workloads.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

#: Seconds the parent waits for the child to build its workload or finish a command.
DEFAULT_TIMEOUT_S = 3600.0


class WorkloadProcessError(RuntimeError):
    """The child failed: its error, or how it died and the end of its stderr."""


class ProcessWorkload:
    """Proxy of a workload living in a child process (see the module docstring).

    Args:
        factory: `"<file.py>:<callable>"`, called in the child with `kwargs`.
        kwargs: keyword arguments of the factory (picklable).
        name: how errors name the workload (e.g. "torchvision").
        env: the child's environment (default: this process's).
        timeout_s: seconds to wait for any one reply.

    Raises:
        WorkloadProcessError: when the child cannot build the workload (its exception text).
    """

    def __init__(
        self,
        factory: str,
        kwargs: dict[str, Any],
        *,
        name: str,
        env: dict[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.timeout_s = timeout_s
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        argv = [sys.executable, str(Path(__file__).resolve()), str(to_child_r), str(from_child_w)]
        self._process = subprocess.Popen(
            argv, pass_fds=(to_child_r, from_child_w), env=env, stderr=self._stderr
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._send = Connection(to_child_w, readable=False)
        self._receive = Connection(from_child_r, writable=False)
        self.images_per_step = self._call("build", factory, kwargs)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._process.pid

    def _call(self, command: str, *args: Any) -> Any:
        try:
            self._send.send((command, *args))
            if not self._receive.poll(self.timeout_s):
                self._process.kill()
                raise WorkloadProcessError(
                    f"the {self.name} process gave no answer to {command!r} in {self.timeout_s} s"
                )
            status, value = self._receive.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            raise WorkloadProcessError(self._death(command)) from None
        if status == "error":
            raise WorkloadProcessError(f"the {self.name} process failed in {command!r}: {value}")
        return value

    def _death(self, command: str) -> str:
        code = self._process.wait(timeout=30)
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace")[-2000:].strip()
        return f"the {self.name} process exited with {code} during {command!r}: {tail}"

    def first_step(self) -> None:
        self._call("first_step")

    def run(self, steps: int) -> None:
        self._call("run", steps)

    def call(self) -> None:
        self._call("call")

    def close(self) -> Any:
        """Closes the workload and waits for the child to exit (kills it after 60 s).

        Returns:
            What the workload's `close()` returned; None when the child had already died.
        """
        value = None
        if self._process.poll() is None:
            with contextlib.suppress(WorkloadProcessError):
                value = self._call("close")
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._send.close()
        self._receive.close()
        self._stderr.close()
        return value


def _load(factory: str) -> Any:
    path, sep, attr = factory.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise ValueError(f"a workload factory is '<file.py>:<callable>', got {factory!r}")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, attr)


def serve(receive: Connection, send: Connection) -> int:
    """The child's loop: build, then run commands until "close"; every reply is
    `("ok", value)` or `("error", text)`."""
    workload = None
    while True:
        try:
            command, *args = receive.recv()
        except EOFError:  # the parent is gone
            return 1
        try:
            if command == "build":
                factory, kwargs = args
                workload = _load(factory)(**kwargs)
                value = workload.images_per_step
            else:
                value = getattr(workload, command)(*args)
        except Exception as e:  # noqa: BLE001 - every failure goes back to the parent
            text = "".join(traceback.format_exception_only(type(e), e)).strip()
            send.send(("error", text))
            if command in ("build", "close"):
                return 1
            continue
        send.send(("ok", value))
        if command == "close":
            return 0


if __name__ == "__main__":
    sys.exit(
        serve(
            Connection(int(sys.argv[1]), writable=False),
            Connection(int(sys.argv[2]), readable=False),
        )
    )
