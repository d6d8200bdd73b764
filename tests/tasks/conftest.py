"""Records the task tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def six_class_records(tmp_path_factory):
    """A 6-class folder (the demo's shapes, 2 train + 1 val image each) built into records."""
    from cvbench.data import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    root = tmp_path_factory.mktemp("six")
    raw = write_classification_set(
        root / "raw", image_size=32, train_per_class=2, val_per_class=1, seed=0
    )
    build_imagenet(raw.path, root / "records", train_shards=1, val_shards=1, num_workers=1,
                   progress=False)  # fmt: skip
    return root / "records"
