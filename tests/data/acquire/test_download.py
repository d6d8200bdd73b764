"""download_file / download_coco against a local HTTP server on 127.0.0.1 (no internet).

The server serves in-memory files, honours `Range: bytes=N-`, and can misbehave on purpose:
close the connection mid-body (an interrupted transfer), serve wrong bytes of the right length
(a corrupt archive), or ignore the range header. It records every request it answers.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import re
import threading
import zipfile
from pathlib import Path

import pytest

from cvbench.data.acquire import coco_download, download
from cvbench.data.acquire.coco_download import CocoLayout, download_coco
from cvbench.data.acquire.download import DownloadError, RemoteFile, download_file, unpack_marker

_RANGE = re.compile(r"bytes=(\d+)-$")


class _Files:
    """What the server serves and how it misbehaves; shared with the handler."""

    def __init__(self) -> None:
        self.content: dict[str, bytes] = {}
        self.drop_after: dict[str, list[int]] = {}  # path -> byte counts, one per bad response
        self.bad: dict[str, list[bytes]] = {}  # path -> wrong copies, served before the real one
        self.ignore_range = False
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)


class _Handler(http.server.BaseHTTPRequestHandler):
    files: _Files

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        files = self.files
        range_header = self.headers.get("Range")
        files.requests.append((self.path, range_header))
        data = files.content.get(self.path)
        if data is None:
            self.send_error(404)
            return
        if files.bad.get(self.path):
            data = files.bad[self.path].pop(0)
        start = 0
        match = _RANGE.match(range_header or "")
        if match and not files.ignore_range:
            start = int(match.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        drops = files.drop_after.get(self.path)
        if drops:
            # Announce the whole body, send part of it, close: an interrupted transfer.
            self.wfile.write(body[: drops.pop(0)])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture
def server():
    """Yields (base_url, files); the server thread stops when the test ends."""
    files = _Files()
    handler = type("Handler", (_Handler,), {"files": files})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", files
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _payload(n: int, seed: int = 0) -> bytes:
    # Deterministic, non-repeating-ish bytes: position and seed mixed.
    return bytes((i * 131 + seed * 17 + (i >> 8)) % 251 for i in range(n))


def _flipped(data: bytes) -> bytes:
    return bytes(b ^ 0xFF for b in data)  # same length, wrong bytes


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


FAST = {"timeout": 5.0, "progress": False, "chunk_size": 4096}


def test_fresh_download_is_verified_and_stamped(server, tmp_path):
    base, files = server
    data = _payload(50_000)
    files.content["/a.bin"] = data
    dest = download_file(
        f"{base}/a.bin", tmp_path / "a.bin", size=len(data), md5=_md5(data), **FAST
    )
    assert dest.read_bytes() == data
    assert not (tmp_path / "a.bin.part").exists()
    assert (tmp_path / "a.bin.verified").exists()
    assert files.requests == [("/a.bin", None)]


def test_a_part_file_that_is_a_link_is_refused_not_appended_to(server, tmp_path):
    # #37 (cause B for downloads): a planted a.bin.part -> victim was resumed into: the rest
    # of the download appended to the link's target.
    from cvbench.utils.errors import BadFileError

    base, files = server
    files.content["/a.bin"] = _payload(50_000)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"my own file")
    (tmp_path / "a.bin.part").symlink_to(victim)
    with pytest.raises(BadFileError, match=r"a.bin.part is a symbolic link; cvbench never write"):
        download_file(f"{base}/a.bin", tmp_path / "a.bin", **FAST)
    assert victim.read_bytes() == b"my own file"


def test_interrupted_transfer_resumes_with_a_range_request(server, tmp_path):
    base, files = server
    data = _payload(50_000)
    files.content["/a.bin"] = data
    files.drop_after["/a.bin"] = [12_345]  # first response: 12,345 of 50,000 bytes, then EOF
    dest = download_file(
        f"{base}/a.bin", tmp_path / "a.bin", size=len(data), md5=_md5(data), **FAST
    )
    assert dest.read_bytes() == data
    # The second request asks for the rest, from the byte after the 12,345 received.
    assert files.requests == [("/a.bin", None), ("/a.bin", "bytes=12345-")]


def test_a_rerun_continues_a_partial_file(server, tmp_path):
    base, files = server
    data = _payload(40_000, seed=1)
    files.content["/a.bin"] = data
    files.drop_after["/a.bin"] = [10_000]
    with pytest.raises(DownloadError, match="connection closed at byte 10000 of 40000"):
        download_file(f"{base}/a.bin", tmp_path / "a.bin", size=len(data), max_attempts=1, **FAST)
    assert (tmp_path / "a.bin.part").read_bytes() == data[:10_000]
    # The next run (a new call) picks up the .part file.
    download_file(f"{base}/a.bin", tmp_path / "a.bin", size=len(data), md5=_md5(data), **FAST)
    assert (tmp_path / "a.bin").read_bytes() == data
    assert files.requests[-1] == ("/a.bin", "bytes=10000-")


def test_corrupt_transfer_is_detected_and_fetched_again_from_byte_zero(server, tmp_path):
    base, files = server
    data = _payload(30_000, seed=2)
    files.content["/a.bin"] = data
    files.bad["/a.bin"] = [_flipped(data)]
    dest = download_file(
        f"{base}/a.bin", tmp_path / "a.bin", size=len(data), md5=_md5(data), **FAST
    )
    assert dest.read_bytes() == data
    # The corrupt copy had the right size, so only the MD5 caught it; the re-fetch is whole.
    assert files.requests == [("/a.bin", None), ("/a.bin", None)]


def test_always_corrupt_fails_after_the_bounded_attempts_and_leaves_nothing(server, tmp_path):
    base, files = server
    data = _payload(20_000, seed=3)
    files.content["/a.bin"] = data
    files.bad["/a.bin"] = [_flipped(data)] * 100
    with pytest.raises(DownloadError, match="failed after 3 attempts; last: MD5"):
        download_file(f"{base}/a.bin", tmp_path / "a.bin", md5=_md5(data), max_attempts=3, **FAST)
    assert len(files.requests) == 3
    assert sorted(os.listdir(tmp_path)) == []


def test_corrupt_complete_file_on_disk_is_replaced(server, tmp_path):
    base, files = server
    data = _payload(20_000, seed=4)
    files.content["/a.bin"] = data
    (tmp_path / "a.bin").write_bytes(bytes(len(data)))  # right size, wrong bytes, no stamp
    download_file(f"{base}/a.bin", tmp_path / "a.bin", size=len(data), md5=_md5(data), **FAST)
    assert (tmp_path / "a.bin").read_bytes() == data
    assert len(files.requests) == 1


def test_verified_file_is_not_fetched_again_unless_it_changed(server, tmp_path):
    base, files = server
    data = _payload(20_000, seed=5)
    files.content["/a.bin"] = data
    kwargs = dict(size=len(data), md5=_md5(data), **FAST)
    download_file(f"{base}/a.bin", tmp_path / "a.bin", **kwargs)
    download_file(f"{base}/a.bin", tmp_path / "a.bin", **kwargs)
    assert len(files.requests) == 1  # the stamp matched: no request, no re-hash
    with open(tmp_path / "a.bin", "r+b") as f:  # damage it after verification
        f.write(b"\x00\x00\x00")
    download_file(f"{base}/a.bin", tmp_path / "a.bin", **kwargs)
    assert (tmp_path / "a.bin").read_bytes() == data
    assert len(files.requests) == 2


def test_unknown_size_and_md5_fall_back_on_the_servers_length(server, tmp_path):
    base, files = server
    data = _payload(25_000, seed=6)
    files.content["/a.bin"] = data
    files.drop_after["/a.bin"] = [5_000, 9_000]
    dest = download_file(f"{base}/a.bin", tmp_path / "a.bin", **FAST)
    assert dest.read_bytes() == data
    # 5,000 bytes, then 9,000 more from 5,000, then the rest from 14,000.
    assert [r for _, r in files.requests] == [None, "bytes=5000-", "bytes=14000-"]


def test_server_that_ignores_range_restarts_cleanly(server, tmp_path):
    base, files = server
    data = _payload(25_000, seed=7)
    files.content["/a.bin"] = data
    files.drop_after["/a.bin"] = [7_000]
    files.ignore_range = True
    dest = download_file(f"{base}/a.bin", tmp_path / "a.bin", md5=_md5(data), **FAST)
    assert dest.read_bytes() == data
    # The 200 answer to the range request was written from byte 0, not appended (appending
    # would fail the MD5 and cost a third request).
    assert [r for _, r in files.requests] == [None, "bytes=7000-"]


def test_partial_file_longer_than_the_remote_is_discarded(server, tmp_path):
    base, files = server
    data = _payload(10_000, seed=8)
    files.content["/a.bin"] = data
    (tmp_path / "a.bin.part").write_bytes(_payload(12_000, seed=9))
    dest = download_file(f"{base}/a.bin", tmp_path / "a.bin", **FAST)
    assert dest.read_bytes() == data
    # The range from 12,000 is unsatisfiable (416), the .part is dropped, the next GET is whole.
    assert [r for _, r in files.requests] == ["bytes=12000-", None]


def test_http_404_is_an_error_at_once(server, tmp_path):
    base, files = server
    with pytest.raises(DownloadError, match="HTTP 404"):
        download_file(f"{base}/missing.zip", tmp_path / "m.zip", **FAST)
    assert len(files.requests) == 1


def test_bad_arguments_raise_value_error(tmp_path):
    with pytest.raises(ValueError, match="max_attempts must be >= 1, got 0"):
        download_file("http://127.0.0.1:1/x", tmp_path / "x", max_attempts=0)
    with pytest.raises(ValueError, match="'ftp://x/y'"):
        download_file("ftp://x/y", tmp_path / "x")


# ---- download_coco on small fake archives with the official layout ----


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


_FAKE_COCO = {
    "annotations": (
        "annotations/annotations_trainval2017.zip",
        {
            "annotations/instances_train2017.json": b'{"images": [1, 2]}',
            "annotations/instances_val2017.json": b'{"images": [3]}',
        },
    ),
    "val": ("zips/val2017.zip", {"val2017/000000000003.jpg": b"VAL-IMAGE-3" * 50}),
    "train": (
        "zips/train2017.zip",
        {
            "train2017/000000000001.jpg": b"TRAIN-IMAGE-1" * 50,
            "train2017/000000000002.jpg": b"TRAIN-IMAGE-2" * 50,
        },
    ),
}


@pytest.fixture
def fake_coco(server, monkeypatch):
    """Serves three small zips laid out like COCO's; yields (base, files, table).

    The table is also installed as `COCO_2017_FILES`, so a command run without `files=` (the
    CLI) checks the small archives' sizes: with the real table its free-space check compared
    19 GiB with the test machine's disk and failed on a CI host with 17.3 GiB free before the
    request the test was about.
    """
    base, files = server
    table = {}
    for part, (path, members) in _FAKE_COCO.items():
        data = _zip(members)
        files.content["/" + path] = data
        table[part] = RemoteFile(path, len(data), _md5(data))
    monkeypatch.setattr(coco_download, "COCO_2017_FILES", table)
    return base, files, table


def _check_layout(layout: CocoLayout) -> None:
    assert layout.train_annotations.read_bytes() == b'{"images": [1, 2]}'
    assert layout.val_annotations.read_bytes() == b'{"images": [3]}'
    assert sorted(p.name for p in layout.train_images.iterdir()) == [
        "000000000001.jpg",
        "000000000002.jpg",
    ]
    assert (layout.val_images / "000000000003.jpg").read_bytes() == b"VAL-IMAGE-3" * 50


def test_download_coco_fetches_verifies_unpacks_and_a_rerun_does_nothing(fake_coco, tmp_path):
    base, files, table = fake_coco
    layout = download_coco(tmp_path, base_url=base, files=table, progress=False, timeout=5)
    _check_layout(layout)
    assert len(files.requests) == 3
    for remote in table.values():
        assert (tmp_path / "archives" / remote.name).exists()
        assert unpack_marker(remote.name, tmp_path).exists()
    assert not list(tmp_path.glob(".*.staging"))
    download_coco(tmp_path, base_url=base, files=table, progress=False, timeout=5)
    assert len(files.requests) == 3


def test_download_coco_base_url_from_the_environment(fake_coco, tmp_path, monkeypatch):
    base, files, table = fake_coco
    monkeypatch.setenv(coco_download.COCO_BASE_URL_ENV, base)
    layout = download_coco(tmp_path, parts=["val"], files=table, progress=False, timeout=5)
    assert (layout.val_images / "000000000003.jpg").exists()
    assert files.requests == [("/zips/val2017.zip", None)]


def _bad_crc(archive: bytes) -> bytes:
    # Flip one byte inside the stored member: same size, valid zip directory, bad CRC-32.
    at = archive.index(b"VAL-IMAGE-3") + 4
    return archive[:at] + b"#" + archive[at + 1 :]


def test_download_coco_refetches_an_archive_whose_crc_fails(fake_coco, tmp_path):
    base, files, table = fake_coco
    path = "/zips/val2017.zip"
    files.bad[path] = [_bad_crc(files.content[path])]  # the mirror serves a bad copy once
    unknown = {"val": RemoteFile(path.lstrip("/"))}  # no size or MD5: only the CRC can tell
    layout = download_coco(tmp_path, base_url=base, files=unknown, progress=False, timeout=5)
    assert (layout.val_images / "000000000003.jpg").read_bytes() == b"VAL-IMAGE-3" * 50
    assert files.requests == [(path, None), (path, None)]
    assert not list(tmp_path.glob(".*.staging"))


def test_download_coco_gives_up_on_an_archive_that_stays_corrupt(fake_coco, tmp_path):
    base, files, table = fake_coco
    path = "/zips/val2017.zip"
    files.content[path] = _bad_crc(files.content[path])
    unknown = {"val": RemoteFile(path.lstrip("/"))}
    with pytest.raises(DownloadError, match="val2017.zip: corrupt archive after re-fetch"):
        download_coco(tmp_path, base_url=base, files=unknown, progress=False, timeout=5)
    assert len(files.requests) == 2
    assert not (tmp_path / "val2017").exists()
    assert not (tmp_path / "archives" / "val2017.zip").exists()


def test_killed_unpack_is_redone_on_the_next_run(fake_coco, tmp_path):
    base, files, table = fake_coco
    layout = download_coco(tmp_path, parts=["train"], base_url=base, files=table, progress=False)
    # Simulate a kill mid-unpack: marker not yet written, a half-merged file, a stale staging.
    unpack_marker("train2017.zip", tmp_path).unlink()
    (layout.train_images / "000000000002.jpg").write_bytes(b"half")
    stale = tmp_path / ".train2017.zip.staging" / "train2017"
    stale.mkdir(parents=True)
    (stale / "junk.jpg").write_bytes(b"junk")
    download_coco(tmp_path, parts=["train"], base_url=base, files=table, progress=False)
    assert (layout.train_images / "000000000002.jpg").read_bytes() == b"TRAIN-IMAGE-2" * 50
    assert not (layout.train_images / "junk.jpg").exists()
    assert not (tmp_path / ".train2017.zip.staging").exists()
    assert len(files.requests) == 1  # the verified archive was reused, not fetched again


def test_delete_archives_keeps_the_unpacked_data_and_reruns_offline(fake_coco, tmp_path):
    base, files, table = fake_coco
    download_coco(tmp_path, base_url=base, files=table, keep_archives=False, progress=False)
    assert list((tmp_path / "archives").iterdir()) == []
    layout = download_coco(tmp_path, base_url=base, files=table, progress=False)
    _check_layout(layout)
    assert len(files.requests) == 3


def test_download_coco_rejects_unknown_parts_and_bad_urls(tmp_path):
    with pytest.raises(ValueError, match=r"\['test'\]"):
        download_coco(tmp_path, parts=["test"])
    with pytest.raises(ValueError, match="'images.cocodataset.org'"):
        download_coco(tmp_path, base_url="images.cocodataset.org")


def test_official_table_has_the_published_sizes():
    # The numbers every COCO downloader checks against (COCO site; torchvision, fiftyone).
    assert coco_download.COCO_BASE_URL == "http://images.cocodataset.org"
    sizes = {k: (v.path, v.size) for k, v in coco_download.COCO_2017_FILES.items()}
    assert sizes == {
        "annotations": ("annotations/annotations_trainval2017.zip", 252_907_541),
        "val": ("zips/val2017.zip", 815_585_330),
        "train": ("zips/train2017.zip", 19_336_861_798),
    }


# ---- the command line ----


def _cli(argv):
    import argparse

    from cvbench.cli import acquire

    parser = argparse.ArgumentParser(prog="cvbench")
    acquire.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_download_coco(fake_coco, tmp_path, monkeypatch, capsys):
    base, files, table = fake_coco
    argv = ["download-coco", str(tmp_path), "--base-url", base, "--no-progress"]
    assert _cli(argv + ["--parts", "annotations", "val", "--timeout", "5"]) == 0
    assert f"COCO 2017 ready in {tmp_path}" in capsys.readouterr().out
    assert (tmp_path / "val2017" / "000000000003.jpg").exists()
    assert not (tmp_path / "train2017").exists()


def test_cli_download_coco_errors_are_one_line(fake_coco, tmp_path, monkeypatch):
    from cvbench.cli import CLIError

    base, files, table = fake_coco
    # MD5s that do not match the served archives (sizes right): refused, never unpacked.
    wrong = {part: RemoteFile(r.path, r.size, "0" * 32) for part, r in table.items()}
    monkeypatch.setattr(coco_download, "COCO_2017_FILES", wrong)
    argv = ["download-coco", str(tmp_path), "--base-url", base, "--no-progress"]
    # A run-time failure (exit 1 in the command), not a usage error.
    with pytest.raises(
        DownloadError, match="annotations_trainval2017.zip: failed after 2 attempts"
    ):
        _cli(argv + ["--parts", "annotations", "--retries", "2"])
    assert not (tmp_path / "annotations").exists()
    with pytest.raises(CLIError, match="--retries must be >= 1, got 0"):
        _cli(argv + ["--retries", "0"])
    with pytest.raises(CLIError, match="--build-tfrecords needs 'annotations' and 'train'"):
        _cli(argv + ["--parts", "val", "--build-tfrecords", str(tmp_path / "out")])


def test_main_reports_download_errors_with_exit_code_1(fake_coco, tmp_path, monkeypatch, capsys):
    import cvbench.cli

    base, files, table = fake_coco
    modules = tuple(cvbench.cli._COMMAND_MODULES)
    if "cvbench.cli.acquire" not in modules:
        monkeypatch.setattr(cvbench.cli, "_COMMAND_MODULES", modules + ("cvbench.cli.acquire",))
    code = cvbench.cli.main(
        ["download-coco", str(tmp_path), "--base-url", f"{base}/nothing-here", "--no-progress"]
    )
    # Exit 2 is for usage errors; a download that fails is a run-time failure: exit 1, one
    # line naming the URL.
    assert code == 1
    err = capsys.readouterr().err.strip()
    url = f"{base}/nothing-here/{table['annotations'].path}"
    assert err.startswith(f"cvbench download-coco: error: {url}: HTTP 404"), err
    assert "\n" not in err


def test_download_coco_refuses_before_any_request_when_the_disk_is_too_small(
    fake_coco, tmp_path, monkeypatch
):
    import collections
    import shutil

    base, files, table = fake_coco
    # The three fake archives together: the refusal counts what is still to fetch, and a
    # finished archive (its unpack marker written) counts nothing.
    total = sum(r.size for r in table.values())
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, total - 1))
    with pytest.raises(DownloadError, match="still to download but only"):
        download_coco(tmp_path, base_url=base, progress=False, timeout=5)
    assert files.requests == []  # refused before the first byte was asked for
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, total))
    download_coco(tmp_path, base_url=base, progress=False, timeout=5)
    assert len(files.requests) == 3


def test_zip_members_cannot_escape_the_destination(tmp_path):
    archive = tmp_path / "evil.zip"
    archive.write_bytes(_zip({"../../escape.txt": b"x", "/abs.txt": b"y", "ok/in.txt": b"z"}))
    dest = tmp_path / "dest"
    download.unpack_zip(archive, dest, progress=False)
    assert not (tmp_path / "escape.txt").exists()
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*.txt")) == [
        "abs.txt",
        "escape.txt",
        "ok/in.txt",
    ]
    assert Path(dest / "escape.txt").read_bytes() == b"x"


def test_cli_hands_the_download_to_build_coco(server, tmp_path, monkeypatch, capsys):
    import json

    import tensorflow as tf
    from PIL import Image

    base, files = server

    def jpeg(color) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", (8, 6), color).save(buf, format="JPEG")
        return buf.getvalue()

    val = {"images": [], "annotations": [], "categories": [{"id": 18, "name": "dog"}]}
    for image_id in (3, 7):
        name = f"{image_id:012d}.jpg"
        val["images"].append({"id": image_id, "file_name": name, "height": 6, "width": 8})
        val["annotations"].append(
            {
                "id": image_id,
                "image_id": image_id,
                "category_id": 18,
                "bbox": [1, 1, 4, 2],
                "area": 8.0,
                "iscrowd": 0,
            }
        )
    table = {}
    archives = {
        "annotations": (
            "annotations/annotations_trainval2017.zip",
            {"annotations/instances_val2017.json": json.dumps(val).encode()},
        ),
        "val": (
            "zips/val2017.zip",
            {f"val2017/{i:012d}.jpg": jpeg((i * 30, 0, 0)) for i in (3, 7)},
        ),
    }
    for part, (path, members) in archives.items():
        data = _zip(members)
        files.content["/" + path] = data
        table[part] = RemoteFile(path, len(data), _md5(data))
    monkeypatch.setattr(coco_download, "COCO_2017_FILES", table)
    out = tmp_path / "records"
    argv = ["download-coco", str(tmp_path / "coco"), "--base-url", base, "--no-progress"]
    argv += ["--parts", "annotations", "val", "--build-tfrecords", str(out), "--workers", "1"]
    assert _cli(argv) == 0
    assert f"COCO TFRecords (val) written to {out}" in capsys.readouterr().out
    records = sorted(out.glob("coco_val.record-*"))
    assert [p.name for p in records] == [  # 2 images: min(10 val shards, 2)
        "coco_val.record-00000-of-00002",
        "coco_val.record-00001-of-00002",
    ]
    ids = []
    for record in tf.data.TFRecordDataset([str(p) for p in records]):
        example = tf.train.Example.FromString(record.numpy())
        feature = example.features.feature
        ids.append(feature["image/source_id"].bytes_list.value[0])
        assert list(feature["image/object/class/label"].int64_list.value) == [18]
    assert sorted(ids) == [b"3", b"7"]
