"""A planted `cvbench_manifest.json` cannot make `--overwrite` delete a file outside the
output folder: its shard names, split names and patterns must be names of the folder
(found by helper F1: `{"shards": {"../victim": ...}}` deleted `m/victim`)."""

from __future__ import annotations

import json

import pytest

from cvbench.data.builders.manifest import MANIFEST_NAME, split_shard_names
from cvbench.data.builders.sharded_writer import SplitSpec, write_sharded
from cvbench.utils.errors import BadFileError


def encode(item):
    return f"record {item}".encode()


def planted(tmp_path, manifest: dict):
    out = tmp_path / "m" / "out"
    out.mkdir(parents=True)
    (tmp_path / "m" / "victim").write_text("precious")
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize(
    "manifest",
    [
        # a shard named outside the folder
        {"format": 1, "dataset": "other", "options": {}, "splits": {},
         "shards": {"../victim": {"records": 0, "bytes": 5, "skipped": []}}},
        # a split whose pattern names a file outside the folder
        {"format": 1, "dataset": "t", "options": {}, "shards": {},
         "splits": {"train": {"num_items": 1, "num_shards": 1, "pattern": "../victim",
                              "items_sha256": "x"}}},
        # a split name that is no file name
        {"format": 1, "dataset": "t", "options": {}, "shards": {},
         "splits": {"../v": {"num_items": 1, "num_shards": 1, "pattern": "{split}",
                             "items_sha256": "x"}}},
    ],
)  # fmt: skip
def test_overwrite_never_deletes_outside_the_folder(tmp_path, manifest):
    out = planted(tmp_path, manifest)
    with pytest.raises(BadFileError, match="is not a cvbench build manifest: (shards|splits)"):
        write_sharded(
            out, [SplitSpec("train", [1], 1)], encode, dataset="t", overwrite=True,
            num_workers=1, progress=False,
        )  # fmt: skip
    assert (tmp_path / "m" / "victim").read_text() == "precious"


def test_a_manifest_of_another_format_deletes_nothing_outside(tmp_path):
    """Another format's manifest is not checked field by field; its names still never leave
    the folder."""
    manifest = {"format": 99, "shards": {"../victim": {}}}
    out = planted(tmp_path, manifest)
    write_sharded(
        out, [SplitSpec("train", [1], 1)], encode, dataset="t", overwrite=True,
        num_workers=1, progress=False,
    )  # fmt: skip
    assert (tmp_path / "m" / "victim").read_text() == "precious"


def test_split_shard_names_gives_no_path_outside_the_folder():
    identity = {"pattern": "{split}-{index:05d}-of-{num_shards:05d}", "num_shards": 2}
    assert split_shard_names("train", identity) == ["train-00000-of-00002", "train-00001-of-00002"]
    assert split_shard_names("train", {"pattern": "../{split}", "num_shards": 1}) == []
