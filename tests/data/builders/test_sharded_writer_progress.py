"""The shard writer's progress when stderr is not a terminal: plain lines, no `\\r`."""

from __future__ import annotations

import re
import sys

from cvbench.data.builders.sharded_writer import SplitSpec, write_sharded
from cvbench.data.tfrecord import encode_example, int64_feature


def encode_number(n: int) -> bytes:
    return encode_example({"n": int64_feature(n)})


def test_progress_in_a_log_is_plain_lines(tmp_path, capsys, monkeypatch):
    # Regression: the tqdm bar wrote `\r` updates into logs (stderr a file or a pipe).
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not sys.stderr.isatty()  # pytest's capture
    write_sharded(
        tmp_path,
        [SplitSpec("train", list(range(20)), 2)],
        encode_number,
        dataset="numbers",
        num_workers=1,
        progress=True,
        unit="img",
    )
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    # A line at each 10% of the 20 items (2, 4, ... 18) and the last one at close.
    assert [line.split()[1] for line in lines] == [f"{n}/20" for n in range(2, 21, 2)]
    assert all(
        re.fullmatch(r"train: \d+/20 img \(\d+%\), [\d.,]+ img/s, eta \d+s", x) for x in lines[:-1]
    )
    assert re.fullmatch(r"train: 20/20 img \(100%\), [\d.,]+ img/s, in \d+s", lines[-1])
