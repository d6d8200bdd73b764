"""Symbolic links in a raw ImageNet-style folder (`imagenet_layout.discover`): a class folder
that links outside the raw data is read like any other; one that makes images be read twice
(a loop, a link into the raw data, a second link to a folder already read) is refused, naming
the link."""

from __future__ import annotations

from pathlib import Path

import pytest

from cvbench.data.builders import imagenet_layout as layout
from cvbench.utils.errors import BadFileError


def _images(folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"not decoded here")


@pytest.fixture
def raw(tmp_path) -> Path:
    _images(tmp_path / "raw" / "train" / "a", "a0.jpg", "a1.jpg")
    _images(tmp_path / "elsewhere" / "b", "b0.jpg")
    _images(tmp_path / "elsewhere" / "b" / "more", "b1.jpg")
    return tmp_path / "raw"


def test_a_class_folder_linking_outside_the_raw_data_is_read(raw):
    (raw / "train" / "b").symlink_to(raw.parent / "elsewhere" / "b")
    found = layout.discover(raw)
    assert found.classes == ["a", "b"]
    # os.walk's order: a folder's files, then its sub-folders; paths through the link.
    assert [p for p, c in found.train if c == "b"] == [
        str(raw / "train" / "b" / "b0.jpg"),
        str(raw / "train" / "b" / "more" / "b1.jpg"),
    ]


def test_a_linked_folder_inside_a_class_is_read_too(raw):
    (raw / "train" / "a" / "extra").symlink_to(raw.parent / "elsewhere" / "b")
    found = layout.discover(raw)
    assert found.train_counts() == {"a": 4}


@pytest.mark.parametrize(
    ("link", "target", "why"),
    [
        ("train/x", ".", "a folder that holds it (a loop"),
        ("train/a/up", "..", "a folder that holds it (a loop"),
        ("train/c", "a", "inside the raw data folder"),
        ("train/r", "../..", "a folder that holds it (a loop"),
    ],
)
def test_a_link_that_reads_images_twice_is_refused(raw, link, target, why):
    (raw / link).symlink_to(target)
    with pytest.raises(BadFileError) as caught:
        layout.discover(raw)
    assert str(caught.value).startswith(f"{raw / link} is a symbolic link to ")
    assert why in str(caught.value)


def test_two_links_to_one_folder_are_refused(raw):
    (raw / "train" / "b").symlink_to(raw.parent / "elsewhere" / "b")
    (raw / "train" / "c").symlink_to(raw.parent / "elsewhere" / "b")
    with pytest.raises(BadFileError, match=r"/train/c is a symbolic link to .*already read"):
        layout.discover(raw)


def test_a_loop_outside_the_raw_data_is_refused(raw):
    outside = raw.parent / "elsewhere" / "b"
    (outside / "more" / "back").symlink_to(outside)
    (raw / "train" / "b").symlink_to(outside)
    with pytest.raises(BadFileError, match=r"more/back is a symbolic link to .*\(a loop"):
        layout.discover(raw)
