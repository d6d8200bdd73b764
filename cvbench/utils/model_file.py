"""`.keras` model files that carry what inference needs: `ModelInfo`.

A cvbench model file is a Keras 3 `.keras` archive (loadable with plain
`keras.saving.load_model(path)` in a process that never imports cvbench, as long as the model
holds built-in Keras layers only; see `cvbench.utils.plain_keras`) plus one extra archive entry,
`cvbench.json`, that Keras ignores: the `ModelInfo` of the model (task, class names, input
size, how images are resized, the box format and post-processing of a detector).

Inputs of every model cvbench writes for users: float32 `(B, H, W, 3)` RGB in `[0, 255]`,
already resized to `ModelInfo.image_size` by the rule `ModelInfo.resize`; the model
normalizes them itself. Outputs: classifiers `(B, num_classes)` logits; SSDs
`{"boxes": (B, N, 4) box codes, "classes": (B, N, C) logits}` (decode and NMS with
`ModelInfo.detection`, see `cvbench.detection.postprocess`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The archive entry holding the `ModelInfo`.
INFO_ENTRY = "cvbench.json"
#: Version of the `cvbench.json` layout.
INFO_FORMAT = 1
TASKS = ("classification", "detection")
#: How an image is brought to the model's input size:
#: "center_crop": resize the shorter side to `round(side / crop_fraction)` (aspect kept),
#: then crop the center `image_size` (ImageNet evaluation); "stretch": resize to
#: `image_size` ignoring the aspect ratio (SSD; boxes then scale back per axis).
RESIZE_RULES = ("center_crop", "stretch")


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What inference needs besides the weights.

    Args:
        task: "classification" or "detection".
        class_names: the name of each class index, `class_names[i]` for output `i`.
        image_size: `(height, width)` of the model's input.
        resize: how images are brought to `image_size` (see `RESIZE_RULES`).
        crop_fraction: for "center_crop", the fraction of the resized shorter side kept
            (0.875: 224 of 256).
        detection: for detectors, `{"anchors": multiscale_anchors kwargs (min_level,
            max_level, anchor_scale, aspect_ratios, scales_per_octave), "scales": box-coder
            scales, "postprocess": postprocess kwargs (iou_threshold, score_threshold,
            max_per_class, max_total)}`; decoded boxes are `[ymin, xmin, ymax, xmax]`
            normalized to `[0, 1]` of the resized input.
        model: the cvbench model name it was built as (e.g. "resnet50", "ssd320"), or None.

    Example:
        >>> info = ModelInfo(task="classification", class_names=("cat", "dog"),
        ...                  image_size=(224, 224))
        >>> ModelInfo.from_dict(info.to_dict()) == info
        True
    """

    task: str
    class_names: tuple[str, ...]
    image_size: tuple[int, int]
    resize: str = "center_crop"
    crop_fraction: float = 0.875
    detection: Mapping[str, Any] | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}; got {self.task!r}")
        names = tuple(self.class_names)
        if not names or not all(isinstance(n, str) for n in names):
            raise ValueError(f"class_names must be a non-empty sequence of str; got {names!r}")
        object.__setattr__(self, "class_names", names)
        size = tuple(self.image_size)
        if len(size) != 2 or not all(isinstance(s, int) and s >= 1 for s in size):
            raise ValueError(f"image_size must be (height, width) ints >= 1; got {size!r}")
        object.__setattr__(self, "image_size", size)
        if self.resize not in RESIZE_RULES:
            raise ValueError(f"resize must be one of {RESIZE_RULES}; got {self.resize!r}")
        if not 0.0 < float(self.crop_fraction) <= 1.0:
            raise ValueError(f"crop_fraction must be in (0, 1]; got {self.crop_fraction!r}")
        if (self.task == "detection") != (self.detection is not None):
            raise ValueError("detection settings are required for, and only for, detectors")
        if self.detection is not None:
            missing = {"anchors", "scales", "postprocess"} - set(self.detection)
            if missing:
                raise ValueError(f"detection settings lack {sorted(missing)}")
            object.__setattr__(self, "detection", json.loads(json.dumps(dict(self.detection))))

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["class_names"] = list(self.class_names)
        out["image_size"] = list(self.image_size)
        return {"format": INFO_FORMAT, **out}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelInfo:
        data = dict(data)
        version = data.pop("format", INFO_FORMAT)
        if version != INFO_FORMAT:
            raise ValueError(f"unknown {INFO_ENTRY} format {version!r} (this cvbench reads 1)")
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def save_model(model: Any, path: str | os.PathLike, info: ModelInfo | None = None) -> Path:
    """Writes `model` as a `.keras` file with `info` inside, atomically (a temporary file in
    the same directory renamed into place; the user's umask applies).

    The model is saved as given: pass a model of built-in layers
    (`cvbench.utils.plain_keras.to_plain_keras`) for a file that plain Keras loads.

    Args:
        model: a Keras model.
        path: the destination, ending in `.keras`.
        info: what inference needs, stored as the archive entry `cvbench.json`.

    Returns:
        The path written.

    Raises:
        ValueError: for a path not ending in `.keras`.
    """
    path = Path(path)
    if path.suffix != ".keras":
        raise ValueError(f"a model file must end in .keras; got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".keras", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        model.save(tmp)
        if info is not None:
            with zipfile.ZipFile(tmp, "a") as archive:
                archive.writestr(INFO_ENTRY, json.dumps(info.to_dict(), indent=1))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_model_info(path: str | os.PathLike) -> ModelInfo | None:
    """The `ModelInfo` stored in a `.keras` file, or None when it has none.

    Raises:
        ValueError: for a file that is not a `.keras` archive, naming it.
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            if INFO_ENTRY not in archive.namelist():
                return None
            return ModelInfo.from_dict(json.loads(archive.read(INFO_ENTRY)))
    except zipfile.BadZipFile as err:
        raise ValueError(f"{path} is not a .keras model file ({err})") from None


def load_model(path: str | os.PathLike, *, compile: bool = False) -> tuple[Any, ModelInfo | None]:
    """Loads a `.keras` file (safe mode) and its `ModelInfo`.

    Returns:
        `(model, info)`; `info` is None for a file without `cvbench.json`.

    Raises:
        FileNotFoundError: for a missing file.
        ValueError: for a file that is not a `.keras` archive.
    """
    import keras

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model file {path}")
    info = read_model_info(path)
    return keras.saving.load_model(path, compile=compile, safe_mode=True), info


def class_names_or_default(info: ModelInfo | None, num_classes: int) -> Sequence[str]:
    """`info.class_names`, or `("0", "1", ...)` for a model without info."""
    if info is not None:
        return info.class_names
    return tuple(str(i) for i in range(num_classes))
