"""Fixtures of the hostile-input harness: the fork server and the valid inputs (`Assets`),
each made once per session."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Iterator

import pytest

from hostile import corpus
from hostile.commands import Assets, F, R
from hostile.harness import Server


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("hostile-server") / "server.log"
    running = Server(log)
    print(f"hostile: server baseline {running.baseline_bytes >> 20} MiB, {running.cvbench}")
    yield running
    running.close()


@pytest.fixture(scope="session")
def assets(server, tmp_path_factory) -> Assets:
    """A classifier and a detector model file, a finished run, records and their raw
    images; made through the same server (the run and the records by the real commands)."""
    from inference_models import (
        channel_classifier,
        classifier_info,
        constant_detector,
        detector_info,
    )

    from cvbench.inference import save_model

    root = tmp_path_factory.mktemp("hostile-assets")
    save_model(channel_classifier(), root / "cls.keras", classifier_info())
    save_model(constant_detector(), root / "det.keras", detector_info())
    for cls in ("a", "b"):
        for i in range(4):
            corpus.jpeg(root / "raw" / "train" / cls / f"{cls}{i}.jpg", seed=i + 4 * (cls == "b"))
    # raw2: raw with class folder b renamed c (the same images)
    shutil.copytree(root / "raw", root / "raw2")
    (root / "raw2" / "train" / "b").rename(root / "raw2" / "train" / "c")
    build = "build-imagenet --raw-dir {} --output-dir {} --train-shards 1 --val-shards 1 "
    build += "--workers 1 --no-progress"
    train = f"train {F} --eval none --no-export --checkpoint-every 1 --log-dir run"
    on_records = f"train {R} --data-dir records --log-dir records_run"
    commands = (build.format("raw", "records"), build.format("raw2", "renamed"), train, on_records)
    for command in commands:
        done = server.run(shlex.split(command), cwd=root, timeout=300)
        assert done.rc == 0, done.err[-3000:]
    assert sorted(p.name for p in (root / "run" / "checkpoints").iterdir()) == [
        "ckpt-0000000001.npz",
        "ckpt-0000000002.npz",
    ]
    assets = Assets(
        root=root,
        cls_model=root / "cls.keras",
        det_model=root / "det.keras",
        run=root / "run",
        records=root / "records",
        raw=root / "raw",
        renamed=root / "renamed",
        records_run=root / "records_run",
    )
    return assets
