"""What a classification pipeline does to images, for the model files trained on it.

`imagenet_dataset`, `tfds_dataset` and the grain reader hand a `ClassifierInputs` to the
`Trainer` with the dataset they return (`attach`, which is
`cvbench.utils.model_file.attach_inputs`: the one documented hand-over, read back by
`attached_inputs`): the evaluation resize, the normalization and the data set's class names
(from `dataset_info.json`, or the TFDS `label` feature's). A `Trainer` fitted on such a
dataset writes model files that take [0, 255] RGB and do that same normalization in front of
the trained model, with the `ModelInfo` (class names, input size, resize rule) that
`cvbench predict` and `cvbench.inference.classify` read: a user's pipeline and the model
files agree by construction. A dataset made with a caller's own `train_preprocess` /
`eval_preprocess` carries none (its preprocessing is the caller's to state,
`Trainer(model_info=..., export_transform=...)`); nor does a dataset derived from it (`.map`,
`.take`, ...).

The pipeline's `ImagePreprocessing.eval_crop` and the model file's `ModelInfo.resize` speak one
vocabulary (`cvbench.utils.model_file.RESIZE_RULES`): the crop is the rule, by the same name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.utils.model_file import (
    DATASET_ATTRIBUTE,
    DEPRECATED_RESIZE_SPELLINGS,
    EVAL_CROP_RULES,
    INTERPOLATIONS,
    InputSettings,
    ModelInfo,
    attach_inputs,
)

#: The attribute of a `tf.data.Dataset` holding its `ClassifierInputs` (spelled in
#: `cvbench.utils.model_file`; use `attach` / `attached_inputs`).
ATTRIBUTE = DATASET_ATTRIBUTE

#: `ImagePreprocessing.eval_crop` -> `ModelInfo.resize`: each rule by itself, and the
#: deprecated spelling "resize_then_crop" (kept for code that imported it).
RESIZE_OF_EVAL_CROP = {**{rule: rule for rule in EVAL_CROP_RULES}, **DEPRECATED_RESIZE_SPELLINGS}


@dataclass(frozen=True)
class ClassifierInputs:
    """How [0, 255] RGB images became a classifier's input in a cvbench pipeline.

    Args:
        image_size: the square input size.
        preprocessing: the pipeline's `ImagePreprocessing` (evaluation crop, scaling).
        class_names: the data set's class names in label order, or None (then "0", "1", ...).
        resize: the `ModelInfo.resize` rule, for a pipeline of one's own preprocess functions
            (e.g. "stretch" for a plain resize); None: the one of `preprocessing.eval_crop`.

    Example:
        >>> inputs = ClassifierInputs(32, ImagePreprocessing(), ("a", "b"), resize="stretch")
        >>> inputs.model_info(2).resize, inputs.normalization()[0]
        ('stretch', (123.68, 116.28, 103.53))
    """

    image_size: int
    preprocessing: ImagePreprocessing
    class_names: tuple[str, ...] | None = None
    resize: str | None = None

    def normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """`(mean, std)` with which the pipeline maps `[0, 255]` pixels to the model's input,
        `(x - mean) / std`: the recipe's mean and std, or for `input_scaling="inception"`
        (`x / 127.5 - 1`) mean = std = 127.5.

        Example:
            >>> ClassifierInputs(224, ImagePreprocessing.nvcnn_inception_v3()).normalization()
            ((127.5, 127.5, 127.5), (127.5, 127.5, 127.5))
        """
        p = self.preprocessing
        if p.input_scaling == "inception":
            return (127.5,) * 3, (127.5,) * 3
        return tuple(p.mean), tuple(p.std)

    def model_info(self, num_classes: int, *, model: str | None = None) -> ModelInfo:
        """The `ModelInfo` of a classifier of `num_classes` outputs trained on this pipeline.

        Raises:
            ValueError: when the data set's class names are not `num_classes`, or for an
                evaluation crop or resize method inference has no rule for (`ModelInfo`'s
                `RESIZE_RULES` and `INTERPOLATIONS`).
        """
        names = self.class_names or tuple(str(i) for i in range(num_classes))
        if len(names) != num_classes:
            raise ValueError(
                f"the data set has {len(names)} classes (dataset_info.json) but the model "
                f"outputs {num_classes}"
            )
        return ModelInfo.of(
            task="classification", class_names=names, inputs=self.input_settings(), model=model
        )

    def input_settings(self) -> InputSettings:
        """The input part of the model contract of this pipeline (`ModelInfo.inputs`).

        Raises:
            ValueError: for an evaluation crop or resize method inference has no rule for
                (`ModelInfo`'s `RESIZE_RULES` and `INTERPOLATIONS`).
        """
        p = self.preprocessing
        resize = self.resize or p.eval_crop  # the same vocabulary: the crop is the rule
        if p.resize_method not in INTERPOLATIONS:
            raise ValueError(
                f"resize_method={p.resize_method!r} has no inference rule (known: "
                f"{INTERPOLATIONS}): pass Trainer(model_info=...) stating one"
            )
        mean, std = self.normalization()
        return InputSettings(
            image_size=(self.image_size, self.image_size),
            resize=resize,
            crop_fraction=p.crop_fraction,
            interpolation=p.resize_method,
            quantize_uint8=p.quantize_uint8,
            dct_method=p.dct_method,
            fancy_upscaling=p.fancy_upscaling,
            input_mean=mean,
            input_std=std,
        )

    def model_info_for(self, model: Any) -> ModelInfo:
        """`model_info` for a built Keras classifier of any output width."""
        return self.model_info(int(model.output_shape[-1]))

    def user_model(self, model: Any) -> Any:
        """`model` as users get it: built-in Keras layers only (`to_plain_keras`), taking
        `[0, 255]` RGB (this pipeline's normalization put in front)."""
        from cvbench.utils.plain_keras import to_plain_keras, with_input_normalization

        mean, std = self.normalization()
        return with_input_normalization(to_plain_keras(model), mean=mean, std=std)


def eval_preprocessing(info: ModelInfo) -> ImagePreprocessing:
    """The `ImagePreprocessing` whose evaluation crop is `info.resize` ("center_crop" or
    "crop_then_resize") at `info.crop_fraction`, interpolating by `info.interpolation`,
    quantizing by `info.quantize_uint8` (for `eval_view` and `quantize`).

    Raises:
        ValueError: for "stretch", which is no evaluation crop.

    Example:
        >>> info = ModelInfo(task="classification", class_names=("a",), image_size=(8, 8),
        ...                  resize="crop_then_resize", crop_fraction=0.5)
        >>> p = eval_preprocessing(info)
        >>> p.eval_crop, p.crop_fraction
        ('crop_then_resize', 0.5)
    """
    return ImagePreprocessing(
        eval_crop=info.inputs.eval_crop,
        crop_fraction=info.crop_fraction,
        resize_method=info.interpolation,
        quantize_uint8=info.quantize_uint8,
    )


def attach(dataset: Any, inputs: ClassifierInputs | None) -> Any:
    """`dataset` handing `inputs` to a `Trainer` fitted on it (returned as it is for None):
    `cvbench.utils.model_file.attach_inputs` (module docstring)."""
    return attach_inputs(dataset, inputs)


def class_names_of(data_dir: Any) -> tuple[str, ...] | None:
    """The class names of `data_dir/dataset_info.json`, or None without that file."""
    from cvbench.data.dataset_info import read_dataset_info

    info = read_dataset_info(data_dir)
    return None if info is None else info.class_names
