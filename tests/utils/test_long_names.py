"""Any file name the file system takes can be written atomically (probe p50 #4): a legal
220-byte name failed with "File name too long" after the work was done (`eval --json`,
`predict --draw`), since the temporary's name was the final name plus about 45 bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cvbench.utils.io import (
    HOST_TAG,
    atomic_open,
    atomic_path,
    remove_dead_temporaries,
    temporary_stem,
)


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("name", [
    "r" * 215 + ".json",  # the probe's: 220 bytes
    "x" * 255,  # the longest name, no suffix
    "a.b.c." + "d" * 240 + ".keras",  # dots in the head
    "é" * 120 + ".json",  # 245 bytes of 2-byte characters: no character cut in half
    "n" * 200 + "." + "s" * 40,  # a suffix too long to keep
])  # fmt: skip
def test_a_legal_long_name_is_written_atomically(tmp_path, name):
    assert len(os.fsencode(name)) <= 255
    with atomic_open(tmp_path / name) as f:
        f.write("ok")
        temporaries = [p.name for p in tmp_path.iterdir() if p.name != name]
        assert len(temporaries) == 1 and len(os.fsencode(temporaries[0])) <= 255
    assert (tmp_path / name).read_text() == "ok"
    assert [p.name for p in tmp_path.iterdir()] == [name]  # the temporary renamed away


@pytest.mark.backend_agnostic
@pytest.mark.parametrize(
    "name", ["ab" + "あ" * 80, "a" + "あ" * 80, "あ" * 70 + "é" * 10 + ".json"]
)  # 242, 241 and 235 bytes: shortened, the cut falling inside a character
def test_a_shortened_temporary_is_whole_characters(tmp_path, name):
    # review V F1: the head was cut at a byte count, mid-character: build-coco of a legal
    # 200-byte split name of 3-byte characters (its shards' names are longer) failed
    # ('utf-8' codec can't encode ...
    # surrogates not allowed, TensorFlow's TFRecordWriter)
    with atomic_path(tmp_path / name) as tmp:
        tmp.name.encode("utf-8")  # strict: no surrogate
        assert len(os.fsencode(tmp.name)) <= 255
        tmp.write_bytes(b"x")
    assert (tmp_path / name).read_bytes() == b"x"


@pytest.mark.backend_agnostic
def test_a_shortened_temporary_keeps_the_suffix_writers_check(tmp_path):
    name = "m" * 240 + ".keras"  # model.save wants its path to end in .keras
    with atomic_path(tmp_path / name) as tmp:
        assert tmp.suffix == ".keras" and len(os.fsencode(tmp.name)) <= 255
        tmp.write_bytes(b"k")
    # two long names that share their first bytes get two temporaries' names
    assert temporary_stem("m" * 240 + "1.json") != temporary_stem("m" * 240 + "2.json")
    assert temporary_stem("short.json") == "short.json"  # short names as before


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("name", ["r" * 215 + ".json", "x" * 255, "n" * 200 + "." + "s" * 40])
def test_a_killed_writers_shortened_temporary_is_swept(tmp_path, name):
    # a child opens the temporary and is killed outright (no finally): the next process's
    # first write into the folder removes it, as it does a short name's
    code = (
        "import os, sys\nfrom cvbench.utils.io import atomic_open\n"
        "with atomic_open(sys.argv[1]) as f:\n    f.write('half'); f.flush(); os._exit(9)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], check=False)
    assert done.returncode == 9
    (left,) = tmp_path.iterdir()
    assert f".cvbench-{HOST_TAG}-" in left.name and len(os.fsencode(left.name)) <= 255
    assert [p.name for p in remove_dead_temporaries(tmp_path)] == [left.name]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.backend_agnostic
def test_a_name_over_the_limit_still_fails_naming_the_file(tmp_path):
    name = "z" * 256  # not a legal name anywhere: the error names it, not the temporary
    with pytest.raises(OSError) as info, atomic_open(tmp_path / name) as f:
        f.write("x")
    assert Path(info.value.filename).name == name
