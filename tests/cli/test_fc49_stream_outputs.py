"""No output argument is a stream (`files.user_output`, applied by `cvbench.cli.main` to
every `OUTPUT_ARGS`): `-`, `/dev/stdout`, `/dev/fd/N` and an existing FIFO or device are
refused in one line naming the option, exit 2, before anything is written; `./-` is a file.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cvbench import cli

#: command -> (the arguments it needs besides the output, {dest: its option as printed,
#: and the argv placing VALUE there}).
COMMANDS = {
    "train": ["train", "--synthetic", "--model", "resnet18", "--log-dir", "VALUE"],
    "eval --json": ["eval", "--synthetic", "--checkpoint", "c.npz", "--json", "VALUE"],
    "eval --log-dir": ["eval", "--synthetic", "--checkpoint", "c.npz", "--log-dir", "VALUE"],
    "predict --coco-json": ["predict", "m.keras", "images", "--coco-json", "VALUE"],
    "predict --draw": ["predict", "m.keras", "images", "--draw", "VALUE"],
    "export": ["export", "m.keras", "--output", "VALUE"],
    "benchmark": ["benchmark", "--synthetic", "--json", "VALUE"],
    "build-imagenet": ["build-imagenet", "--raw-dir", "raw", "--output-dir", "VALUE"],
    "build-coco": ["build-coco", "VALUE", "--annotations", "a.json"],
    "dali-index": ["dali-index", "data", "--index-dir", "VALUE"],
    "download-coco": ["download-coco", "VALUE"],
    "download-coco --build-tfrecords": ["download-coco", "d", "--build-tfrecords", "VALUE"],
    "extract-imagenet": ["extract-imagenet", "VALUE"],
    "demo": ["demo", "--output-dir", "VALUE"],
}
#: How each case's line names its option (a positional: its metavar).
OPTION = {
    "train": "--log-dir", "eval --json": "--json", "eval --log-dir": "--log-dir",
    "predict --coco-json": "--coco-json", "predict --draw": "--draw", "export": "--output",
    "benchmark": "--json", "build-imagenet": "--output-dir", "build-coco": "OUT",
    "dali-index": "--index-dir", "download-coco": "DIR",
    "download-coco --build-tfrecords": "--build-tfrecords", "extract-imagenet": "OUT",
    "demo": "--output-dir",
}  # fmt: skip
WHY = "atomically to the file or folder it names (a command's report is on standard output already)"


def test_every_output_argument_is_tried():
    tried = {(argv[0], argv.index("VALUE")) for argv in COMMANDS.values()}
    assert {c for c, _ in tried} == set(cli.OUTPUT_ARGS)
    assert len(COMMANDS) == sum(len(dests) for dests in cli.OUTPUT_ARGS.values())


def _run(case, value, capsys):
    argv = [value if a == "VALUE" else a for a in COMMANDS[case]]
    code = cli.main(argv)
    return code, capsys.readouterr()


@pytest.mark.parametrize("case", sorted(COMMANDS))
def test_dash_is_refused_naming_the_option(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out = _run(case, "-", capsys)
    option = OPTION[case]
    assert (code, out.out) == (2, "")
    assert out.err == (
        f"cvbench: error: {option} -: '-' is not standard output here: cvbench writes "
        f"{option} {WHY}; name a path (./- for one called -)\n"
    )
    assert os.listdir(tmp_path) == []  # no file named -


@pytest.mark.parametrize("case", sorted(COMMANDS))
def test_a_descriptor_path_is_refused(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    read, write = os.pipe()
    try:
        code, out = _run(case, f"/dev/fd/{write}", capsys)
    finally:
        os.close(read)
        os.close(write)
    option = OPTION[case]
    assert (code, out.out) == (2, "")
    assert out.err == (
        f"cvbench: error: {option} /dev/fd/{write} is an open descriptor of a process, not a "
        f"file: cvbench writes {option} {WHY}; name a file\n"
    )
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", ["eval --json", "benchmark", "predict --coco-json"])
def test_a_fifo_a_device_and_a_link_to_stdout_are_refused(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("fifo")
    os.symlink("/dev/stdout", "out.json")
    option = OPTION[case]
    code, out = _run(case, "fifo", capsys)
    assert (code, out.err) == (
        2,
        f"cvbench: error: {option} fifo is a FIFO (named pipe), not a file or folder: "
        f"cvbench writes {option} {WHY}\n",
    )
    code, out = _run(case, "/dev/null", capsys)
    assert (code, out.err) == (
        2,
        f"cvbench: error: {option} /dev/null is a character device, not a file or folder: "
        f"cvbench writes {option} {WHY}\n",
    )
    code, out = _run(case, "out.json", capsys)
    assert (code, out.err) == (
        2,
        f"cvbench: error: {option} out.json is an open descriptor of a process (through "
        f"/dev/stdout), not a file: cvbench writes {option} {WHY}; name a file\n",
    )
    assert sorted(os.listdir(tmp_path)) == ["fifo", "out.json"]


def test_dot_slash_dash_is_a_path():
    from cvbench.utils.files import user_output

    assert user_output("./-", flag="--json") == "./-"
    assert user_output(Path("out.json"), flag="--json") == Path("out.json")


def test_eval_json_dev_stdout_under_a_pipe_and_a_redirect(tmp_path):
    """The probe's lines: a pipe said `/proc/N/fd/pipe:[M]: No such file or directory`,
    a redirect `outfile exists and was not written by cvbench`."""
    argv = [sys.executable, "-m", "cvbench", "eval", "--synthetic", "--checkpoint", "c.npz"]
    line = (
        "cvbench: error: --json /dev/stdout is an open descriptor of a process, not a file: "
        f"cvbench writes --json {WHY}; name a file\n"
    )
    piped = subprocess.run(
        [*argv, "--json", "/dev/stdout"], cwd=tmp_path, capture_output=True, text=True
    )
    assert (piped.returncode, piped.stdout, piped.stderr) == (2, "", line)
    with open(tmp_path / "outfile", "w") as f:
        redirected = subprocess.run(
            [*argv, "--json", "/dev/stdout"], cwd=tmp_path, stdout=f, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
    assert (redirected.returncode, redirected.stderr) == (2, line)
    assert (tmp_path / "outfile").read_text() == ""
