"""Fixtures of the end-to-end reliability tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def records(tmp_path_factory) -> Path:
    """`build-imagenet` records of the shapes set: 6 classes x 4 training images of 32 x 32
    (24 records: 6 steps an epoch at batch 4, 3 at batch 8), 1 validation image each."""
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("shapes_records")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=4, val_per_class=1, seed=0
    )
    out = root / "records"
    build_imagenet(raw.path, out, train_shards=2, val_shards=1, num_workers=1, progress=False)
    return out
