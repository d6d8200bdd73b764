"""The CPU regression check (benchmarks/cpu_check.py, `make bench`): the paired-ratio
statistic, the verdicts against the floors, the exit code, and that a deliberately slowed
step fails it where the same step unslowed passes."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import pytest

from cvbench.benchmark.results import CVBENCH, ThroughputResult
from cvbench.training.throughput import Throughput, measure_throughput
from throughput_suite.reference import KERAS
from throughput_suite.suite import Slowed, SuiteConfig, SuiteResults
from throughput_suite.table import PairedRatio, paired_ratio

pytestmark = pytest.mark.backend_agnostic

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_check.py"
FLOORS = SCRIPT.with_name("cpu_floors.json")


def _load_check():
    spec = importlib.util.spec_from_file_location("cpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cpu_check"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _throughput(*rates: float) -> Throughput:
    return Throughput(sum(rates) / len(rates), 0.0, 0.0, rates, 3, 16, 1.0, 1.0, 2, 0.0)


def _result(impl: str, mode: str, precision: str, *rates: float) -> ThroughputResult:
    # Both cores busy in every window: images per CPU-second are half the images/s.
    cpu_rates = tuple(r / 2 for r in rates)
    t = _throughput(*rates)
    return ThroughputResult("resnet50", mode, impl, precision, 16, 128, t, cpu_rates)


def test_paired_ratio_is_the_median_of_the_window_pairs():
    # Pairs 30/20 = 1.5, 10/20 = 0.5 (a burst of load hit cvbench's window), 22/20 = 1.1,
    # 24/20 = 1.2: median of (0.5, 1.1, 1.2, 1.5) = (1.1 + 1.2) / 2 = 1.15; the ratio of the
    # means would be 21.5 / 20 = 1.075, pulled down by the one bad window.
    paired = paired_ratio(_throughput(30.0, 10.0, 22.0, 24.0), _throughput(20.0, 20.0, 20.0, 20.0))
    assert paired == PairedRatio(pytest.approx(1.15), 0.5, 1.5, 4)
    assert paired.format() == "1.15x (0.50-1.50)"


def test_paired_ratio_of_unpaired_measurements_compares_the_means():
    # Different window counts were not timed side by side: one pair of means, 15 / 10 = 1.5.
    paired = paired_ratio(_throughput(10.0, 20.0), _throughput(10.0, 10.0, 10.0))
    assert paired == PairedRatio(1.5, 1.5, 1.5, 1)
    assert paired.format() == "1.50x"


def test_paired_ratio_with_a_zero_rate_is_nan():
    paired = paired_ratio(_throughput(1.0, 2.0), _throughput(0.0, 2.0))
    assert math.isnan(paired.median) and paired.pairs == 2


def test_verdicts_hold_their_floors_and_skip_what_did_not_run():
    check = _load_check()
    results = [
        _result(CVBENCH, "train", "float32", 12.0, 11.0, 13.0),  # / 10: median 1.2
        _result(KERAS, "train", "float32", 10.0, 10.0, 10.0),
        _result(CVBENCH, "inference", "float32", 9.0, 9.5, 8.0),  # / 10: median 0.9
        _result(KERAS, "inference", "float32", 10.0, 10.0, 10.0),
    ]
    floors = {"float32": {"train": 1.1, "inference": 0.95}, "mixed_bfloat16": {"train": 1.0}}
    verdicts = check.judge(results, floors)
    assert [(v.mode, v.holds) for v in verdicts] == [("train", True), ("inference", False)]
    assert verdicts[0].median == pytest.approx(1.2) and verdicts[1].median == pytest.approx(0.9)
    assert verdicts[1].line().endswith("floor 0.95x: LOW")


def test_every_cpu_kind_has_floors_for_each_precision_it_checks():
    check = _load_check()
    floors = json.loads(FLOORS.read_text())
    for kind in check.CPU_KINDS:
        table = check.floors_of(kind, floors)
        for precision in check.PRECISIONS[kind]:
            policy = check.POLICIES[precision]
            assert set(table[policy]) == {"train", "inference"}, (kind, policy)
            assert all(0 < v < 5 for v in table[policy].values())


@pytest.mark.parametrize("kind", ["avx2", "avx512_bf16"])
def test_the_check_exits_1_on_a_low_ratio_and_prints_the_cpu_line_first(
    monkeypatch, capsys, tmp_path, kind
):
    check = _load_check()
    import throughput_suite

    ran = {}

    def fake_suite(config, report):
        ran["precisions"] = config.precisions
        rows = []
        for precision in ("float32", "mixed_bfloat16"):
            slow = 0.5 if precision == "float32" else 1.0
            for mode in ("train", "inference"):
                rows += [
                    _result(CVBENCH, mode, precision, 10.0 * slow, 10.0 * slow),
                    _result(KERAS, mode, precision, 10.0, 10.0),
                ]
        return SuiteResults(throughput=rows)

    monkeypatch.setattr(throughput_suite, "run_suite", fake_suite)
    monkeypatch.setattr("cvbench.utils.cpu.cpu_flags", lambda: frozenset({"avx2", kind}))
    floors = tmp_path / "floors.json"
    table = {"float32": {"train": 0.9, "inference": 0.9}}
    table["mixed_bfloat16"] = {"train": 0.9, "inference": 0.9}
    floors.write_text(json.dumps({"floors": {kind: table}}))
    assert check.main(["--floors", str(floors), "--json", str(tmp_path / "c.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("cpu: ")
    assert out[-1] == "cpu check: FAILED"
    # float32 at 0.5x fails its 0.9 floor; bfloat16 (1.0x) runs only where it is native
    assert ran["precisions"] == check.PRECISIONS[kind]
    lows = [line for line in out if ": LOW" in line]
    assert [line.split(":")[0] for line in lows] == ["float32 train", "float32 inference"]
    written = json.loads((tmp_path / "c.json").read_text())
    assert [v["holds"] for v in written["verdicts"]][:2] == [False, False]


class _Sleeper:
    """A workload whose step sleeps a fixed time: its rate is known, whatever the machine."""

    images_per_step = 8

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def first_step(self) -> None:
        time.sleep(self.seconds)

    def run(self, steps: int) -> None:
        time.sleep(self.seconds * steps)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("slowdown, holds", [(0.0, True), (0.3, False)])
def test_a_deliberately_slowed_step_fails_the_floor_the_same_step_holds(slowdown, holds):
    # Two equal 6 ms steps: ratio 1.0 against a 0.9 floor holds; the cvbench side 30% slower
    # gives 1 / 1.3 = 0.77, under it.
    check = _load_check()
    ours = _Sleeper(0.006) if not slowdown else Slowed(_Sleeper(0.006), slowdown)
    measured = measure_throughput(
        {CVBENCH: ours, KERAS: _Sleeper(0.006)}, warmup_steps=1, windows=5, window_steps=3
    )
    results = [
        ThroughputResult("resnet50", "train", name, "float32", 8, 32, t)
        for name, t in measured.items()
    ]
    [verdict] = check.judge(results, {"float32": {"train": 0.9}})
    assert verdict.holds is holds, verdict.line()


def test_the_check_s_own_examples_run():
    import doctest

    outcome = doctest.testmod(_load_check(), optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_slowdown_is_checked():
    with pytest.raises(ValueError, match="slowdown must be in"):
        SuiteConfig(slowdown=-0.1)
