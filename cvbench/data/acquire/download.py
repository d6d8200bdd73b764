"""Resumable, verified downloads, and the zip unpacking they end with.

`download_file` writes to `<dest>.part`, resumes a partial file with an HTTP range request,
checks the finished file (size, and MD5 when known) and only then renames it to `dest`. A file
that fails the check is deleted and fetched again from the first byte, a bounded number of times;
it is never used. A verified file gets a small stamp (`<dest>.verified`: size, mtime, MD5) so a
rerun does not hash 18 GB again; a file without a matching stamp is checked before it is trusted.
A stamp that cannot be read (not a regular file, over 1 MiB, nested or malformed JSON: read
through `cvbench.utils.files.read_json`) counts as no stamp.

`unpack_zip` unpacks an archive atomically enough that a killed unpack is redone on the next
run (extract into a staging folder, merge it into place, then write a done-marker). The COCO
2017 fetcher built on both is `cvbench.data.acquire.coco_download`.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import posixpath
import re
import shutil
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from cvbench.utils.errors import BadFileError, CvbenchError
from cvbench.utils.files import open_input, open_output, read_json
from cvbench.utils.io import write_json_atomic
from cvbench.utils.progress import progress_bar

#: The largest download stamp read (one holds three fields).
_STAMP_LIMIT = 1 << 20


class DownloadError(CvbenchError, RuntimeError):
    """A download or unpack that still failed after its bounded retries."""


@dataclass(frozen=True)
class RemoteFile:
    """A file on a server: its path under a base URL and, when known, its size and MD5.

    Attributes:
        path: path under the base URL, e.g. "zips/val2017.zip".
        size: size in bytes, or None if unknown (then the server's length is checked).
        md5: lowercase hex MD5, or None if unknown.
    """

    path: str
    size: int | None = None
    md5: str | None = None

    @property
    def name(self) -> str:
        """The file name, the last component of `path`."""
        return posixpath.basename(self.path)


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_CONTENT_RANGE_UNSATISFIED = re.compile(r"bytes\s+\*/(\d+)")
_NETWORK_ERRORS = (OSError, http.client.HTTPException)  # includes URLError, timeouts, resets


class _InterruptedError(CvbenchError):
    """The transfer stopped before the announced end; the .part file is kept for resuming."""


def file_md5(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Returns the lowercase hex MD5 of a file, read in chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open_input(path) as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".verified")


def _write_stamp(dest: Path, md5: str) -> None:
    st = dest.stat()
    write_json_atomic(
        _stamp_path(dest), {"md5": md5, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    )


def _has_valid_stamp(dest: Path, size: int | None, md5: str | None) -> bool:
    try:
        stamp = read_json(_stamp_path(dest), limit=_STAMP_LIMIT, what="download stamp")
        st = dest.stat()
    except (OSError, BadFileError):
        return False
    return isinstance(stamp, dict) and (
        stamp.get("size") == st.st_size
        and stamp.get("mtime_ns") == st.st_mtime_ns
        and (size is None or size == st.st_size)
        and (md5 is None or stamp.get("md5") == md5)
    )


def _problem(path: Path, size: int | None, md5: str | None) -> str | None:
    """Returns why `path` is not the expected file, or None when it is."""
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        return f"size {actual_size} bytes, expected {size}"
    if md5 is not None and (actual_md5 := file_md5(path)) != md5:
        return f"MD5 {actual_md5}, expected {md5}"
    return None


def discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    with contextlib.suppress(FileNotFoundError):
        _stamp_path(path).unlink()


def _fetch_into(
    url: str, part: Path, size: int | None, *, timeout: float, chunk_size: int, progress: bool
) -> int | None:
    """Appends the rest of `url` to `part`; returns the file's total length if the server said.

    Raises:
        _InterruptedError: the connection ended before the announced length.
        OSError, http.client.HTTPException: network failures (the .part file is kept).
    """
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:
        part.unlink()
        offset = 0
    if size is not None and offset == size:
        return size  # complete from an earlier run: only verification is left
    headers = {"User-Agent": "cvbench", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout
        )
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:  # range not satisfiable: the .part is complete or too long
            match = _CONTENT_RANGE_UNSATISFIED.match(e.headers.get("Content-Range", ""))
            total = int(match.group(1)) if match else None
            if total != offset:
                part.unlink()
                raise _InterruptedError(
                    f"server has {total} bytes, partial file had {offset}"
                ) from e
            return total
        if e.code >= 500:  # a server-side hiccup: worth another attempt
            raise _InterruptedError(f"HTTP {e.code} {e.reason}") from e
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from e
    with response:
        total = None
        if offset and response.status == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != offset:
                part.unlink()
                raise _InterruptedError(
                    f"server resumed at the wrong offset ({match and match[1]})"
                )
            total = int(match.group(3)) if match.group(3) != "*" else None
        else:
            offset = 0  # the server ignored the range (or there was none): start over
            length = response.headers.get("Content-Length")
            total = int(length) if length is not None else None
        received = offset
        with (
            open_output(part, "ab" if offset else "wb") as f,  # never through a link
            progress_bar(
                total=total or size,
                initial=offset,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=part.name.removesuffix(".part"),
                disable=not progress,
            ) as bar,
        ):
            while chunk := response.read(chunk_size):
                f.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    if total is not None and received < total:
        raise _InterruptedError(f"connection closed at byte {received} of {total}")
    return total if total is not None else received


def download_file(
    url: str,
    dest: str | os.PathLike,
    *,
    size: int | None = None,
    md5: str | None = None,
    max_attempts: int = 5,
    timeout: float = 60.0,
    chunk_size: int = 1 << 20,
    progress: bool = True,
) -> Path:
    """Downloads `url` to `dest`, resuming a partial download and verifying the result.

    Data goes to `<dest>.part`; an interrupted transfer is resumed with a `Range` request on
    the next attempt (or the next run). The complete file must match `size` (else the length
    the server announced) and `md5` when given; a mismatch deletes it and starts again from byte
    0. Only a verified file is renamed to `dest`. An existing `dest` is trusted if its stamp
    matches, otherwise checked, and re-fetched if it fails.

    Args:
        url: http(s) URL.
        dest: final path; its folder is created.
        size: expected size in bytes, or None.
        md5: expected lowercase hex MD5, or None.
        max_attempts: connection attempts in all (resumes and re-fetches), at least 1.
        timeout: seconds without data before an attempt is abandoned.
        chunk_size: bytes per read.
        progress: show progress (bytes, MB/s, ETA) on stderr: a tqdm bar on a terminal or
            in Jupyter, plain lines elsewhere.

    Returns:
        `dest` as a Path.

    Raises:
        ValueError: `max_attempts` < 1 or `url` is not http(s).
        DownloadError: still failing after `max_attempts`, or an HTTP error status.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"url must be http:// or https://, got {url!r}")
    md5 = md5.lower() if md5 else None
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        if _has_valid_stamp(dest, size, md5):
            return dest
        if (problem := _problem(dest, size, md5)) is None:
            _write_stamp(dest, md5 or file_md5(dest))
            return dest
        discard(dest)  # corrupt or wrong file: never used, fetched again below
    part = dest.with_name(dest.name + ".part")
    problem = "no attempt made"
    for _ in range(max_attempts):
        try:
            total = _fetch_into(
                url, part, size, timeout=timeout, chunk_size=chunk_size, progress=progress
            )
        except (_InterruptedError, *_NETWORK_ERRORS) as e:
            problem = f"{type(e).__name__}: {e}"
            continue
        problem = _problem(part, size if size is not None else total, md5)
        if problem is None:
            os.replace(part, dest)
            _write_stamp(dest, md5 or file_md5(dest))
            return dest
        part.unlink()  # corrupt: restart from the first byte
    raise DownloadError(f"{url}: failed after {max_attempts} attempts; last: {problem}")


def _merge_tree(src: Path, dst: Path) -> None:
    """Moves everything under `src` into `dst`, replacing files of the same name."""
    if src.is_dir() and not src.is_symlink():
        if dst.exists() and not dst.is_dir():
            dst.unlink()
        if not dst.exists():
            os.replace(src, dst)
            return
        for child in src.iterdir():
            _merge_tree(child, dst / child.name)
        src.rmdir()
    else:
        if dst.is_dir():
            shutil.rmtree(dst)
        os.replace(src, dst)


def unpack_marker(archive_name: str, dest_dir: str | os.PathLike) -> Path:
    """The done-marker `unpack_zip` writes for `archive_name` in `dest_dir`."""
    return Path(dest_dir) / f".{archive_name}.unpacked"


def unpack_zip(
    archive: str | os.PathLike, dest_dir: str | os.PathLike, *, progress: bool = True
) -> None:
    """Unpacks a zip into `dest_dir`, once: a rerun after a killed unpack redoes it.

    Members go to a staging folder in `dest_dir` (zipfile checks each member's CRC-32 as it is
    read), which is then merged into `dest_dir`, and only then is the done-marker written.

    Raises:
        zipfile.BadZipFile, zlib.error, EOFError: the archive is corrupt or truncated.
    """
    archive = Path(archive)
    dest_dir = Path(dest_dir)
    marker = unpack_marker(archive.name, dest_dir)
    if marker.exists():
        return
    staging = dest_dir / f".{archive.name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            with progress_bar(
                total=sum(m.file_size for m in members),
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=f"unpack {archive.name}",
                disable=not progress,
            ) as bar:
                for member in members:
                    zf.extract(member, staging)  # strips absolute paths and '..'
                    bar.update(member.file_size)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    for entry in sorted(staging.iterdir()):
        _merge_tree(entry, dest_dir / entry.name)
    staging.rmdir()
    marker.touch()
