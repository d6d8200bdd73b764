"""An OS error of an atomic write names the file the user asked for, never the temporary
beside it (`atomic_path`: `_naming_destination`). Before: `cvbench eval --json ro/x.json`
on a read-only folder said `cvbench eval: error: /abs/ro/.x.json.cvbench-<host>-<pid>-
<random>.tmp.json: Read-only file system`, and on a full disk `cvbench eval: error: No space
left on device`, naming nothing."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from cvbench.utils.io import atomic_open, atomic_path, write_json_atomic


def test_an_error_naming_the_temporary_names_the_destination(tmp_path):
    dest = tmp_path / "x.json"
    with pytest.raises(OSError) as error, atomic_path(dest) as tmp:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert (error.value.errno, error.value.filename) == (errno.ENOSPC, str(dest))
    assert str(error.value) == f"[Errno 28] No space left on device: '{dest}'"
    assert os.listdir(tmp_path) == []  # the temporary removed, nothing published


def test_a_write_error_naming_no_file_names_the_destination(tmp_path):
    # f.write / flush / fsync on a full disk raise OSError(ENOSPC) without a file name.
    dest = tmp_path / "y.bin"
    with pytest.raises(OSError) as error, atomic_open(dest, "wb"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert error.value.filename == str(dest)
    assert error.value.errno == errno.ENOSPC and os.listdir(tmp_path) == []


def test_errors_about_other_files_and_other_exceptions_are_kept(tmp_path):
    other = tmp_path / "input.txt"
    with pytest.raises(FileNotFoundError) as error, atomic_path(tmp_path / "z"):
        open(other)  # noqa: SIM115  (an input the writer reads: its own name)
    assert error.value.filename == str(other)
    with pytest.raises(ValueError, match="^kept$"), atomic_path(tmp_path / "z"):
        raise ValueError("kept")
    err = OSError("no errno")  # errno None: left as it is
    with pytest.raises(OSError) as kept, atomic_path(tmp_path / "z"):
        raise err
    assert kept.value is err


def test_a_read_only_folder_names_the_destination(tmp_path):
    from small_disk import read_only

    ro = read_only(tmp_path / "ro")
    try:
        with pytest.raises(OSError) as error:
            write_json_atomic(ro / "x.json", {"a": 1})
        assert (error.value.errno, error.value.filename) == (errno.EROFS, str(ro / "x.json"))
    finally:
        subprocess.run(["umount", str(ro)], check=False)


@pytest.mark.parametrize("depth", ["x.json", "sub/x.json"])
def test_a_file_where_a_folder_should_be_is_not_a_directory_naming_it(tmp_path, depth):
    # `mkdir(parents=True, exist_ok=True)` said `[Errno 17] File exists: 'pfile'`, which the
    # CLI reported as `cvbench: error: pfile: File exists`, exit 2.
    (tmp_path / "pfile").write_text("a user's file")
    with pytest.raises(NotADirectoryError) as error:
        write_json_atomic(tmp_path / "pfile" / depth, {})
    assert error.value.filename == str(tmp_path / "pfile")
    assert (tmp_path / "pfile").read_text() == "a user's file"
