import json

import pytest

from cvbench.utils.io import atomic_open, atomic_path, write_json_atomic


def test_atomic_open_replaces_on_success(tmp_path):
    dst = tmp_path / "sub" / "f.txt"
    with atomic_open(dst) as f:
        f.write("hello")
        # Not visible under its final name until the block ends.
        assert not dst.exists()
    assert dst.read_text() == "hello"
    assert [p.name for p in dst.parent.iterdir()] == ["f.txt"]


def test_atomic_open_failure_keeps_old_file_and_leaves_no_temp(tmp_path):
    dst = tmp_path / "f.txt"
    dst.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(dst) as f:
        f.write("half")
        raise RuntimeError("killed")
    assert dst.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_atomic_path_keeps_suffix(tmp_path):
    with atomic_path(tmp_path / "m.keras") as tmp:
        assert tmp.suffix == ".keras"
        tmp.write_bytes(b"x")
    assert (tmp_path / "m.keras").read_bytes() == b"x"


def test_atomic_open_rejects_read_mode(tmp_path):
    with pytest.raises(ValueError, match="'r'"), atomic_open(tmp_path / "x", "r"):
        pass


def test_write_json_atomic(tmp_path):
    write_json_atomic(tmp_path / "a.json", {"b": 1, "a": [1, 2]})
    assert json.loads((tmp_path / "a.json").read_text()) == {"a": [1, 2], "b": 1}
