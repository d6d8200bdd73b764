"""`ClassificationTask`: ResNets and Inception V3 on ImageNet-format TFRecords (or synthetic
data): sparse cross-entropy with label smoothing, top-1 / top-5 over the whole validation set
(top-5 only for more than 5 classes: `accuracy_metrics`).

Every knob comes from the task's recipe (`TaskOptions.recipe`, the model's default unless
named: `cvbench.tasks.recipes`): model knobs, input size, input pipeline, loss, mixup, and
through `prepare_run` the optimizer, schedule and loss scaling.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import keras

from cvbench.data.image_io import DEFAULT_MAX_PIXELS
from cvbench.data.read.model_inputs import ClassifierInputs
from cvbench.tasks.base import (
    DATA_CLASSES_REASON,
    SYNTHETIC_EVAL_BATCHES,
    RecordTask,
    TaskOptions,
    class_count_error,
    records_info,
    repeated,
)
from cvbench.tasks.recipes import fit_classes
from cvbench.tasks.recipes.plan import builder_arguments
from cvbench.tasks.sources import DALI_DEVICES, DaliSource, DataSource, GrainSource
from cvbench.training.losses import SparseCrossEntropy
from cvbench.training.resume import UNSET, compare_settings
from cvbench.utils.model_file import ModelInfo
from cvbench.zoo import (
    CLASSIFICATION,
    InputNormalization,
    get_model,
    list_models,
    weights_architecture,
    weights_normalization,
)

#: The `data_backend` names: tf.data, DALI, grain (`cvbench.tasks.sources`).
DATA_BACKENDS = ("tf", "dali", "grain")


class ClassificationTask(RecordTask):
    """Image classification: cross-entropy, top-1/top-5 (see the module docstring).

    Args:
        options: the task options; `data_dir` holds ImageNet-format TFRecords
            (`train-*`, `validation-*`), or None for synthetic data.
        train_preprocess: `(image_bytes, boxes, seed[2]) -> image` replacing the NVIDIA
            training augmentation of `imagenet_dataset` (e.g. the demo's flip-only one).
        eval_preprocess: `image_bytes -> image` replacing the evaluation resize and crop.
        metrics: Keras metrics instead of `accuracy_metrics(num_classes)` (top-1, and top-5
            for more than 5 classes).
        weights: weights to start from (the builder's `weights`: a file, or "imagenet"
            where published): sets the recipe's `model.weights` (a deviation). Weights
            trained on another input normalization bring theirs (`pretrained_start`).
        data_backend: what reads the records (`cvbench.tasks.sources`): "tf"
            (`cvbench.data.imagenet_dataset`), "dali"
            (`cvbench.data.dali.dataset.imagenet_dali_dataset`: NVIDIA DALI, the same recipe,
            element structure and evaluation cover; needs the records' index files and the
            `cvbench[dali]` extra), "grain" (`imagenet_grain_dataset`: no TensorFlow, the
            same recipe and batches, `options.data_workers` worker processes), or a
            `DataSource` object (`DaliSource(device=...)`, `GrainSource(workers=...)`, ...).
            `options.reader` "grain" chooses grain too.
        dali_device: with "dali": "cpu" (libjpeg-turbo) or "mixed" (nvJPEG on the GPU).

    `recipe` is `options.recipe` with the data's classes (`fit_classes`): the model, input
    size, loss, mixup and (through `prepare_run`) the optimizer, schedule and loss scaling are
    its; with mixup, top-1/top-5 score a mixed label's dominant class.

    `num_classes` and `class_names` (model index -> name) come from the records'
    `dataset_info.json` (`cvbench.data.dataset_info`); without one, `options.num_classes`
    is needed (`class_names` None); on synthetic data 1000 classes (`class_names` None).

    Raises:
        ValueError: an unknown model; records without metadata and no `num_classes`; a
            `num_classes` that the metadata disagrees with (naming both numbers and the file);
            a bad `data_backend` / `dali_device`; with "grain": synthetic data,
            `options.reader` "tf", and what the grain reader does not support
            (`RecordTask.reader`); with "dali": synthetic data, custom
            preprocess functions, `skip_corrupt` or a mixup recipe (tf.data features).

    Example:
        >>> task = ClassificationTask(TaskOptions(model="resnet18", num_classes=10))
        >>> task.image_size, task.num_classes, task.recipe.name, task.recipe.schedule.decay
        (224, 10, 'resnet18_cvbench', 'cosine')
    """

    name = CLASSIFICATION
    #: What can read its records (`data_backend`).
    data_backends = DATA_BACKENDS

    @classmethod
    def models(cls) -> list[str]:
        return list_models(task=CLASSIFICATION)

    def __init__(
        self,
        options: TaskOptions,
        *,
        train_preprocess: Callable | None = None,
        eval_preprocess: Callable | None = None,
        metrics: Callable[[], list] | None = None,
        weights: str | os.PathLike | None = None,
        data_backend: str | DataSource = "tf",
        dali_device: str = "cpu",
    ) -> None:
        if options.model not in self.models():
            raise ValueError(
                f"unknown classification model {options.model!r}; known: {', '.join(self.models())}"
            )
        self.options = options
        self.num_classes, self.class_names = _classes(options)
        _check_two_classes(self.num_classes, options)
        recipe = fit_classes(options.recipe, self.num_classes, reason=DATA_CLASSES_REASON)
        if weights is not None:
            recipe = recipe.with_overrides({"model.weights": weights}, reason="weights")
        self.recipe = pretrained_start(recipe)
        self.image_size = recipe.model_knobs.image_size
        self._train_preprocess = train_preprocess
        self._eval_preprocess = eval_preprocess
        self._metrics = metrics
        self._source = _chosen_source(data_backend, dali_device, options)
        self.data_backend = "tf" if self._source is None else self._source.name
        self.dali_device = getattr(self._source, "device", dali_device)
        self._check_backend()

    def data_source(self) -> DataSource | None:
        """The source `data_backend` chose (`DaliSource`, `GrainSource`, or the object
        given), or None for "tf" (tf.data, or grain when `options.reader` says so)."""
        return self._source

    def _check_backend(self) -> None:
        if self.data_backend == "grain":
            if self.options.reader == "tf":
                raise ValueError("data_backend='grain' and reader='tf' disagree; pass one")
            if self.options.data_dir is None:
                raise ValueError(
                    "the grain reader does not support synthetic data (no data_dir); use "
                    "data_backend='tf'"
                )
            self.reader()  # what grain does not support, named
        if self.data_backend != "dali":
            return
        unsupported = {
            "synthetic data (no data_dir)": self.options.data_dir is None,
            "train_preprocess / eval_preprocess": self._train_preprocess is not None
            or self._eval_preprocess is not None,
            "skip_corrupt": self.options.skip_corrupt,
            "max_pixels (its decoder has its own limits)": self.options.max_pixels
            != DEFAULT_MAX_PIXELS,
            f"mixup (alpha {self.mixup_alpha()})": bool(self.mixup_alpha()),
        }
        for what, present in unsupported.items():
            if present:
                raise ValueError(
                    f"the DALI data backend does not support {what}; use data_backend='tf'"
                )

    def restore_from_checkpoint(self, recorded: Callable[[], dict[str, Any]] | None = None) -> None:
        """`RecordTask.restore_from_checkpoint`; with the checkpoint's knobs (`recorded`,
        read only when needed) the input normalization a starting weights file decided is
        taken from them when that file is gone (`model.weights_normalization`); a
        checkpoint of an older cvbench, which records none, is resumed as it recorded
        itself (the knob unset; its preprocessing compared by the resume as always).

        Raises:
            ValueError: the file gone and a checkpoint of an older cvbench that does not
                record the normalization, while its preprocessing differs from the recipe's.
        """
        super().restore_from_checkpoint(recorded)
        m = self.recipe.model_knobs
        if recorded is None or m.weights is None:
            return
        told = m.weights == KERAS_IMAGENET or os.path.exists(m.weights)
        if told and m.weights_normalization is None:
            return  # not keras.applications' weights, told by the weights themselves
        knobs = recorded()
        if knobs.get("model.weights") != m.weights:
            return  # another start: the resume's own check names the difference
        if "model.weights_normalization" not in knobs:  # an older cvbench's checkpoint
            if m.weights_normalization is None:
                _check_unrecorded_normalization(self.recipe, knobs)
            else:  # told by the file: the run goes on as it recorded itself
                self.recipe = self.recipe.with_overrides(
                    {"model.weights_normalization": None},
                    reason="the checkpoint of an older cvbench records no normalization",
                )
            return
        source = knobs["model.weights_normalization"]
        if m.weights_normalization is None and source is not None:
            self.recipe = pretrained_start(
                self.recipe.with_overrides(
                    {"model.weights_normalization": source}, reason=f"the run of {m.weights}"
                )
            )

    def build_model(self) -> keras.Model:
        """The model of the recipe; without its starting weights when a checkpoint restores
        every weight (`restoring`).

        Raises:
            ValueError: restoring a run whose checkpoint does not record the ResNet variant
                its starting weights decide (a checkpoint of an older cvbench), when that
                file is no longer there to tell.
        """
        m = self.recipe.model_knobs
        unknown = m.weights is not None and m.variant is None and self.restoring
        if unknown and self.options.model in VARIANT_BY_WEIGHTS:
            raise ValueError(
                f"{self.options.model}: the checkpoint does not record the ResNet variant its "
                f"starting weights {m.weights} decide, and that file is not there to tell: "
                "put it back at that path"
            )
        return get_model(
            self.options.model,
            **builder_arguments(self.recipe, starting_weights=not self.restoring),
            input_shape=(self.image_size, self.image_size, 3),
            classifier_activation=None,
        )

    def loss(self) -> Callable:
        return SparseCrossEntropy(
            label_smoothing=self.recipe.loss.label_smoothing,
            smoothing_classes=self.recipe.loss.smoothing_classes,
        )

    def mixup_alpha(self) -> float:
        """The recipe's mixup alpha (0: none; training data only)."""
        return float(self.recipe.loss.mixup_alpha)

    def metrics(self) -> list:
        if self._metrics is not None:
            return self._metrics()
        return accuracy_metrics(self.num_classes)

    def synthetic_batch(self, batch_size: int, seed: int) -> tuple[Any, Any]:
        """NumPy `(images float32 [B, S, S, 3] ~ N(0, 1), labels int32 [B])`."""
        from cvbench.data.read.synthetic import synthetic_arrays

        return synthetic_arrays(batch_size, self.image_size, self.num_classes, seed=seed)

    def dataset_fn(self) -> Callable[..., Any]:
        """tf.data's reader of the records (`RecordSource`; DALI and grain are sources of
        their own, `data_source`)."""
        from cvbench.data import imagenet_dataset

        return imagenet_dataset

    def count_records(self, split: str) -> int:
        from cvbench.data import num_examples

        return num_examples(self.options.data_dir, split, skip_corrupt=self.options.skip_corrupt)

    def callers_own(self) -> tuple[str, ...]:
        """The recipe's parts this task's caller replaced (`train_preprocess`,
        `eval_preprocess`): named in the run's banner and recipe event."""
        hooks = {
            "training preprocessing": self._train_preprocess,
            "evaluation preprocessing": self._eval_preprocess,
        }
        return tuple(part for part, hook in hooks.items() if hook is not None)

    def train_options(self) -> dict[str, Any]:
        """The caller's `train_preprocess`, which replaces the recipe's preprocessing, else
        the recipe's `preprocessing`."""
        if self._train_preprocess is not None:
            return {"train_preprocess": self._train_preprocess}
        return {"preprocessing": self.preprocessing()}

    def train_dataset(self, dataset: Any, *, seed: int | None, distribution: Any) -> Any:
        """Mixup of the training batches when the recipe has it (labels become soft
        `[B, num_classes]`; `cvbench.data.read.mixup`), else `dataset` unchanged."""
        alpha = self.mixup_alpha()
        if not alpha:
            return dataset
        from cvbench.data.read.mixup import mixup

        return mixup(
            dataset,
            alpha=alpha,
            num_classes=self.num_classes,
            seed=seed,
            shard_index=distribution.rank,
        )

    def dataset_options(self) -> dict[str, Any]:
        # A record whose label is outside [0, num_classes) is an error naming it (a wrong
        # --num-classes would otherwise train on silently: a one-hot of zeros has loss 0).
        return {"num_classes": self.num_classes}

    def preprocessing(self) -> Any:
        """The recipe's `cvbench.data.ImagePreprocessing` (crops, scaling, decoder)."""
        return self.recipe.preprocessing

    def inputs(self) -> ClassifierInputs:
        """What the recipe's pipeline does to [0, 255] RGB (`cvbench.data.ClassifierInputs`:
        evaluation resize, normalization) and the dataset's class names: the one source of
        `input_normalization`, `model_info` and `user_model`."""
        names = getattr(self, "class_names", None)
        return ClassifierInputs(self.image_size, self.preprocessing(), names and tuple(names))

    def input_normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """`(mean, std)` with which the pipeline maps `[0, 255]` pixels to the model's input,
        `(x - mean) / std` (`ClassifierInputs.normalization`)."""
        return self.inputs().normalization()

    def evaluation_data(self, *, batch_size: int, distribution: Any) -> Any:
        """This rank's `(images, labels, weights)` validation batches (padding weighs 0),
        or two synthetic batches without data."""
        if self.options.data_dir is None:
            batch = keras.tree.map_structure(
                keras.ops.convert_to_tensor, self.synthetic_batch(batch_size, 1)
            )
            return list(repeated(batch, SYNTHETIC_EVAL_BATCHES)(0))
        if self._eval_preprocess is not None:  # replaces the recipe's preprocessing
            preprocess: dict[str, Any] = {"eval_preprocess": self._eval_preprocess}
        else:
            preprocess = {"preprocessing": self.preprocessing()}
        return self.read(
            self.evaluation_split, batch_size=batch_size, distribution=distribution, training=False,
            **preprocess,
        )  # fmt: skip

    def evaluate(self, trainer: Any, *, batch_size: int) -> dict[str, float]:
        """Loss, top-1 and (more than 5 classes) top-5 over the whole validation split,
        identical on every rank."""
        from cvbench.training.evaluation import evaluated_rows

        if self.options.data_dir is not None and self._count(self.evaluation_split) == 0:
            # no batch at all (Keras on JAX cannot even start): refused before evaluating
            self.check_evaluated(0, self.evaluation_split, trainer.distribution)
        data = self.evaluation_data(batch_size=batch_size, distribution=trainer.distribution)
        results = trainer.evaluate(data)
        # every record skipped as corrupt, or none there: refused, not "top-1 0"
        self.check_evaluated(
            evaluated_rows(trainer.training_model), self.evaluation_split, trainer.distribution
        )
        if trainer.is_chief:
            warn_nonfinite_outputs(trainer.metrics, loss=results.get("loss"))
        return results

    # ----------------------------------------------------------------- model files
    def model_info(self) -> ModelInfo:
        """What inference needs: the class names (the dataset's, else `"0"`, `"1"`, ...),
        the input size and the recipe's evaluation resize rule and crop fraction (a task with
        its own `eval_preprocess` states its own rule with `dataclasses.replace`)."""
        return self.inputs().model_info(self.num_classes, model=self.options.model)

    def user_model(self, model: keras.Model) -> keras.Model:
        """The trained `model` as users get it: built-in Keras layers only
        (`to_plain_keras`), taking `[0, 255]` RGB (the data pipeline's normalization put in
        front), logits out."""
        return self.inputs().user_model(model)

    def postprocess(self) -> None:
        """None: a classifier's outputs (logits) are its predictions."""
        return None

    def from_user_model(self, model: keras.Model) -> keras.Model:
        """A model taking `[0, 255]` RGB (a model file's, `user_model`'s) as this task's
        evaluation pipeline feeds it: its normalization undone in front (`x * std + mean`)."""
        from cvbench.utils.plain_keras import with_input_normalization

        means, stds = self.input_normalization()
        return with_input_normalization(
            model,
            mean=[-m / s for m, s in zip(means, stds, strict=True)],
            std=[1 / s for s in stds],
            name="denormalize",
        )


#: The models whose architecture the starting weights decide (keras.applications' files of
#: these ResNets are v1, `cvbench.models.resnet`): `model.variant` records it.
VARIANT_BY_WEIGHTS = ("resnet50", "resnet101", "resnet152")
#: keras.applications' ImageNet weights, as `model.weights` names them.
KERAS_IMAGENET = "imagenet"


def pretrained_start(recipe: Any) -> Any:
    """`recipe` feeding its model the input its starting weights were trained on.

    keras.applications' weights (`"imagenet"` or a file of theirs) come with their own
    normalization (`cvbench.zoo.weights_normalization`): ResNets caffe-style
    (RGB minus `(123.68, 116.779, 103.939)`, unscaled, the model's stem permuted from BGR),
    Inception V3 `x / 127.5 - 1`. The recipe's `preprocessing` takes it (deviations whose
    reason says so), so training, evaluation and every model file (`ClassifierInputs`
    normalization, `user_model`) apply it; the model knobs keras.applications' layers fix
    (batch-norm epsilon, Inception V3's last pooling: `zoo.weights_architecture`)
    are set to theirs. A ResNet is then built as v1 (the builder's
    `variant=None`), which the `model.weights` deviation states. The normalization is
    recorded (`model.weights_normalization`), and a recipe that records it (a checkpoint's)
    is not told it by reading the weights again. Other weights: `recipe`.

    Example:
        >>> from cvbench.tasks.recipes import default_recipe
        >>> r = default_recipe("resnet50").with_overrides(
        ...     {"model.weights": "imagenet"}, reason="--weights")
        >>> p = pretrained_start(r).preprocessing
        >>> p.mean, p.std, p.input_scaling
        ((123.68, 116.779, 103.939), (1.0, 1.0, 1.0), 'mean_std')
    """
    given = recipe.deviation("model.weights")
    flag = given.reason if given is not None else "weights"
    norm = _starting_normalization(recipe)
    if norm is None:
        return _own_weights_variant(recipe, flag)
    return _with_weights_normalization(recipe, norm, flag)


def _starting_normalization(recipe: Any) -> InputNormalization | None:
    """The normalization the recipe's starting weights were trained on: the one it records
    (`model.weights_normalization`), else told by the weights (`weights_normalization`:
    None for a file no longer there)."""
    recorded = recipe.model_knobs.weights_normalization
    if recorded is None:
        return weights_normalization(recipe.model, recipe.model_knobs.weights)
    # keras.applications' normalization of this model, told without reading any file
    norm = weights_normalization(recipe.model, KERAS_IMAGENET)
    if norm is None or norm.source != recorded:
        raise ValueError(
            f"model.weights_normalization {recorded!r}: keras.applications' {recipe.model} "
            f"weights are trained on {norm.source if norm else 'no'} normalization"
        )
    return norm


def _own_weights_variant(recipe: Any, flag: str) -> Any:
    """`recipe` recording `model.variant` v1.5 when it starts a bottleneck ResNet from a
    weight file that is not keras.applications' (so that a model restored from a checkpoint
    is built the same without reading the file: `ClassificationTask.build_model`)."""
    m = recipe.model_knobs
    if m.weights is None or recipe.model not in VARIANT_BY_WEIGHTS:
        return recipe
    if m.variant is not None or not os.path.exists(m.weights):
        return recipe  # recorded by the run (its checkpoint's knobs), or unknown here
    return recipe.with_overrides(
        {"model.variant": "v1.5"},
        reason=f"{flag}: not keras.applications' weights: the recipe's ResNet v1.5",
    )


def _with_weights_normalization(recipe: Any, norm: InputNormalization, flag: str) -> Any:
    """`recipe` with keras.applications' input normalization `norm` and the architecture
    their model has (`pretrained_start`), recording `norm` as `model.weights_normalization`."""
    if norm.source == "inception":
        changes: dict[str, Any] = {"preprocessing.input_scaling": "inception"}
    else:
        changes = {
            "preprocessing.input_scaling": "mean_std",
            "preprocessing.mean": norm.mean,
            "preprocessing.std": norm.std,
        }
    changes["model.weights_normalization"] = norm.source
    recipe = recipe.with_overrides(
        changes,
        reason=f"{flag}: keras.applications' weights were trained on {norm.source} input "
        f"normalization (RGB mean {norm.mean}, std {norm.std})",
    )
    layout = weights_architecture(recipe.model, KERAS_IMAGENET)  # reads no file
    architecture = {f"model.{knob}": value for knob, value in layout.items()}
    recipe = recipe.with_overrides(
        architecture, reason=f"{flag}: keras.applications' {recipe.model} has this layout"
    )
    if norm.source != "caffe":
        return recipe
    return recipe.with_overrides(
        {"model.weights": recipe.model_knobs.weights, "model.variant": "v1"},
        reason=f"{flag}: keras.applications' ResNet v1 weights: the model is built as "
        "ResNet v1 (stride in the first 1x1 conv; the recipe's is v1.5) and its stem "
        "permuted to take RGB",
    )


def _check_unrecorded_normalization(recipe: Any, knobs: dict[str, Any]) -> None:
    """Refuses a checkpoint (`knobs`) of an older cvbench, recording no
    `model.weights_normalization`, whose preprocessing differs from `recipe`'s: its starting
    weights decided it, and their file is not there to tell. Compared as the resume compares
    (`compare_settings`); a knob one side lacks (another version's) is not compared."""
    differ = [
        knob
        for knob, (stored, now) in compare_settings(knobs, dict(recipe.knobs())).items()
        if knob.startswith("preprocessing.") and stored is not UNSET and now is not UNSET
    ]
    if differ:
        raise ValueError(
            f"{recipe.model}: the checkpoint does not record the input normalization its "
            f"starting weights {recipe.model_knobs.weights} decide ({', '.join(differ)} "
            "differ), and that file is not there to tell: put it back at that path"
        )


def _hard_labels(y_true: Any, y_pred: Any) -> Any:
    """Integer labels as they are; soft `[B, C]` labels (mixup) as their dominant class."""
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == y_pred.shape[-1]:
        return keras.ops.argmax(y_true, axis=-1)
    return y_true


#: The top-k accuracies a classifier reports (`accuracy_metrics`), each where k < its classes.
TOP_K = (1, 5)


def accuracy_metrics(num_classes: int) -> list[keras.metrics.Metric]:
    """The accuracies a classifier of `num_classes` classes reports, `top{k}` for each k of
    `TOP_K` below `num_classes`: top-5 of 5 classes or fewer is 1.0 whatever the model, so
    it is not applicable and left out (no `top5` key in eval's results, `--json`,
    `results.json`, the training's progress and validation logs). Each one
    `top_k_accuracy`'s (integer and soft labels; a non-finite row is never correct).

    Example:
        >>> [m.name for m in accuracy_metrics(1000)], [m.name for m in accuracy_metrics(5)]
        (['top1', 'top5'], ['top1'])
    """
    return [top_k_accuracy(k, f"top{k}") for k in TOP_K if k < num_classes]


def top_k_accuracy(k: int, name: str) -> keras.metrics.Metric:
    """Top-`k` accuracy that takes integer labels and soft (mixed) ones alike (the Sparse
    metrics refuse soft labels, the Categorical ones score integer labels as 0); a row of
    logits with a NaN or infinite value is never correct, on every backend (Keras' own
    metrics score a NaN row as class 0 on TensorFlow and, for top-k, as a hit on JAX).
    `nonfinite` counts those rows (weighted as the accuracy: padding rows not). An integer
    label outside `[0, C)` is never a hit either (`SparseCrossEntropy` scores it NaN).

    Example:
        >>> import numpy as np
        >>> m = top_k_accuracy(1, "top1")
        >>> m.update_state(np.array([0, 1, 0]), np.array([[2.0, 1], [0, 3], [np.nan, 0]]))
        >>> round(float(m.result()), 4), int(m.nonfinite.value)  # rows 0, 1 right; 2 never
        (0.6667, 1)
    """
    return FiniteTopKAccuracy(k=k, name=name)


class FiniteTopKAccuracy(keras.metrics.Metric):
    """`top_k_accuracy`'s metric: the weighted mean of "the label is among the `k` best
    logits and every logit of the row is finite" (k = 1: the arg max, ties to the lowest
    class, as `SparseCategoricalAccuracy`; k > 1: `SparseTopKCategoricalAccuracy`'s rule)."""

    def __init__(self, k: int, name: str, dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.k = int(k)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")
        self.nonfinite = self.add_variable(shape=(), initializer="zeros", name="nonfinite")

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        ops = keras.ops
        y_pred = ops.cast(y_pred, "float32")
        labels = _hard_labels(y_true, y_pred)
        if self.k == 1:
            hit = keras.metrics.sparse_categorical_accuracy(labels, y_pred)
        else:
            hit = keras.metrics.sparse_top_k_categorical_accuracy(labels, y_pred, k=self.k)
        hit = ops.reshape(ops.cast(hit, "float32"), (-1,))
        flat = ops.reshape(ops.cast(labels, "int32"), (-1,))
        in_range = ops.logical_and(flat >= 0, flat < ops.shape(y_pred)[-1])
        hit = ops.where(in_range, hit, 0.0)  # a label outside [0, C) is never a hit
        finite = ops.all(ops.isfinite(y_pred), axis=-1)
        weight = ops.ones_like(hit) if sample_weight is None else sample_weight
        weight = ops.reshape(ops.cast(weight, "float32"), (-1,))
        self.total.assign_add(ops.sum(ops.where(finite, hit, 0.0) * weight))
        self.count.assign_add(ops.sum(weight))
        self.nonfinite.assign_add(ops.sum(ops.where(finite, 0.0, ops.cast(weight > 0, "float32"))))

    def result(self) -> Any:
        return keras.ops.divide_no_nan(self.total, self.count)

    def get_config(self) -> dict[str, Any]:
        return {"k": self.k, "name": self.name, "dtype": self.dtype}


def warn_nonfinite_outputs(metrics: Any, loss: float | None = None) -> None:
    """Warns (one line under the CLI: `cvbench eval: warning: ...`) when the evaluation
    just run by metrics `metrics` saw images whose logits were not all finite (the first
    `FiniteTopKAccuracy`'s count, summed over ranks); they counted as wrong. Without such
    images, a `loss` that is not finite is the labels': `SparseCrossEntropy` scores a label
    outside the model's classes NaN, and the warning says so.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_nonfinite_outputs([], loss=float("nan"))
        >>> print(str(caught[0].message)[:61])
        the evaluation loss is nan: a label outside [0, classes) (the
    """
    import math
    import warnings

    for metric in metrics:
        if isinstance(metric, FiniteTopKAccuracy):
            count = int(round(float(keras.ops.convert_to_numpy(metric.nonfinite.value))))
            if count:
                warnings.warn(
                    f"{count} image(s) had NaN or infinite logits: counted as wrong "
                    "predictions (the model's outputs are broken)",
                    stacklevel=2,
                )
                return
            break
    if loss is not None and not math.isfinite(loss):
        warnings.warn(
            f"the evaluation loss is {loss}: a label outside [0, classes) "
            "(the model's outputs) scores NaN (SparseCrossEntropy); check the data's labels "
            "against the class count (0-based)",
            stacklevel=2,
        )


def _chosen_source(
    data_backend: str | DataSource, dali_device: str, options: TaskOptions
) -> DataSource | None:
    """The `DataSource` of `ClassificationTask(data_backend=..., dali_device=...)`: a source
    object as given, "dali" and "grain" theirs, "tf" None (`RecordTask.source` decides).

    Raises:
        ValueError: an unknown name or device.
    """
    if not isinstance(data_backend, str):
        if not callable(getattr(data_backend, "read", None)):
            raise ValueError(
                f"data_backend must be one of {DATA_BACKENDS} or a DataSource, got {data_backend!r}"
            )
        return data_backend
    if data_backend not in DATA_BACKENDS:
        raise ValueError(f"data_backend must be one of {DATA_BACKENDS}, got {data_backend!r}")
    if dali_device not in DALI_DEVICES:
        raise ValueError(f"dali_device must be one of {DALI_DEVICES}, got {dali_device!r}")
    if data_backend == "dali":
        return DaliSource(dali_device)
    if data_backend == "grain":
        return GrainSource(options.data_workers)
    return None


def _check_two_classes(num_classes: int, options: TaskOptions) -> None:
    """A classifier of one class is refused: its softmax is 1 whatever the image, so its
    loss is 0, nothing is learned and every accuracy is 1.0 (a run that looks perfect)."""
    if num_classes >= 2:
        return
    where = f"num_classes={num_classes}"
    if options.data_dir is not None and options.num_classes is None:
        where = f"the records in {options.data_dir} hold {num_classes} class"
    raise ValueError(
        f"a classifier needs at least 2 classes; got {num_classes} ({where}): the softmax of "
        "one class is 1 for any image, so nothing would be learned and every accuracy would "
        "read 1.0"
    )


def _classes(options: TaskOptions) -> tuple[int, tuple[str, ...] | None]:
    """`(num_classes, class_names)`: the records' `dataset_info.json` (an explicit
    `num_classes` must agree), else `options.num_classes` (records without metadata), else
    the recipe's on synthetic data."""
    info = records_info(options, kind="imagenet")
    if info is None:
        return options.recipe.model_knobs.num_classes, None
    if options.num_classes is not None and options.num_classes != info.num_classes:
        raise class_count_error(options, info)
    return info.num_classes, info.class_names
