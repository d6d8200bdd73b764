"""Session-wide tiny data sets for the documentation blocks, built on first use."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Callable, Iterator
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


@pytest.fixture(scope="session")
def coco_mirror(tmp_path_factory, doc_data) -> Iterator[tuple[str, dict]]:
    """A local HTTP server with COCO 2017's three zips (made from the tiny COCO set) at their
    official paths: yields (base URL, the `COCO_2017_FILES` table of those zips)."""
    from cvbench.data.acquire.download import RemoteFile

    root = tmp_path_factory.mktemp("coco_mirror")
    table = docs_tiny_data.coco_archives(root, doc_data("coco_raw"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        files = {part: RemoteFile(*entry) for part, entry in table.items()}
        yield f"http://127.0.0.1:{server.server_port}", files
    finally:
        server.shutdown()
        server.server_close()
