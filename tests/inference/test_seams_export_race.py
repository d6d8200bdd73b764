"""An export without --overwrite never replaces what appeared at its path while it was
written (another export to the same path at the same time, a user's file): it is placed
only where nothing is (`_place_new`: a file by a hard link, a folder by a rename, neither of
which replaces). Before: two `cvbench export m.keras --output same` at once both said
`wrote same`, the second silently replacing the first (a user's file there likewise)."""

from __future__ import annotations

import pytest

from cvbench.inference.export import _swap_into_place


def _staged(tmp_path, kind: str):
    staging = tmp_path / ".staging"
    staging.mkdir()
    if kind == "file":
        new = staging / "model.tflite"
        new.write_bytes(b"new export")
    else:
        new = staging / "saved_model"
        (new / "variables").mkdir(parents=True)
        (new / "saved_model.pb").write_bytes(b"new export")
    return new, staging / "previous"


@pytest.mark.parametrize("kind", ["file", "folder"])
@pytest.mark.parametrize("appeared", ["file", "folder"])
def test_what_appeared_meanwhile_is_kept_without_overwrite(tmp_path, kind, appeared):
    new, aside = _staged(tmp_path, kind)
    out = tmp_path / "out"
    if appeared == "file":
        out.write_bytes(b"a user's file")
    else:
        (out / "inside").mkdir(parents=True)
        (out / "inside" / "notes.txt").write_bytes(b"a user's file")
    with pytest.raises(ValueError, match="appeared while this export was written") as error:
        _swap_into_place(new, out, aside=aside, overwrite=False)
    assert str(out) in str(error.value) and "pass overwrite=True" in str(error.value)
    kept = out if appeared == "file" else out / "inside" / "notes.txt"
    assert kept.read_bytes() == b"a user's file"


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_free_path_gets_the_export_and_overwrite_still_replaces(tmp_path, kind):
    new, aside = _staged(tmp_path, kind)
    out = tmp_path / "out"
    _swap_into_place(new, out, aside=aside, overwrite=False)
    written = out if kind == "file" else out / "saved_model.pb"
    assert written.read_bytes() == b"new export" and not new.exists()
    (tmp_path / "b").mkdir()
    newer, aside = _staged(tmp_path / "b", kind)
    (newer if kind == "file" else newer / "saved_model.pb").write_bytes(b"newer export")
    _swap_into_place(newer, out, aside=aside, overwrite=True)  # --overwrite: replaced
    assert written.read_bytes() == b"newer export"
