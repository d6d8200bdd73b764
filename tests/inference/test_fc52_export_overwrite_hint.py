"""`export_for_serving` refusing an existing info file tells a Python caller the Python
argument (`overwrite=True`), as its other refusals do; `cvbench export` says `--overwrite`
(`cvbench.cli.predict.with_flag_hints`, `cvbench.cli.errors.for_command_line`). Before: the
library said `pass --overwrite`."""

from __future__ import annotations

import pytest

from cvbench.cli.errors import for_command_line
from cvbench.cli.predict import with_flag_hints
from cvbench.inference.export import _checked_destination, _swap_into_place

pytestmark = pytest.mark.backend_agnostic


def test_an_existing_info_file_names_the_python_argument(tmp_path):
    info = tmp_path / "served_info.json"
    info.write_text("mine")
    with pytest.raises(ValueError) as error:
        _checked_destination(str(tmp_path / "served"), overwrite=False)
    assert str(error.value) == f"{info} exists; pass overwrite=True to replace it"
    hinted = str(with_flag_hints(error.value))
    assert hinted == f"{info} exists; pass --overwrite to replace it"
    with pytest.raises(ValueError) as error:  # not cvbench's: overwrite=True does not replace it
        _checked_destination(str(tmp_path / "served"), overwrite=True)
    tail = "replaces only cvbench's own outputs: move it or write elsewhere"
    assert (
        str(error.value) == f"{info} exists and was not written by cvbench; overwrite=True {tail}"
    )
    assert for_command_line(str(error.value)) == (
        f"{info} exists and was not written by cvbench; --overwrite {tail}"
    )
    assert info.read_text() == "mine"
    # a message that names both keeps its words in the CLI
    both = "pass overwrite=True (--overwrite) to replace them"
    assert for_command_line(both) == both


def test_an_export_that_appeared_meanwhile_names_the_python_argument(tmp_path):
    new = tmp_path / "new.tflite"
    new.write_bytes(b"new")
    out = tmp_path / "out.tflite"
    out.write_bytes(b"theirs")
    with pytest.raises(ValueError, match=r"it was left as it is: pass overwrite=True to replace"):
        _swap_into_place(new, out, aside=tmp_path / "previous", overwrite=False)
    assert out.read_bytes() == b"theirs"
