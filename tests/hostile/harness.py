"""The runner of the hostile-input harness: a fork server that imports cvbench, TensorFlow and
Keras once and runs each `cvbench` command line in a forked child.

Starting a Python that imports TensorFlow takes 5-10 s on CI's two cores; a hundred cases
would spend most of their time there. `Server` starts one process (`serve`) that imports the
`cvbench` command and every module its subcommands load lazily, then, per request, forks a
child that runs `cvbench.cli.main(argv)` in the case's folder with its own stdout, stderr and
environment, exactly as `python -m cvbench` would after its imports (an uncaught exception
prints its traceback and exits 1, as the interpreter does).

The server never runs a TensorFlow operation itself: TensorFlow's thread pools start with its
first operation, in each child, so forking is safe.

For each run the server reports:

- the exit status (`rc`, negative for a signal, as `subprocess` says it);
- the child's peak resident memory (`ru_maxrss` of `wait4`, which includes the children it
  waited for) and `increment`: that peak over the peak of a control child that ran
  `cvbench --version` (a forked child does not start with all of its parent's pages counted:
  the mapped libraries are faulted in again), i.e. what the command itself allocated over "a
  process that imported cvbench and TensorFlow";
- `timed_out`: the child (its whole process group) was killed after the case's timeout;
- `memory_killed`: the child was killed because its process group's resident memory went past
  `KILL_AT_INCREMENT` over the baseline (the machine is shared: a case that would allocate
  gigabytes is stopped, and fails its budget, before it hurts anyone).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: The memory budget of every case: what the command may allocate over the resident size of a
#: process that imported cvbench, TensorFlow and Keras (stated in docs/reliability.md's terms:
#: crafted files must not make cvbench allocate from their headers).
BUDGET_BYTES = 1536 << 20
#: A child whose process group passes this is killed at once (reported as over the budget).
KILL_AT_INCREMENT = 2560 << 20
#: The modules the subcommands import lazily, imported once by the server.
PRELOAD = (
    "tensorflow",
    "keras",
    "PIL.Image",
    "cvbench.cli",
    "cvbench.tasks",
    "cvbench.tasks.evaluation",
    "cvbench.training",
    "cvbench.training.checkpoint",
    "cvbench.inference",
    "cvbench.data",
    "cvbench.data.builders.imagenet_builder",
    "cvbench.data.builders.coco_builder",
    "cvbench.data.dali_index",
    "cvbench.data.acquire.extract_imagenet",
    "cvbench.benchmark.input_bench",
    "cvbench.demo.run",
)
_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Result:
    """One command's run in a forked child."""

    argv: tuple[str, ...]
    rc: int
    stdout: bytes
    stderr: bytes
    peak_bytes: int
    increment: int
    wall_s: float
    timed_out: bool
    memory_killed: bool

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "backslashreplace")

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "backslashreplace")


# ------------------------------------------------------------------------------ the server
def _rss_bytes(pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _group_rss(pid: int) -> int:
    """The resident bytes of `pid` and every process below it."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss_bytes(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return total


def _child(request: dict) -> None:
    """In the forked child: runs the command, never returns."""
    code = 1
    try:
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False, errors="surrogateescape")  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = ["cvbench", *request["argv"]]
        try:
            code = _call(request["call"], request["argv"]) if request.get("call") else None
            if not request.get("call"):
                from cvbench.cli import main

                code = main(request["argv"])
            code = 0 if code is None else int(code)
        except SystemExit as e:  # argparse, or a command's own exit
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:  # as the interpreter: the traceback, exit 1
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _call(name: str, args: list[str]) -> int:
    """A public reader `module:function` called with `args`, reported as the command
    reports errors (`known_error`, command "reader"): one line and its code; an unknown
    error propagates (its traceback is printed, exit 1)."""
    import importlib

    from cvbench.cli.errors import known_error
    from cvbench.cli.tf_startup import quiet_tensorflow_startup

    module, _, function = name.partition(":")
    with quiet_tensorflow_startup():
        try:
            value = getattr(importlib.import_module(module), function)(*args)
        except Exception as e:
            known = known_error(e, command="reader")
            if known is None:
                raise
            print(known[0], file=sys.stderr)
            return known[1]
    print(repr(value)[:200])
    return 0


def allocate(mib: str) -> int:
    """Allocates and touches `mib` MiB (the harness's own test of its memory figure)."""
    block = bytearray(int(mib) << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return len(block) >> 20


def _run_request(request: dict, baseline: int | None = None) -> dict:
    base = _rss_bytes() if baseline is None else baseline
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(request)
    timed_out = memory_killed = False
    deadline = start + request["timeout"]
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline and not timed_out:
            timed_out = True
            _kill_group(pid)
        elif not memory_killed and _group_rss(pid) - base > KILL_AT_INCREMENT:
            memory_killed = True
            _kill_group(pid)
        time.sleep(0.02)
    _kill_group(pid)  # grandchildren left behind (a builder's workers)
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    peak = usage.ru_maxrss * 1024
    return {
        "rc": rc,
        "peak_bytes": peak,
        "increment": peak - base,
        "wall_s": time.monotonic() - start,
        "timed_out": timed_out,
        "memory_killed": memory_killed,
    }


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def serve() -> None:
    """The server's main loop: preloads, prints its baseline, answers one JSON line per
    request line on stdin until stdin closes."""
    import importlib

    from cvbench.cli.tf_startup import quiet_tensorflow_startup

    with quiet_tensorflow_startup():
        for name in PRELOAD:
            importlib.import_module(name)
    sys.stdout.flush()
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints never reach the reply channel
    requests = sys.stdin
    control = {
        "argv": ["--version"],
        "cwd": "/",
        "env": dict(os.environ),
        "timeout": 60,
        "stdout": os.devnull,
        "stderr": os.devnull,
    }
    baseline = _run_request(control)["peak_bytes"]
    import cvbench

    hello = {"baseline_bytes": baseline, "server_bytes": _rss_bytes(), "cvbench": cvbench.__file__}
    print(json.dumps(hello), file=replies, flush=True)
    for line in requests:
        request = json.loads(line)
        print(json.dumps(_run_request(request, baseline)), file=replies, flush=True)


# ------------------------------------------------------------------------------ the client
class Server:
    """The fork server, started once; `run` one command line at a time."""

    def __init__(self, log: Path) -> None:
        self.log = log
        env = _base_env()
        code = "import sys; sys.path.insert(0, sys.argv[1]); from hostile.harness import serve; "
        code += "serve()"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(_ROOT / "tests")],
            cwd=_ROOT / "tests",  # not the checkout: PYTHONPATH may name another cvbench
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log, "wb"),  # noqa: SIM115
            text=True,
        )
        hello = self._read(timeout=300)
        self.baseline_bytes = int(hello["baseline_bytes"])
        self.cvbench = hello["cvbench"]  # the package the commands run

    def _read(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError(f"the hostile-input server did not answer; see {self.log}")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the hostile-input server ended; see {self.log}")
        return json.loads(line)

    def run(
        self,
        argv: list[str],
        *,
        cwd: Path,
        timeout: float = 60,
        env: dict | None = None,
        call: str | None = None,
    ) -> Result:
        out, err = cwd.parent / ".stdout", cwd.parent / ".stderr"
        request = {
            "argv": [os.fsdecode(a) for a in argv],
            "cwd": str(cwd),
            "env": {**_base_env(), **(env or {})},
            "timeout": timeout,
            "call": call,
            "stdout": str(out),
            "stderr": str(err),
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._read(timeout=timeout + 60)
        result = Result(
            argv=tuple(request["argv"]),
            stdout=out.read_bytes(),
            stderr=err.read_bytes(),
            **reply,
        )
        out.unlink()
        err.unlink()
        return result

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _base_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CVBENCH_DEBUG", "TF_CPP_MIN_LOG_LEVEL", "PYTEST_CURRENT_TEST")
    }
    env.update(KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    return env
