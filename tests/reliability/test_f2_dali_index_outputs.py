"""`cvbench dali-index` writes only into an index folder it owns and replaces only index files
it wrote: a link in place of `DATA_DIR/idx` is refused (it wrote through it into the link's
target), a user's file named like an index is never replaced (with or without --overwrite),
a stale index cvbench wrote is rewritten, an empty DATA_DIR or --index-dir is refused."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from dali_records import LAYOUT, write_records  # noqa: E402

import cvbench.cli as cli  # noqa: E402
from cvbench.data.dali_index import read_index, record_entries, write_indexes  # noqa: E402
from cvbench.utils.files import written_by_cvbench  # noqa: E402

SHARD = "train-00000-of-00002"


@pytest.fixture(autouse=True)
def with_imagenet_commands(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.imagenet",))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(["dali-index", *argv, "--no-progress"])
    except SystemExit as e:  # argparse's usage error
        code = e.code
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


def test_a_link_in_place_of_idx_is_refused_and_its_target_untouched(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / f"{SHARD}.idx").write_text("precious\n")
    (root / "idx").symlink_to(victim)
    code, out, err = _run(capsys, str(root))
    assert (code, out) == (1, "")
    assert err == (
        f"cvbench dali-index: error: {root}/idx is a symbolic link; cvbench writes only into "
        "folders it made, never through a link: remove it"
    )
    assert sorted(p.name for p in victim.iterdir()) == [f"{SHARD}.idx"]
    assert (victim / f"{SHARD}.idx").read_text() == "precious\n"


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_users_file_named_like_an_index_is_never_replaced(tmp_path, capsys, overwrite):
    root = write_records(tmp_path / "data", index=False)
    (root / "idx").mkdir()
    mine = root / "idx" / f"{SHARD}.idx"
    mine.write_text("precious\n")
    code, out, err = _run(capsys, str(root), *(["--overwrite"] if overwrite else []))
    assert (code, out) == (2, "")
    assert err == (
        f"cvbench: error: {mine} exists and was not written by cvbench; --overwrite replaces "
        "only cvbench's own outputs: move it or write elsewhere"
    )
    # Refused before any index is written: the user's file is the folder's only file.
    assert sorted(p.name for p in (root / "idx").iterdir()) == [mine.name]
    assert mine.read_text() == "precious\n"


def test_a_fresh_index_someone_else_wrote_is_kept_and_used(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    (root / "idx").mkdir()
    theirs = root / "idx" / f"{SHARD}.idx"  # as DALI's tfrecord2idx writes it
    theirs.write_text("".join(f"{o} {s}\n" for o, s in record_entries(root / SHARD)))
    code, out, _ = _run(capsys, str(root))
    assert (code, out) == (0, "DALI index files: 3 written (8 records), 1 already up to date")
    assert not written_by_cvbench(theirs)


def test_a_stale_index_cvbench_wrote_is_rewritten(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    assert _run(capsys, str(root))[0] == 0
    assert all(written_by_cvbench(root / "idx" / f"{name}.idx") for name in LAYOUT)
    shard = root / SHARD
    with open(shard, "ab") as f:  # the shard was rebuilt with more records
        f.write((root / "train-00001-of-00002").read_bytes())
    code, out, _ = _run(capsys, str(root))
    assert (code, out) == (0, "DALI index files: 1 written (6 records), 3 already up to date")
    assert len(read_index(shard)) == 6
    code, out, _ = _run(capsys, str(root), "--overwrite")  # its own files, all rewritten
    assert (code, out) == (0, "DALI index files: 4 written (14 records), 0 already up to date")


def test_an_empty_data_dir_or_index_dir_is_refused(tmp_path, capsys, monkeypatch):
    root = write_records(tmp_path / "data", index=False)
    monkeypatch.chdir(root)
    assert _run(capsys, "") == (
        2,
        "",
        "cvbench: error: DATA_DIR is empty: name the folder of the shards (. for this one)",
    )
    assert _run(capsys, str(root), "--index-dir", "") == (
        2,
        "",
        "cvbench dali-index: error: argument --index-dir: the path is empty: name the folder "
        "to write (. for the current one) (see cvbench dali-index --help)",
    )
    with pytest.raises(ValueError, match=r"the index folder is empty \(--index-dir ' '\)"):
        write_indexes([root / SHARD], index_dir=" ")  # the Python API
    assert sorted(p.name for p in root.iterdir()) == sorted(LAYOUT)  # nothing written


def test_a_file_in_place_of_idx_is_one_line(tmp_path, capsys):
    root = write_records(tmp_path / "data", index=False)
    (root / "idx").write_text("mine\n")
    assert _run(capsys, str(root)) == (
        1,
        "",
        f"cvbench dali-index: error: {root}/idx: is a file, not a folder",
    )
    assert (root / "idx").read_text() == "mine\n"


@pytest.mark.parametrize("overwrite", [False, True])
def test_the_index_files_of_an_older_build_are_rewritten_not_refused(tmp_path, capsys, overwrite):
    """A data set indexed before index files were recorded (an older cvbench, or DALI's
    tfrecord2idx): its well-formed index files are the shards' own, so a stale one (and
    with --overwrite every one) is rewritten, never refused as a user's file."""
    root = write_records(tmp_path / "data", index=False)
    (root / "idx").mkdir()
    for name in LAYOUT:  # well-formed and unrecorded; this one stale: one record too few
        entries = record_entries(root / name)[: -1 if name == SHARD else None]
        (root / "idx" / f"{name}.idx").write_text("".join(f"{o} {s}\n" for o, s in entries))
    argv = (str(root), "--overwrite") if overwrite else (str(root),)
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    written = len(LAYOUT) if overwrite else 1
    assert out.startswith(f"DALI index files: {written} written")
    assert read_index(root / SHARD) == record_entries(root / SHARD)
    assert written_by_cvbench(root / "idx" / f"{SHARD}.idx")
