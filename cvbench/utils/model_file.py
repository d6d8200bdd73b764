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

A model file is a user's input, so it is checked before anything is read or allocated from
it: a file that is not a zip archive, lacks `config.json`, holds an archive member larger than
its limit (`cvbench.json` and `metadata.json` at most `MAX_JSON_BYTES`, `config.json` at most
`MAX_CONFIG_BYTES`, any other member at most `MAX_EXPANSION` times the bytes it stores once
over `MAX_CONFIG_BYTES`; declared sizes, read from the zip directory), members that together
declare more than `MAX_EXPANSION` times the file's size once over `MAX_CONFIG_BYTES` (forty
members of 60 MiB each under the per-member limits, stored in 2.4 MB, would make Keras extract
2.4 GB) or that overlap, a `cvbench.json` that is not a JSON object with the fields of
`ModelInfo` (or nested deeper than `cvbench.utils.files.MAX_JSON_DEPTH`), an `image_size` over
`MAX_INPUT_SIDE` pixels per side (`max_input_side=` raises it), or a model whose input size
or class count differs from its `ModelInfo` raises `cvbench.utils.errors.BadFileError` naming
the file and what is wrong. A path that is not a regular file (a FIFO, a device) is refused
before a byte is read.

`.npz` weight archives (training checkpoints, torchvision state dicts given as `--weights`)
get one check, `check_npz`, before any array is read: each member lies inside the file and
declares no more than deflate can give, the members do not overlap and together declare at most
`MAX_EXPANSION` times the file (once over `MAX_CONFIG_BYTES`), and each `.npy` header's shape
and dtype come to exactly the bytes its member holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import re
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from cvbench.utils.errors import BadFileError, check_utf8, naming
from cvbench.utils.files import (
    check_regular,
    loads_json,
    open_input,
    remove_dead_staging,
    staging_folder,
)

#: The archive entry holding the `ModelInfo`.
INFO_ENTRY = "cvbench.json"
#: Version of the `cvbench.json` layout.
INFO_FORMAT = 1
TASKS = ("classification", "detection")
#: How an image is brought to the model's input size:
#: "center_crop": resize the shorter side to `round(side / crop_fraction)` (aspect kept),
#: then crop the center `image_size` (ImageNet evaluation); "stretch": resize to
#: `image_size` ignoring the aspect ratio (SSD; boxes then scale back per axis).
RESIZE_RULES = ("center_crop", "stretch", "crop_then_resize")
#: How the resize of `RESIZE_RULES` interpolates: "bilinear" is `tf.image.resize`'s (half-pixel
#: centres, no antialiasing); "bilinear_tf1" TF1's (no half-pixel centres, nvcnn's Inception V3).
INTERPOLATIONS = ("bilinear", "bilinear_tf1")
#: The JPEG decoder's IDCT (`tf.io.decode_jpeg`'s `dct_method`): "" (TensorFlow's default, its
#: "INTEGER_FAST"), "INTEGER_FAST", "INTEGER_ACCURATE".
DCT_METHODS = ("", "INTEGER_FAST", "INTEGER_ACCURATE")
#: The Keras model description inside a `.keras` archive.
CONFIG_ENTRY = "config.json"
#: Largest `cvbench.json` / `metadata.json` accepted, in bytes (declared, uncompressed).
MAX_JSON_BYTES = 1 << 20
#: Largest `config.json` accepted, in bytes (a ResNet-152's is about 0.3 MiB).
MAX_CONFIG_BYTES = 64 << 20
#: Largest ratio of declared to stored bytes of another member (the weights) once it is over
#: `MAX_CONFIG_BYTES` (Keras stores its members uncompressed, ratio 1), and of all members'
#: declared bytes together to the archive's size.
MAX_EXPANSION = 100
#: The most bytes deflate can give per compressed byte (its 258-byte matches: 1032:1).
DEFLATE_MAX_RATIO = 1032
#: Largest model input side (`ModelInfo.image_size`) a model file may declare, in pixels.
MAX_INPUT_SIDE = 8192
_JSON_LIMITS = {INFO_ENTRY: MAX_JSON_BYTES, "metadata.json": MAX_JSON_BYTES}


#: The resize rules that are evaluation crops (the values of `ImagePreprocessing.eval_crop`,
#: the same names as `ModelInfo.resize`: one vocabulary for pipelines, recipes and model files).
EVAL_CROP_RULES = ("center_crop", "crop_then_resize")
#: Former spellings of a resize rule, accepted only where settings come in from outside
#: (`ImagePreprocessing(eval_crop=...)`, recipe overrides, the run settings of checkpoints
#: and run logs written before) and read as the rule they name: "resize_then_crop" was the
#: training pipeline's name of "center_crop". Deprecated: write the rule's own name.
DEPRECATED_RESIZE_SPELLINGS = {"resize_then_crop": "center_crop"}
#: Each evaluation-crop rule by itself (kept for code that imported it when the pipeline
#: spelled "center_crop" "resize_then_crop"; the names are one vocabulary now).
EVAL_CROP_OF_RULE = {rule: rule for rule in EVAL_CROP_RULES}
#: Scores a detector keeps for COCO evaluation: everything above 1e-8 (SSD320 v1.2's
#: post-processing; low-scored boxes still add to the average precision).
COCO_SCORE_THRESHOLD = 1e-8
#: Scores worth showing to a person (`cvbench.inference.detect`, `cvbench predict`, serving
#: exports by default): above 0.5.
DISPLAY_SCORE_THRESHOLD = 0.5
#: The keyword arguments of `cvbench.detection.anchors.multiscale_anchors` a model file may
#: record (`DetectionSettings.anchors`; the ones left out take SSD320 v1.2's values).
ANCHOR_KEYS = ("min_level", "max_level", "anchor_scale", "aspect_ratios", "scales_per_octave")
#: The fields of `DetectionSettings` (and of its JSON object).
DETECTION_KEYS = ("anchors", "scales", "postprocess")
#: The dataset attribute that carries a pipeline's input contract to the `Trainer`
#: (`attach_inputs` / `attached_inputs` are its only readers and writers).
DATASET_ATTRIBUTE = "cvbench_inputs"


def _as_tuple(value: Any) -> tuple:
    """A list or tuple as a tuple; anything else (a number, a string) as `(value,)`, which
    the field's check then refuses, naming the value."""
    return tuple(value) if isinstance(value, list | tuple) else (value,)


def check_score_threshold(value: Any) -> float:
    """A detector's score threshold (`detect`, `cvbench predict` / `export`, serving exports):
    detections scoring above it are kept, so it is a number in `[0, 1)` (1 or more would keep
    nothing; NaN compares false with every score).

    Example:
        >>> check_score_threshold(0.3)
        0.3
        >>> check_score_threshold(2)
        Traceback (most recent call last):
        ...
        ValueError: score_threshold must be in [0, 1); got 2
    """
    number = isinstance(value, int | float | np.floating) and not isinstance(value, bool)
    if not (number and 0.0 <= value < 1.0):
        raise ValueError(f"score_threshold must be in [0, 1); got {value!r}")
    return float(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool; got {value!r}")


def _rgb(name: str, value: Any, *, positive: bool) -> tuple[float, float, float] | None:
    """`value` as 3 floats (None stays None), or a `ValueError` naming `name`."""
    if value is None:
        return None
    value = _as_tuple(value)
    if len(value) != 3 or not all(_is_number(v) for v in value):
        raise ValueError(f"{name} must be 3 finite numbers (RGB); got {value!r}")
    if positive and not all(v > 0 for v in value):
        raise ValueError(f"{name} must be > 0 per channel; got {value!r}")
    return tuple(float(v) for v in value)


def resize_rule(value: Any, *, name: str = "resize", rules: Sequence[str] = RESIZE_RULES) -> str:
    """`value` as a rule of `rules`: a deprecated spelling (`DEPRECATED_RESIZE_SPELLINGS`)
    read as the rule it names, so that settings written before keep their meaning.

    Raises:
        ValueError: for any other value, naming `name`, the value and the known rules.

    Example:
        >>> resize_rule("resize_then_crop"), resize_rule("stretch")
        ('center_crop', 'stretch')
    """
    rule = DEPRECATED_RESIZE_SPELLINGS.get(value, value) if isinstance(value, str) else value
    if rule not in rules:
        raise ValueError(f"{name} must be one of {tuple(rules)}; got {value!r}")
    return rule


def resize_rule_of_eval_crop(eval_crop: str) -> str:
    """The `ModelInfo.resize` rule of a pipeline's `ImagePreprocessing.eval_crop`: the same
    name (`resize_rule` with the evaluation crops; a deprecated spelling mapped).

    Raises:
        ValueError: for a value that is no evaluation crop, naming the known ones.

    Example:
        >>> resize_rule_of_eval_crop("resize_then_crop")
        'center_crop'
    """
    return resize_rule(eval_crop, name="eval_crop", rules=EVAL_CROP_RULES)


def current_setting(key: str, value: Any) -> Any:
    """A stored setting (`key` as dotted names, e.g. `settings.knobs.preprocessing.eval_crop`
    of a checkpoint's plan) in today's vocabulary: a resize rule's deprecated spelling read as
    the rule (fields named `eval_crop` or `resize`); anything else as it is. What a resume or
    evaluation compares a run written before with, so that it still agrees.

    Example:
        >>> current_setting("knobs.preprocessing.eval_crop", "resize_then_crop")
        'center_crop'
        >>> current_setting("model", "resize_then_crop")
        'resize_then_crop'
    """
    field = key.rsplit(".", 1)[-1]
    if field in ("eval_crop", "resize") and isinstance(value, str):
        return DEPRECATED_RESIZE_SPELLINGS.get(value, value)
    return value


@dataclasses.dataclass(frozen=True)
class InputSettings:
    """The input part of the model contract: how an image of any size becomes the model's
    `[0, 255]` RGB input, and what the model does to it itself. The fields are those of
    `ModelInfo` of the same names (see there); each is checked here, once.

    Example:
        >>> s = InputSettings(image_size=[224, 224], resize="crop_then_resize")
        >>> s.image_size, s.eval_crop
        ((224, 224), 'crop_then_resize')
    """

    image_size: tuple[int, int]
    resize: str = "center_crop"
    crop_fraction: float = 0.875
    interpolation: str = "bilinear"
    quantize_uint8: bool = False
    dct_method: str = ""
    fancy_upscaling: bool = True
    input_mean: tuple[float, float, float] | None = None
    input_std: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        size = _as_tuple(self.image_size)
        if len(size) != 2 or not all(isinstance(s, int) and s >= 1 for s in size):
            raise ValueError(f"image_size must be (height, width) ints >= 1; got {size!r}")
        object.__setattr__(self, "image_size", size)
        _check_choice("resize", self.resize, RESIZE_RULES)
        _check_choice("interpolation", self.interpolation, INTERPOLATIONS)
        _check_bool("quantize_uint8", self.quantize_uint8)
        _check_choice("dct_method", self.dct_method, DCT_METHODS)
        _check_bool("fancy_upscaling", self.fancy_upscaling)
        object.__setattr__(self, "input_mean", _rgb("input_mean", self.input_mean, positive=False))
        object.__setattr__(self, "input_std", _rgb("input_std", self.input_std, positive=True))
        if not 0.0 < float(self.crop_fraction) <= 1.0:
            raise ValueError(f"crop_fraction must be in (0, 1]; got {self.crop_fraction!r}")

    @property
    def eval_crop(self) -> str:
        """This rule as an `ImagePreprocessing.eval_crop` (the same name).

        Raises:
            ValueError: for "stretch", which is no evaluation crop.
        """
        if self.resize not in EVAL_CROP_RULES:
            raise ValueError(
                f"resize {self.resize!r} is no evaluation crop (known: {EVAL_CROP_RULES})"
            )
        return self.resize

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values (lists for tuples)."""
        out = dataclasses.asdict(self)
        for name in ("image_size", "input_mean", "input_std"):
            if out[name] is not None:
                out[name] = list(out[name])
        return out


#: The fields of `ModelInfo` that make its `InputSettings`.
INPUT_FIELDS = tuple(f.name for f in dataclasses.fields(InputSettings))


@dataclasses.dataclass(frozen=True)
class NmsSettings:
    """How a detector's decoded boxes are cut down: per class, the boxes scoring above
    `score_threshold`, greedy NMS at `iou_threshold`, at most `max_per_class`; then the
    `max_total` best (`cvbench.detection.postprocess`). The defaults are SSD320 v1.2's.

    Example:
        >>> NmsSettings(max_total=5).to_dict()["max_total"]
        5
    """

    iou_threshold: float = 0.6
    score_threshold: float = COCO_SCORE_THRESHOLD
    max_per_class: int = 100
    max_total: int = 100

    def __post_init__(self) -> None:
        for name in ("iou_threshold", "score_threshold"):
            value = getattr(self, name)
            if not _is_number(value):
                raise ValueError(f"{name} must be a finite number; got {value!r}")
            object.__setattr__(self, name, float(value))
        for name in ("max_per_class", "max_total"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1; got {value!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NmsSettings:
        """From the JSON object; names outside the fields are refused, naming them."""
        if not isinstance(data, Mapping):
            raise ValueError(f"post-processing settings must be an object; got {data!r}")
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown post-processing settings {sorted(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, eq=False)
class DetectionSettings(Mapping):
    """The detection part of the model contract: how an SSD's outputs become boxes.

    Args:
        anchors: `multiscale_anchors` keyword arguments (`ANCHOR_KEYS`; those left out take
            SSD320 v1.2's values).
        scales: the box coder's `(y, x, h, w)` scales.
        postprocess: the NMS settings (`NmsSettings`, or its JSON object).

    Decoded boxes are `[ymin, xmin, ymax, xmax]` normalized to `[0, 1]` of the resized input
    (`cvbench.detection.predict.Decoder`). It is also a read-only mapping of its JSON form
    (`settings["postprocess"]["max_total"]`, `dict(settings)`, equal to a dict of the same
    JSON), which `ModelInfo.detection` was before it was typed.

    Example:
        >>> s = DetectionSettings.from_dict({"anchors": {}, "scales": [10, 10, 5, 5],
        ...                                  "postprocess": {"max_total": 5}})
        >>> s.postprocess.max_total, s["scales"], s.task
        (5, [10.0, 10.0, 5.0, 5.0], 'detection')
    """

    #: The task of a model whose `ModelInfo` holds this part.
    task: ClassVar[str] = "detection"

    anchors: Mapping[str, Any]
    scales: tuple[float, float, float, float]
    postprocess: NmsSettings = NmsSettings()

    def __post_init__(self) -> None:
        if not isinstance(self.anchors, Mapping):
            raise ValueError(f"anchors must be an object of {ANCHOR_KEYS}; got {self.anchors!r}")
        unknown = set(self.anchors) - set(ANCHOR_KEYS)
        if unknown:
            raise ValueError(f"unknown anchor settings {sorted(unknown)} (known: {ANCHOR_KEYS})")
        object.__setattr__(self, "anchors", json.loads(json.dumps(dict(self.anchors))))
        scales = _as_tuple(self.scales)
        if len(scales) != 4 or not all(_is_number(s) and s > 0 for s in scales):
            raise ValueError(f"scales must be 4 numbers > 0 (y, x, h, w); got {scales!r}")
        object.__setattr__(self, "scales", tuple(float(s) for s in scales))
        if not isinstance(self.postprocess, NmsSettings):
            object.__setattr__(self, "postprocess", NmsSettings.from_dict(self.postprocess))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DetectionSettings:
        """From the JSON object (or a `DetectionSettings`, returned as it is).

        Raises:
            ValueError: for a missing or unknown field, naming it, or a bad value.
        """
        if isinstance(data, DetectionSettings):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"detection settings must be an object; got {data!r}")
        missing = set(DETECTION_KEYS) - set(data)
        if missing:
            raise ValueError(f"detection settings lack {sorted(missing)}")
        unknown = set(data) - set(DETECTION_KEYS)
        if unknown:
            raise ValueError(f"unknown detection settings {sorted(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: fresh lists and dicts, the caller's to change."""
        return {
            "anchors": json.loads(json.dumps(self.anchors)),
            "scales": list(self.scales),
            "postprocess": self.postprocess.to_dict(),
        }

    def class_count(self, outputs: Any, *, where: str) -> Any:
        """The class count of an SSD's outputs `{"boxes", "classes": (B, N, C)}` (None when
        not fixed), or `BadFileError` naming `where` for other outputs."""
        if not isinstance(outputs, dict) or "classes" not in outputs or "boxes" not in outputs:
            raise BadFileError(
                f'{where} says detection, but the model does not output {{"boxes", "classes"}}'
            )
        return outputs["classes"].shape[-1]

    # the read-only mapping of the JSON form
    def __getitem__(self, key: str) -> Any:
        if key not in DETECTION_KEYS:
            raise KeyError(key)
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(DETECTION_KEYS)

    def __len__(self) -> int:
        return len(DETECTION_KEYS)


class _Logits:
    """The head of a `ModelInfo` without detection settings: a classifier's logits."""

    task = "classification"

    @staticmethod
    def class_count(outputs: Any, *, where: str) -> Any:
        """The width of `(B, C)` logits (None when not fixed), or `BadFileError` naming
        `where` for a model with several outputs."""
        if isinstance(outputs, dict | list | tuple):
            raise BadFileError(f"{where} says classification, but the model has several outputs")
        return getattr(outputs, "shape", (None,))[-1]


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What inference needs besides the weights: the model contract.

    Built from flat keywords (below; `ModelInfo.of` builds it from its typed parts), it holds
    two typed parts, built and checked once here and read by evaluation, inference, serving
    and export: `inputs` (`InputSettings`: the fields from `image_size` to `input_std`) and,
    for detectors, `detection` (`DetectionSettings`). The flat fields stay readable
    (`info.resize` is `info.inputs.resize`) and `dataclasses.replace(info, resize=...)` builds
    the parts again.

    Args:
        task: "classification" or "detection".
        class_names: the name of each class index, `class_names[i]` for output `i`.
        image_size: `(height, width)` of the model's input.
        resize: how images are brought to `image_size` (see `RESIZE_RULES`).
        crop_fraction: for "center_crop", the fraction of the resized shorter side kept
            (0.875: 224 of 256); for "crop_then_resize", the central fraction of each side
            kept before resizing.
        interpolation: the resize's interpolation (see `INTERPOLATIONS`).
        quantize_uint8: the resized image clipped to `[0, 255]` and truncated to integers
            before the model (nvcnn's uint8 images; `ImagePreprocessing.quantize_uint8`).
        dct_method: how the training pipeline decoded JPEG files (`DCT_METHODS`;
            `ImagePreprocessing.dct_method`); inference decodes them alike.
        fancy_upscaling: the pipeline's JPEG decoder interpolated subsampled chroma (True,
            TensorFlow's default) or replicated it (False, DLE's and nvcnn's).
        detection: for detectors (and only them), the `DetectionSettings` or their JSON
            object `{"anchors": multiscale_anchors kwargs, "scales": box-coder scales,
            "postprocess": NMS settings}`; decoded boxes are `[ymin, xmin, ymax, xmax]`
            normalized to `[0, 1]` of the resized input.
        model: the cvbench model name it was built as (e.g. "resnet50", "ssd320"), or None.
        input_mean, input_std: the normalization `(x - mean) / std` per RGB channel that the
            model file applies itself to its `[0, 255]` input (its first layer), as the
            weights were trained: the ImageNet mean/std of cvbench's recipes, caffe's means
            and std 1 for keras.applications' ResNet weights, 127.5 and 127.5 (`[-1, 1]`) for
            Inception V3's; None where not recorded (older files, detectors). A statement of
            the contract: callers feed `[0, 255]` RGB and never normalize again.

    Example:
        >>> info = ModelInfo(task="classification", class_names=("cat", "dog"),
        ...                  image_size=(224, 224))
        >>> ModelInfo.from_dict(info.to_dict()) == info
        True
        >>> info.inputs.resize, info.head.task
        ('center_crop', 'classification')
    """

    task: str
    class_names: tuple[str, ...]
    image_size: tuple[int, int]
    resize: str = "center_crop"
    crop_fraction: float = 0.875
    detection: DetectionSettings | None = None
    model: str | None = None
    interpolation: str = "bilinear"
    quantize_uint8: bool = False
    dct_method: str = ""
    fancy_upscaling: bool = True
    input_mean: tuple[float, float, float] | None = None
    input_std: tuple[float, float, float] | None = None
    #: The input part, built from the flat fields above.
    inputs: InputSettings = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_choice("task", self.task, TASKS)
        names = _as_tuple(self.class_names)
        if not names or not all(isinstance(n, str) for n in names):
            raise ValueError(f"class_names must be a non-empty sequence of str; got {names!r}")
        for name in names:  # an exported model holds them as UTF-8 strings
            check_utf8(name, what="class name")
        object.__setattr__(self, "class_names", names)
        inputs = InputSettings(**{name: getattr(self, name) for name in INPUT_FIELDS})
        object.__setattr__(self, "inputs", inputs)
        for name in INPUT_FIELDS:  # the checked values (tuples, floats)
            object.__setattr__(self, name, getattr(inputs, name))
        if self.detection is not None:
            object.__setattr__(self, "detection", DetectionSettings.from_dict(self.detection))
        if self.head.task != self.task:
            raise ValueError("detection settings are required for, and only for, detectors")

    @classmethod
    def of(
        cls,
        *,
        task: str,
        class_names: Sequence[str],
        inputs: InputSettings,
        detection: DetectionSettings | None = None,
        model: str | None = None,
    ) -> ModelInfo:
        """The `ModelInfo` of its typed parts (what the tasks build from their recipes).

        Example:
            >>> ModelInfo.of(task="classification", class_names=["a"],
            ...              inputs=InputSettings(image_size=(8, 8))).image_size
            (8, 8)
        """
        flat = {name: getattr(inputs, name) for name in INPUT_FIELDS}
        return cls(task=task, class_names=class_names, detection=detection, model=model, **flat)

    @property
    def head(self) -> DetectionSettings | _Logits:
        """What the model outputs: the detection part, or a classifier's logits (each knows
        its `task` and how to count the classes of a model's outputs)."""
        return _LOGITS if self.detection is None else self.detection

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        out.update(self.inputs.to_dict())
        out["class_names"] = list(self.class_names)
        out["detection"] = None if self.detection is None else self.detection.to_dict()
        return {"format": INFO_FORMAT, **out}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelInfo:
        data = dict(data)
        version = data.pop("format", INFO_FORMAT)
        if version != INFO_FORMAT:
            raise ValueError(f"unknown {INFO_ENTRY} format {version!r} (this cvbench reads 1)")
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        return cls(**{k: v for k, v in data.items() if k in known})


_LOGITS = _Logits()


@runtime_checkable
class InputContract(Protocol):
    """What a pipeline hands to the `Trainer` with its dataset (`attach_inputs`): the
    `ModelInfo` of a model trained on it, and the model as users get it (its
    normalization put in front). `cvbench.data.read.model_inputs.ClassifierInputs` is one."""

    def model_info_for(self, model: Any) -> ModelInfo: ...

    def user_model(self, model: Any) -> Any: ...


def attach_inputs(dataset: Any, inputs: InputContract | None) -> Any:
    """`dataset` carrying the input contract `inputs` (returned as it is for None): the one
    hand-over from a reader (`imagenet_dataset`, `tfds_dataset`, grain) to the `Trainer`,
    which reads it back with `attached_inputs`. The contract rides on the dataset object
    (its attribute `DATASET_ATTRIBUTE`), so a dataset derived from it (`.map`, `.take`)
    carries none: its preprocessing is the caller's to state."""
    if inputs is not None:
        setattr(dataset, DATASET_ATTRIBUTE, inputs)
    return dataset


def attached_inputs(dataset: Any) -> InputContract | None:
    """The input contract `attach_inputs` gave `dataset`, or None.

    Example:
        >>> class Data: ...
        >>> attached_inputs(Data()) is None
        True
    """
    return getattr(dataset, DATASET_ATTRIBUTE, None)


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
        ValueError: for a path not ending in `.keras`, or an `info` that contradicts the
            model (`check_model_matches_info`: its input size, its class count); nothing is
            written then.
    """
    path = Path(path)
    if path.suffix != ".keras":
        raise ValueError(f"a model file must end in .keras; got {str(path)!r}")
    if info is not None:  # a file every reader would refuse is never written
        check_model_matches_info(model, info)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".keras", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with naming(path), keras_temporaries(path, "write"):  # a full disk here: `path`
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


#: What the model file beside an info file takes and returns (`write_info_file`'s
#: "contract"): a `.keras` file (and Keras' own SavedModel of it), or a serving export.
CONTRACTS = {
    "model": "float32 (B, H, W, 3) RGB in [0, 255], resized to image_size by the resize rule "
    "(the model normalizes) -> classifier logits (B, num_classes), or SSD box codes and "
    "class logits per anchor",
    "serving": "uint8 (B, H, W, 3) RGB images of any size (resized in the graph) -> "
    "probabilities, top_k_indices, top_k_scores, top_k_class_names, or SSD "
    "detection_boxes, detection_scores, detection_classes, detection_class_names, "
    "num_detections",
}
_MODEL_SUFFIXES = {".keras": "", ".tflite": "_tflite"}


def info_file_path(model_path: str | os.PathLike) -> Path:
    """The info file beside an exported model, in its folder: `<stem>_info.json` for a
    `.keras` file (`model.keras` -> `model_info.json`), `<stem>_tflite_info.json` for a
    `.tflite` file (so that `ssd.tflite` and a SavedModel folder `ssd` beside it each have
    their own), `<name>_info.json` for a SavedModel folder.

    Example:
        >>> [info_file_path(p).as_posix() for p in ("run/export/model.keras", "ssd.tflite",
        ...                                         "served/classifier")]
        ['run/export/model_info.json', 'ssd_tflite_info.json', 'served/classifier_info.json']
    """
    path = Path(model_path)
    name = path.name
    for suffix, tag in _MODEL_SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)] + tag
            break
    return path.with_name(f"{name}_info.json")


def write_info_file(
    info: ModelInfo, model_path: str | os.PathLike, *, contract: str = "model"
) -> Path:
    """Writes `info` as JSON beside the exported model at `model_path` (`info_file_path`),
    atomically, and records it (`cvbench.utils.files.recording`), so that plain-Keras and
    serving users read the class names and the resize rule without unzipping the model:
    the fields of `ModelInfo.to_dict()`, plus `"model_file"` (the model's name in that
    folder) and `"contract"` (`CONTRACTS[contract]`: what the model takes and returns).
    `read_model_info` reads the file back.

    Returns:
        The info file's path.
    """
    from cvbench.utils.files import recording
    from cvbench.utils.io import write_json_atomic

    if contract not in CONTRACTS:
        raise ValueError(f"contract must be one of {tuple(CONTRACTS)}; got {contract!r}")
    path = info_file_path(model_path)
    data = {**info.to_dict(), "model_file": Path(model_path).name,
            "contract": CONTRACTS[contract]}  # fmt: skip
    with recording(path):
        write_json_atomic(path, data)
    return path


def _check_members(path: Path, archive: zipfile.ZipFile, file_size: int) -> None:
    members = {m.filename: m for m in archive.infolist()}
    if CONFIG_ENTRY not in members:
        raise BadFileError(f"{path} is not a .keras model file (no {CONFIG_ENTRY} in it)")
    for name, member in members.items():
        limit = _JSON_LIMITS.get(name, MAX_CONFIG_BYTES if name == CONFIG_ENTRY else None)
        if limit is not None and member.file_size > limit:
            raise BadFileError(
                f"{path}: archive member {name} declares {member.file_size} bytes, over the "
                f"limit of {limit} bytes"
            )
        stored = max(member.compress_size, 1)
        if member.file_size > max(MAX_CONFIG_BYTES, MAX_EXPANSION * stored):
            raise BadFileError(
                f"{path}: archive member {name} declares {member.file_size} bytes but stores "
                f"{member.compress_size}, over the limit of {MAX_EXPANSION}x (a zip bomb?)"
            )
    problem = _zip_totals_problem(archive.infolist(), file_size)
    if problem is not None:
        raise BadFileError(f"{path}: {problem}")


def _zip_totals_problem(members: Sequence[zipfile.ZipInfo], file_size: int) -> str | None:
    """What is wrong with an archive's members taken together, or None: their stored bytes
    overlap (more than the file holds), or they declare more than `MAX_EXPANSION` times the
    file once over `MAX_CONFIG_BYTES` (the sum a reader that extracts them all allocates)."""
    stored = sum(m.compress_size for m in members)
    if stored > file_size:
        return (
            f"its {len(members)} archive members store {stored} bytes together, more than the "
            f"file's {file_size} (overlapping members)"
        )
    declared = sum(m.file_size for m in members)
    limit = max(MAX_CONFIG_BYTES, MAX_EXPANSION * file_size)
    if declared > limit:
        return (
            f"its {len(members)} archive members declare {declared} bytes together, over the "
            f"limit of {limit} bytes ({MAX_EXPANSION}x the file's {file_size}; a zip bomb?)"
        )
    return None


def _read_info_entry(path: Path, archive: zipfile.ZipFile) -> Any:
    with archive.open(INFO_ENTRY) as f:
        data = f.read(MAX_JSON_BYTES + 1)  # the declared size was checked; this bounds a liar
    if len(data) > MAX_JSON_BYTES:
        raise BadFileError(f"{path}: {INFO_ENTRY} is over the limit of {MAX_JSON_BYTES} bytes")
    return loads_json(data, source=f"{path}: {INFO_ENTRY}")


def info_from_json(
    data: Any, *, path: str | os.PathLike, max_input_side: int = MAX_INPUT_SIDE
) -> ModelInfo:
    """The `ModelInfo` of a decoded `cvbench.json`, checked.

    Args:
        data: the decoded JSON.
        path: the model file, for the messages.
        max_input_side: the largest `image_size` side accepted, in pixels.

    Raises:
        BadFileError: for a value that is not an object with valid `ModelInfo` fields, or an
            image size over `max_input_side`, naming the file.

    Example:
        >>> info_from_json([1], path="m.keras")
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: m.keras: cvbench.json is not a JSON object (got a list)
    """
    where = f"{path}: {INFO_ENTRY}"
    if not isinstance(data, dict):
        kind = "null" if data is None else f"a {type(data).__name__}"
        raise BadFileError(f"{where} is not a JSON object (got {kind})")
    required = {
        f.name for f in dataclasses.fields(ModelInfo) if f.init and f.default is dataclasses.MISSING
    }
    missing = sorted(required - set(data))
    if missing:
        raise BadFileError(f"{where} lacks {', '.join(missing)}")
    size = data["image_size"]
    if isinstance(size, list) and any(
        isinstance(s, int) and not isinstance(s, bool) and s > max_input_side for s in size
    ):
        raise BadFileError(
            f"{where} image_size {size} is over the limit of {max_input_side} pixels per "
            "side; pass max_input_side=N to raise it"
        )
    try:
        return ModelInfo.from_dict(data)
    except (TypeError, ValueError, AttributeError) as err:
        raise BadFileError(f"{where}: {err}") from None


def read_model_info(
    path: str | os.PathLike, *, max_input_side: int = MAX_INPUT_SIDE
) -> ModelInfo | None:
    """The `ModelInfo` stored in a `.keras` file, or None when it has none; or that of an
    info file written beside an exported model (a `.json` path, `write_info_file`).

    Args:
        path: the model file, or its info file.
        max_input_side: the largest `image_size` side accepted, in pixels.

    Raises:
        FileNotFoundError: for a missing file.
        BadFileError: (a `ValueError`) for a file that is not a `.keras` archive (or not a
            regular file), is over a size limit, or holds a malformed `cvbench.json` (module
            docstring), naming it.
    """
    path = Path(path)
    if path.suffix == ".json":  # an info file (`write_info_file`)
        from cvbench.utils.files import read_json

        data = read_json(path, limit=MAX_JSON_BYTES, what="model info file")
        return info_from_json(data, path=path, max_input_side=max_input_side)
    refuse_serving_export(path)
    try:
        with open_input(path, what="model file") as f, zipfile.ZipFile(f) as archive:
            _check_members(path, archive, os.fstat(f.fileno()).st_size)
            if INFO_ENTRY not in archive.namelist():
                return None
            data = _read_info_entry(path, archive)
    except zipfile.BadZipFile:
        raise BadFileError(f"{path} is not a .keras model file (not a zip archive)") from None
    return info_from_json(data, path=path, max_input_side=max_input_side)


def require_model_info(
    path: str | os.PathLike, *, max_input_side: int = MAX_INPUT_SIDE
) -> ModelInfo:
    """The `ModelInfo` of the model file `path` (`read_model_info`), for the commands that
    cannot run a model without it (`predict`, `export`): a file without one is a bad input
    file, not a bad argument.

    Raises:
        FileNotFoundError: for a missing file.
        BadFileError: as `read_model_info`, and for a `.keras` file without `cvbench.json`,
            naming the file and what is missing.
    """
    info = read_model_info(path, max_input_side=max_input_side)
    if info is None:
        raise BadFileError(
            f"{path} holds no ModelInfo (no {INFO_ENTRY} entry: its class names, input size "
            "and resize rule); cvbench writes one into every model file it saves: write it "
            "with cvbench.inference.save_model(model, path, info)"
        )
    return info


def load_model(
    path: str | os.PathLike, *, compile: bool = False, max_input_side: int = MAX_INPUT_SIDE
) -> tuple[Any, ModelInfo | None]:
    """Loads a `.keras` file (safe mode) and its `ModelInfo`, checked against each other.

    Args:
        path: the model file.
        compile: passed to `keras.saving.load_model`.
        max_input_side: the largest `image_size` side accepted, in pixels.

    Returns:
        `(model, info)`; `info` is None for a file without `cvbench.json`.

    Raises:
        FileNotFoundError: for a missing file.
        BadFileError: (a `ValueError`) for a file that is not a `.keras` archive (or not a
            regular file), over a size limit, with a malformed `cvbench.json`, that Keras
            cannot load, or whose model's input size or class count differs from its `ModelInfo`.
    """
    import keras

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no model file {path}")
    refuse_serving_export(path)
    check_regular(path, what="model file")
    info = read_model_info(path, max_input_side=max_input_side)
    try:
        with keras_temporaries(path, "unpack"):
            model = keras.saving.load_model(path, compile=compile, safe_mode=True)
    except OSError as err:
        if err.errno is not None:  # the disk, not the file's content
            raise
        raise BadFileError(f"{path}: Keras cannot load it ({_first_line(err)})") from None
    except Exception as err:  # noqa: BLE001 (what Keras raises for a bad file varies)
        raise BadFileError(f"{path}: Keras cannot load it ({_first_line(err)})") from None
    if info is not None:
        check_model_matches_info(model, info, path=path)
    return model, info


#: The prefix of the folder `keras_temporaries` makes in the temporary folder (TMPDIR).
KERAS_TEMPORARIES_PREFIX = ".cvbench-keras-"
#: One `keras_temporaries` at a time: it switches the process's temporary folder.
_TEMPORARIES_LOCK = threading.Lock()


def _temporaries_full(error: OSError, base: str) -> bool:
    """Whether the full disk of `error` is the temporary folder `base`'s: the file it names
    is in `base`, or it names none and `base`'s file system has (almost) no room left."""
    if error.filename is not None:
        named = os.path.abspath(os.fsdecode(error.filename))
        return os.path.commonpath([named, os.path.abspath(base)]) == os.path.abspath(base)
    try:
        st = os.statvfs(base)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _ROOM


#: Free bytes under which a temporary folder counts as full (an error naming no file).
_ROOM = 1 << 20


@contextlib.contextmanager
def keras_temporaries(model_file: str | os.PathLike, action: str) -> Iterator[Path]:
    """A private folder in the temporary folder (`tempfile.gettempdir()`: TMPDIR) for the
    files Keras writes while it loads or saves `model_file` (it unpacks a `.keras` archive
    with more than its weights, such as cvbench's `cvbench.json`, into a `tempfile.mkdtemp()`
    folder), removed at the end whatever happens: Keras leaves a partial folder behind when
    the unpacking fails. Keras' `mkdtemp` lands in it because `tempfile.tempdir` points
    there meanwhile (restored after; a lock keeps two of these from interleaving). Folders of
    a process killed outright (no `finally`) are removed by the next call
    (`remove_dead_staging`).

    Args:
        model_file: the model file, named in the message of a full disk.
        action: what Keras does to it, for that message ("unpack", "write").

    Raises:
        OSError: ENOSPC (or EDQUOT), whose one line names the temporary folder that filled
            up and says to free space there or set TMPDIR to a folder with room.

    Example:
        >>> import tempfile
        >>> base = tempfile.gettempdir()
        >>> with keras_temporaries("m.keras", "unpack") as folder:
        ...     inside = Path(tempfile.mkdtemp())  # what Keras does
        ...     print(inside.parent == folder, folder.parent == Path(base))
        True True
        >>> folder.exists(), inside.exists(), tempfile.gettempdir() == base
        (False, False, True)
    """
    with _TEMPORARIES_LOCK:
        base = tempfile.gettempdir()
        before = tempfile.tempdir
        folder = None
        try:
            remove_dead_staging(base, KERAS_TEMPORARIES_PREFIX)
            folder = staging_folder(base, KERAS_TEMPORARIES_PREFIX)
            tempfile.tempdir = os.fspath(folder)
            yield folder
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT) or not _temporaries_full(e, base):
                raise  # another disk filled up: the destination of a save (review V F5)
            raise OSError(
                e.errno,
                f"the temporary folder {base} is full ({os.strerror(e.errno)}) while Keras "
                f"{action}s {os.fspath(model_file)} there; free space in it or set TMPDIR to "
                "a folder with room",
            ) from e
        finally:
            tempfile.tempdir = before
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


def refuse_serving_export(path: str | os.PathLike) -> None:
    """A SavedModel folder or a TFLite file (what `cvbench export` writes for serving) given
    where a `.keras` model file (or, to `cvbench eval`, a checkpoint) is read: a
    `BadFileError` that says so and names the file cvbench reads instead."""
    path = Path(path)
    kind = None
    if path.is_dir() and (path / "saved_model.pb").is_file():
        kind = "a SavedModel folder"
    elif path.is_file():
        with contextlib.suppress(OSError), open(path, "rb") as f:
            if f.read(8)[4:8] == b"TFL3":
                kind = "a TFLite file"
    if kind is not None:
        raise BadFileError(
            f"{path} is {kind}, an export for serving (TensorFlow Serving, TFLite); cvbench "
            "reads the .keras model file it was exported from (a training run's "
            "RUN/export/model.keras)"
        )


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def check_model_matches_info(
    model: Any,
    info: ModelInfo,
    *,
    path: str | os.PathLike | None = None,
    argument: str = "info",
) -> None:
    """Checks that `model` takes `info.image_size` inputs (where its size is fixed) and gives
    one output per class name (`(B, C)` logits, or a detector's `{"classes": (B, N, C)}`):
    the one check wherever a model and its info meet (`load_model`, `save_model`,
    `classify` / `detect` with `info=`).

    Args:
        model: a Keras model.
        info: its `ModelInfo`.
        path: the file `info` was read from; None for an info passed as an argument.
        argument: the name of that argument, for the message.

    Raises:
        BadFileError: naming the file and the difference, for an info read from `path`.
        ValueError: naming `argument` and the difference, for an info passed as one.

    Example:
        >>> import keras
        >>> inputs = keras.Input((8, 8, 3))
        >>> model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(inputs)))
        >>> info = ModelInfo(task="classification", class_names=("a", "b"), image_size=(8, 8))
        >>> check_model_matches_info(model, info)
        Traceback (most recent call last):
        ...
        ValueError: info has 2 class names but the model outputs 3 classes
    """
    where = f"{path}: {INFO_ENTRY}" if path is not None else argument
    error = BadFileError if path is not None else ValueError
    shape = getattr(model, "input_shape", None)
    if isinstance(shape, tuple) and len(shape) == 4:
        size = tuple(shape[1:3])
        if None not in size and size != tuple(info.image_size):
            raise error(
                f"{where} image_size {list(info.image_size)} differs from the model's input "
                f"size {list(size)}"
            )
    outputs = _model_outputs(model)
    try:
        count = None if outputs is None else info.head.class_count(outputs, where=where)
    except BadFileError as err:
        raise error(str(err)) from None
    if count is not None and int(count) != info.num_classes:
        raise error(
            f"{where} has {info.num_classes} class name{'s' * (info.num_classes != 1)} but "
            f"the model outputs {int(count)} classes"
        )


def _model_outputs(model: Any) -> Any:
    """`model.output` (a tensor, or a detector's dict of them); the one tensor of
    `model.outputs` for a `Sequential` model never called (it has no `output` then); None
    for a model without fixed outputs (a subclassed model)."""
    outputs = getattr(model, "output", None)
    if outputs is None:
        listed = getattr(model, "outputs", None)
        if isinstance(listed, list) and len(listed) == 1:
            outputs = listed[0]
    return outputs


def class_names_or_default(info: ModelInfo | None, num_classes: int) -> Sequence[str]:
    """`info.class_names`, or `("0", "1", ...)` for a model without info."""
    if info is not None:
        return info.class_names
    return tuple(str(i) for i in range(num_classes))


def unused_class_name(name: str) -> bool:
    """Whether `name` stands for a class index no category has: a COCO id between the
    categories of a 90-class detector, written "N/A" in the class names read from records
    (`tasks.detection`'s label map) and "coco_id_<id>" in a model file of a run without them
    (`DetectionTask.model_info`).

    Example:
        >>> [unused_class_name(n) for n in ("N/A", "coco_id_12", "person", "coco_id_")]
        [True, True, False, False]
    """
    return name == "N/A" or re.fullmatch(r"coco_id_[0-9]+", name) is not None


def class_name_differences(
    before: Sequence[str] | None,
    after: Sequence[str] | None,
    *,
    where: tuple[str, str] = ("in the checkpoint", "now"),
    indices_unnamed: bool = False,
) -> str | None:
    """How two lists of class names (model index -> name) differ, each side named by
    `where`: the one rule of `--resume` (a checkpoint's classes and the records' now) and of
    `cvbench eval` (a model's classes and the records'). Records rebuilt after renaming one
    class folder shift every label, so a name that differs means other labels.

    None when they agree, or when a side has no names to compare: None (a file written
    before the names were recorded, records without `dataset_info.json`, synthetic data) or,
    with `indices_unnamed` (`cvbench eval`: a model file's names), the indices `"0"`, `"1"`,
    ... (`class_names_or_default`: a model trained on records without names, `--num-classes`
    only; records whose class folders are those digits cannot be told from them there).
    `--resume` compares such names as names, as it always did. A slot either side names as
    unused (`unused_class_name`) is not compared. The first three differing classes are named.

    Example:
        >>> class_name_differences(["cat", "dog", "eel"], ["cat", "wolf", "eel"])
        "class names: 1 of 3 differ (class 1 'dog' in the checkpoint, 'wolf' now)"
        >>> class_name_differences(["a", "b"], ["a", "b", "c"], where=("in m", "in d"))
        'class names: 2 in m, 3 in d'
        >>> class_name_differences(["0", "1"], ["cat", "dog"], indices_unnamed=True) is None
        True
        >>> class_name_differences(["0", "1"], ["0", "one"])
        "class names: 1 of 2 differ (class 1 '1' in the checkpoint, 'one' now)"
        >>> class_name_differences(["person", "coco_id_12"], ["person", "N/A"]) is None
        True
    """
    if before is None or after is None:
        return None
    old, new = [str(n) for n in before], [str(n) for n in after]
    indices = [names == [str(i) for i in range(len(names))] for names in (old, new)]
    if old == new or (indices_unnamed and any(indices)):
        return None
    first, second = where
    if len(old) != len(new):
        return f"class names: {len(old)} {first}, {len(new)} {second}"
    changed = [
        i
        for i, (a, b) in enumerate(zip(old, new, strict=True))
        if a != b and not (unused_class_name(a) or unused_class_name(b))
    ]
    if not changed:
        return None
    shown = "; ".join(f"class {i} {old[i]!r} {first}, {new[i]!r} {second}" for i in changed[:3])
    more = "; ..." if len(changed) > 3 else ""
    return f"class names: {len(changed)} of {len(old)} differ ({shown}{more})"


def check_npz(
    path: str | os.PathLike,
    file: IO[bytes],
    *,
    what: str = "weights file",
    member_limits: Mapping[str, int] | None = None,
) -> None:
    """Checks the sizes an `.npz` archive declares before any array is read or allocated
    (module docstring): each member lies inside the file, stores as many bytes as its zip
    entry says (deflate at most `DEFLATE_MAX_RATIO` : 1), the members together stay within
    the file and `MAX_EXPANSION` times it, and each `.npy` header's shape and dtype come to
    exactly its member's size. The one check of checkpoints and of `.npz` weight files.

    Args:
        path: the file, for the messages.
        file: the file opened for binary reading (`cvbench.utils.files.open_input`).
        what: what the file is, for the messages ("checkpoint", "weights file").
        member_limits: the largest size of named members (a checkpoint's `meta.npy`).

    Raises:
        BadFileError: `"<path> is not a valid <what>: ..."`, naming the member and what it
            asks for.

    Example:
        >>> import io
        >>> buffer = io.BytesIO()
        >>> np.savez(buffer, w=np.zeros(3, np.float32))
        >>> check_npz("w.npz", buffer)
        >>> check_npz("w.npz", io.BytesIO(b"PK\\x03\\x04 cut"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cvbench.utils.errors.BadFileError: w.npz is not a valid weights file: File is not a zip...
    """
    try:
        file.seek(0, os.SEEK_END)
        file_size = file.tell()
        file.seek(0)
        with zipfile.ZipFile(file) as archive:
            members = archive.infolist()
            for info in members:
                _check_npz_member(archive, info, file_size, dict(member_limits or {}))
            problem = _zip_totals_problem(members, file_size)
            if problem is not None:
                raise ValueError(problem)
    except (ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as err:
        raise BadFileError(f"{os.fspath(path)} is not a valid {what}: {err}") from None
    except OSError as err:
        if err.errno is not None:
            raise
        raise BadFileError(f"{os.fspath(path)} is not a valid {what}: {err}") from None
    finally:
        file.seek(0)


def _check_npz_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, file_size: int, limits: dict[str, int]
) -> None:
    name, size = info.filename, info.file_size
    if info.header_offset + info.compress_size > file_size:
        raise ValueError(
            f"member {name} says it stores {byte_count(info.compress_size)} at byte "
            f"{info.header_offset}, past the end of the {byte_count(file_size)} file"
        )
    if info.compress_type == zipfile.ZIP_STORED and size != info.compress_size:
        raise ValueError(
            f"member {name} says it holds {byte_count(size)} but stores "
            f"{byte_count(info.compress_size)} uncompressed"
        )
    if size > DEFLATE_MAX_RATIO * max(info.compress_size, 1):
        raise ValueError(
            f"member {name} says it holds {byte_count(size)} from "
            f"{byte_count(info.compress_size)} compressed, more than deflate can give "
            f"({DEFLATE_MAX_RATIO}:1)"
        )
    if name in limits and size > limits[name]:
        raise ValueError(
            f"its member {name} is {byte_count(size)}, over the limit of {byte_count(limits[name])}"
        )
    if not name.endswith(".npy"):
        return
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise ValueError(f"member {name} is a .npy file of version {version}, not 1.0 or 2.0")
        header = member.tell()
    if dtype.hasobject:
        return  # pickled objects: np.load refuses them (allow_pickle=False), unread
    wanted = math.prod(shape) * dtype.itemsize
    if header + wanted != size:
        raise ValueError(
            f"member {name} has a .npy header asking for shape {tuple(shape)} of {dtype} "
            f"({byte_count(wanted)}), but holds {byte_count(size - header)} of data"
        )


def byte_count(count: int) -> str:
    """A byte count for messages.

    Example:
        >>> byte_count(120), byte_count(6 << 30)
        ('120 bytes', '6.0 GiB')
    """
    if count < 1024:
        return f"{count} bytes"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


def load_npz(
    path: str | os.PathLike,
    *,
    what: str = "weights file",
    member_limits: Mapping[str, int] | None = None,
    keys: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """The arrays of the `.npz` file `path` (only `keys` when given), read once `path` is
    known to be a regular file and `check_npz` has passed.

    Raises:
        FileNotFoundError: for a missing file.
        BadFileError: not a regular file, or `"<path> is not a valid <what>: ..."`.
    """
    with open_input(path, what=what) as f:
        check_npz(path, f, what=what, member_limits=member_limits)
        try:
            with np.load(f, allow_pickle=False) as data:
                names = data.files if keys is None else [k for k in keys if k in data.files]
                return {name: data[name] for name in names}
        except (ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:
            raise BadFileError(f"{os.fspath(path)} is not a valid {what}: {err}") from None
        except OSError as err:
            if err.errno is not None:
                raise
            raise BadFileError(f"{os.fspath(path)} is not a valid {what}: {err}") from None
