"""A damaged `cvbench_manifest.json` (not JSON, or JSON of the wrong shape) is a
`BadFileError` naming the file, what is wrong and how to proceed, in every build that reads
it (`manifest._read_manifest`): it read as another data set before, and a shard entry of
the wrong shape was a traceback. Nothing is resumed from it, and no file deleted by it."""

from __future__ import annotations

import json

import pytest

from cvbench.data.builders.manifest import MANIFEST_NAME, folder_splits, prepare_out_dir
from cvbench.data.builders.sharded_writer import Skip, SplitSpec, write_sharded
from cvbench.data.tfrecord import encode_example, int64_feature
from cvbench.utils.errors import BadFileError

pytestmark = pytest.mark.backend_agnostic

HINT = (
    "a build resumes from, and replaces, only the shards its manifest lists: delete the "
    "folder's shards and cvbench_manifest.json to build again, or choose another output "
    "directory"
)


def encode(n: int) -> bytes | Skip:
    return Skip("three") if n == 3 else encode_example({"n": int64_feature(n)})


def build(out, *, overwrite: bool = False):
    split = SplitSpec("train", list(range(1, 7)), 2)
    return write_sharded(
        out, [split], encode, dataset="numbers", num_workers=1, progress=False,
        overwrite=overwrite,
    )  # fmt: skip


def damaged(manifest: dict, path: str, value) -> dict:
    """`manifest` with the value at `path` (keys separated by '/') replaced by `value`."""
    copy = json.loads(json.dumps(manifest))
    *parents, last = path.split("/")
    node = copy
    for key in parents:
        node = node[key]
    node[last] = value
    return copy


# (what the file holds, what the error says after "<file> is not a cvbench build manifest: ")
SHAPES = [
    ("[1, 2]", "its JSON is a list, not an object"),
    ("null", "its JSON is null, not an object"),
    (("format", "1"), "its format is the string '1', not a number"),
    (("format", True), "its format is a boolean True, not a number"),
    (("dataset", None), "its dataset is null, not a string"),
    (("splits", []), "its splits is a list, not an object"),
    (("shards", "x"), "its shards is the string 'x', not an object"),
    (("metadata", 5), "its metadata is the number 5, not an object"),
    (("splits/train", 5), "splits['train'] is the number 5, not an object"),
    (("splits/train", {}), "splits['train'] has num_items missing, not a count"),
    (("splits/train/num_shards", "2"), (
        "splits['train'] has num_shards the string '2', not a count")),
    (("shards/train-00000-of-00002/bytes", -1), (
        "shards['train-00000-of-00002'] has bytes the number -1, not a count")),
    (("shards/train-00000-of-00002/skipped", {}), (
        "shards['train-00000-of-00002'] has skipped an object, not a list")),
    (("shards/train-00000-of-00002/skipped", [["3"]]), (
        "shards['train-00000-of-00002'] has a skipped entry that is not an [item, reason] "
        "pair of strings")),
]  # fmt: skip


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("content, problem", SHAPES)
def test_a_manifest_of_the_wrong_shape_is_a_bad_file_naming_what_is_wrong(
    tmp_path, content, problem, overwrite
):
    out = tmp_path / "out"
    build(out)
    manifest_path = out / MANIFEST_NAME
    if isinstance(content, tuple):
        content = json.dumps(damaged(json.loads(manifest_path.read_text()), *content))
    manifest_path.write_text(content)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    message = f"{manifest_path} is not a cvbench build manifest: {problem}; {HINT}"
    with pytest.raises(BadFileError) as refused:
        build(out, overwrite=overwrite)
    assert str(refused.value) == message
    with pytest.raises(BadFileError):
        folder_splits(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing deleted


@pytest.mark.parametrize(
    "content, problem",
    [
        ("{garbage", "is not valid JSON: Expecting property name enclosed in double quotes: "
         "line 1 column 2 (char 1)"),
        ("[" * 1000, ": JSON nested 1000 levels deep, over the limit of 200"),
    ],
)  # fmt: skip
def test_a_manifest_that_is_not_json_is_a_bad_file_saying_how_to_proceed(
    tmp_path, content, problem
):
    (tmp_path / MANIFEST_NAME).write_text(content)
    sep = "" if problem.startswith(":") else " "
    message = f"{tmp_path / MANIFEST_NAME}{sep}{problem}; {HINT}"
    for overwrite in (False, True):
        with pytest.raises(BadFileError) as refused:
            prepare_out_dir(tmp_path, {"format": 1}, [], overwrite=overwrite)
        assert str(refused.value) == message


def test_a_sound_manifest_still_resumes_and_another_format_is_another_data_set(tmp_path):
    out = tmp_path / "out"
    build(out)
    (out / "train-00001-of-00002").unlink()
    summary = build(out)  # resumed: one shard written, one reused
    assert (summary.splits["train"].shards_written, summary.splits["train"].shards_reused) == (
        1,
        1,
    )
    # A manifest of another format number (another cvbench's) is another data set, as before.
    (out / MANIFEST_NAME).write_text(json.dumps({"format": 2, "anything": []}))
    with pytest.raises(FileExistsError, match="holds a different data set"):
        build(out)


def test_the_build_command_says_it_in_one_line_and_exit_1(tmp_path, capsys):
    from cvbench.cli import main
    from cvbench.demo.shapes_data import write_classification_set

    raw = write_classification_set(tmp_path / "raw", image_size=16, train_per_class=1,
                                   val_per_class=1).path  # fmt: skip
    argv = ["build-imagenet", "--raw-dir", str(raw), "--output-dir", str(tmp_path / "out")]
    argv += ["--train-shards", "1", "--val-shards", "1", "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    (tmp_path / "out" / MANIFEST_NAME).write_text("{}")
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        f"cvbench build-imagenet: error: {tmp_path / 'out' / MANIFEST_NAME} is not a cvbench "
        f"build manifest: its format is missing, not a number; {HINT}\n"
    )
