"""cvbench's errors share one base (`CvbenchError`) that says the command's exit code; the
CLI maps them by type (`known_error`), with the lines and codes they had, while each keeps the
built-in base Python callers catch."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

import cvbench.cli as cli
from cvbench.cli import train as train_cli
from cvbench.cli.errors import CLIError, known_error
from cvbench.data.acquire.download import DownloadError
from cvbench.data.builders.sharded_writer import DiskFullError
from cvbench.data.image_io import ImageError
from cvbench.inference.images import ImageFileError, ImageTooLargeError
from cvbench.training.checkpoint import CheckpointWriteError
from cvbench.training.distributed import RankFailedError
from cvbench.training.run_dir import RunDirInUseError
from cvbench.training.signals import TrainingInterruptedError
from cvbench.utils.errors import USAGE_ERROR, BadFileError, CvbenchError

TINY = ["--model", "resnet18", "--batch-size", "2", "--image-size", "32", "--num-classes", "4"]


# The one line and exit code of each kind, as the CLI printed them before the common base: the
# message alone, misuse without the command's name, an API hint as the command's flag.
LINES = [
    (CLIError("--retries must be >= 1, got 0"), "cvbench: error: --retries must be >= 1, got 0", 2),
    (BadFileError("m.keras: no config.json"), "cvbench train: error: m.keras: no config.json", 1),
    (ImageError("not an image"), "cvbench: error: not an image", 2),  # a ValueError: misuse
    (ImageFileError("a.jpg: not an image"), "cvbench train: error: a.jpg: not an image", 1),
    (ImageTooLargeError("a.jpg: 9 pixels > 4"), "cvbench train: error: a.jpg: 9 pixels > 4", 1),
    # an OSError whose errno is set after it was made: its message, not strerror(ENOSPC)
    (
        CheckpointWriteError("no space; pass force_resume=True"),
        "cvbench train: error: no space; pass --force-resume",
        1,
    ),
    (RunDirInUseError("run is in use by pid 7"), "cvbench train: error: run is in use by pid 7", 1),
    (
        DiskFullError(Path("out/a"), 2),
        "cvbench train: error: no space left on device writing out/a; 2 finished shards are "
        "intact; free space and rerun to resume",
        1,
    ),
    (
        RankFailedError("rank 1 on host b was lost"),
        "cvbench train: error: rank 1 on host b was lost",
        1,
    ),
    (DownloadError("u: HTTP 404 Not Found"), "cvbench train: error: u: HTTP 404 Not Found", 1),
    # a stop by SIGTERM (15): 128 + 15, and its line says what was kept, not "error:"
    (
        TrainingInterruptedError(signal.SIGTERM, 3, "r/ckpt"),
        "cvbench train: SIGTERM received: stopped after step 3, checkpoint r/ckpt written; "
        "rerun with --resume to continue",
        143,
    ),
]


@pytest.mark.parametrize("error, line, code", LINES, ids=lambda v: type(v).__name__)
def test_each_error_kind_keeps_its_line_and_exit_code(error, line, code):
    assert isinstance(error, CvbenchError) and error.exit_code == code
    assert known_error(error, command="train") == (line, code)


@pytest.mark.parametrize(
    "kind, builtin",
    [
        (BadFileError, ValueError),
        (ImageError, ValueError),
        (ImageFileError, ValueError),
        (CheckpointWriteError, OSError),
        (RunDirInUseError, OSError),
        (DiskFullError, OSError),
        (RankFailedError, RuntimeError),
        (DownloadError, RuntimeError),
    ],
)
def test_each_error_kind_keeps_its_builtin_base(kind, builtin):
    assert issubclass(kind, CvbenchError) and issubclass(kind, builtin)


def test_the_exit_code_is_the_class_s_not_the_built_in_base_s():
    # a new kind is mapped by its class alone: a ValueError that says run error exits 1,
    # an OSError that says misuse exits 2 (no table of kinds in the CLI to update)
    class StaleIndexError(CvbenchError, ValueError):
        pass

    class LockedError(CvbenchError, OSError):
        exit_code = USAGE_ERROR

    assert known_error(StaleIndexError("a.idx is stale"), command="eval") == (
        "cvbench eval: error: a.idx is stale",
        1,
    )
    assert known_error(LockedError("locked"), command="eval") == (
        "cvbench: error: locked",
        2,
    )


def test_known_error_needs_no_training_or_tensorflow_module_loaded():
    # the mapping is by type: it neither imports nor looks up the modules defining the kinds
    code = (
        "import sys\n"
        "from cvbench.cli.errors import known_error\n"
        "from cvbench.utils.errors import CvbenchError\n"
        "class E(CvbenchError, RuntimeError): pass\n"
        "print(known_error(E('rank 1 lost'), command='train'))\n"
        "heavy = ('cvbench.training', 'tensorflow')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out == "('cvbench train: error: rank 1 lost', 1)\n[]\n"


@pytest.mark.parametrize("debug", ["0", "1"])
def test_a_stopped_run_prints_its_line_with_or_without_debug(monkeypatch, capsys, debug):
    def stopped(args):
        raise TrainingInterruptedError(signal.SIGINT, 5, None)

    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))
    monkeypatch.setattr(train_cli, "train_command", stopped)
    monkeypatch.setenv("CVBENCH_DEBUG", debug)
    assert cli.main(["train", *TINY, "--synthetic"]) == 128 + signal.SIGINT
    assert capsys.readouterr().err == (
        "cvbench train: SIGINT received: stopped after step 5, no checkpoint was written "
        "(no log directory)\n"
    )


def test_debug_keeps_the_traceback_of_a_cvbench_error(monkeypatch):
    def bad_file(args):
        raise BadFileError("m.keras: no config.json")

    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.train",))
    monkeypatch.setattr(train_cli, "train_command", bad_file)
    monkeypatch.setenv("CVBENCH_DEBUG", "1")
    with pytest.raises(BadFileError, match="no config.json"):
        cli.main(["train", *TINY, "--synthetic"])


def test_every_error_class_of_the_package_derives_from_the_base():
    import ast
    import importlib

    package = Path(__file__).resolve().parents[2] / "cvbench"
    found = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
                found[f"{module}.{node.name}"] = (module, node.name)
    assert len(found) >= 12  # the kinds this test was written for, and any added since
    for module, name in found.values():
        kind = getattr(importlib.import_module(module.removesuffix(".__init__")), name)
        assert issubclass(kind, CvbenchError), f"{module}.{name}"
        stop = issubclass(kind, TrainingInterruptedError)  # 128 + its signal (the demo's too)
        assert kind.exit_code in (1, 2) or stop, name
