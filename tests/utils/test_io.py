import json
import os
import stat

import pytest

from cvbench.utils import io as io_module
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


@pytest.fixture(params=[0o022, 0o077, 0o002], ids=["umask022", "umask077", "umask002"])
def umask(request):
    """Runs the test under each umask, restoring the old one afterwards."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


# What open() / mkdir() give a new file / directory: 0o666 / 0o777 without the umask's bits.
FILE_MODES = {0o022: 0o644, 0o077: 0o600, 0o002: 0o664}
DIR_MODES = {0o022: 0o755, 0o077: 0o700, 0o002: 0o775}


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_current_umask_reads_without_changing_it(umask, monkeypatch):
    assert io_module.current_umask() == umask
    assert os.umask(umask) == umask  # unchanged
    # The fallback (no /proc): set-and-restore gives the same value and restores it.
    monkeypatch.setattr(io_module, "_PROC_STATUS", "/nonexistent/status")
    assert io_module.current_umask() == umask
    assert os.umask(umask) == umask


def test_atomic_writes_get_the_mode_open_would_give(umask, tmp_path):
    # A plain open() under the same umask, for comparison.
    with open(tmp_path / "plain.txt", "w") as f:
        f.write("x")
    assert _mode(tmp_path / "plain.txt") == FILE_MODES[umask]

    with atomic_open(tmp_path / "new" / "deeper" / "f.txt") as f:
        f.write("hello")
    assert _mode(tmp_path / "new" / "deeper" / "f.txt") == FILE_MODES[umask]
    # Parent folders the write created: what mkdir gives.
    assert _mode(tmp_path / "new") == DIR_MODES[umask]
    assert _mode(tmp_path / "new" / "deeper") == DIR_MODES[umask]

    write_json_atomic(tmp_path / "m.json", {"a": 1})
    assert _mode(tmp_path / "m.json") == FILE_MODES[umask]
    with atomic_path(tmp_path / "shard-00000-of-00001") as tmp:
        tmp.write_bytes(b"records")
    assert _mode(tmp_path / "shard-00000-of-00001") == FILE_MODES[umask]


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o664])
def test_replacing_a_file_keeps_its_mode(umask, mode, tmp_path):
    # As open(dst, "w") would: the user's 0o600 stays 0o600 (it became 0o644 under umask 022
    # before), whatever the umask; a new file still gets the umask's mode.
    dst = tmp_path / "ckpt.bin"
    dst.write_bytes(b"old")
    os.chmod(dst, mode)
    with atomic_open(dst, "wb") as f:
        f.write(b"new")
    assert dst.read_bytes() == b"new"
    assert _mode(dst) == mode
    with atomic_open(tmp_path / "fresh.bin", "wb") as f:
        f.write(b"new")
    assert _mode(tmp_path / "fresh.bin") == FILE_MODES[umask]


def test_replacing_a_directory_or_link_does_not_borrow_its_mode(umask, tmp_path):
    # A file replacing a folder's name (never happens through atomic_open: os.replace refuses)
    # is not given the folder's mode; a link's target mode is not followed either.
    target = tmp_path / "target"
    target.write_bytes(b"t")
    os.chmod(target, 0o600)
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    with atomic_open(link, "wb") as f:
        f.write(b"new")
    assert not link.is_symlink() and link.read_bytes() == b"new"
    assert _mode(link) == FILE_MODES[umask]
    assert target.read_bytes() == b"t"


def test_atomic_path_directory_gets_the_mkdir_mode(umask, tmp_path):
    # A writer that replaces the temporary file with a folder (a SavedModel-like export),
    # creating it private as TensorFlow or mkdtemp might.
    with atomic_path(tmp_path / "saved_model") as tmp:
        tmp.unlink()
        tmp.mkdir(mode=0o700)
        (tmp / "saved_model.pb").write_bytes(b"pb")
    assert _mode(tmp_path / "saved_model") == DIR_MODES[umask]
    assert (tmp_path / "saved_model" / "saved_model.pb").read_bytes() == b"pb"


def test_atomic_path_failure_removes_a_directory_temporary(tmp_path):
    with pytest.raises(RuntimeError, match="export failed"), atomic_path(tmp_path / "d") as tmp:
        tmp.unlink()
        tmp.mkdir()
        (tmp / "part").write_bytes(b"x")
        raise RuntimeError("export failed")
    assert list(tmp_path.iterdir()) == []
