"""`cvbench dali-index DATA_DIR`: index files for existing shards, one-line errors."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from dali_records import LAYOUT, write_records  # noqa: E402

import cvbench.cli as cli  # noqa: E402
from cvbench.data.dali_index import read_index  # noqa: E402


@pytest.fixture(autouse=True)
def with_imagenet_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.imagenet",))


def test_dali_index_writes_then_keeps(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    assert cli.main(["dali-index", str(root), "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == (
        "DALI index files: 4 written (11 records), 0 already up to date"  # LAYOUT: 3+3+3+2
    )
    assert all(read_index(root / name) for name in LAYOUT)
    assert cli.main(["dali-index", str(root), "--no-progress"]) == 0
    assert "0 written (0 records), 4 already up to date" in capsys.readouterr().out


def test_dali_index_elsewhere(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    assert cli.main(["dali-index", str(root), "--index-dir", str(tmp_path / "i")]) == 0
    written = sorted(p.name for p in (tmp_path / "i").iterdir())
    assert written == [".cvbench-outputs.json"] + [n + ".idx" for n in LAYOUT]  # recorded
    assert not (root / "idx").exists()


def test_dali_index_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["dali-index", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"cvbench: error: data directory {tmp_path / 'none'} does not exist"
    root = write_records(tmp_path / "data", index=False)
    shard = root / "train-00001-of-00002"
    shard.write_bytes(shard.read_bytes()[:-3])
    assert cli.main(["dali-index", str(root), "--no-progress"]) == 1  # a bad file: exit 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cvbench dali-index: error: TFRecord file {shard} is truncated")
    assert len(err.splitlines()) == 1
