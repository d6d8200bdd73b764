"""Checks documented commands without running them, with the real parser of each program.

`cvbench` (cvbench's argparse parser), Python scripts (their own argparse parser, stopped
right after parsing), `horovodrun` (Horovod's launcher parser, then the command it starts),
`mpirun` / `srun` (the command they start: from the first `cvbench` or `python` word on),
`make` (`make -n`, then the cvbench lines of the recipe), `pip install` (extras and versions
against pyproject.toml, the Dockerfile and the installed TensorFlow), `docker build/run`
(build args against the Dockerfile's ARGs, the image tag), shell scripts (exist, are
executable, read the variables set), `python -m venv` / `. .venv/bin/activate`; also usage
synopses and the inline `cvbench ...` / `make ...` spans of prose.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import runpy
import shlex
import subprocess
from pathlib import Path

from docs_commands import ROOT, Command, CommandError, _argv

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class _ParsedError(Exception):
    """Raised by the patched `parse_args` once a script's arguments have parsed."""


def parse_cvbench(argv: list[str]) -> argparse.Namespace:
    """Parses `cvbench` arguments with the real parser; raises `CommandError` if rejected."""
    from cvbench.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return build_parser().parse_args(argv)
    except SystemExit as e:
        raise CommandError(f"cvbench {shlex.join(argv)}: {err.getvalue().strip()}") from e


def parse_script(path: Path, argv: list[str]) -> argparse.Namespace:
    """Runs the script `path` as `__main__` until its argparse parser has parsed `argv`."""
    if not path.is_file():
        raise CommandError(f"no script {path}")
    original = argparse.ArgumentParser.parse_args
    parsed: list[argparse.Namespace] = []

    def stop_after_parsing(self, args=None, namespace=None):
        parsed.append(original(self, args, namespace))
        raise _ParsedError

    err = io.StringIO()
    argparse.ArgumentParser.parse_args = stop_after_parsing
    try:
        with _argv([str(path), *argv]), contextlib.redirect_stderr(err):
            runpy.run_path(str(path), run_name="__main__")
    except _ParsedError:
        return parsed[0]
    except SystemExit as e:
        raise CommandError(f"{path.name} {shlex.join(argv)}: {err.getvalue().strip()}") from e
    finally:
        argparse.ArgumentParser.parse_args = original
    raise CommandError(f"{path} finished without parsing command-line arguments")


def parse_horovodrun(argv: list[str]) -> list[str]:
    """Parses `horovodrun` arguments with Horovod's own parser; returns the command it runs."""
    from horovod.runner import launch

    err = io.StringIO()
    try:
        with _argv(["horovodrun", *argv]), contextlib.redirect_stderr(err):
            args = launch.parse_args()
    except SystemExit as e:
        raise CommandError(f"horovodrun {shlex.join(argv)}: {err.getvalue().strip()}") from e
    if not args.command:
        raise CommandError(f"horovodrun {shlex.join(argv)}: no command to run")
    return list(args.command)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _dockerfile_args() -> dict[str, str]:
    text = (ROOT / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG\s+(\w+)=?(\S*)", text, flags=re.MULTILINE))


def parse_pip(argv: list[str], block: list[Command]) -> None:
    """`pip install` lines: what they name must be what pyproject.toml and the Dockerfile say."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    if argv[:1] != ["install"]:
        raise CommandError(f"pip {shlex.join(argv)}: only `pip install` is documented")
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    deps = {canonicalize_name(Requirement(r).name): Requirement(r) for r in project["dependencies"]}
    named = set()
    for arg in argv[1:]:
        if arg.startswith("-"):
            continue
        if arg == "." or arg.startswith(".["):
            missing = set(re.findall(r"[\w-]+", arg[1:])) - set(extras)
            if missing:
                raise CommandError(f"pip install {arg}: no extra {sorted(missing)} in pyproject")
            continue
        req = Requirement(arg)
        name = canonicalize_name(req.name)
        named.add(name)
        if name == "tensorflow":
            if req.extras - {"and-cuda"}:
                raise CommandError(f"{arg}: tensorflow has no extra {sorted(req.extras)}")
            pins = [s.version for s in req.specifier if s.operator == "=="]
            import tensorflow as tf

            wanted = {tf.__version__, _dockerfile_args().get("TF_VERSION")}
            if pins and set(pins) - wanted:
                raise CommandError(f"{arg}: the Dockerfile and this venv use {sorted(wanted)}")
        elif name in deps:
            if str(req.specifier) != str(deps[name].specifier):
                raise CommandError(f"{arg}: pyproject.toml says {deps[name]}")
        elif not any(
            canonicalize_name(Requirement(r).name) == name for r in sum(extras.values(), [])
        ):
            raise CommandError(f"{arg}: not a cvbench dependency (pyproject.toml)")
    if "--no-deps" in argv:  # then the block must install the other requirements by hand
        later = {
            canonicalize_name(Requirement(a).name)
            for c in block
            if c.argv[:2] == ["pip", "install"] and "--no-deps" not in c.argv
            for a in c.argv[2:]
            if not a.startswith("-") and a != "."
        }
        missing = {n for n in deps if not n.startswith("tensorflow")} - later
        if missing:
            raise CommandError(f"pip install --no-deps: the block never installs {sorted(missing)}")


def parse_docker(argv: list[str], built_tags: set[str]) -> None:
    """`docker build`: build args are ARGs of the Dockerfile; `docker run`: a built image."""
    if argv[:1] == ["build"]:
        args = argv[1:]
        if args[-1:] != ["."] or not (ROOT / "Dockerfile").is_file():
            raise CommandError(f"docker {shlex.join(argv)}: must build the repository root")
        known = _dockerfile_args()
        for i, a in enumerate(args):
            if a == "--build-arg":
                key = args[i + 1].partition("=")[0]
                if key not in known:
                    raise CommandError(f"--build-arg {key}: not an ARG of the Dockerfile")
        return
    if argv[:1] == ["run"]:
        if not any(tag in argv for tag in built_tags):
            raise CommandError(f"docker {shlex.join(argv)}: runs none of {sorted(built_tags)}")
        return
    raise CommandError(f"docker {shlex.join(argv)}: only build and run are documented")


def parse_make(argv: list[str]) -> None:
    """`make -n TARGET` must succeed; every cvbench line of the recipe must parse."""
    result = subprocess.run(
        ["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        raise CommandError(f"make -n {shlex.join(argv[1:])}: {result.stderr.strip()}")
    for line in result.stdout.splitlines():
        words = shlex.split(line)
        if words and Path(words[0]).name == "cvbench":
            parse_cvbench(words[1:])


def parse_shell_script(cmd: Command) -> None:
    path = ROOT / cmd.argv[0]
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise CommandError(f"{cmd.argv[0]}: not an executable file of the repository")
    text = path.read_text()
    for var in cmd.env:
        if not re.search(rf"\b{var}\b", text):
            raise CommandError(f"{cmd.argv[0]} does not read {var}")


def parse_command(cmd: Command, block: list[Command], built_tags: set[str]) -> None:
    """Checks `cmd` with the real parser of the program it calls; raises `CommandError`."""
    program, args = cmd.argv[0], cmd.argv[1:]
    if program == "cvbench":
        parse_cvbench(args)
    elif program in ("python", "python3"):
        if args[:1] == ["-m"]:
            if args[1] == "cvbench":
                parse_cvbench(args[2:])
            elif importlib.util.find_spec(args[1]) is None:
                raise CommandError(f"python -m {args[1]}: no such module")
        elif args[:1] == ["-c"]:
            compile(args[1], "<python -c>", "exec")
        else:
            parse_script(ROOT / args[0], args[1:])
    elif program == "timeout" and len(args) > 1:
        parse_command(Command(cmd.line, args[1:], cmd.env), block, built_tags)
    elif program == "horovodrun":
        inner = parse_horovodrun(args)
        parse_command(Command(cmd.line, inner), block, built_tags)
    elif program in ("mpirun", "srun"):
        parse_command(Command(cmd.line, launched_command(cmd)), block, built_tags)
    elif program == "make":
        parse_make(cmd.argv)
    elif program == "pip":
        parse_pip(args, block)
    elif program == "docker":
        parse_docker(args, built_tags)
    elif program in (".", "source"):
        if args != [".venv/bin/activate"]:
            raise CommandError(f"{cmd}: only the venv made above is sourced")
        if not any(c.argv[:4] == ["python", "-m", "venv", ".venv"] for c in block):
            raise CommandError(f"{cmd}: no `python -m venv .venv` in the block")
    elif program.startswith("scripts/") or (
        program.startswith("benchmarks/") and program.endswith(".sh")
    ):
        parse_shell_script(cmd)
    else:
        raise CommandError(f"{cmd}: no parser for {program!r} (tests/docs/docs_parsers.py)")


def launched_command(cmd: Command) -> list[str]:
    """What `mpirun ... cvbench ...` / `srun ... python ...` starts: the words from the first
    `cvbench` / `python` on (their own options are left to the launcher, not checked)."""
    for i, word in enumerate(cmd.argv[1:], start=1):
        if word in ("cvbench", "python", "python3"):
            return cmd.argv[i:]
    raise CommandError(f"{cmd}: starts no cvbench or python command")


def check_synopsis(text: str) -> None:
    """A usage synopsis: each `cvbench CMD ...` entry (continued on indented lines) may name
    only options of CMD, and a `--flag a|b|c` choice list must be the option's choices."""
    from cvbench.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    entries: list[str] = []
    for line in text.splitlines():
        if line.startswith("cvbench "):
            entries.append(line)
        elif line.strip() and entries:
            entries[-1] += " " + line
    if not entries:
        raise CommandError("no `cvbench COMMAND` entry in the synopsis")
    for entry in entries:
        name = entry.split()[1]
        if name not in commands:
            raise CommandError(f"cvbench {name}: no such command")
        options = {o: a for a in commands[name]._actions for o in a.option_strings}
        for flag, value in re.findall(r"(--[\w-]+)(?:[ =]([\w.|]+))?", entry):
            if flag not in options:
                raise CommandError(f"cvbench {name} has no option {flag}")
            choices = options[flag].choices
            if (
                value
                and "|" in value
                and choices is not None
                and set(value.split("|")) != set(choices)
            ):
                raise CommandError(f"cvbench {name} {flag}: {value} but the choices are {choices}")


def check_inline_commands(markdown: str) -> int:
    """Inline code spans of prose that show a cvbench or make command: `cvbench CMD[/CMD2]
    [--flag ...]` must name real commands and options, `make TARGET` a real target; a span
    whose second word ends with a colon is the command's output (`cvbench train: error:
    ...`) and is not checked. Returns how many spans were checked."""
    from cvbench.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    checked = 0
    for span in re.findall(r"`((?:cvbench|make) [^`]*)`", markdown):
        words = span.split()
        if words[1].endswith(":"):  # output such as `cvbench train: error: ...`, no command
            continue
        if words[0] == "make":
            parse_make(["make", "-n", *[w for w in words[1:] if "=" not in w][:1]])
        else:
            names = words[1].split("/")
            unknown = [n for n in names if n not in commands]
            if unknown:
                raise CommandError(f"`{span}`: no cvbench command {unknown}")
            for flag in re.findall(r"(?<!\S)(--[\w-]+)", span):
                if not any(flag in a.option_strings for n in names for a in commands[n]._actions):
                    raise CommandError(f"`{span}`: cvbench {words[1]} has no option {flag}")
        checked += 1
    return checked
