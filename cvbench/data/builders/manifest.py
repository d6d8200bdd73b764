"""The manifest of `write_sharded` (`cvbench_manifest.json` in the output folder).

A JSON object: "format" (1), "dataset" (the kind of data set, e.g. "imagenet"), "options"
(the settings that change the records), shared by every split of the folder; "splits" (per
split name: "num_items", "num_shards", "pattern", "items_sha256"), each split's own
identity; "shards" (per finished shard name: "records", "bytes", "skipped" as [item, reason]
pairs); and "metadata" (facts that do not identify the data set), replaced by every run.

A folder is built split by split, call after call or in one call: each call checks and
writes only the splits it names, and keeps the folder's other splits (their identity and
shards) as they are, provided they share its kind and options.

Here: the identity, the check of an output folder against it (`prepare_out_dir`: resume a
split, add one, refuse another data set or foreign shards, or with `overwrite` replace the
named splits only), and the shard names (`shard_glob`: a pattern for file *names*, matched
in the output folder by `cvbench.utils.files.match_files`, so that glob characters in the
folder's own name, such as `out[12]`, never reach another folder's shards;
`split_shard_names`: exactly one split's). The manifest is read with a bound
(`MAX_MANIFEST_BYTES`) and its nesting checked before parsing, then its shape: a damaged
one (not JSON, or JSON of the wrong shape) is a `BadFileError` naming it and what is wrong,
and no build resumes from it or deletes a shard by it.
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

from cvbench.data.dali_index import remove_indexes
from cvbench.data.dataset_info import dataset_info_path, only_splits, read_dataset_info
from cvbench.data.safe_paths import check_split_name, plain_name
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import check_output, match_files, read_json, written_by_cvbench
from cvbench.utils.io import write_json_atomic

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


def split_shard_names(name: str, split_identity: Mapping[str, Any]) -> list[str]:
    """The shard file names of split `name` as the manifest's identity of it gives them
    (its pattern and shard count): exactly that split's, never another split's whose name
    shares a prefix (a glob of `train` would match `train-x`'s shards)."""
    try:
        pattern, count = split_identity["pattern"], int(split_identity["num_shards"])
        names = [pattern.format(split=name, index=i, num_shards=count) for i in range(count)]
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return []  # a damaged entry names no file: nothing of it is deleted
    # a name that is no plain file name (`../victim`) is not a shard of this folder
    return names if all(plain_name(n) for n in names) else []


def remove_stale_temporaries(out_dir: Path, splits: Sequence[Any]) -> None:
    """Removes the temporary files a killed build left beside the shards of `splits`: all
    of them, whatever process made them, since a build holds its folder's lock (no other
    writer is at work there); `atomic_path`'s own sweep removes only those of writers it
    knows dead (`io.writer_dead`)."""
    # `atomic_path` names its temporaries ".<final name>.cvbench-<host>-<pid>-<random>.tmp<suffix>".
    for spec in splits:
        for p in match_files(out_dir, "." + shard_glob(spec.pattern, spec.name) + ".*.tmp*"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)


#: How to proceed from a damaged manifest: it alone says which shards cvbench wrote and
#: finished, so no build resumes from it nor deletes a file by it.
_DAMAGED_HINT = (
    "a build resumes from, and replaces, only the shards its manifest lists: delete the "
    "folder's shards and {name} to build again, or choose another output directory"
)


def _read_manifest(path: Path) -> dict | None:
    """The manifest at `path`, checked (`_check_manifest`); None when there is none.

    Raises:
        BadFileError: naming the file and what is wrong with it (not JSON, nested too deep,
            over `MAX_MANIFEST_BYTES`, not a regular file, or JSON of the wrong shape), and
            how to proceed.
        OSError: it cannot be read (permission, I/O error), naming it.
    """
    if not os.path.lexists(path):
        return None
    hint = _DAMAGED_HINT.format(name=MANIFEST_NAME)
    try:
        manifest = read_json(path, limit=MAX_MANIFEST_BYTES, what="manifest")
    except BadFileError as e:
        raise BadFileError(f"{e}; {hint}") from None
    problem = _check_manifest(manifest)
    if problem is not None:
        raise BadFileError(f"{path} is not a cvbench build manifest: {problem}; {hint}")
    return manifest


def _check_manifest(manifest: Any) -> str | None:
    """What is wrong with the shape of a manifest read from JSON (None: nothing). One of
    another format number (another cvbench's) is only checked to be an object with one."""
    if not isinstance(manifest, dict):
        return f"its JSON is {_kind_of(manifest)}, not an object"
    if not _is_int(manifest.get("format")):
        return f"its format is {_kind_of(manifest.get('format', _MISSING))}, not a number"
    if manifest["format"] != _MANIFEST_FORMAT:
        return None  # another data set (prepare_out_dir names the difference)
    fields = {"dataset": str, "options": dict, "splits": dict, "shards": dict}
    for key, kind in fields.items():
        value = manifest.get(key, _MISSING)
        if not isinstance(value, kind):
            return f"its {key} is {_kind_of(value)}, not {_KIND_NAMES[kind]}"
    if not isinstance(manifest.get("metadata", {}), dict):
        return f"its metadata is {_kind_of(manifest['metadata'])}, not an object"
    split_fields = {"num_items": int, "num_shards": int, "pattern": str, "items_sha256": str}
    for name, split in manifest["splits"].items():
        problem = _check_fields(split, split_fields) or _check_name(name, check_split_name)
        if problem is None and split["num_shards"] and not split_shard_names(name, split):
            problem = f"has pattern {split['pattern']!r}, which names no file of this folder"
        if problem is not None:
            return f"splits[{name!r}] {problem}"
    for name, shard in manifest["shards"].items():
        problem = _check_name(name, _check_plain_name)
        if problem is not None:
            return f"shards[{name!r}] {problem}"
        problem = _check_fields(shard, {"records": int, "bytes": int, "skipped": list})
        if problem is None and not all(_is_pair(s) for s in shard["skipped"]):
            problem = "has a skipped entry that is not an [item, reason] pair of strings"
        if problem is not None:
            return f"shards[{name!r}] {problem}"
    return None


def _check_name(name: str, check: Any) -> str | None:
    """What is wrong with a split or shard name of the manifest (None: nothing): one that
    is no plain file name would make a path outside the folder (a planted `../victim` was
    deleted by `--overwrite`)."""
    try:
        check(name)
    except ValueError as e:
        return f"is no name of this folder ({e})"
    return None


def _check_plain_name(name: str) -> None:
    if not plain_name(name):
        raise ValueError(f"{name!r} is not one plain file name")


_KIND_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
_MISSING = object()  # a field the manifest lacks


def _check_fields(entry: Any, fields: Mapping[str, type]) -> str | None:
    """What is wrong with `entry`, an object whose `fields` have the given kinds."""
    if not isinstance(entry, dict):
        return f"is {_kind_of(entry)}, not an object"
    for key, kind in fields.items():
        value = entry.get(key, _MISSING)
        if not (_is_int(value) and value >= 0 if kind is int else isinstance(value, kind)):
            wanted = "a count" if kind is int else _KIND_NAMES[kind]
            return f"has {key} {_kind_of(value)}, not {wanted}"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _kind_of(value: Any) -> str:
    """`value` as a message names it: missing, null, or its JSON kind and a short repr."""
    if value is _MISSING or value is None:
        return "missing" if value is _MISSING else "null"
    kinds = {bool: "a boolean", dict: "an object", list: "a list", str: "the string"}
    kind = next((name for t, name in kinds.items() if isinstance(value, t)), "the number")
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return kind if isinstance(value, dict | list) else f"{kind} {shown}"


def listed_shards(out_dir: str | os.PathLike) -> set[str]:
    """The names of the shards the manifest of `out_dir` lists as finished (none without a
    manifest, or with one of another format).

    Raises:
        BadFileError: the manifest is damaged (`_read_manifest`).
    """
    manifest = _read_manifest(Path(out_dir) / MANIFEST_NAME) or {}
    shards = manifest.get("shards")
    return set(shards) if isinstance(shards, dict) else set()


def folder_splits(out_dir: str | os.PathLike) -> dict[str, Any]:
    """Split name -> its identity, for the splits the manifest of `out_dir` lists ({} when
    it has no manifest, or one of another format).

    Raises:
        BadFileError: the manifest is damaged (`_read_manifest`).
    """
    manifest = _read_manifest(Path(out_dir) / MANIFEST_NAME) or {}
    splits = manifest.get("splits")
    return dict(splits) if isinstance(splits, dict) else {}


def _foreign_shards(out_dir: Path, spec: Any, manifest: Mapping[str, Any]) -> list[Path]:
    """Files named like shards of `spec` that the manifest does not list (another tool's, or
    an older build's of another shard count), except this build's own shard names (a whole
    shard renamed into place just before a kill is rewritten by the rerun)."""
    listed = manifest.get("shards") if isinstance(manifest.get("shards"), dict) else {}
    mine = {spec.shard_name(i) for i in range(spec.num_shards)}
    return [
        p
        for p in match_files(out_dir, shard_glob(spec.pattern, spec.name))
        if p.name not in listed and p.name not in mine
    ]


def prepare_out_dir(out_dir: Path, identity: dict[str, Any], splits, overwrite: bool) -> dict:
    """Checks `out_dir` for writing the splits `identity` names; returns the manifest to
    continue from.

    A folder holds one data set of one kind (`dataset`, `format`) and settings (`options`),
    built split by split, call after call or in one call. Only the splits named here are
    checked and written; the folder's other splits (their identity, shards and files) are
    kept as they are. A named split the folder holds already is resumed when its identity is
    the same (only missing shards are written), refused when it differs, and with `overwrite`
    replaced: its shards the manifest lists are deleted with the DALI index files cvbench
    wrote for them (`cvbench.data.dali_index.remove_indexes`), no other file.

    Raises:
        FileExistsError: naming the difference: a named split differs (without
            `overwrite`); the folder's other splits were built as another kind of data set
            or with other settings (with or without `overwrite`: it never touches them);
            files named like a named split's shards that no cvbench manifest lists (with or
            without `overwrite`: it never deletes a file cvbench did not write).
        BadFileError: the folder's manifest is damaged (not JSON, or JSON of the wrong
            shape), naming it and what is wrong: no split is resumed from it, nor any file
            deleted by it.
    """
    manifest_path = out_dir / MANIFEST_NAME
    manifest = _read_manifest(manifest_path)
    if manifest is None:
        manifest = {"shards": {}}
        for spec in splits:
            existing = match_files(out_dir, shard_glob(spec.pattern, spec.name))
            if existing:
                raise FileExistsError(
                    f"{out_dir} already holds {len(existing)} shard files (e.g. "
                    f"{existing[0].name}) but no {MANIFEST_NAME}, so they were not written by "
                    "this builder; overwrite (--overwrite) replaces only shards cvbench wrote: "
                    "move them or choose another output directory"
                )
        return {**identity, "shards": {}}
    old_splits = manifest.get("splits") if isinstance(manifest.get("splits"), dict) else {}
    shards = manifest.get("shards") if isinstance(manifest.get("shards"), dict) else {}
    named = set(identity.get("splits", {}))
    kept = sorted(set(old_splits) - named)
    common = [k for k in identity if k != "splits"]
    diffs = _differences({k: manifest.get(k) for k in common}, {k: identity[k] for k in common})
    if diffs and kept:
        raise FileExistsError(
            f"{out_dir} holds the split(s) {', '.join(kept)} of another data set or built with "
            f"other settings ({'; '.join(diffs[:5])}); every split of a folder shares them and "
            "overwrite (--overwrite) replaces only the splits it names: build with the same "
            "settings, or choose another output directory"
        )
    changed = {}
    for name in sorted(named & set(old_splits)):
        split_diffs = _differences(old_splits[name], identity["splits"][name], f"splits.{name}.")
        if split_diffs or diffs or overwrite:
            changed[name] = split_diffs
    if not overwrite and (diffs or any(changed.values())):
        found = diffs + [d for name in sorted(changed) for d in changed[name]]
        raise FileExistsError(
            f"{out_dir} holds a different data set (its {MANIFEST_NAME} differs in "
            f"{'; '.join(found[:5])}); pass overwrite=True (--overwrite) to replace "
            f"{'it' if not kept else 'the split(s) named'}, or choose another output directory"
        )
    replaced = {n for name in changed for n in split_shard_names(name, old_splits[name])}
    if diffs:  # an unreadable manifest or another data set, wholly replaced
        replaced |= set(shards)
    fresh = {**manifest, "shards": {k: v for k, v in shards.items() if k not in replaced}}
    listed = {"shards": {**fresh["shards"], **dict.fromkeys(replaced)}}
    for spec in splits:
        foreign = _foreign_shards(out_dir, spec, listed)
        if foreign:
            raise FileExistsError(
                f"{out_dir} already holds {len(foreign)} files named like shards of split "
                f"{spec.name!r} (e.g. {foreign[0].name}) that its {MANIFEST_NAME} does not "
                "list, so they were not written by this builder; overwrite (--overwrite) "
                "replaces only shards cvbench wrote: move them or choose another output "
                "directory"
            )
    # never a path outside the folder (the names are checked on reading too)
    replaced = {name for name in replaced if plain_name(name)}
    for name in sorted(replaced):
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()
    remove_indexes(out_dir / name for name in sorted(replaced))  # cvbench's own only
    if diffs:
        return {**identity, "shards": {}}
    splits_out = {name: old_splits[name] for name in kept}
    splits_out.update(identity["splits"])
    return {**fresh, **{k: identity[k] for k in common}, "splits": splits_out}


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


def kept_info(out_dir: str | os.PathLike, named: set[str], kind: str):
    """The `dataset_info.json` of `out_dir` and the splits a build naming `named` keeps
    there (`prepare_out_dir` never touches them), when the folder holds such splits and a
    readable file of this `kind` describes them; else None (nothing to keep: a missing or
    unreadable file cannot vouch for them and the new file describes the named splits).

    Returns:
        (DatasetInfo, sorted kept split names) or None.
    """
    kept = sorted(set(folder_splits(out_dir)) - set(named))
    if not kept:
        return None
    try:
        info = read_dataset_info(out_dir)
    except BadFileError:
        return None
    return (info, kept) if info is not None and info.kind == kind else None


def drop_replaced_info(out_dir: str | os.PathLike, kept, overwrite: bool) -> None:
    """Before an `overwrite` build writes its first shard: `out_dir`'s `dataset_info.json`
    describes only the splits the folder keeps (`kept_info`), or is removed when it keeps
    none. So another data set's classes never stay beside a half-written one, the entry of a
    split being rewritten never describes shards a stopped build left unfinished, and a
    kept split's entry is never lost (the builder writes the file again at the end and
    `write_dataset_info` adds the kept splits back)."""
    if not overwrite:
        return
    if kept is None:
        dataset_info_path(out_dir).unlink(missing_ok=True)
        return
    info, names = kept
    if set(info.splits) - set(names):
        write_json_atomic(dataset_info_path(out_dir), only_splits(info, names).to_json())
