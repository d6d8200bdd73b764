"""Session-wide tiny data sets for the documentation blocks, built on first use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import docs_tiny_data
import pytest


@pytest.fixture(scope="session")
def doc_data(tmp_path_factory, legacy_h5) -> Callable[[str], Path]:
    """`doc_data(name)`: the folder of a tiny data set of `docs_tiny_data`, built once."""
    root = tmp_path_factory.mktemp("doc_data")
    built: dict[str, Path] = {}
    needs = {"imagenet_records": "imagenet_raw", "coco_records": "coco_raw"}

    def get(name: str) -> Path:
        if name not in built:
            maker = getattr(docs_tiny_data, name)
            if name == "resnet50_notop_h5":
                built[name] = maker(root / f"{name}.h5", legacy_h5)
            elif name in needs:
                built[name] = maker(root / name, get(needs[name]))
            else:
                built[name] = maker(root / name)
        return built[name]

    return get
