"""The corpus of the hostile-input harness: crafted files, made at tiny size on disk.

Each maker writes one hostile thing at `path` (its parent folders made) and returns `path`.
Only the *sizes they declare* are large: the sparse file has no blocks, the bombs are a few
megabytes that claim gigabytes, the 13000 x 13000 PNG is 500 KB.

| name | what it is | what it tries |
|---|---|---|
| `fifo` | a named pipe | a reader that opens it blocks forever |
| `zero_link` | a symbolic link to `/dev/zero` | a reader that reads to the end never ends |
| `dangling_link` | a link to a file that does not exist | misleading messages |
| `sparse_jpeg` | a valid 40 x 40 JPEG, then 2 GiB of holes | a reader without a size bound |
| `nested_json` | `'[' * 100000` | Python's JSON parser recursing (`RecursionError`) |
| `keras_bomb` | a `.keras` plus 40 members of 60 MiB zeros (2.4 MB) | limits not on the total |
| `npz_header_bomb` | an `.npz` whose `.npy` header asks for 256 GiB | allocating from a header |
| `npz_nested_meta` | a checkpoint whose metadata is nested JSON | `RecursionError` |
| `lying_jpeg`, `lying_png` | a valid header, then garbage | silent classification of garbage |
| `huge_png` | a real PNG of 13000 x 13000 black pixels (500 KB) | decoding 507 MB from 500 KB |
| `float_tiff` | an 8000 x 7900 float32 TIFF, deflated (0.4 MB) | conversions past the budget |
| `victim` | a bystander file of the user's | outputs written through links |

Names: `NEWLINE_NAME` (a newline and a forged result line in a file name) and
`NON_UTF8_NAME` (bytes that are no UTF-8).
"""

from __future__ import annotations

import functools
import io
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

#: A file name holding a newline followed by what looks like a result line.
NEWLINE_NAME = "a\nforged 1.000.png"
#: A file name that is not UTF-8 (Latin-1 "é" and a stray continuation byte).
NON_UTF8_NAME = os.fsdecode(b"caf\xe9\x80.png")
#: What the victim file holds.
VICTIM_TEXT = b"the user's own file: never to be changed by cvbench\n"
SPARSE_SIZE = 2 << 30


def _parent(path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@functools.cache
def jpeg_bytes(seed: int = 0, size: tuple[int, int] = (40, 40)) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, format="JPEG")
    return buf.getvalue()


@functools.cache
def png_bytes(seed: int = 0, size: tuple[int, int] = (30, 20)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, (10 + seed, 30, 20)).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(path: Path, seed: int = 0) -> Path:
    _parent(path).write_bytes(jpeg_bytes(seed))
    return Path(path)


def png(path: Path, seed: int = 0) -> Path:
    _parent(path).write_bytes(png_bytes(seed))
    return Path(path)


def victim(path: Path) -> Path:
    _parent(path).write_bytes(VICTIM_TEXT)
    return Path(path)


# ------------------------------------------------------------------ not regular files, links
def fifo(path: Path) -> Path:
    os.mkfifo(_parent(path))
    return Path(path)


def zero_link(path: Path) -> Path:
    os.symlink("/dev/zero", _parent(path))
    return Path(path)


def dangling_link(path: Path) -> Path:
    os.symlink("no-such-file-anywhere", _parent(path))
    return Path(path)


def link_to(path: Path, target: Path) -> Path:
    """A symbolic link at `path` to `target` (relative when both share a parent)."""
    path = _parent(path)
    os.symlink(os.path.relpath(target, path.parent), path)
    return path


# -------------------------------------------------------------------------- sizes that lie
def sparse_jpeg(path: Path, size: int = SPARSE_SIZE) -> Path:
    """A valid JPEG followed by holes up to `size` bytes (no blocks on disk)."""
    with open(_parent(path), "wb") as f:
        f.write(jpeg_bytes(0))
        f.truncate(size)
    return Path(path)


def nested_json(path: Path, depth: int = 100_000) -> Path:
    _parent(path).write_bytes(b"[" * depth)
    return Path(path)


NESTED_JSON = b"[" * 100_000


def lying_jpeg(path: Path) -> Path:
    """A JPEG whose headers (SOI ... SOS) are those of a valid 40 x 40 image, then garbage."""
    data = jpeg_bytes(0)
    sos = data.index(b"\xff\xda")
    length = struct.unpack(">H", data[sos + 2 : sos + 4])[0]
    head = data[: sos + 2 + length]
    garbage = bytes(np.random.default_rng(1).integers(0, 255, 600, dtype=np.uint8))
    _parent(path).write_bytes(head + garbage.replace(b"\xff", b"\x00") + b"\xff\xd9")
    return Path(path)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = struct.pack(">I", zlib.crc32(kind + data))
    return struct.pack(">I", len(data)) + kind + data + crc


def lying_png(path: Path) -> Path:
    """A PNG with a valid 30 x 20 header and an IDAT of garbage (no valid zlib stream)."""
    header = struct.pack(">IIBBBBB", 30, 20, 8, 2, 0, 0, 0)
    garbage = bytes(np.random.default_rng(2).integers(0, 255, 300, dtype=np.uint8))
    data = (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", garbage)
        + _png_chunk(b"IEND", b"")
    )
    _parent(path).write_bytes(data)
    return Path(path)


@functools.cache
def huge_png_bytes(side: int = 13000) -> bytes:
    """A complete PNG of `side` x `side` black RGB pixels: 507 MB decoded, ~500 KB stored."""
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    pixels = zlib.compressobj(9)
    row = b"\0" * (3 * side + 1)
    block = row * 100
    parts = [pixels.compress(block) for _ in range(side // 100)]
    parts.append(pixels.compress(row * (side % 100)))
    parts.append(pixels.flush())
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", b"".join(parts))
        + _png_chunk(b"IEND", b"")
    )


def huge_png(path: Path) -> Path:
    _parent(path).write_bytes(huge_png_bytes())
    return Path(path)


@functools.cache
def float_tiff_bytes(width: int = 8000, height: int = 7900) -> bytes:
    """A `width` x `height` float32 TIFF of zeros (63.2 megapixels, under the 64 megapixel
    limit: 253 MB decoded), deflate-compressed."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.zeros((height, width), np.float32), mode="F").save(
        buf, format="TIFF", compression="tiff_deflate"
    )
    return buf.getvalue()


def float_tiff(path: Path) -> Path:
    _parent(path).write_bytes(float_tiff_bytes())
    return Path(path)


# ---------------------------------------------------------------------------------- archives
@functools.cache
def _zero_member(size: int) -> tuple[bytes, int]:
    """Raw deflate of `size` zero bytes and their CRC."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = b"\0" * (1 << 20)
    parts = [compressor.compress(chunk) for _ in range(size >> 20)]
    parts.append(compressor.flush())
    crc = 0
    for _ in range(size >> 20):
        crc = zlib.crc32(chunk, crc)
    return b"".join(parts), crc


def _add_deflated(archive: zipfile.ZipFile, name: str, size: int) -> None:
    """Adds a member of `size` zero bytes, compressed once and reused (fast)."""
    data, crc = _zero_member(size)
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.file_size, info.compress_size, info.CRC = size, len(data), crc
    archive.fp.seek(archive.start_dir)
    info.header_offset = archive.start_dir
    archive.fp.write(info.FileHeader(zip64=False))
    archive.fp.write(data)
    archive.start_dir = archive.fp.tell()
    archive.filelist.append(info)
    archive.NameToInfo[name] = info
    archive._didModify = True


def keras_bomb(path: Path, model: Path, members: int = 40, size: int = 60 << 20) -> Path:
    """`model` (a valid `.keras`) plus `members` members of `size` zero bytes each: 2.4 MB
    on disk that declare 2.4 GB."""
    path = _parent(path)
    with zipfile.ZipFile(model) as source, zipfile.ZipFile(path, "w") as out:
        for info in source.infolist():
            out.writestr(info, source.read(info.filename))
        for i in range(members):
            _add_deflated(out, f"assets/padding-{i:02d}.bin", size)
    return path


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return header.getvalue()


def npz_header_bomb(path: Path, member: str = "model/0.npy") -> Path:
    """An `.npz` whose only array's `.npy` header asks for 256 GiB of float32 (2**36
    values) and holds 12 bytes."""
    with zipfile.ZipFile(_parent(path), "w") as z:
        z.writestr(member, _npy_header((2**36,)) + bytes(12))
    return Path(path)


def npz_nested_meta(path: Path) -> Path:
    """A checkpoint-shaped `.npz` (one array, a `meta` member) whose metadata is
    `'[' * 100000`."""
    buf = io.BytesIO()
    np.savez(
        buf,
        **{"model/0": np.zeros(2, np.float32), "meta": np.frombuffer(NESTED_JSON, np.uint8)},
    )
    _parent(path).write_bytes(buf.getvalue())
    return Path(path)


def replace_zip_member(source: Path, dest: Path, name: str, data: bytes) -> Path:
    """A copy of the zip `source` at `dest` with member `name` replaced by `data`."""
    with zipfile.ZipFile(source) as a, zipfile.ZipFile(_parent(dest), "w") as b:
        for info in a.infolist():
            if info.filename != name:
                b.writestr(info, a.read(info.filename))
        b.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
    return Path(dest)
