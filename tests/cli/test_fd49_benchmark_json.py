"""`cvbench benchmark --json` follows eval's `--json` rule (`check_output` with
`written_by_cvbench`, `files.recording`): a file cvbench did not write, or a training's
`results.json`, is refused before the model is built (exit 2, one line, the file unchanged);
benchmark's own earlier file is replaced by a rerun (it was `write_json_atomic` over
anything)."""

from __future__ import annotations

import json

import pytest

import cvbench.cli as cli
from cvbench.benchmark import run as run_module
from cvbench.utils.files import recording, written_by_cvbench
from cvbench.utils.io import write_json_atomic

pytestmark = pytest.mark.backend_agnostic

TINY = ["--model", "resnet18", "--synthetic", "--batch-size", "2", "--image-size", "32"]
TINY += ["--num-classes", "4", "--precision", "fp32", "--steps", "10", "--log-every", "0"]


@pytest.fixture(autouse=True)
def with_benchmark(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.benchmark",))


@pytest.fixture
def runs(monkeypatch):
    """The images/s of each `benchmark_cvbench` call (50, 51, ...): a fake measurement."""
    from cvbench.benchmark.results import ThroughputResult
    from cvbench.training.throughput import Throughput

    made: list[float] = []

    def fake(model, **kwargs):
        made.append(50.0 + len(made))
        t = Throughput(made[-1], 1.0, 2.0, (made[-1],) * 3, 5, 8, 1.0, 0.5, 1, 25.0)
        return ThroughputResult("resnet18", kwargs["mode"], "cvbench", "float32", 8, 32, t)

    monkeypatch.setattr(run_module, "benchmark_cvbench", fake)
    return made


def test_a_users_file_is_refused_and_unchanged(tmp_path, runs, capsys):
    path = tmp_path / "mine.json"
    path.write_text('{"my": "notes"}')
    assert cli.main(["benchmark", *TINY, "--json", str(path)]) == 2
    assert path.read_text() == '{"my": "notes"}' and runs == []  # refused before measuring
    err = capsys.readouterr().err
    assert err == (
        f"cvbench: error: {path} exists and was not written by cvbench; --json replaces only "
        "cvbench's own outputs: move it or write elsewhere\n"
    )


def test_a_trainings_results_are_refused(tmp_path, runs, capsys):
    path = tmp_path / "results.json"
    with recording(path):  # what a training leaves: recorded, holding its plan
        write_json_atomic(path, {"plan": {"epochs": 1}, "metrics": {}})
    before = path.read_bytes()
    assert cli.main(["benchmark", *TINY, "--json", str(path)]) == 2
    assert path.read_bytes() == before and runs == []
    assert capsys.readouterr().err == (
        f"cvbench: error: --json {path} is a training's results file; it is never replaced: "
        "give benchmark another --json\n"
    )


def test_a_rerun_replaces_benchmarks_own_file(tmp_path, runs):
    path = tmp_path / "bench.json"
    assert cli.main(["benchmark", *TINY, "--json", str(path)]) == 0
    assert json.loads(path.read_text())["mean"] == 50.0 and written_by_cvbench(path)
    assert cli.main(["benchmark", *TINY, "--json", str(path)]) == 0  # the second: 51 img/s
    assert json.loads(path.read_text())["mean"] == 51.0 and written_by_cvbench(path)
    # once changed by hand, it is the user's: refused
    path.write_text(path.read_text() + " ")
    assert cli.main(["benchmark", *TINY, "--json", str(path)]) == 2 and runs == [50.0, 51.0]


def test_a_file_in_the_way_of_its_folder_is_refused_before_measuring(tmp_path, runs, capsys):
    (tmp_path / "plain").write_text("x")
    assert cli.main(["benchmark", *TINY, "--json", str(tmp_path / "plain" / "b.json")]) == 1
    assert runs == [] and capsys.readouterr().err.count("\n") == 1
