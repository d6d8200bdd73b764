"""The manifest of `write_sharded` (`cvbench_manifest.json` in the output folder).

A JSON object: "format" (1), "dataset" (the kind of data set, e.g. "imagenet"), "options"
(the settings that change the records), "splits" (per split name: "num_items",
"num_shards", "pattern", "items_sha256"), which together are the data set's identity;
"shards" (per finished shard name: "records", "bytes", "skipped" as [item, reason] pairs);
and "metadata" (facts that do not identify the data set), replaced by every run.

Here: the identity, the check of an output folder against it (`prepare_out_dir`: resume,
refuse another data set or foreign shards, or start over with `overwrite`), and the shard
names (`shard_glob`: a pattern for file *names*, matched in the output folder by
`cvbench.utils.files.match_files`, so that glob characters in the folder's own name, such as
`out[12]`, never reach another folder's shards). The manifest is read with a bound
(`MAX_MANIFEST_BYTES`) and its nesting checked before parsing; one that cannot be read
counts as another data set's.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import string
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cvbench.utils.errors import BadFileError
from cvbench.utils.files import check_output, match_files, read_json, written_by_cvbench

MANIFEST_NAME = "cvbench_manifest.json"
_MANIFEST_FORMAT = 1
#: The largest manifest read (one for 1,152 ImageNet shards has about 200 KB).
MAX_MANIFEST_BYTES = 64 << 20


def shard_glob(pattern: str, split: str) -> str:
    """A shell pattern matching every file name `pattern` gives for `split`, any index or
    count; for `match_files` (file names only, never a folder path).

    Example:
        >>> shard_glob("{split}-{index:05d}-of-{count:05d}", "train")
        'train-*-of-*'
    """
    out = []
    for literal, field_name, _, _ in string.Formatter().parse(pattern):
        out.append(glob.escape(literal))
        if field_name == "split":
            out.append(glob.escape(split))
        elif field_name is not None:
            out.append("*")
    return "".join(out)


def manifest_identity(
    dataset: str,
    options: Mapping[str, Any],
    splits: Sequence[Any],
    item_key: Callable[[Any], str],
) -> dict[str, Any]:
    """The data set's identity as the manifest stores it: the format, `dataset`, `options`
    and per split (`SplitSpec`s) its item and shard counts, pattern and the SHA-256 over
    the `item_key` of every item in order (one line each)."""
    split_ids = {}
    for spec in splits:
        digest = hashlib.sha256()
        for item in spec.items:
            # A file name that is not UTF-8 keeps its bytes (Python decodes them as surrogates).
            digest.update(item_key(item).encode("utf-8", "surrogateescape"))
            digest.update(b"\n")
        split_ids[spec.name] = {
            "num_items": len(spec.items),
            "num_shards": spec.num_shards,
            "pattern": spec.pattern,
            "items_sha256": digest.hexdigest(),
        }
    # A JSON round trip, so that tuples compare equal to the lists read back from the file.
    return json.loads(
        json.dumps(
            {
                "format": _MANIFEST_FORMAT,
                "dataset": dataset,
                "options": dict(options),
                "splits": split_ids,
            }
        )
    )


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [f"{prefix[:-1]}: {old!r} -> {new!r}"]


def _existing_shards(out_dir: Path, splits: Sequence[Any]) -> list[Path]:
    found: set[Path] = set()
    for spec in splits:
        found.update(match_files(out_dir, shard_glob(spec.pattern, spec.name)))
    return sorted(found)


def remove_stale_temporaries(out_dir: Path, splits: Sequence[Any]) -> None:
    """Removes the temporary files a killed build left beside the shards of `splits`."""
    # `atomic_path` names its temporary files ".<final name>.<random>.tmp<suffix>".
    for spec in splits:
        for p in match_files(out_dir, "." + shard_glob(spec.pattern, spec.name) + ".*.tmp*"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)


def prepare_out_dir(out_dir: Path, identity: dict[str, Any], splits, overwrite: bool) -> dict:
    """Checks or resets `out_dir`; returns the manifest to continue from."""
    manifest_path = out_dir / MANIFEST_NAME
    manifest = None
    if manifest_path.exists():
        try:
            manifest = read_json(manifest_path, limit=MAX_MANIFEST_BYTES, what="manifest")
        except (OSError, BadFileError):
            manifest = {}
        if not isinstance(manifest, dict):
            manifest = {}
    existing = _existing_shards(out_dir, splits)
    if not overwrite:
        if manifest is not None:
            old_identity = {k: manifest.get(k) for k in identity}
            diffs = _differences(old_identity, identity)
            if diffs:
                raise FileExistsError(
                    f"{out_dir} holds a different data set (its {MANIFEST_NAME} differs in "
                    f"{'; '.join(diffs[:5])}); pass overwrite=True (--overwrite) to replace it, "
                    "or choose another output directory"
                )
            return manifest
        if existing:
            raise FileExistsError(
                f"{out_dir} already holds {len(existing)} shard files (e.g. {existing[0].name}) "
                f"but no {MANIFEST_NAME}, so they were not written by this builder; pass "
                "overwrite=True (--overwrite) to replace them, or choose another output directory"
            )
    else:
        for p in existing:
            p.unlink()
        with contextlib.suppress(FileNotFoundError):
            manifest_path.unlink()
    return {**identity, "shards": {}}


def check_data_set_file(path: str | os.PathLike) -> Path:
    """Checks, before any work, that a builder may write (or, with `overwrite`, delete) the
    single file `path` beside its shards (`dataset_info.json`): missing, written by cvbench
    (`written_by_cvbench`), or beside a `MANIFEST_NAME` (then it belongs to the data set the
    manifest describes, which `prepare_out_dir` checks). A user's file of that name in a
    folder that holds no cvbench data set, or a symbolic link, is never replaced.

    Raises:
        ValueError: naming the file (exit 2 in the command).
    """

    def is_ours(file: Path) -> bool:
        return written_by_cvbench(file) or (file.parent / MANIFEST_NAME).is_file()

    return check_output(path, overwrite=True, is_ours=is_ours)


def whole_shards(out_dir: Path, manifest: Mapping[str, Any]) -> int:
    """Shards the manifest lists whose file is there with the recorded size."""
    return sum(
        1
        for name, entry in manifest["shards"].items()
        if (out_dir / name).is_file() and (out_dir / name).stat().st_size == entry["bytes"]
    )
