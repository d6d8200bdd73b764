"""The file-access layer: each rule on the files a user names, at its edges."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from cvbench.utils.errors import BadFileError
from cvbench.utils.files import (
    MAX_JSON_DEPTH,
    OUTPUTS_LIST,
    check_output,
    check_regular,
    json_depth,
    loads_json,
    match_files,
    open_input,
    open_output,
    owned_folder,
    read_input,
    read_json,
    record_output,
    written_by_cvbench,
)

pytestmark = pytest.mark.backend_agnostic


def _opens_within(fn, seconds: float = 5.0):
    """Runs `fn` in a thread; fails the test if it has not returned within `seconds` (a FIFO
    opened for reading blocks until a writer comes)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# --- match_files: paths are never patterns ---------------------------------------------


def test_glob_characters_in_the_folder_name_mean_themselves(tmp_path):
    # gl/out[12] as a glob matches gl/out1 and gl/out2; as a path it is one folder.
    for name in ("out1", "out2", "out[12]"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"train-{name}").write_bytes(b"")
    found = match_files(tmp_path / "out[12]", "train-*")
    assert found == [tmp_path / "out[12]" / "train-out[12]"]


def test_the_pattern_matches_names_only_and_earlier_parts_are_literal(tmp_path):
    (tmp_path / "a[b]").mkdir()
    (tmp_path / "a[b]" / "x-1").write_bytes(b"")
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "x-2").write_bytes(b"")
    assert match_files(tmp_path, "a[b]/x-?") == [tmp_path / "a[b]" / "x-1"]


def test_only_regular_files_match(tmp_path):
    (tmp_path / "f-1").write_bytes(b"")
    (tmp_path / "f-2").mkdir()
    os.mkfifo(tmp_path / "f-3")
    (tmp_path / "f-4").symlink_to(tmp_path / "missing")  # dangling
    (tmp_path / "f-5").symlink_to(tmp_path / "f-1")  # a link to a file counts
    assert [p.name for p in match_files(tmp_path, "f-*")] == ["f-1", "f-5"]


def test_a_missing_folder_matches_nothing(tmp_path):
    assert match_files(tmp_path / "nope", "*") == []
    (tmp_path / "file").write_bytes(b"")
    assert match_files(tmp_path / "file", "*") == []


# --- inputs: regular files, read with a bound --------------------------------------------


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "a.JPEG"
    os.mkfifo(fifo)
    with pytest.raises(BadFileError, match=r"image .*a\.JPEG is a FIFO \(named pipe\), not a"):
        _opens_within(lambda: open_input(fifo, what="image"))
    with pytest.raises(BadFileError, match="FIFO"):
        _opens_within(lambda: read_input(fifo, limit=10))


def test_a_link_to_dev_zero_is_refused_before_reading(tmp_path):
    link = tmp_path / "classes.txt"
    link.symlink_to("/dev/zero")
    with pytest.raises(BadFileError, match=r"classes\.txt is a character device"):
        read_input(link, limit=1 << 20, what="class texts")
    with pytest.raises(BadFileError, match="a folder"):
        check_regular(tmp_path)


def test_the_size_limit_is_exact_and_names_the_flag(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 10)
    assert read_input(f, limit=10) == b"x" * 10  # exactly the limit: accepted
    with pytest.raises(
        BadFileError, match=r"has 10 bytes, over the limit of 9 bytes; pass --max N"
    ):
        read_input(f, limit=9, flag="--max")


def test_a_sparse_file_is_refused_from_its_size_without_reading_it(tmp_path):
    f = tmp_path / "big.jpg"
    with open(f, "wb") as out:
        out.truncate(2 << 30)  # 2 GiB of holes: no disk, but read() would allocate 2 GiB
    with pytest.raises(BadFileError, match="has 2147483648 bytes"):
        read_input(f, limit=256 << 20, what="image")


def test_a_missing_input_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_input(tmp_path / "nope", limit=1)


# --- JSON: size and depth -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, depth",
    [
        ("1", 0),
        ("[]", 1),
        ('{"a": {"b": [1]}}', 3),
        ('["[[[[", "]]"]', 1),  # brackets inside strings do not count
        (r'["\"[[[[\\", {"k": "\\\"{"}]', 2),  # escaped quotes and backslashes
    ],
)
def test_json_depth(text, depth):
    assert json_depth(text) == depth


def test_the_depth_limit_is_exact():
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_depth(ok) == MAX_JSON_DEPTH
    loads_json(ok, source="ok.json")
    deep = "[" + ok + "]"
    with pytest.raises(BadFileError, match=f"deep.json: JSON nested {MAX_JSON_DEPTH + 1} levels"):
        loads_json(deep, source="deep.json")


def test_a_hundred_thousand_brackets_are_one_error_not_a_recursion_error(tmp_path):
    f = tmp_path / "dataset_info.json"
    f.write_bytes(b"[" * 100000)
    with pytest.raises(BadFileError, match="dataset_info.json: JSON nested 100000 levels deep"):
        read_json(f, limit=1 << 20)


def test_invalid_json_and_bytes_name_the_source():
    with pytest.raises(BadFileError, match="m.json is not valid JSON"):
        loads_json(b"\xff\xfe{", source="m.json")
    with pytest.raises(BadFileError, match="m.json is not valid JSON"):
        loads_json(b'{"a": }', source="m.json")


# --- writes: never through a link, only into folders cvbench owns --------------------------


def test_open_output_refuses_a_link_and_leaves_its_target(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".cvbench-run.lock").symlink_to("../victim.txt")
    for mode in ("w", "a", "r+"):
        with pytest.raises(BadFileError, match=r"\.cvbench-run\.lock is a symbolic link"):
            open_output(run / ".cvbench-run.lock", mode)
    assert victim.read_text() == "keep me"


def test_open_output_writes_appends_and_refuses_a_fifo(tmp_path):
    f = tmp_path / "log.jsonl"
    with open_output(f, "w", encoding="utf-8") as out:
        out.write("a\n")
    with open_output(f, "a", encoding="utf-8") as out:
        out.write("b\n")
    assert f.read_text() == "a\nb\n"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BadFileError, match="a FIFO"):
        _opens_within(lambda: open_output(tmp_path / "fifo", "a"))
    with pytest.raises(ValueError, match="mode"):
        open_output(f, "x")


def test_owned_folder_makes_parts_and_refuses_a_link_below_the_root(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root_link = tmp_path / "runlink"
    root_link.symlink_to(elsewhere)  # the root may be a link: the user named it
    assert owned_folder(root_link, "checkpoints") == root_link / "checkpoints"
    assert (elsewhere / "checkpoints").is_dir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "export").symlink_to(elsewhere)
    with pytest.raises(BadFileError, match=r"run/export is a symbolic link"):
        owned_folder(run, "export", "saved_model")
    (run / "tensorboard").write_text("")
    with pytest.raises(BadFileError, match="a regular file|not a regular file|where cvbench keeps"):
        owned_folder(run, "tensorboard")
    assert owned_folder(run, "new", create=False) == run / "new"
    assert not (run / "new").exists()


# --- outputs never replace inputs or the user's files ---------------------------------------


def test_an_output_equal_to_or_holding_an_input_is_refused(tmp_path):
    ckpt = tmp_path / "run" / "ckpt-2.npz"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"checkpoint")
    with pytest.raises(ValueError, match="is an input of this command"):
        check_output(ckpt, inputs=[ckpt], overwrite=True)
    with pytest.raises(ValueError, match="is an input of this command"):
        check_output(tmp_path / "run", inputs=[ckpt], overwrite=True)  # holds it
    link = tmp_path / "other-name.npz"
    link.symlink_to(ckpt)
    with pytest.raises(ValueError, match="is an input of this command"):
        check_output(link, inputs=[ckpt], overwrite=True)  # the same file by another name
    assert ckpt.read_bytes() == b"checkpoint"


def test_an_existing_output_needs_overwrite_and_to_be_cvbench_s(tmp_path):
    out = tmp_path / "results.json"
    assert check_output(out) == out  # missing: fine
    out.write_text("[]")
    with pytest.raises(ValueError, match=r"exists; pass --overwrite to replace it"):
        check_output(out)
    assert check_output(out, overwrite=True) == out  # no ownership rule given
    with pytest.raises(ValueError, match="was not written by cvbench"):
        check_output(out, overwrite=True, is_ours=written_by_cvbench)
    record_output(out)
    assert check_output(out, overwrite=True, is_ours=written_by_cvbench) == out
    with pytest.raises(ValueError, match="empty"):
        check_output("")


def test_a_symbolic_link_is_never_an_output(tmp_path):
    (tmp_path / "victim").write_text("x")
    (tmp_path / "out.json").symlink_to(tmp_path / "victim")
    with pytest.raises(ValueError, match="symbolic link"):
        check_output(tmp_path / "out.json", overwrite=True)


def test_the_outputs_list_tracks_content_and_survives_damage(tmp_path):
    a, b = tmp_path / "a.tflite", tmp_path / "b.json"
    a.write_bytes(b"1234TFL3")
    b.write_text("{}")
    record_output(a)
    record_output(b)
    assert written_by_cvbench(a) and written_by_cvbench(b)
    a.write_bytes(b"1234TFL3 changed")  # same magic bytes, other content: the user's now
    assert not written_by_cvbench(a)
    (tmp_path / OUTPUTS_LIST).write_bytes(b"[" * 1000)  # a damaged list claims nothing
    assert not written_by_cvbench(b)
    assert not written_by_cvbench(tmp_path / "missing")
    assert not written_by_cvbench(tmp_path)  # a folder


def test_record_output_never_writes_the_list_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "outs"
    out.mkdir()
    (out / OUTPUTS_LIST).symlink_to(victim)
    (out / "r.json").write_text("[]")
    with pytest.raises(BadFileError, match="symbolic link"):
        record_output(out / "r.json")
    assert victim.read_text() == "keep"
    assert Path(out / OUTPUTS_LIST).is_symlink()
