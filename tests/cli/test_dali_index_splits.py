"""`dali-index` lists each split as the readers do (`data/read/splits.py`): an incomplete
shard set or an unrecorded 0-byte shard is refused before any index is written, and a
file whose name only looks like a shard is not indexed."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from dali_records import LAYOUT, write_records  # noqa: E402

import cvbench.cli as cli  # noqa: E402
from cvbench.data.read.splits import every_split_files  # noqa: E402


@pytest.fixture(autouse=True)
def with_imagenet_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.imagenet",))


def _run(root, capsys):
    code = cli.main(["dali-index", str(root), "--no-progress"])
    return code, capsys.readouterr()


def test_an_incomplete_set_is_refused_before_any_index(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    (root / "validation-00001-of-00002").unlink()  # a copy still under way
    code, out = _run(root, capsys)
    assert code == 1 and len(out.err.strip().splitlines()) == 1
    assert "validation-00001-of-00002" in out.err  # the missing shard, named
    assert not (root / "idx").exists()  # train's complete set was not indexed either


def test_an_unrecorded_empty_shard_is_refused_and_named(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    (root / "train-00001-of-00002").write_bytes(b"")  # a truncated copy
    code, out = _run(root, capsys)
    assert code == 1
    assert f"{root / 'train-00001-of-00002'} is 0 bytes" in out.err
    assert not (root / "idx").exists()


def test_an_empty_shard_the_manifest_records_is_indexed(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    (root / "train-00001-of-00002").write_bytes(b"")  # every image of it skipped
    shards = {"train-00001-of-00002": {"bytes": 0, "records": 0}}
    (root / "cvbench_manifest.json").write_text(json.dumps({"shards": shards}))
    code, out = _run(root, capsys)
    # LAYOUT's 4 shards; train-00000 3 records + validation 3 + 2 + the empty one's 0 = 8
    assert code == 0, out.err
    assert out.out.strip().startswith("DALI index files: 4 written (8 records)")
    assert (root / "idx" / "train-00001-of-00002.idx").read_text() == ""


def test_names_that_only_look_like_shards_are_not_listed(tmp_path):
    root = write_records(tmp_path / "data", index=False)
    (root / "train-0000a-of-00002").write_bytes(b"not a shard")  # '?' matched a letter
    assert [Path(p).name for p in every_split_files(root)] == sorted(LAYOUT)


def test_a_folder_with_no_shard_names_what_it_looked_for(tmp_path, capsys):
    (tmp_path / "train-0000a-of-00002").write_bytes(b"x")
    assert cli.main(["dali-index", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"cvbench: error: no TFRecord shards named <split>-NNNNN-of-NNNNN in {tmp_path}")
