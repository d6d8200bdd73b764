"""The COCO 2017 fetcher: the official archives downloaded, verified and unpacked.

`download_coco` fetches the archives of `COCO_2017_FILES` (paths under a base URL, sizes and
MD5s) with `cvbench.data.acquire.download.download_file`, unpacks each one with `unpack_zip`
(a killed unpack is redone on the next run), and re-fetches an archive whose unpacking finds a
corrupt member (zip CRC), which also covers mirrors for which no MD5 is known. The layout it
leaves is a `CocoLayout`.
"""

from __future__ import annotations

import os
import shutil
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cvbench.data.acquire.download import (
    DownloadError,
    RemoteFile,
    discard,
    download_file,
    unpack_marker,
    unpack_zip,
)

COCO_BASE_URL = "http://images.cocodataset.org"
COCO_BASE_URL_ENV = "CVBENCH_COCO_BASE_URL"

# Sizes and MD5s of the official COCO 2017 archives (as published by the COCO site and repeated
# by torchvision, fiftyone and the TF / NVIDIA download scripts).
COCO_2017_FILES: dict[str, RemoteFile] = {
    "annotations": RemoteFile(
        "annotations/annotations_trainval2017.zip", 252_907_541, "f4bbac642086de4f52a3fdda2de5fa2c"
    ),
    "val": RemoteFile("zips/val2017.zip", 815_585_330, "442b8da7639aecaf257c1dceb8ba8c80"),
    "train": RemoteFile("zips/train2017.zip", 19_336_861_798, "cced6f7f71b7629ddf16f17bbcfab6b2"),
}


@dataclass(frozen=True)
class CocoLayout:
    """Where `download_coco` put COCO 2017.

    Attributes:
        root: the download folder.
        train_images: `root/train2017` (118,287 JPEGs).
        val_images: `root/val2017` (5,000 JPEGs).
        train_annotations: `root/annotations/instances_train2017.json`.
        val_annotations: `root/annotations/instances_val2017.json`.
    """

    root: Path

    @property
    def train_images(self) -> Path:
        return self.root / "train2017"

    @property
    def val_images(self) -> Path:
        return self.root / "val2017"

    @property
    def train_annotations(self) -> Path:
        return self.root / "annotations" / "instances_train2017.json"

    @property
    def val_annotations(self) -> Path:
        return self.root / "annotations" / "instances_val2017.json"


def resolve_base_url(base_url: str | None = None) -> str:
    """The COCO base URL: `base_url`, else $CVBENCH_COCO_BASE_URL, else the official host."""
    url = base_url or os.environ.get(COCO_BASE_URL_ENV) or COCO_BASE_URL
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"base URL must be http:// or https://, got {url!r}")
    return url.rstrip("/")


def download_coco(
    root: str | os.PathLike,
    *,
    parts: Iterable[str] | None = None,
    base_url: str | None = None,
    files: dict[str, RemoteFile] | None = None,
    keep_archives: bool = True,
    max_attempts: int = 5,
    timeout: float = 60.0,
    progress: bool = True,
) -> CocoLayout:
    """Downloads, verifies and unpacks COCO 2017 into `root`; a rerun resumes or skips.

    Needs about 19 GB for the archives plus 19 GB unpacked (`keep_archives=False` deletes each
    archive once it is unpacked).

    Args:
        root: destination folder; archives go to `root/archives/`, images to `root/train2017/`
            and `root/val2017/`, annotations to `root/annotations/`.
        parts: which of "annotations", "val", "train" to fetch (default: every key of `files`).
        base_url: server to fetch from (a mirror with the same paths); default
            $CVBENCH_COCO_BASE_URL, else http://images.cocodataset.org.
        files: the table of remote files (default `COCO_2017_FILES`).
        keep_archives: keep the zips after unpacking.
        max_attempts: per archive, see `download_file`; an archive whose unpacking fails its
            CRC check is fetched once more.
        timeout: seconds without data before an attempt is abandoned.
        progress: show progress bars.

    Returns:
        A `CocoLayout` naming the unpacked folders.

    Raises:
        ValueError: an unknown part or a bad base URL.
        DownloadError: a download or unpack still failing after the retries.
    """
    files = COCO_2017_FILES if files is None else files
    parts = list(files) if parts is None else list(parts)
    unknown = [p for p in parts if p not in files]
    if unknown or not parts:
        raise ValueError(f"parts must be a non-empty subset of {sorted(files)}, got {parts}")
    base = resolve_base_url(base_url)
    root = Path(root)
    archives = root / "archives"
    archives.mkdir(parents=True, exist_ok=True)
    todo = [files[p] for p in parts if not unpack_marker(files[p].name, root).exists()]
    _check_free_space(archives, todo)
    for remote in todo:
        archive = archives / remote.name
        for round_ in range(2):
            download_file(
                f"{base}/{remote.path}",
                archive,
                size=remote.size,
                md5=remote.md5,
                max_attempts=max_attempts,
                timeout=timeout,
                progress=progress,
            )
            try:
                unpack_zip(archive, root, progress=progress)
                break
            except (zipfile.BadZipFile, zlib.error, EOFError) as e:
                discard(archive)  # corrupt although it passed the size/MD5 checks we had
                if round_ == 1:
                    raise DownloadError(
                        f"{base}/{remote.path}: corrupt archive after re-fetch: {e}"
                    ) from e
        if not keep_archives:
            discard(archive)
    return CocoLayout(root)


def _check_free_space(folder: Path, remotes: list[RemoteFile]) -> None:
    needed = 0
    for remote in remotes:
        if remote.size is None:
            continue
        have = folder / remote.name
        part = folder / (remote.name + ".part")
        done = have.stat().st_size if have.exists() else part.stat().st_size if part.exists() else 0
        needed += max(remote.size - done, 0)
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise DownloadError(
            f"{folder}: {needed / 2**30:.1f} GiB still to download but only "
            f"{free / 2**30:.1f} GiB free"
        )
