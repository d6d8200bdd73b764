"""The table of the hostile-input harness: every `cvbench` command and public reader that
takes a path, which of its path arguments take which hostile inputs, and the documented
outcome of each.

**Adding a command** is one entry in `TABLE` per path argument:

    Row("mycmd-input", "mycmd {target} --out out", records, "data.json", JSON_FILE,
        BAD_FILE, outputs=("out",)),

(name, argv, base, target, hostiles, expect, then keywords):

- `name` prefixes the case ids; `argv` is the command line (split like a shell would, then
  each `{name}` filled in with a path of the case folder: `{target}` is where the hostile
  input was put);
- `base(case, assets)` writes the command's *valid* inputs into the empty case folder
  (`Assets`: a tiny classifier and detector, a finished run, records, a COCO set);
- `target` is where, relative to the case folder, each hostile input of `hostiles` (names of
  `HOSTILES`) is put;
- `expect` is the documented outcome (`Expect`), the same for every hostile input or a dict
  by hostile name (`"*"` for the rest);
- `outputs` are the paths the command may write; every other file of the case folder (the
  inputs, bystanders like `victim.txt`) must be byte-identical afterwards, and `protect`
  lists files inside an output that must be too;
- `call="module:function"` makes the row a public reader's: `argv` are its arguments.

The kinds of input file have their hostile sets (`IMAGE_FILE`, `MODEL_FILE`,
`CHECKPOINT_FILE`, `JSON_FILE`, `TEXT_FILE`, `OUTPUT_FILE`, `OUTPUT_FOLDER`); a new hostile
input is one entry of `HOSTILES` (a maker in `corpus.py`) added to the kinds it fits.

One row expands to one case per hostile input (`cases()`), id `<row>-<hostile>`. `SEEDS`
holds the repros of issue #37 (sections A-K) that need a setup of their own, one `Case`
each. A public reader (`cvbench.data.read_dataset_info`, ...) is a row whose `call` names
it: its `argv` are the function's arguments, and what it raises is reported as the command
would report it (`cvbench.cli.errors.known_error`, command `reader`).

The outcomes follow docs/reliability.md: a bad input file (not a regular file, over a size
limit, malformed, nested too deep) is one line naming it and exit 1; a missing file or a
refused plan (an output that is an input, a link, a user's file) exit 2; a bad image met by
a *builder* is skipped and listed (exit 0, the file named in the summary); glob characters in
a folder name mean themselves (exit 0, the literal folder used, its look-alikes untouched).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hostile import corpus

F = (
    "--model resnet18 --image-size 32 --num-classes 4 --synthetic --batch-size 2 "
    "--steps-per-epoch 2 --epochs 1 --precision fp32 --no-progress --log-every 0 --seed 0"
)
#: `eval` of the run `F` trains.
E = (
    "--model resnet18 --image-size 32 --num-classes 4 --synthetic --batch-size 2 "
    "--precision fp32 --seed 0"
)
#: `train` on the records of `Assets.records` (2 classes, 8 training images).
R = (
    "--model resnet18 --image-size 32 --batch-size 2 --steps-per-epoch 2 --epochs 1 "
    "--precision fp32 --no-progress --log-every 0 --seed 0 --eval none --no-export"
)
BUILD = "--train-shards 1 --val-shards 1 --workers 1 --no-progress"


@dataclass(frozen=True)
class Assets:
    """Valid inputs made once per session (read-only: cases copy them)."""

    root: Path
    cls_model: Path  # a Sequential classifier, 8 x 8 input, 3 classes
    det_model: Path  # an SSD-contract detector, 64 x 64 input, 2 classes
    run: Path  # a finished `train F --checkpoint-every 1` run: ckpt 1 and 2, no export
    records: Path  # build-imagenet records: 2 classes x 4 training images, dataset_info.json
    raw: Path  # the raw folder of `records`: train/a, train/b
    renamed: Path  # the records of raw with class folder b renamed c
    records_run: Path  # a finished `train R` run on `records`


@dataclass(frozen=True)
class Expect:
    """A documented outcome.

    rc: the exit status, or the statuses allowed where docs/reliability.md leaves it open
        (each such case says why in `TABLE`).
    named: the name (a key of the case's paths, `target` by default) that the one error line
        (rc != 0) names, or that the output lists (`listed`); None: not checked.
    listed: with rc 0, the file is named in stdout or stderr (a builder's skipped list, a
        resume's warning).
    check: more checks `(result, case folder)`, each an `assert`.
    """

    rc: int | tuple[int, ...]
    named: str | None = "target"
    listed: bool = False
    check: Callable | None = None

    @property
    def codes(self) -> tuple[int, ...]:
        return self.rc if isinstance(self.rc, tuple) else (self.rc,)


BAD_FILE = Expect(1)  # a bad input file: one line naming it, exit 1
MISSING = Expect(2)  # a missing input (a dangling link): one line naming it, exit 2
REFUSED = Expect(2)  # a refused output or plan: one line naming it, exit 2
LISTED = Expect(0, listed=True)  # a builder's bad image: skipped, named in the summary
ACCEPTED = Expect(0, named=None)  # a legitimate input: the command does its work
NO_SHARDS = Expect(2, named="data")  # a data folder without records: named, exit 2
#: An output path that is a link: the one rule (`cvbench.utils.files.user_output`, applied
#: by `cvbench.cli.main` to every output argument) resolves a link the user names once, so
#: the command checks its target: a user's file there (victim.txt) is refused as any user's
#: file is (exit 2; a file where a folder is expected: exit 1), the line naming the link and
#: its target; a dangling link is refused naming it (exit 1 with the OS errors, 2 from
#: `check_output`). Never written through: the target byte-identical.
LINKED_OUTPUT = Expect((1, 2))


@dataclass(frozen=True)
class Case:
    """One command line against one case folder."""

    id: str
    argv: tuple[str, ...]
    make: Callable[[Path, Assets], Mapping[str, str] | None]
    expect: Expect
    outputs: tuple[str, ...] = ()
    protect: tuple[str, ...] = ()
    call: str | None = None
    timeout: float = 60
    target: str = ""
    heavy: bool = False

    def paths(self, case: Path, assets: Assets) -> dict[str, str]:
        """Makes the case folder; the names of `argv`'s fields."""
        names = dict(self.make(case, assets) or {})
        if self.target:
            names.setdefault("target", self.target)
        return names

    def command_line(self, names: Mapping[str, str]) -> list[str]:
        return [part.format(**names) for part in self.argv]


@dataclass(frozen=True)
class Row:
    """A command's path argument: `hostiles` put at `target`, each with `expect`."""

    name: str
    argv: str
    base: Callable[[Path, Assets], Mapping[str, str] | None]
    target: str
    hostiles: tuple[str, ...]
    expect: Expect | Mapping[str, Expect]
    outputs: tuple[str, ...] = ()
    call: str | None = None
    timeout: float = 60
    heavy: bool = False
    protect: tuple[str, ...] = ()

    def outcome(self, hostile: str) -> Expect:
        if isinstance(self.expect, Expect):
            return self.expect
        return self.expect.get(hostile, self.expect.get("*"))


# ------------------------------------------------------------------------ the hostile inputs
def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)
    return dst


def _with_name(target: Path, name: str) -> Path:
    return target.with_name(name)


#: name -> maker(path, assets): each writes one hostile input at `path`.
HOSTILES: dict[str, Callable[[Path, Assets], None]] = {
    "fifo": lambda p, a: corpus.fifo(p),
    "dev-zero": lambda p, a: corpus.zero_link(p),
    "dangling": lambda p, a: corpus.dangling_link(p),
    "sparse-2gib": lambda p, a: corpus.sparse_jpeg(p),
    "nested-json": lambda p, a: corpus.nested_json(p),
    "lying-jpeg": lambda p, a: corpus.lying_jpeg(p),
    "lying-png": lambda p, a: corpus.lying_png(p),
    "png-13000": lambda p, a: corpus.huge_png(p),
    "float-tiff": lambda p, a: corpus.float_tiff(p),
    "keras-bomb": lambda p, a: corpus.keras_bomb(p, a.cls_model),
    "keras-nested-info": lambda p, a: corpus.replace_zip_member(
        a.cls_model, p, "cvbench.json", corpus.NESTED_JSON
    ),
    "npz-256gib": lambda p, a: corpus.npz_header_bomb(p),
    "npz-nested-meta": lambda p, a: corpus.npz_nested_meta(p),
    "garbage": lambda p, a: p.write_bytes(b"no file of any kind cvbench reads\n" * 4),
    # outputs: a link to the user's file victim.txt beside the case, a link to the user's
    # folder mine/ (holding a.png, its own), a dangling link
    "link-to-victim": lambda p, a: corpus.link_to(p, corpus.victim(p.parent / "victim.txt")),
    "link-to-user-folder": lambda p, a: corpus.link_to(p, _user_folder(p.parent / "mine")),
}


def _user_folder(path: Path) -> Path:
    corpus.victim(path / "a.png")
    corpus.victim(path / "notes.txt")
    return path


#: The hostile inputs of each kind of input file.
ANY_FILE = ("fifo", "dev-zero", "dangling")
IMAGE_FILE = (*ANY_FILE, "sparse-2gib", "lying-jpeg", "lying-png", "png-13000")
MODEL_FILE = (*ANY_FILE, "sparse-2gib", "keras-bomb", "keras-nested-info", "garbage")
CHECKPOINT_FILE = (*ANY_FILE, "sparse-2gib", "npz-256gib", "npz-nested-meta", "garbage")
JSON_FILE = (*ANY_FILE, "nested-json")
TEXT_FILE = ANY_FILE
OUTPUT_FILE = ("link-to-victim", "dangling")
OUTPUT_FOLDER = ("link-to-victim", "link-to-user-folder", "dangling")


# ------------------------------------------------------------------- the commands' valid inputs
def images_folder(case: Path, assets: Assets) -> dict[str, str]:
    """images/a.png, images/b.png (20 x 30) and the classifier model.keras."""
    corpus.png(case / "images" / "a.png", 0)
    corpus.png(case / "images" / "b.png", 1)
    _copy(assets.cls_model, case / "model.keras")
    return {}


def detector_images(case: Path, assets: Assets) -> dict[str, str]:
    corpus.png(case / "images" / "a.png", 0)
    _copy(assets.det_model, case / "det.keras")
    corpus.victim(case / "victim.txt")
    return {}


def model_only(case: Path, assets: Assets) -> dict[str, str]:
    _copy(assets.cls_model, case / "model.keras")
    corpus.victim(case / "victim.txt")
    return {}


def nothing(case: Path, assets: Assets) -> dict[str, str]:
    corpus.victim(case / "victim.txt")
    return {}


def finished_run(case: Path, assets: Assets) -> dict[str, str]:
    """run/ (a finished 2-step run: checkpoints 1 and 2) and victim.txt beside it."""
    _copy(assets.run, case / "run")
    corpus.victim(case / "victim.txt")
    return {}


def raw_images(case: Path, assets: Assets) -> dict[str, str]:
    """raw/train/a, raw/train/b: 4 JPEGs each."""
    _copy(assets.raw, case / "raw")
    return {}


def records(case: Path, assets: Assets) -> dict[str, str]:
    _copy(assets.records, case / "data")
    return {}


def coco_set(case: Path, assets: Assets) -> dict[str, str]:
    """ann.json naming images/a.jpg and images/b.jpg (40 x 40, one box each)."""
    corpus.jpeg(case / "images" / "a.jpg", 0)
    corpus.jpeg(case / "images" / "b.jpg", 1)
    _write_coco(case / "ann.json", ["a.jpg", "b.jpg"])
    return {}


def _write_coco(path: Path, names: list[str]) -> None:
    doc = {
        "images": [
            {"id": i + 1, "file_name": n, "height": 40, "width": 40} for i, n in enumerate(names)
        ],
        "annotations": [
            {"id": i + 1, "image_id": i + 1, "category_id": 1, "bbox": [2, 2, 10, 10], "area": 100}
            for i in range(len(names))
        ],
        "categories": [{"id": 1, "name": "thing"}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def coco_with_hostile_image(case: Path, assets: Assets) -> dict[str, str]:
    """ann.json naming images/a.jpg (valid) and images/x.jpg (the hostile input)."""
    corpus.jpeg(case / "images" / "a.jpg", 0)
    _write_coco(case / "ann.json", ["a.jpg", "x.jpg"])
    return {}


def imagenet_tars(case: Path, assets: Assets) -> dict[str, str]:
    corpus.victim(case / "victim.txt")
    return {}


def shards(case: Path, assets: Assets) -> dict[str, str]:
    """data/ with the records' shards only (no idx/)."""
    _copy(assets.records, case / "data")
    shutil.rmtree(case / "data" / "idx", ignore_errors=True)
    return {}


def shards_with_hostile_shard(case: Path, assets: Assets) -> dict[str, str]:
    shards(case, assets)
    shard = next((case / "data").glob("train-*"))
    shard.unlink()
    return {"data": "data"}


def records_without_info(case: Path, assets: Assets) -> dict[str, str]:
    records(case, assets)
    (case / "data" / "dataset_info.json").unlink()
    return {}


def records_hostile_train_shard(case: Path, assets: Assets) -> dict[str, str]:
    records(case, assets)
    for shard in (case / "data").glob("train-*"):
        shard.unlink()
    return {"data": "data"}


def export_folder(case: Path, assets: Assets) -> dict[str, str]:
    corpus.victim(case / "victim.txt")
    (case / "export").mkdir()
    return {}


# ------------------------------------------------------------------------------- the table
TABLE: tuple[Row, ...] = (
    # --- cvbench predict: the model file, the images, --coco-json, --draw
    Row(
        "predict-model",
        "predict {target} images",
        images_folder,
        "bad.keras",
        MODEL_FILE,
        {"*": BAD_FILE, "dangling": MISSING},
    ),
    Row(
        "predict-image",
        "predict model.keras {target}",
        images_folder,
        "images/x.png",
        (*IMAGE_FILE, "float-tiff"),
        # float TIFFs are decoded (docs: "decoded to the model's 0-255 range"); refusing one
        # over the image budget is allowed too: the check is its memory.
        {"*": BAD_FILE, "dangling": MISSING, "float-tiff": Expect((0, 1))},
    ),
    # In a folder, only regular files are images (`match_files`): a FIFO or a device link is
    # not read at all, and the two images are classified.
    Row(
        "predict-image-in-folder",
        "predict model.keras images",
        images_folder,
        "images/x.png",
        ("fifo", "dev-zero", "sparse-2gib", "lying-jpeg", "png-13000"),
        {"*": BAD_FILE, "fifo": ACCEPTED, "dev-zero": ACCEPTED},
    ),
    # --- cvbench export: the model file
    Row(
        "export-model",
        "export {target} --output out",
        model_only,
        "bad.keras",
        MODEL_FILE,
        {"*": BAD_FILE, "dangling": MISSING},
        outputs=("out", "out_info.json"),  # the export and its info file
    ),
    # --- cvbench eval --checkpoint
    Row(
        "eval-checkpoint",
        f"eval {E} --checkpoint {{target}}",
        finished_run,
        "run/checkpoints/ckpt-0000000009.npz",
        CHECKPOINT_FILE,
        {"*": BAD_FILE, "dangling": MISSING},
    ),
    # --- cvbench train --resume: a hostile newest checkpoint is skipped with a warning
    # naming it (docs: "the previous checkpoint is used"), the run resumes from ckpt 2.
    Row(
        "train-resume-newest",
        f"train {F} --eval none --no-export --log-dir run --resume",
        finished_run,
        "run/checkpoints/ckpt-0000000009.npz",
        ("fifo", "dev-zero", "sparse-2gib", "npz-256gib", "npz-nested-meta", "garbage"),
        Expect(0, listed=True),
        outputs=("run",),
    ),
    # --- cvbench train --weights
    Row(
        "train-weights",
        f"train {F} --eval none --no-export --weights {{target}}",
        nothing,
        "w.npz",
        (*ANY_FILE, "sparse-2gib", "npz-256gib", "garbage"),
        {"*": BAD_FILE, "dangling": MISSING},
    ),
    # --- cvbench train --data-dir: dataset_info.json and the shards
    Row(
        "train-dataset-info",
        f"train {R} --data-dir data",
        records,
        "data/dataset_info.json",
        (*ANY_FILE[:2], "nested-json"),
        BAD_FILE,
    ),
    # A FIFO or device named like a shard is no shard (`match_files` lists regular files
    # only): the folder holds no training records, exit 2, the folder named.
    Row(
        "train-shard",
        f"train {R} --num-classes 2 --data-dir data",
        records_hostile_train_shard,
        "data/train-00000-of-00001",
        ("fifo", "dev-zero", "garbage"),
        {"*": NO_SHARDS, "garbage": BAD_FILE},
    ),
    # --- cvbench build-imagenet: images are skipped and listed; required files are one line
    Row(
        "build-imagenet-image",
        f"build-imagenet --raw-dir raw --output-dir out {BUILD}",
        raw_images,
        "raw/train/a/x.jpg",
        (*IMAGE_FILE,),
        LISTED,
        outputs=("out",),
    ),
    Row(
        "build-imagenet-class-texts",
        f"build-imagenet --raw-dir raw --output-dir out {BUILD} --class-texts {{target}}",
        raw_images,
        "texts.txt",
        TEXT_FILE,
        {"*": BAD_FILE, "dangling": MISSING},
        outputs=("out",),
    ),
    Row(
        "build-imagenet-boxes",
        f"build-imagenet --raw-dir raw --output-dir out {BUILD} --boxes {{target}}",
        raw_images,
        "boxes.csv",
        TEXT_FILE,
        {"*": BAD_FILE, "dangling": MISSING},
        outputs=("out",),
    ),
    # --- cvbench build-coco: the annotations (one line), an image it names (listed)
    Row(
        "build-coco-annotations",
        "build-coco out --annotations {target} --images images --split val --workers 1 "
        "--no-progress",
        coco_set,
        "bad.json",
        JSON_FILE,
        {"*": BAD_FILE, "dangling": MISSING},
        outputs=("out",),
    ),
    Row(
        "build-coco-image",
        "build-coco out --annotations ann.json --images images --split val --workers 1 "
        "--no-progress",
        coco_with_hostile_image,
        "images/x.jpg",
        IMAGE_FILE,
        LISTED,
        outputs=("out",),
    ),
    # --- cvbench dali-index: a shard that is no regular file
    Row(
        "dali-index-shard",
        "dali-index data --no-progress",
        shards_with_hostile_shard,
        "data/train-00000-of-00001",
        ("fifo", "dev-zero"),
        NO_SHARDS,
        outputs=("data/idx",),
    ),
    # --- cvbench extract-imagenet: the archives
    Row(
        "extract-imagenet-train-tar",
        "extract-imagenet out --train-tar {target} --no-progress",
        imagenet_tars,
        "ILSVRC2012_img_train.tar",
        (*ANY_FILE, "sparse-2gib"),
        {"*": BAD_FILE, "dangling": MISSING},
        outputs=("out",),
    ),
    # --- cvbench bench-input --data-dir: a shard that is no regular file
    Row(
        "bench-input-shard",
        "bench-input --data-dir data --batch-size 2 --image-size 32 --warmup-batches 0 "
        "--batches 1 --rounds 1 --threads 1",
        records_hostile_train_shard,
        "data/train-00000-of-00001",
        ("fifo", "dev-zero"),
        NO_SHARDS,
    ),
    # --- public readers
    Row(
        "read_model_info",
        "{target}",
        nothing,
        "m.keras",
        MODEL_FILE,
        {"*": BAD_FILE, "dangling": MISSING},
        call="cvbench.inference:read_model_info",
    ),
    Row(
        "load_model",
        "{target}",
        nothing,
        "m.keras",
        ("keras-bomb", "keras-nested-info"),
        BAD_FILE,
        call="cvbench.inference:load_model",
    ),
    Row(
        "load_checkpoint",
        "{target}",
        nothing,
        "ckpt-0000000001.npz",
        CHECKPOINT_FILE,
        {"*": BAD_FILE, "dangling": MISSING},
        call="cvbench.training.checkpoint:load_checkpoint",
    ),
    Row(
        "read_dataset_info",
        "data",
        records,
        "data/dataset_info.json",
        (*ANY_FILE[:2], "nested-json"),
        BAD_FILE,
        call="cvbench.data:read_dataset_info",
    ),
    Row(
        "read_export_info-marker",
        "export",
        export_folder,
        "export/cvbench_export.json",
        (*ANY_FILE[:2], "nested-json"),
        BAD_FILE,
        call="cvbench.inference:read_export_info",
    ),
    Row(
        "read_export_info-tflite",
        "{target}",
        nothing,
        "m.tflite",
        (*ANY_FILE[:2], "sparse-2gib"),
        BAD_FILE,
        call="cvbench.inference:read_export_info",
    ),
    # --- outputs: never written through a link, never into the user's folder
    Row(
        "eval-json",
        f"eval {E} --checkpoint run/checkpoints/ckpt-0000000002.npz --json {{target}}",
        finished_run,
        "results.json",
        OUTPUT_FILE,
        LINKED_OUTPUT,
    ),
    Row(
        "predict-coco-json",
        "predict det.keras images --coco-json {target} --overwrite",
        detector_images,
        "results.json",
        OUTPUT_FILE,
        LINKED_OUTPUT,
    ),
    Row(
        "predict-draw",
        "predict model.keras images --draw {target} --overwrite",
        images_folder,
        "drawn",
        OUTPUT_FOLDER,
        LINKED_OUTPUT,
    ),
    Row(
        "export-output",
        "export model.keras --output {target} --overwrite",
        model_only,
        "out",
        OUTPUT_FOLDER,
        LINKED_OUTPUT,
    ),
    Row(
        "export-output-tflite",
        "export model.keras --format tflite --output {target} --overwrite",
        model_only,
        "out.tflite",
        OUTPUT_FILE,
        LINKED_OUTPUT,
    ),
    Row(
        "build-imagenet-output",
        f"build-imagenet --raw-dir raw --output-dir {{target}} --overwrite {BUILD}",
        raw_images,
        "out",
        OUTPUT_FOLDER,
        # A link the user gives as the output folder is resolved once (the user chose it):
        # the build writes into mine/ beside the user's files, which are kept.
        {"*": LINKED_OUTPUT, "link-to-user-folder": Expect((0, 1, 2))},
        outputs=("out", "mine"),
        protect=("mine/a.png", "mine/notes.txt"),
    ),
    Row(
        "build-coco-output",
        "build-coco {target} --annotations ann.json --images images --split val --workers 1 "
        "--no-progress --overwrite",
        coco_set,
        "out",
        OUTPUT_FOLDER,
        # A link the user gives as the output folder is resolved once (the user chose it):
        # the build writes into mine/ beside the user's files, which are kept.
        {"*": LINKED_OUTPUT, "link-to-user-folder": Expect((0, 1, 2))},
        outputs=("out", "mine"),
        protect=("mine/a.png", "mine/notes.txt"),
    ),
    Row(
        "dali-index-index-dir",
        "dali-index data --index-dir {target} --no-progress",
        shards,
        "out",
        OUTPUT_FOLDER,
        # A link the user gives as the index folder is resolved once (the user chose it):
        # the index files go into mine/ beside the user's files, which are kept.
        {"*": LINKED_OUTPUT, "link-to-user-folder": Expect((0, 1, 2))},
        outputs=("out", "mine"),
        protect=("mine/a.png", "mine/notes.txt"),
    ),
    Row(
        "demo-output",
        "demo --quick --output-dir {target}",
        nothing,
        "out",
        ("link-to-victim", "link-to-user-folder"),
        LINKED_OUTPUT,
    ),
)


def cases() -> list[Case]:
    """Every (row, hostile input) case of `TABLE`, then `SEEDS`."""
    out = []
    for row in TABLE:
        for hostile in row.hostiles:
            out.append(_row_case(row, hostile))
    out.extend(SEEDS)
    out.extend(PROBE)
    ids = [c.id for c in out]
    assert len(ids) == len(set(ids)), "two cases share an id"
    return out


def _row_case(row: Row, hostile: str) -> Case:
    def make(case: Path, assets: Assets, row=row, hostile=hostile) -> dict[str, str]:
        names = dict(row.base(case, assets) or {})
        target = case / row.target
        if target.exists() or target.is_symlink():
            target.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        HOSTILES[hostile](target, assets)
        return names

    return Case(
        id=f"{row.name}-{hostile}",
        argv=tuple(shlex.split(row.argv)),
        make=make,
        expect=row.outcome(hostile),
        outputs=row.outputs,
        call=row.call,
        timeout=row.timeout,
        target=row.target,
        heavy=row.heavy,
        protect=row.protect,
    )


# ------------------------------------------------------------------ the seeds: issue #37 A-K
def _glob_build(case: Path, assets: Assets) -> dict[str, str]:
    """A: gl/out1 and gl/out2 hold records; the output is the literal gl/out[12]."""
    raw_images(case, assets)
    for name in ("out1", "out2"):
        _copy(assets.records, case / "gl" / name)
    return {}


def _glob_dali(case: Path, assets: Assets) -> dict[str, str]:
    for name in ("rd1", "rd2", "rd[12]"):
        _copy(assets.records, case / "gl" / name)
        shutil.rmtree(case / "gl" / name / "idx", ignore_errors=True)
    return {}


def _glob_data_dir(case: Path, assets: Assets) -> dict[str, str]:
    """A: x1 holds records; x[12] (the folder named) is empty."""
    _copy(assets.records, case / "x1")
    (case / "x[12]").mkdir()
    return {"target": "x[12]"}


def _lock_link(case: Path, assets: Assets) -> dict[str, str]:
    """B: run/.cvbench-run.lock is a link to ../victim.txt."""
    corpus.victim(case / "victim.txt")
    (case / "run").mkdir()
    corpus.link_to(case / "run" / ".cvbench-run.lock", case / "victim.txt")
    return {"target": ".cvbench-run.lock"}


def _log_link(case: Path, assets: Assets) -> dict[str, str]:
    """B: the finished run's train_log.jsonl is a link to ../victim.jsonl (its own text)."""
    finished_run(case, assets)
    log = case / "run" / "train_log.jsonl"
    (case / "victim.jsonl").write_bytes(log.read_bytes())
    log.unlink()
    corpus.link_to(log, case / "victim.jsonl")
    return {"target": "train_log.jsonl"}


def _checkpoints_link(case: Path, assets: Assets) -> dict[str, str]:
    """B: run/checkpoints is a link to ../elsewhere (holding the user's file)."""
    corpus.victim(case / "elsewhere" / "victim.txt")
    (case / "run").mkdir()
    corpus.link_to(case / "run" / "checkpoints", case / "elsewhere")
    return {"target": "checkpoints"}


def _dangling_log_dir(case: Path, assets: Assets) -> dict[str, str]:
    """I: --log-dir is a dangling link."""
    corpus.victim(case / "victim.txt")
    corpus.dangling_link(case / "run")
    return {"target": "run"}


def _eval_json_is_checkpoint(case: Path, assets: Assets) -> dict[str, str]:
    finished_run(case, assets)
    return {"target": "run/checkpoints/ckpt-0000000002.npz"}


def _demo_user_folder(case: Path, assets: Assets) -> dict[str, str]:
    """F: the user's DIR/logs/notes.txt and DIR/metrics.json."""
    corpus.victim(case / "mine" / "logs" / "notes.txt")
    corpus.victim(case / "mine" / "metrics.json")
    return {"target": "mine"}


def _coco_user_instances(case: Path, assets: Assets) -> dict[str, str]:
    """F: out/instances_val.json is the user's own file."""
    coco_set(case, assets)
    corpus.victim(case / "out" / "instances_val.json")
    return {"target": "instances_val.json"}


def _coco_json_is_model(case: Path, assets: Assets) -> dict[str, str]:
    detector_images(case, assets)
    return {"target": "det.keras"}


def _coco_json_link(case: Path, assets: Assets) -> dict[str, str]:
    detector_images(case, assets)
    corpus.link_to(case / "results.json", case / "victim.txt")
    return {"target": "results.json"}


def _export_over_text(case: Path, assets: Assets) -> dict[str, str]:
    """F: notes.tflite is the user's text with TFL3 at byte 4."""
    model_only(case, assets)
    (case / "notes.tflite").write_bytes(b"abcdTFL3 my notes, not a model\n")
    return {"target": "notes.tflite"}


def _export_over_link(case: Path, assets: Assets) -> dict[str, str]:
    model_only(case, assets)
    corpus.link_to(case / "out.tflite", case / "victim.txt")
    return {"target": "out.tflite"}


def _predict_names(case: Path, assets: Assets) -> dict[str, str]:
    """K: images named with a newline (and a forged result line) and with non-UTF-8 bytes."""
    images_folder(case, assets)
    corpus.png(case / "images" / corpus.NEWLINE_NAME, 2)
    corpus.png(case / "images" / corpus.NON_UTF8_NAME, 3)
    return {}


def _no_forged_lines(result, case: Path) -> None:
    lines = result.out.splitlines()
    assert len(lines) == 4, result.out  # one line per image: a.png, b.png and the two names
    assert not any(line.startswith("forged") for line in lines), result.out


def _predict_all_corrupt(case: Path, assets: Assets) -> dict[str, str]:
    """K: every image is corrupt."""
    _copy(assets.cls_model, case / "model.keras")
    corpus.lying_png(case / "images" / "a.png")
    (case / "images" / "b.png").write_bytes(b"no image")
    return {"target": "images"}


def _predict_big_input(case: Path, assets: Assets) -> dict[str, str]:
    """D: a model with input (None, None, 3) and image_size [8192, 8192], two 20x30 PNGs."""
    import keras

    from cvbench.inference import ModelInfo, save_model

    inputs = keras.Input((None, None, 3))
    outputs = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(inputs))
    info = ModelInfo(task="classification", class_names=("r", "g", "b"), image_size=(8192, 8192))
    save_model(keras.Model(inputs, outputs), case / "big.keras", info)
    corpus.png(case / "images" / "a.png", 0)
    corpus.png(case / "images" / "b.png", 1)
    return {"target": "big.keras"}


def _crc_records(case: Path, assets: Assets) -> dict[str, str]:
    """H: 24 records, one with a damaged CRC (a byte of its JPEG flipped)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from jpeg_records import write_jpeg_records

    shard = case / "data" / "train-00000-of-00001"
    write_jpeg_records(shard, 24, num_classes=4)
    data = bytearray(shard.read_bytes())
    # Record 5: 8 bytes length + 4 bytes length CRC, then the payload; flip a byte in it.
    offset = 0
    for _ in range(5):
        (length,) = __import__("struct").unpack("<Q", data[offset : offset + 8])
        offset += 8 + 4 + length + 4
    data[offset + 12 + 40] ^= 0xFF
    shard.write_bytes(bytes(data))
    return {"target": "train-00000-of-00001"}


def _one_skipped(result, case: Path) -> None:
    assert "skipped 1 corrupt record " in result.out, result.out[-2000:]


def _duplicate_tar(case: Path, assets: Assets) -> dict[str, str]:
    """K: a class tar holding the same member name twice (different bytes)."""
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as t:
        for seed in (0, 1):
            data = corpus.jpeg_bytes(seed)
            info = tarfile.TarInfo("n01440764_1.JPEG")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    with tarfile.open(case / "train.tar", "w") as t:
        info = tarfile.TarInfo("n01440764.tar")
        info.size = len(inner.getvalue())
        t.addfile(info, io.BytesIO(inner.getvalue()))
    return {"target": "n01440764_1.JPEG"}


def _both_kept_or_refused(result, case: Path) -> None:
    if result.rc == 0:  # kept both, deterministically: both images' bytes are in the output
        found = {p.read_bytes() for p in (case / "out").rglob("*.JPEG")}
        assert {corpus.jpeg_bytes(0), corpus.jpeg_bytes(1)} <= found, sorted(found)


def _all_checkpoints_invalid(case: Path, assets: Assets) -> dict[str, str]:
    """J: every checkpoint of the run is damaged."""
    finished_run(case, assets)
    for ckpt in (case / "run" / "checkpoints").glob("ckpt-*.npz"):
        ckpt.write_bytes(ckpt.read_bytes()[:1000])
    return {"target": "ckpt-0000000002.npz"}


def _glob_runs(case: Path, assets: Assets) -> dict[str, str]:
    """A: run1 and run2 hold finished runs; the log folder named is the literal run[12]."""
    for name in ("run1", "run2"):
        _copy(assets.run, case / name)
    return {}


def _glob_exports(case: Path, assets: Assets) -> dict[str, str]:
    model_only(case, assets)
    for name in ("ex1", "ex2"):
        corpus.victim(case / name / "notes.txt")
    return {}


def _glob_drawings(case: Path, assets: Assets) -> dict[str, str]:
    images_folder(case, assets)
    for name in ("dr1", "dr2"):
        corpus.victim(case / name / "a.png")
    return {}


def _glob_coco_out(case: Path, assets: Assets) -> dict[str, str]:
    coco_set(case, assets)
    for name in ("co1", "co2"):
        _copy(assets.records, case / name)
    return {}


def _glob_bench(case: Path, assets: Assets) -> dict[str, str]:
    _copy(assets.records, case / "b1")
    (case / "b[12]").mkdir()
    return {"target": "b[12]"}


def _prints_none(result, case: Path) -> None:
    assert result.out.strip() == "None", result.out  # x[12] has no dataset_info.json


def _raw_is_output(case: Path, assets: Assets) -> dict[str, str]:
    raw_images(case, assets)
    return {"target": "raw"}


def _draw_into_inputs(case: Path, assets: Assets) -> dict[str, str]:
    images_folder(case, assets)
    return {"target": "a.png"}


def _export_over_model(case: Path, assets: Assets) -> dict[str, str]:
    model_only(case, assets)
    return {"target": "model.keras"}


def _coco_into_images(case: Path, assets: Assets) -> dict[str, str]:
    coco_set(case, assets)
    return {"target": "images"}


def _builder_names(case: Path, assets: Assets) -> dict[str, str]:
    """K: class folder a holds images named with a newline (and a forged line) and with
    non-UTF-8 bytes."""
    raw_images(case, assets)
    corpus.jpeg(case / "raw" / "train" / "a" / corpus.NEWLINE_NAME.replace(".png", ".jpg"), 5)
    corpus.jpeg(case / "raw" / "train" / "a" / corpus.NON_UTF8_NAME.replace(".png", ".jpg"), 6)
    return {}


def _no_forged_line(result, case: Path) -> None:
    lines = (result.out + result.err).splitlines()
    assert not any(line.startswith("forged") for line in lines), result.out


def _renamed_class(case: Path, assets: Assets) -> dict[str, str]:
    """J: the run trained on classes a, b; the records were rebuilt with b renamed c."""
    _copy(assets.renamed, case / "data")
    _copy(assets.records_run, case / "run")
    return {}


def _names_the_classes(result, case: Path) -> None:
    line = result.err.strip().splitlines()[-1]
    assert "class" in line, line


SEEDS: tuple[Case, ...] = (
    # A. folder names are never patterns
    Case(
        "A-build-imagenet-output-glob",
        tuple(
            shlex.split(f"build-imagenet --raw-dir raw --output-dir gl/out[12] --overwrite {BUILD}")
        ),
        _glob_build,
        ACCEPTED,
        outputs=("gl/out[12]",),
    ),
    Case(
        "A-dali-index-glob",
        ("dali-index", "gl/rd[12]", "--no-progress"),
        _glob_dali,
        ACCEPTED,
        outputs=("gl/rd[12]/idx",),
    ),
    # an empty literal folder: its (missing) records are named, not another folder's read
    Case(
        "A-train-data-dir-glob",
        ("train", *shlex.split(R), "--num-classes", "2", "--data-dir", "x[12]"),
        _glob_data_dir,
        Expect((1, 2)),
    ),
    # B. run-folder files are never written through links
    Case(
        "B-train-lock-link",
        (*shlex.split(f"train {F} --eval none --no-export"), "--log-dir", "run"),
        _lock_link,
        BAD_FILE,
        outputs=("run",),
    ),
    Case(
        "B-train-log-link-resume",
        (*shlex.split(f"train {F} --eval none --no-export"), "--log-dir", "run", "--resume"),
        _log_link,
        BAD_FILE,
        outputs=("run",),
    ),
    Case(
        "B-train-checkpoints-link",
        (*shlex.split(f"train {F} --eval none --no-export"), "--log-dir", "run"),
        _checkpoints_link,
        BAD_FILE,
        outputs=("run",),
    ),
    # F. outputs never replace inputs or the user's files
    Case(
        "F-eval-json-is-the-checkpoint",
        (
            *shlex.split(f"eval {E}"),
            "--checkpoint",
            "run/checkpoints/ckpt-0000000002.npz",
            "--json",
            "run/checkpoints/ckpt-0000000002.npz",
        ),
        _eval_json_is_checkpoint,
        REFUSED,
    ),
    Case(
        "F-demo-user-folder",
        ("demo", "--quick", "--output-dir", "mine"),
        _demo_user_folder,
        REFUSED,
        outputs=("mine",),
        protect=("mine/logs/notes.txt", "mine/metrics.json"),
    ),
    Case(
        "F-build-coco-user-instances",
        tuple(
            shlex.split(
                "build-coco out --annotations ann.json --images images --split val --workers 1 "
                "--no-progress"
            )
        ),
        _coco_user_instances,
        REFUSED,
        outputs=("out",),
        protect=("out/instances_val.json",),
    ),
    Case(
        "F-predict-coco-json-is-the-model",
        tuple(shlex.split("predict det.keras images --coco-json det.keras --overwrite")),
        _coco_json_is_model,
        REFUSED,
    ),
    Case(
        "F-predict-coco-json-link",
        tuple(shlex.split("predict det.keras images --coco-json results.json --overwrite")),
        _coco_json_link,
        REFUSED,
    ),
    Case(
        "F-export-tflite-over-user-text",
        tuple(shlex.split("export model.keras --format tflite --output notes.tflite --overwrite")),
        _export_over_text,
        REFUSED,
    ),
    Case(
        "F-export-tflite-link",
        tuple(shlex.split("export model.keras --format tflite --output out.tflite --overwrite")),
        _export_over_link,
        REFUSED,
    ),
    # I. messages and exit codes
    Case(
        "I-train-log-dir-dangling",
        (*shlex.split(f"train {F} --eval none --no-export"), "--log-dir", "run"),
        _dangling_log_dir,
        BAD_FILE,
    ),
    Case(
        "I-train-log-dir-empty",
        (*shlex.split(f"train {F} --eval none --no-export"), "--log-dir", ""),
        nothing,
        Expect(2, named=None),
    ),
    Case(
        "I-export-sequential-model",
        tuple(shlex.split("export model.keras --output out")),
        model_only,
        ACCEPTED,
        outputs=("out", "out_info.json"),  # the export and its info file
    ),
    # D. limits bound what a file makes the process allocate (refused naming the model, or
    # run within the budget: docs/reliability.md leaves which open)
    Case(
        "D-predict-model-input-8192",
        tuple(shlex.split("predict big.keras images")),
        _predict_big_input,
        Expect((0, 1)),
    ),
    # H. one CRC-damaged record in 24 is one skipped record
    Case(
        "H-train-skip-corrupt-counts-one",
        (
            *shlex.split(
                "train --model resnet18 --image-size 32 --num-classes 4 --batch-size 4 --epochs 1 "
                "--precision fp32 --no-progress --log-every 0 --seed 0 --eval none --no-export "
                "--skip-corrupt --data-dir data --log-dir run"
            ),
        ),
        _crc_records,
        Expect(0, named=None, check=_one_skipped),
        outputs=("run",),
        timeout=120,  # trains: a few seconds, 25 s on two busy cores
    ),
    # J. resume checks
    Case(
        "J-train-resume-every-checkpoint-invalid",
        (*shlex.split(f"train {F} --eval none --no-export --log-dir run --resume"),),
        _all_checkpoints_invalid,
        BAD_FILE,
        outputs=("run",),
    ),
    Case(
        "J-train-resume-renamed-class",
        ("train", *shlex.split(R), "--data-dir", "data", "--log-dir", "run", "--resume"),
        _renamed_class,
        Expect(2, named=None, check=_names_the_classes),
        outputs=("run",),
    ),
    Case(
        "J-train-resume-other-seed",
        (*shlex.split(f"train {F} --eval none --no-export --log-dir run --resume --seed 1"),),
        finished_run,
        # The seed only changes what comes next: a warning names both seeds, the resume goes on.
        Expect(0, named=None, check=lambda r, c: _says_seed(r)),
        outputs=("run",),
    ),
    # K. names, lying headers, every image skipped, duplicate tar members
    Case(
        "K-predict-names-forge-no-lines",
        tuple(shlex.split("predict model.keras images")),
        _predict_names,
        Expect(0, named=None, check=_no_forged_lines),
    ),
    Case(
        "K-predict-every-image-skipped",
        tuple(shlex.split("predict model.keras images --skip-corrupt --json")),
        _predict_all_corrupt,
        Expect(1, named=None),
    ),
    Case(
        "K-extract-duplicate-members",
        tuple(shlex.split("extract-imagenet out --train-tar train.tar --no-progress")),
        _duplicate_tar,
        Expect((0, 1), check=_both_kept_or_refused),
        outputs=("out",),
    ),
    # A. more folders with glob characters: the literal folder is used, look-alikes untouched
    Case(
        "A-train-log-dir-glob",
        (*shlex.split(f"train {F} --eval none --no-export"), "--log-dir", "run[12]"),
        _glob_runs,
        ACCEPTED,
        outputs=("run[12]",),
        timeout=120,  # trains: a few seconds, 25 s on two busy cores
    ),
    Case(
        "A-export-output-glob",
        ("export", "model.keras", "--output", "ex[12]"),
        _glob_exports,
        ACCEPTED,
        outputs=("ex[12]", "ex[12]_info.json"),
    ),
    Case(
        "A-predict-draw-glob",
        ("predict", "model.keras", "images", "--draw", "dr[12]"),
        _glob_drawings,
        ACCEPTED,
        outputs=("dr[12]",),
    ),
    Case(
        "A-build-coco-output-glob",
        (
            "build-coco",
            "co[12]",
            *shlex.split(
                "--annotations ann.json --images images --split val --workers 1 --no-progress"
            ),
        ),
        _glob_coco_out,
        ACCEPTED,
        outputs=("co[12]",),
    ),
    Case(
        "A-bench-input-data-dir-glob",
        (
            "bench-input",
            "--data-dir",
            "b[12]",
            *shlex.split(
                "--batch-size 2 --image-size 32 --warmup-batches 0 --batches 1 --rounds 1"
            ),
        ),
        _glob_bench,
        Expect((1, 2)),
    ),
    Case(
        "A-read_dataset_info-glob",
        ("x[12]",),
        _glob_data_dir,
        Expect(0, named=None, check=_prints_none),
        call="cvbench.data:read_dataset_info",
    ),
    # F. an output that is an input
    Case(
        "F-build-imagenet-output-is-raw",
        tuple(shlex.split(f"build-imagenet --raw-dir raw --output-dir raw --overwrite {BUILD}")),
        _raw_is_output,
        REFUSED,
    ),
    Case(
        "F-predict-draw-into-the-input-folder",
        tuple(shlex.split("predict model.keras images --draw images --overwrite")),
        _draw_into_inputs,
        REFUSED,
    ),
    Case(
        "F-export-output-is-the-model",
        tuple(shlex.split("export model.keras --format tflite --output model.keras --overwrite")),
        _export_over_model,
        REFUSED,
    ),
    Case(
        "F-build-coco-output-is-the-image-folder",
        tuple(
            shlex.split(
                "build-coco images --annotations ann.json --images images --split val --workers 1 "
                "--no-progress"
            )
        ),
        _coco_into_images,
        REFUSED,
    ),
    # K. names in a builder's summary
    Case(
        "K-build-imagenet-names-forge-no-lines",
        tuple(shlex.split(f"build-imagenet --raw-dir raw --output-dir out {BUILD}")),
        _builder_names,
        Expect(0, named=None, check=_no_forged_line),
        outputs=("out",),
    ),
)


def _says_seed(result) -> None:
    assert re.search(r"\bseed\b.*\b0\b.*\b1\b", result.err), result.err[-2000:]


# ------------------------------------------------------- the probe of 2026-12-05: section L
def _model_folder(case: Path, assets: Assets) -> dict[str, str]:
    """kdir.keras is a folder (holding a file), beside the valid inputs."""
    images_folder(case, assets)
    corpus.victim(case / "kdir.keras" / "inside.txt")
    return {"target": "kdir.keras"}


def _plain_model(case: Path, assets: Assets) -> dict[str, str]:
    """plain.keras: a Keras model file without cvbench's ModelInfo (no cvbench.json)."""
    import keras

    images_folder(case, assets)
    model = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3)]
    )
    model.save(case / "plain.keras")
    return {"target": "plain.keras"}


def _info_text(text: str) -> Callable[[Path, Assets], dict[str, str]]:
    def make(case: Path, assets: Assets) -> dict[str, str]:
        records(case, assets)
        (case / "data" / "dataset_info.json").write_text(text)
        return {"target": "data/dataset_info.json"}

    return make


def _missing_shard(case: Path, assets: Assets) -> dict[str, str]:
    """data/train-00000-of-00002 alone: shard 1 of 2 is missing (the set was 1 of 1)."""
    records(case, assets)
    shutil.rmtree(case / "data" / "idx", ignore_errors=True)
    (case / "data" / "train-00000-of-00001").rename(case / "data" / "train-00000-of-00002")
    return {"missing": "train-00001-of-00002"}


def _missing_validation_shard(case: Path, assets: Assets) -> dict[str, str]:
    """data/validation-00001-of-00002 alone (the training shard renamed): shard 0 of 2 is
    missing; run/ the finished run on these records."""
    records(case, assets)
    shutil.rmtree(case / "data" / "idx", ignore_errors=True)
    shard = case / "data" / "train-00000-of-00001"
    shard.rename(case / "data" / "validation-00001-of-00002")
    _copy(assets.records_run, case / "run")
    return {"missing": "validation-00000-of-00002"}


def _cut_in_the_middle(case: Path, assets: Assets) -> dict[str, str]:
    """data/train-00000-of-00001 with its middle third cut out."""
    records(case, assets)
    shutil.rmtree(case / "data" / "idx", ignore_errors=True)
    shard = case / "data" / "train-00000-of-00001"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 3] + data[2 * len(data) // 3 :])
    return {"target": "data/train-00000-of-00001"}


def _names_with_spaces(case: Path, assets: Assets) -> dict[str, str]:
    corpus.png(case / "my images" / "a b.png", 0)
    corpus.png(case / "my images" / os.fsdecode(b"b\xff.png"), 1)  # not UTF-8
    _copy(assets.cls_model, case / "my model.keras")
    return {}


def _lists_both(result, case: Path) -> None:
    # the byte that is not UTF-8 escaped on the line (`\\udcff` or `\\xff`)
    assert "my images/a b.png" in result.out, result.out
    assert r"my images/b\udcff.png" in result.out or r"my images/b\xff.png" in result.out


def _user_file(name: str) -> Callable[[Path, Assets], dict[str, str]]:
    def make(case: Path, assets: Assets) -> dict[str, str]:
        images_folder(case, assets)
        corpus.victim(case / name)
        return {"target": name}

    return make


def _user_folder_output(case: Path, assets: Assets) -> dict[str, str]:
    model_only(case, assets)
    corpus.victim(case / "mine" / "notes.txt")
    return {"target": "mine"}


def _finished_run_log_dir_file(case: Path, assets: Assets) -> dict[str, str]:
    corpus.victim(case / "afile")
    return {"target": "afile"}


#: The probe of 2026-12-05 (docs/reliability.md, section L): each case once, its outcome.
PROBE: tuple[Case, ...] = (
    Case("L-predict-model-is-a-folder", ("predict", "{target}", "images"), _model_folder,
         BAD_FILE),
    Case("L-export-model-is-a-folder", ("export", "{target}", "--output", "out"),
         _model_folder, BAD_FILE, outputs=("out", "out_info.json")),
    Case("L-eval-checkpoint-is-a-keras-folder",
         ("eval", *shlex.split(E), "--checkpoint", "{target}"), _model_folder, BAD_FILE),
    # a .keras without ModelInfo: a bad input file (it was exit 2, a bad argument)
    Case("L-predict-model-without-info", ("predict", "{target}", "images"), _plain_model,
         BAD_FILE),
    Case("L-export-model-without-info", ("export", "{target}", "--output", "out"),
         _plain_model, BAD_FILE, outputs=("out", "out_info.json")),
    Case("L-train-dataset-info-not-json",
         ("train", *shlex.split(R), "--data-dir", "data"), _info_text('{"classes": ['),
         BAD_FILE),
    Case("L-train-dataset-info-a-list", ("train", *shlex.split(R), "--data-dir", "data"),
         _info_text("[1, 2]"), BAD_FILE),
    # an incomplete shard set: refused naming the first missing shard (it trained on less)
    Case("L-train-missing-shard", ("train", *shlex.split(R), "--data-dir", "data"),
         _missing_shard, Expect(1, named="missing")),
    Case("L-eval-missing-shard",
         ("eval", "--checkpoint", "run", "--model", "resnet18", "--image-size", "32",
          "--data-dir", "data", "--precision", "fp32"),
         _missing_validation_shard, Expect(1, named="missing")),
    Case("L-train-shard-cut-in-the-middle", ("train", *shlex.split(R), "--data-dir", "data"),
         _cut_in_the_middle, BAD_FILE),
    # 8 training images, a global batch of 64: refused naming the folder
    Case("L-train-batch-larger-than-the-split",
         ("train", *shlex.split(R.replace("--batch-size 2", "--batch-size 64")), "--data-dir",
          "data"), records, Expect(2, named="data")),
    Case("L-predict-names-with-spaces-and-no-utf8",
         ("predict", "my model.keras", "my images"), _names_with_spaces,
         Expect(0, named=None, check=_lists_both)),
    Case("L-train-log-dir-is-a-file",
         (*shlex.split(f"train {F} --eval none --no-export"), "--log-dir", "{target}"),
         _finished_run_log_dir_file, BAD_FILE),
    Case("L-predict-draw-is-a-users-file", ("predict", "model.keras", "images", "--draw",
         "{target}"), _user_file("notes.txt"), Expect((1, 2))),
    Case("L-eval-json-is-a-folder",
         ("eval", *shlex.split(E), "--checkpoint", "run", "--json", "{target}"),
         lambda c, a: {**finished_run(c, a), **_user_folder_output(c, a)}, Expect((1, 2))),
    Case("L-export-tflite-output-is-a-users-folder",
         ("export", "model.keras", "--format", "tflite", "--output", "{target}", "--overwrite"),
         _user_folder_output, REFUSED),
)  # fmt: skip
