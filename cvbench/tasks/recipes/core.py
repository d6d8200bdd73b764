"""The parts of a named recipe: frozen settings, each knob with the source of its value.

A `Recipe` holds *our* value of every knob that affects accuracy, in frozen parts: the
consumers' own configuration objects (`OptimizerConfig` and `ScheduleConfig` of
`cvbench.training.config`, `ImagePreprocessing` of `cvbench.data`) and the recipe's own
`RunKnobs`, `LossKnobs`, and `ModelKnobs` + `EvalKnobs` for classification or `DetectionKnobs`
for detection. Knobs are named `part.field` (`schedule.decay_from`). A knob whose value differs
from its part's default has a `Source` (repository, file, line at a commit) or `OwnDefault`
(cvbench's choice, saying why); a knob at its part's default without one is the library's
default (`Recipe.source_of` says so). Where we deliberately differ from the reference, a
`Deviation` records the reference value and why; so `Recipe.reference_value(knob)` is the
reference's value of every knob.

One operation changes a recipe: `Recipe.with_overrides({knob: value}, reason=...)`, each
change recorded as a deviation with its reason; `cvbench.tasks.recipes.resolve` maps the
settings users name (`lr`, `batch_size`, the CLI's flags) onto knobs with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cvbench.data import ImagePreprocessing
from cvbench.training.config import OptimizerConfig, ScheduleConfig

CLASSIFICATION, DETECTION = "classification", "detection"


@dataclass(frozen=True)
class Source:
    """Where a reference value is written.

    Attributes:
        repo: GitHub `owner/name`.
        path: file inside the repository.
        line: first line of the value; `last` the last line when it spans several.
        commit: the commit read (40 hex digits).
        note: what the line says, when the value is derived from it (e.g. `0.0693312 / 0.16`).
    """

    repo: str
    path: str
    line: int
    commit: str
    last: int | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.line, int) or self.line < 1:
            raise ValueError(f"Source.line must be an int >= 1, got {self.line!r}")
        if self.last is not None and (not isinstance(self.last, int) or self.last < self.line):
            raise ValueError(f"Source.last must be an int >= line {self.line}, got {self.last!r}")

    @property
    def lines(self) -> str:
        """`"28"` or `"89-101"`."""
        return str(self.line) if self.last is None else f"{self.line}-{self.last}"

    def __str__(self) -> str:
        text = f"{self.repo} {self.path}:{self.lines}"
        return f"{text} ({self.note})" if self.note else text


@dataclass(frozen=True)
class Deviation:
    """A knob where the recipe deliberately differs from its reference.

    Attributes:
        knob: the knob's name (`eval.drop_remainder`).
        reference: the reference's value (the recipe holds ours).
        reason: why we differ, and how to get the reference's behaviour.
    """

    knob: str
    reference: Any
    reason: str


@dataclass(frozen=True)
class OwnDefault:
    """The source of a knob whose value is cvbench's own choice, not a reference's.

    Attributes:
        note: why this value (e.g. "TrainConfig's dynamic loss scaling").
    """

    note: str

    def __str__(self) -> str:
        return f"cvbench default ({self.note})"


@dataclass(frozen=True)
class RunKnobs:
    """How long and how wide: `batch_per_gpu` images per GPU on `reference_gpus` GPUs, for
    `epochs` epochs or `images` training images in all (steps = images / global batch)."""

    batch_per_gpu: int
    reference_gpus: int
    precision: str
    epochs: float | None = None
    images: int | None = None


@dataclass(frozen=True)
class LossKnobs:
    """Label smoothing over `smoothing_classes` (None: the model's classes), mixup's alpha
    (0: off) and loss scaling (`dynamic_loss_scale`, else the static `loss_scale`)."""

    dynamic_loss_scale: bool
    label_smoothing: float = 0.0
    smoothing_classes: int | None = None
    mixup_alpha: float = 0.0
    loss_scale: float | None = None


@dataclass(frozen=True)
class ModelKnobs:
    """Builder arguments of a classification model (`cvbench.models`), and its input size
    (`image_size`: the builder's `input_shape` and the pipeline's output size)."""

    image_size: int
    num_classes: int
    bn_momentum: float
    bn_epsilon: float
    bn_scale: bool
    conv_initializer: str
    dense_initializer: str
    last_block_pooling: str | None = None
    weights: str | None = None
    # The ResNet variant ("v1", "v1.5"); None: the builder's choice. Set where the starting
    # weights fix it (keras.applications' are v1), so that a model restored from a
    # checkpoint is built the same without reading those weights again.
    variant: str | None = None
    # The input normalization keras.applications' starting weights were trained on
    # ("caffe", "inception"; `cvbench.models.pretrained`); None: not theirs (the recipe's
    # applies). Recorded at the start, so that a resume or an evaluation never needs
    # those weights again to tell it.
    weights_normalization: str | None = None


@dataclass(frozen=True)
class EvalKnobs:
    """Evaluation: `images` of the validation split, and whether the last partial batch is
    dropped (`drop_remainder`) at `batch_size` images per step."""

    images: int = 50000
    drop_remainder: bool = False
    batch_size: int | None = None


@dataclass(frozen=True)
class DetectionKnobs:
    """SSD: starting point, batch norm, augmentation, box limits, post-processing, L2, and
    the fixed parts of the model and loss (preprocessing means, box coder, focal loss, head)."""

    backbone: str
    backbone_weights: str | None
    freeze_batchnorm: bool
    image_size: int
    num_classes: int
    flip: bool
    crop_aspect_range: tuple[float, float]
    crop_area_range: tuple[float, float]
    crop_min_object_covered: float
    color_jitter: bool
    max_boxes: int
    score_threshold: float
    iou_threshold: float
    max_per_class: int
    max_total: int
    l2_weight: float
    activation: str
    backbone_activation: str
    channel_means: tuple[float, float, float]
    box_coder_scales: tuple[float, float, float, float]
    focal_alpha: float
    focal_gamma: float
    class_bias_init: float
    head_bn_momentum: float
    head_bn_epsilon: float


PARTS = (
    "run",
    "optimizer",
    "schedule",
    "loss",
    "model",
    "preprocessing",
    "eval",
    "detection",
)
#: The class of each part (the consumers' own configuration objects where one exists).
PART_TYPES = {
    "run": RunKnobs,
    "optimizer": OptimizerConfig,
    "schedule": ScheduleConfig,
    "loss": LossKnobs,
    "model": ModelKnobs,
    "preprocessing": ImagePreprocessing,
    "eval": EvalKnobs,
    "detection": DetectionKnobs,
}
_CLASSIFICATION_PARTS = ("model", "preprocessing", "eval")


@dataclass(frozen=True)
class Recipe:
    """One named recipe: every knob that affects accuracy, its value and its source.

    Attributes:
        name: the recipe's name (`resnet50_v1.5_90e`).
        model: the cvbench model it trains (`resnet50`).
        task: "classification" or "detection".
        summary: one line: what it reproduces and the reference's result.
        run: `RunKnobs`; optimizer: `OptimizerConfig`; schedule: `ScheduleConfig` (its
            `warmup_steps` is left None: the plan sets it); loss: `LossKnobs`.
        model_knobs, preprocessing (`ImagePreprocessing`), eval: classification parts (None
            for detection).
        detection: the detection part (None for classification).
        sources: knob name -> `Source` or `OwnDefault`, for every knob whose value is not its
            part's default (and any other knob whose reference value we cite).
        deviations: the knobs where we deliberately differ from the reference.

    Raises:
        ValueError: a part of the wrong type, a knob off its part's default without a source
            (or deviation), a source or deviation naming no knob, or parts that do not fit
            the task.
    """

    name: str
    model: str
    task: str
    summary: str
    run: RunKnobs
    optimizer: OptimizerConfig
    schedule: ScheduleConfig
    loss: LossKnobs
    sources: Mapping[str, Source | OwnDefault]
    model_knobs: ModelKnobs | None = None
    preprocessing: ImagePreprocessing | None = None
    eval: EvalKnobs | None = None
    detection: DetectionKnobs | None = None
    deviations: tuple[Deviation, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        object.__setattr__(self, "deviations", tuple(self.deviations))
        if self.task not in (CLASSIFICATION, DETECTION):
            raise ValueError(
                f"Recipe.task must be {CLASSIFICATION!r} or {DETECTION!r}, got {self.task!r}"
            )
        for name, kind in PART_TYPES.items():
            part = self.part(name)
            if part is not None and not isinstance(part, kind):
                raise ValueError(
                    f"recipe {self.name!r}: part {name!r} must be a {kind.__name__}, "
                    f"got {type(part).__name__}"
                )
        classification = [self.part(p) for p in _CLASSIFICATION_PARTS]
        if self.task == CLASSIFICATION and (None in classification or self.detection):
            raise ValueError(
                f"recipe {self.name!r}: classification needs model_knobs, "
                "preprocessing and eval, and no detection part"
            )
        if self.task == DETECTION and (
            any(p is not None for p in classification) or not self.detection
        ):
            raise ValueError(f"recipe {self.name!r}: detection needs only the detection part")
        names = dict(self.knobs())
        deviated = {d.knob for d in self.deviations}
        unknown = [k for k in [*self.sources, *deviated] if k not in names]
        if unknown:
            raise ValueError(f"recipe {self.name!r}: sources or deviations for no knob {unknown}")
        # A knob off its part's default needs its source, or a deviation recording the
        # reference's value.
        missing = [
            k
            for k, v in names.items()
            if not _is_default(k, v) and k not in {*self.sources, *deviated}
        ]
        if missing:
            raise ValueError(f"recipe {self.name!r}: no source for {', '.join(missing)}")

    def part(self, name: str) -> Any:
        """The part called `name` in knob names ("model" is the `model_knobs` attribute)."""
        if name not in PARTS:
            raise ValueError(f"unknown recipe part {name!r}; parts: {', '.join(PARTS)}")
        return getattr(self, "model_knobs" if name == "model" else name)

    def knobs(self) -> Iterator[tuple[str, Any]]:
        """`(part.field, value)` for every field of every part the recipe has, None included."""
        for part_name in PARTS:
            part = self.part(part_name)
            if part is not None:
                for f in dataclasses.fields(part):
                    yield f"{part_name}.{f.name}", getattr(part, f.name)

    def value(self, knob: str) -> Any:
        """Our value of `knob` (`"schedule.decay_from"`).

        Raises:
            ValueError: naming the knob when the recipe has no such knob.
        """
        found = dict(self.knobs())
        if knob not in found:
            raise ValueError(
                f"recipe {self.name!r} has no knob {knob!r}; knobs: {', '.join(found)}"
            )
        return found[knob]

    def source_of(self, knob: str) -> Source | OwnDefault | None:
        """Where our value of `knob` comes from; None: its part's default (cvbench's)."""
        self.value(knob)  # raises for an unknown knob
        return self.sources.get(knob)

    def deviation(self, knob: str) -> Deviation | None:
        """The deliberate difference on `knob`, or None where we follow the reference."""
        return next((d for d in self.deviations if d.knob == knob), None)

    def reference_value(self, knob: str) -> Any:
        """The reference's value of `knob`: ours unless a `Deviation` says otherwise."""
        value = self.value(knob)
        deviation = self.deviation(knob)
        return value if deviation is None else deviation.reference

    def with_overrides(
        self, changes: Mapping[str, Any], *, reason: str | Mapping[str, str]
    ) -> Recipe:
        """A copy with knobs set (`{"run.batch_per_gpu": 128}`); each one that then differs
        from the reference is recorded as a `Deviation` with `reason` (e.g. "--batch-size";
        a mapping: each knob's own), and one set back to the reference loses its deviation.
        Each part is validated again by its own class (`OptimizerConfig`, `ScheduleConfig`,
        ...), and a value is compared with the reference as its part reads it (a deprecated
        spelling, such as `preprocessing.eval_crop="resize_then_crop"`, is the reference's
        "center_crop").

        Raises:
            ValueError: naming an unknown knob, a knob of a part this recipe lacks, or a
                value its part refuses.
        """
        parts: dict[str, dict[str, Any]] = {}
        for knob, value in changes.items():
            self.value(knob)  # raises for an unknown knob
            part_name, _, field_name = knob.partition(".")
            parts.setdefault(part_name, {})[field_name] = value
        replaced = {
            ("model_knobs" if name == "model" else name): dataclasses.replace(
                self.part(name), **fields
            )
            for name, fields in parts.items()
        }
        deviations = {d.knob: d for d in self.deviations}
        for knob in changes:
            part_name, _, field_name = knob.partition(".")
            part = replaced["model_knobs" if part_name == "model" else part_name]
            reference = self.reference_value(knob)
            deviations.pop(knob, None)
            if getattr(part, field_name) != reference:  # the value as its part reads it
                why = reason if isinstance(reason, str) else reason[knob]
                deviations[knob] = Deviation(knob, reference, why)
        return dataclasses.replace(self, **replaced, deviations=tuple(deviations.values()))

    def for_model(
        self, *, name: str, model: str, summary: str, changes: Mapping[str, Any], reason: str
    ) -> Recipe:
        """This recipe applied to another `model` under another `name`: the knobs in
        `changes` set as `with_overrides` sets them (each recorded as a deviation with
        `reason`), every other knob keeping its value and source."""
        changed = self.with_overrides(changes, reason=reason)
        return dataclasses.replace(changed, name=name, model=model, summary=summary)


def _is_default(knob: str, value: Any) -> bool:
    """Whether `value` is the default of `knob`'s field in its part's class (a field without
    a default never is)."""
    part_name, _, field_name = knob.partition(".")
    spec = {f.name: f for f in dataclasses.fields(PART_TYPES[part_name])}[field_name]
    if spec.default is not dataclasses.MISSING:
        return value == spec.default
    if spec.default_factory is not dataclasses.MISSING:
        return value == spec.default_factory()
    return False
