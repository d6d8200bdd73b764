"""Shell commands of the docs: split a block into commands and run them.

`run` executes a command: `cvbench ...` and `python script.py ...` in this process (no new
interpreter to start), anything else (environment assignments, `python -c`, `horovodrun`)
in a subprocess whose PATH starts with this interpreter's folder (the venv), so that
`python`, `cvbench` and `horovodrun` are the venv's. A command with the variables of
`keras.distribution.initialize()` (`KERAS_DISTRIBUTION_NUM_PROCESSES=N`,
`KERAS_DISTRIBUTION_PROCESS_ID`, a `localhost` `KERAS_DISTRIBUTION_JOB_ADDRESSES`) is what
the docs tell each host to run: it runs as N processes at once on this machine, process ids
0 to N-1, and every one must succeed.

Checking a command without running it is `docs_parsers.py`'s job.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
_SEPARATORS = ("&&", ";", "||")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class CommandError(AssertionError):
    """A documented command that does not run, or that its program's parser rejects."""


@dataclass
class Command:
    """One command of a shell block: `VAR=value ... argv`, and the block line it starts on."""

    line: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.argv)


def split_commands(text: str) -> list[Command]:
    """Commands of a shell block: continuations joined, comments dropped, split at && ; ||.

    A leading `$ ` (a prompt) is dropped; lines of a block are otherwise all commands.
    """
    commands = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, line = i + 1, lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i]
        i += 1
        line = re.sub(r"^\s*\$ ", "", line)
        words = shlex.split(line, comments=True)
        group: list[str] = []
        for word in [*words, "&&"]:
            if word not in _SEPARATORS:
                group.append(word)
                continue
            env = {}
            while group and _ASSIGNMENT.match(group[0]):
                key, _, value = group.pop(0).partition("=")
                env[key] = value
            if group:
                commands.append(Command(start, group, env))
            group = []
    return commands


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the venv first on PATH, plus `extra`."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update(extra or {})
    return env


@contextlib.contextmanager
def _argv(argv: list[str]):
    saved = sys.argv
    sys.argv = list(argv)
    try:
        yield
    finally:
        sys.argv = saved


def _exit_code(exc: SystemExit) -> int:
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


# ----------------------------------------------------------------------------------- run


def run_command(cmd: Command, cwd: Path, *, timeout: float = 600) -> str:
    """Runs `cmd` in `cwd`; returns its output (stdout and stderr); raises `CommandError`.

    Only `cvbench`, `horovodrun` and `python` (a script, `-c`, `-m cvbench`) are ever run:
    anything else (pip, make, docker, shell scripts) would change this machine, and must be
    marked `parse`.
    """
    program = cmd.argv[0]
    runnable = program in ("cvbench", "horovodrun") or (
        program == "python"
        and cmd.argv[1:3] != ["-m", "venv"]
        and (cmd.argv[1:2] != ["-m"] or cmd.argv[2:3] == ["cvbench"])
    )
    if not runnable:
        raise CommandError(f"`{cmd}` is never run by the docs tests: mark the block `parse`")
    if program == "horovodrun" and cmd.argv[1:5] != ["-np", "2", "-H", "localhost:2"]:
        raise CommandError(f"`{cmd}`: run horovodrun as `-np 2 -H localhost:2` (a sub=...)")
    if "KERAS_DISTRIBUTION_PROCESS_ID" in cmd.env:
        return _run_processes(cmd, cwd, timeout=timeout)
    in_process = not cmd.env and (
        program == "cvbench" or (program == "python" and cmd.argv[1:2] not in (["-c"], ["-m"]))
    )
    if not in_process:
        argv = [sys.executable, *cmd.argv[1:]] if program == "python" else cmd.argv
        result = subprocess.run(
            argv,
            cwd=cwd,
            env=subprocess_env(cmd.env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = result.stdout + result.stderr
        if result.returncode != 0:
            raise CommandError(f"`{cmd}` exited {result.returncode}:\n{output[-3000:]}")
        return output
    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if program == "cvbench":
                from cvbench.cli import main

                code = main(cmd.argv[1:])
            else:
                code = _run_script(cwd / cmd.argv[1], cmd.argv[1:])
    except SystemExit as e:
        code = _exit_code(e)
    finally:
        os.chdir(previous)
    output = out.getvalue() + err.getvalue()
    if code != 0:
        raise CommandError(f"`{cmd}` exited {code}:\n{output[-3000:]}")
    return output


def _run_processes(cmd: Command, cwd: Path, *, timeout: float) -> str:
    """The one command of each host of a `keras.distribution` job, all on this machine."""
    address = cmd.env.get("KERAS_DISTRIBUTION_JOB_ADDRESSES", "")
    count = int(cmd.env.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "0"))
    if not address.startswith(("localhost:", "127.0.0.1:")) or count < 2:
        raise CommandError(f"`{cmd}`: run it with a localhost job address, 2+ processes (sub=)")
    argv = [sys.executable, *cmd.argv[1:]] if cmd.argv[0] == "python" else cmd.argv
    procs = [
        subprocess.Popen(
            argv,
            cwd=cwd,
            env=subprocess_env({**cmd.env, "KERAS_DISTRIBUTION_PROCESS_ID": str(i)}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(count)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    failed = [i for i, proc in enumerate(procs) if proc.returncode != 0]
    if failed:
        tail = outputs[failed[0]][-3000:] if failed[0] < len(outputs) else ""
        raise CommandError(f"`{cmd}`: process {failed[0]} of {count} failed:\n{tail}")
    return "".join(outputs)


def _run_script(path: Path, argv: list[str]) -> int:
    if not path.is_file():
        raise CommandError(f"no script {path}")
    with _argv([str(path), *argv[1:]]):
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as e:
            return _exit_code(e)
    return 0
