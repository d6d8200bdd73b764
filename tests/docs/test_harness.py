"""The docs harness itself: directives parse strictly, and broken blocks fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_blocks import Directive, DirectiveError, parse_markdown
from docs_commands import Command, CommandError, run_command, split_commands
from docs_exercise import Workspace, check_figure, check_layout, check_output, exercise, mask
from docs_parsers import check_inline_commands, check_synopsis, parse_command

FENCE = "```"


def _md(tmp_path: Path, text: str) -> list:
    path = tmp_path / "doc.md"
    path.write_text(text.replace("'''", FENCE))
    return parse_markdown(path)


def _no_data(name: str) -> Path:
    raise AssertionError(f"no data set expected, asked for {name}")


def test_directive_grammar():
    d = Directive.parse(' run slow sub="a b=>c" sub="x=>" out=/data/o ')
    assert d.mode == "run" and d.flags == {"slow"}
    assert d.subs == (("a b", "c"), ("x", "")) and d.outs == ("/data/o",)
    assert Directive.parse('parse why="needs 8 GPUs"').why == "needs 8 GPUs"


@pytest.mark.parametrize(
    "body, message",
    [
        ("execute", "first word"),
        ("parse", "why="),
        ("run quickly", "unknown flag"),
        ("run size=tiny", "unknown option"),
        ('run sub="no arrow"', "OLD=>NEW"),
        ("layout", "root="),
        ('run sub="unclosed', "No closing quotation"),
    ],
)
def test_bad_directives_are_refused(body, message):
    with pytest.raises(DirectiveError, match=message):
        Directive.parse(body)


def test_blocks_get_their_directive_or_the_default(tmp_path):
    blocks = _md(
        tmp_path,
        "# t\n\n'''python\nx = 1\n'''\n\n<!-- docs-test: parse why=\"w\" -->\n\n"
        "   '''bash\n   cvbench --version\n   '''\n",
    )
    assert [(b.line, b.lang, b.directive.mode) for b in blocks] == [
        (3, "python", "run"),
        (9, "bash", "parse"),
    ]
    assert blocks[1].text == "cvbench --version\n"  # the list indentation is removed


@pytest.mark.parametrize(
    "text, message",
    [
        ("'''\nplain output\n'''\n", "needs a directive"),
        ("<!-- docs-test: run -->\nsome prose\n'''python\n'''\n", "not followed by a fence"),
        ("<!-- docs-test: run -->\n", "not followed by a fence"),
        ("'''python\nx = 1\n", "unclosed"),
    ],
)
def test_untested_or_malformed_blocks_fail(tmp_path, text, message):
    with pytest.raises(DirectiveError, match=message):
        _md(tmp_path, text)


def test_substitutions_replace_whole_words_and_must_match(tmp_path):
    (block,) = _md(
        tmp_path,
        "<!-- docs-test: run sub=\"320=>64\" -->\n'''python\nssd320(); f(320, 320)\n'''\n",
    )
    assert block.substituted() == "ssd320(); f(64, 64)\n"  # 320 inside ssd320 stays
    (block,) = _md(tmp_path, "<!-- docs-test: run sub=\"224=>32\" -->\n'''python\nf(320)\n'''\n")
    with pytest.raises(DirectiveError, match="matches nothing"):
        block.substituted()


def test_split_commands():
    text = (
        "# a comment line\n"
        "$ cvbench train --model resnet50 \\\n    --synthetic  # trailing comment\n"
        "python -m venv .venv && . .venv/bin/activate\n"
        "A=1 B='x y' scripts/build.sh\n"
    )
    assert [(c.line, c.env, c.argv) for c in split_commands(text)] == [
        (2, {}, ["cvbench", "train", "--model", "resnet50", "--synthetic"]),
        (4, {}, ["python", "-m", "venv", ".venv"]),
        (4, {}, [".", ".venv/bin/activate"]),
        (5, {"A": "1", "B": "x y"}, ["scripts/build.sh"]),
    ]


def test_a_broken_python_block_fails(tmp_path):
    (block,) = _md(tmp_path, "'''python\nimport math\nmath.no_such_function()\n'''\n")
    with pytest.raises(AttributeError, match="no_such_function"):
        exercise(block, Workspace(tmp_path), _no_data, set())


def test_a_python_block_that_imports_a_missing_name_fails_parse(tmp_path):
    (block,) = _md(
        tmp_path,
        "<!-- docs-test: parse why=\"w\" -->\n'''python\nfrom cvbench.models import nope\n'''\n",
    )
    with pytest.raises(ImportError, match="nope"):
        exercise(block, Workspace(tmp_path), _no_data, set())


def test_a_command_that_fails_fails(tmp_path):
    (block,) = _md(tmp_path, "'''bash\ncvbench train --model resnet50 --synthetic --oops\n'''\n")
    with pytest.raises(CommandError, match="exited 2"):
        exercise(block, Workspace(tmp_path), _no_data, set())


def test_a_keras_distribution_command_runs_as_every_hosts_process(tmp_path):
    # the docs show host 0's command; run_command starts NUM_PROCESSES copies at once, each
    # with its own process id, and fails when any of them fails
    code = (
        "import os, pathlib, sys; i = os.environ['KERAS_DISTRIBUTION_PROCESS_ID']; "
        "pathlib.Path(f'ran{i}').write_text(i); sys.exit(int(i) * int(sys.argv[1]))"
    )
    env = {
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": "localhost:12355",
        "KERAS_DISTRIBUTION_NUM_PROCESSES": "3",
        "KERAS_DISTRIBUTION_PROCESS_ID": "0",
    }
    run_command(Command(1, ["python", "-c", code, "0"], env), tmp_path)
    assert sorted(p.read_text() for p in tmp_path.glob("ran*")) == ["0", "1", "2"]
    with pytest.raises(CommandError, match="process 1 of 3 failed"):
        run_command(Command(1, ["python", "-c", code, "1"], env), tmp_path)
    remote = {**env, "KERAS_DISTRIBUTION_JOB_ADDRESSES": "host0:12355"}
    with pytest.raises(CommandError, match="localhost job address"):
        run_command(Command(1, ["python", "-c", code, "0"], remote), tmp_path)


def test_run_refuses_commands_that_change_the_machine(tmp_path):
    for argv in (["pip", "install", "."], ["make", "demo"], ["python", "-m", "venv", "v"]):
        with pytest.raises(CommandError, match="mark the block `parse`"):
            run_command(Command(1, argv), tmp_path)
    cmd = Command(1, ["horovodrun", "-np", "8", "-H", "localhost:8", "cvbench", "--version"])
    with pytest.raises(CommandError, match="-np 2"):
        run_command(cmd, tmp_path)


@pytest.mark.parametrize(
    "line, message",
    [
        ("cvbench train --model resnet50 --synthetic --epochz 3", "unrecognized"),
        ("cvbench train --model resnet50 --data-dir d --synthetic", "not allowed with"),
        ("horovodrun -np 2 -H localhost:2 --glooo cvbench --version", "unrecognized"),
        ("horovodrun -np 8 -H localhost:8 cvbench train --model x --synthetic --no", "--no"),
        ("horovodrun -np 8 -H h:8 python examples/train_imagenet.py --data-dir d --bad", "--bad"),
        ("mpirun -np 16 -H a:8,b:8 -x PATH cvbench train --model x --synthetic --no", "--no"),
        ("srun --ntasks-per-node 8 cvbench train --model x --synthetic --epochz 1", "--epochz"),
        ("mpirun -np 16 -H a:8,b:8 hostname", "starts no cvbench or python"),
        ("python benchmarks/input_pipeline.py --rounds zero", "positive integer"),
        ("make no-such-target", "no-such-target"),
        ('pip install ".[no-such-extra]"', "no extra"),
        ('pip install "tensorflow[and-cuda]==2.0.0"', "Dockerfile"),
        ('pip install "keras>=2"', "pyproject.toml says"),
        ("pip install --no-deps . && pip install keras>=3.8", "never installs"),
        ("pip install leftpad", "not a cvbench dependency"),
        ("docker build --build-arg NO_SUCH_ARG=1 -t x .", "not an ARG"),
        ("docker run --gpus all other:image", "runs none of"),
        ("HOROVOD_NO_SUCH_VAR=1 scripts/build_horovod.sh", "does not read"),
        ("scripts/no_such_script.sh", "not an executable"),
        ("NO_SUCH_VAR=1 benchmarks/gpu_run.sh", "does not read"),
        ("benchmarks/train_throughput.py --json x", "no parser"),
        (". other/bin/activate", "only the venv"),
        ("curl https://example.com", "no parser"),
    ],
)
def test_parse_mode_rejects_what_the_real_programs_reject(line, message):
    commands = split_commands(line)
    with pytest.raises(CommandError, match=message):
        for cmd in commands:
            parse_command(cmd, commands, {"cvbench:gpu"})


def test_parse_mode_accepts_the_real_thing():
    text = (
        "horovodrun -np 16 -H node1:8,node2:8 -p 12345 cvbench train --model resnet50 "
        "--data-dir d --precision fp16\n"
        "HOROVOD_GPU_OPERATIONS=NCCL PYTHON=python scripts/build_horovod.sh\n"
        "OUT=h200 BUDGET=555 WHEELS=.whl benchmarks/gpu_run.sh\n"
        "docker build --build-arg TF_VERSION=2.21.0 -t cvbench:gpu .\n"
        "KERAS_BACKEND=jax timeout 9 python benchmarks/train_throughput.py --precisions fp16\n"
        'make demo\npip install ".[gpu]"\n'
    )
    commands = split_commands(text)
    for cmd in commands:
        parse_command(cmd, commands, {"cvbench:gpu"})


def test_output_check_masks_numbers_but_not_words():
    actual = "header\n  Step Epoch Img/sec\n   100     1  2375.1\nImages/sec: 9.0 +/- 1.0\n"
    check_output(["  Step Epoch Img/sec", "     1     1     5.3", "Images/sec: 1 +/- 2"], actual)
    assert mask("  fused 2.37 ms/img (1.24x)") == "fused # ms/img (#x)"
    with pytest.raises(AssertionError, match="not in the real output"):
        check_output(["Images/sec: 1 +/- 2 (jitter = 3)"], actual)
    with pytest.raises(AssertionError, match="not in the real output"):  # order matters
        check_output(["Images/sec: 1 +/- 2", "  Step Epoch Img/sec"], actual)


def test_layout_check(tmp_path):
    (tmp_path / "train" / "n1").mkdir(parents=True)
    (tmp_path / "train" / "n1" / "a.JPEG").write_bytes(b"")
    tree = "root/\n  train/\n    <class>/<image>   text\n  meta.txt\n"
    with pytest.raises(AssertionError, match="meta.txt"):
        check_layout(tree, tmp_path)
    (tmp_path / "meta.txt").write_text("")
    check_layout(tree, tmp_path)


def test_figure_check(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "reader.py").write_text("")
    (tmp_path / "zoo.py").write_text("")
    # `data/reader`, `data/`, `zoo.py` and `data/` (from `data/Reader`) are all there.
    check_figure("data/reader -> zoo.py\n  data/ and data/Reader.read", tmp_path)
    with pytest.raises(AssertionError, match="'tasks/runner'"):
        check_figure("data/reader -> tasks/runner", tmp_path)
    with pytest.raises(AssertionError, match="names no module path"):
        check_figure("boxes -> anchors", tmp_path)


def test_synopsis_check():
    check_synopsis("cvbench benchmark --model m --synthetic [--mode train|inference]\n")
    with pytest.raises(CommandError, match="no option --stepz"):
        check_synopsis("cvbench benchmark --model m\n    [--stepz 3]\n")
    with pytest.raises(CommandError, match="choices"):
        check_synopsis("cvbench benchmark --model m [--mode train|infer]\n")
    with pytest.raises(CommandError, match="no such command"):
        check_synopsis("cvbench fly --model m\n")


def test_inline_commands_check():
    text = "Run `cvbench train/eval --model m`, `make test PYTEST_ARGS='-m x'` or `ls -l`."
    assert check_inline_commands(text) == 2
    with pytest.raises(CommandError, match="no cvbench command"):
        check_inline_commands("`cvbench trian --model m`")
    with pytest.raises(CommandError, match="no option --modle"):
        check_inline_commands("`cvbench train/eval --modle m`")
    with pytest.raises(CommandError, match="make -n"):
        check_inline_commands("`make deploy`")
    # A command's output quoted in prose is not a command line.
    assert check_inline_commands("prints `cvbench train: error: bad --flagz`") == 0
