"""Every cvbench JSON output is strict JSON (RFC 8259): a non-finite float is written as
`null`, by the one rule of `cvbench.utils.io.json_text` (probe fa49 #3)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cvbench.tasks.runner import epoch_history
from cvbench.training.run_log import RunLog, read_run_history
from cvbench.utils.io import json_text, strict_json, write_json_atomic


def _strict_load(text: str):
    """`json.loads` that refuses `NaN`, `Infinity` and `-Infinity`, as JavaScript does."""

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


NON_FINITE = [float("nan"), float("inf"), -float("inf"), np.float32("nan"), np.float64("-inf")]


@pytest.mark.parametrize("value", NON_FINITE)
def test_strict_json_writes_non_finite_as_null(value):
    assert json_text({"a": [1.5, value], "b": (value,)}, sort_keys=True) == (
        '{"a": [1.5, null], "b": [null]}'
    )


def test_strict_json_keeps_finite_numbers_and_converts_numpy():
    got = strict_json({"x": np.float32(0.25), "n": np.int64(3), "arr": np.array([1.0, np.nan])})
    assert got == {"x": 0.25, "n": 3, "arr": [1.0, None]}
    assert type(got["n"]) is int


@pytest.mark.parametrize("value", NON_FINITE)
def test_write_json_atomic_is_strict(tmp_path, value):
    path = tmp_path / "results.json"
    write_json_atomic(path, {"loss": value, "top1": 0.5})
    assert _strict_load(path.read_text()) == {"loss": None, "top1": 0.5}


def test_json_text_still_refuses_what_json_cannot_hold():
    with pytest.raises(TypeError):
        json_text({"x": object()})


def test_run_log_lines_are_strict_and_read_back_as_nan(tmp_path):
    log = RunLog(tmp_path, enabled=True, progress_bar=False, tensorboard=False)
    log.record("epoch", epoch=1, step=2, loss=float("nan"), val_top1=np.float32("inf"))
    log.record("epoch", epoch=2, step=4, loss=1.5, val_top1=0.25)
    lines = (tmp_path / "train_log.jsonl").read_text().splitlines()
    first = _strict_load(lines[0])
    assert (first["loss"], first["val_top1"]) == (None, None)
    history = epoch_history(read_run_history(tmp_path / "train_log.jsonl"))
    assert history["step"] == [2, 4]
    assert math.isnan(history["loss"][0]) and history["loss"][1] == 1.5
    assert math.isnan(history["val_top1"][0]) and history["val_top1"][1] == 0.25
