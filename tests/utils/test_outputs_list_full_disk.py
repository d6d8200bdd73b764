"""A record that fails on a full disk leaves no outputs list behind (heavy test
`test_inference_faults.py::test_os_errors_of_predict_and_export_are_one_line` found an empty
`.cvbench-outputs.json` on the full disk since the list took appended lines, f88332f: the
list was created, then its first line could not be written)."""

from __future__ import annotations

import errno

import pytest

from cvbench.utils import files
from cvbench.utils.files import OUTPUTS_LIST, record_output, written_by_cvbench


def _full_disk(fd, line):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.backend_agnostic
def test_a_first_record_on_a_full_disk_leaves_no_list(tmp_path, monkeypatch):
    (tmp_path / "r.json").write_text("{}")
    monkeypatch.setattr(files, "_append_line", _full_disk)
    with pytest.raises(OSError, match="No space left"):
        record_output(tmp_path / "r.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.backend_agnostic
def test_a_later_record_on_a_full_disk_keeps_the_list(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.json").write_text("[]")
    record_output(tmp_path / "a.json")
    before = (tmp_path / OUTPUTS_LIST).read_bytes()
    monkeypatch.setattr(files, "_append_line", _full_disk)
    with pytest.raises(OSError, match="No space left"):
        record_output(tmp_path / "b.json")
    assert (tmp_path / OUTPUTS_LIST).read_bytes() == before  # a's record intact
    assert written_by_cvbench(tmp_path / "a.json") and not written_by_cvbench(tmp_path / "b.json")
