"""The CLI's DALI check (`data_backend_kwargs`) reads the index files of the splits there are:
a damaged split it cannot list is left to the reader of the command, which names it if it
reads it. Before (review of 2026-12-05, 3rd): an incomplete train split refused
`cvbench eval --data-backend dali`, which never reads train."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from dali_records import write_records  # noqa: E402

from cvbench.cli.task_args import data_backend_kwargs  # noqa: E402


def _args(data: Path) -> argparse.Namespace:
    return argparse.Namespace(
        model="resnet18", data_dir=str(data), data_backend="dali", dali_device=None,
        data_workers=None,
    )  # fmt: skip


def test_an_incomplete_split_is_left_to_the_reader_that_reads_it(tmp_path):
    data = write_records(tmp_path / "data")
    train = sorted(data.glob("train-*-of-*"))
    assert len(train) == 2
    train[1].unlink()  # train is now 1 of 2 shards; validation is whole
    kwargs = data_backend_kwargs(_args(data), task="classification")
    assert kwargs == {"data_backend": "dali", "dali_device": "cpu"}
