"""Classification loss: softmax cross-entropy on integer or soft labels, with label smoothing."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="cvbench")
class SparseCrossEntropy(keras.losses.Loss):
    """Softmax cross-entropy from logits and integer or soft labels, with label smoothing.

    With smoothing `s` the target of class `i` is `(1 - s) * y_i + s / K`, where `y` is the
    one-hot encoding of an integer label (or the soft label itself) and `K` is
    `smoothing_classes` (default: the model's `C` outputs, as in
    `keras.losses.CategoricalCrossentropy(label_smoothing=s)`). Computed in float32 whatever
    the logits' dtype.

    `smoothing_classes=1001` reproduces NVIDIA DeepLearningExamples' ResNet-50 v1.5
    (TensorFlow/Classification/ConvNets `model/resnet.py` l.151-153 smooths over
    `n_classes=1001`, `main.py` l.61, one output more than the 1,000 labels, which are
    0-based, `utils/dali_utils.py` l.159) on a model with the 1,000 outputs only. The mass
    `s * (K - C) / K` of the missing outputs is dropped, not renormalized: then the loss is
    DLE's up to a term that does not depend on the model's `C` logits, and its gradient with
    respect to them is DLE's, `p_i - t_i`, whenever DLE's extra output sits at its target
    probability `s / K` (the only value it ever learns, since no label names it: it is where
    its own gradient vanishes). Both losses have the same minimizer, `softmax = t / sum(t)`.
    Renormalizing the target would scale the gradient by `1 / sum(t)`; smoothing over the
    1,000 outputs instead changes the target itself (0.1 / 1000 vs 0.1 / 1001 off the label).

    Example:
        >>> loss = SparseCrossEntropy(label_smoothing=0.0)
        >>> round(float(loss([0], [[0.0, 0.0]])), 4)  # -log(1/2)
        0.6931
        >>> round(float(loss([[0.5, 0.5]], [[0.0, 0.0]])), 4)  # a soft label (mixup)
        0.6931

    Args:
        label_smoothing: `s` in [0, 1).
        smoothing_classes: `K`, the number of classes `s` is spread over, at least the
            model's `C` outputs; None: `C`.
        name: loss name.
        **kwargs: `keras.losses.Loss` arguments (reduction).

    Call arguments:
        y_true: [batch] integer labels in [0, C), or [batch, C] soft labels (rows of class
            probabilities summing to 1, e.g. mixup's): labels shaped like the logits are soft
            (so a [batch, 1] integer label with C = 1 is read as soft; it is the same target).
        y_pred: [batch, C] logits.

    Raises:
        ValueError: at construction, for `s` outside [0, 1) or `K` not a positive int; at the
            call, for `K` below the logits' `C` or soft labels whose width is not `C`.

    An integer label outside [0, C) gets a NaN loss (a row is never scored as a fit, as its
    all-zero one-hot target would be): the Trainer's whole-step check then skips the step and
    reports it, and an evaluation's loss is NaN (the classification task warns, naming this
    cause). The loss cannot raise an error naming the label (an assertion inside the train
    step made TensorFlow's deterministic runs differ between processes, and XLA and JAX drop
    run-time assertions anyway). The input pipeline does: `imagenet_dataset(num_classes=C)`,
    which the classification task always passes, raises an error naming the label, the class
    count, the file and the record. Array data has no pipeline: `Trainer.fit` and
    `Trainer.evaluate` call `check_targets` on its labels, on the host, before the first step
    (`check_loss_targets`).
    """

    def __init__(
        self,
        label_smoothing: float = 0.0,
        smoothing_classes: int | None = None,
        name: str = "sparse_cross_entropy",
        **kwargs,
    ) -> None:
        super().__init__(name=name, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
        if smoothing_classes is not None and (
            isinstance(smoothing_classes, bool)
            or not isinstance(smoothing_classes, int)
            or smoothing_classes < 1
        ):
            raise ValueError(
                f"smoothing_classes must be a positive int or None, got {smoothing_classes!r}"
            )
        self.label_smoothing = float(label_smoothing)
        self.smoothing_classes = smoothing_classes

    def call(self, y_true, y_pred):
        logits = ops.cast(y_pred, "float32")
        y_true = ops.convert_to_tensor(y_true)
        num_classes = logits.shape[-1]
        valid = None  # integer labels: which rows' labels are in [0, C)
        if len(y_true.shape) == len(logits.shape) and y_true.shape[-1] == num_classes:
            target = ops.cast(y_true, "float32")
        elif len(y_true.shape) == len(logits.shape) and y_true.shape[-1] != 1:
            raise ValueError(
                f"soft labels must have the logits' {num_classes} classes, got labels of "
                f"shape {tuple(y_true.shape)} for logits of shape {tuple(logits.shape)}"
            )
        else:
            labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
            classes = ops.shape(logits)[-1]
            target = ops.one_hot(labels, classes, dtype="float32")
            valid = ops.logical_and(labels >= 0, labels < classes)
        if self.label_smoothing:
            s = self.label_smoothing
            spread = self._spread(num_classes, ops.shape(logits)[-1])
            target = target * (1.0 - s) + s / spread
        log_probs = ops.log_softmax(logits, axis=-1)
        loss = -ops.sum(target * log_probs, axis=-1)
        if valid is None:
            return loss
        # a label outside [0, C): NaN, never a fit (its one-hot is all zeros, a loss of 0)
        return ops.where(valid, loss, ops.full_like(loss, float("nan")))

    def check_targets(self, y_true: Any, num_outputs: int) -> None:
        """Checks array labels on the host, as the call reads them against `num_outputs`
        logits: `[rows, num_outputs]` soft labels pass, integer labels must be integers in
        `[0, num_outputs)` (`check_sparse_labels`).

        Example:
            >>> SparseCrossEntropy().check_targets(np.array([2, 7]), 3)
            Traceback (most recent call last):
            ...
            ValueError: label 7 of row 1 is outside [0, 3) (the model's 3 outputs)

        Raises:
            ValueError: naming the first bad row, its label and the class count; or soft
                labels whose width is not `num_outputs`.
        """
        y_true = np.asarray(y_true)
        if y_true.ndim >= 2 and y_true.shape[-1] == num_outputs:
            return  # soft labels (or a [rows, 1] label with one output: the same target)
        if y_true.ndim >= 2 and y_true.shape[-1] != 1:
            raise ValueError(
                f"soft labels must have the logits' {num_outputs} classes, got labels of "
                f"shape {y_true.shape}"
            )
        check_sparse_labels(y_true, num_outputs)

    def _spread(self, static_classes, dynamic_classes):
        if self.smoothing_classes is None:
            return ops.cast(dynamic_classes, "float32")
        if static_classes is not None and self.smoothing_classes < static_classes:
            raise ValueError(
                f"smoothing_classes={self.smoothing_classes} is below the logits' "
                f"{static_classes} classes"
            )
        return float(self.smoothing_classes)

    def get_config(self) -> dict:
        config = super().get_config()
        config["label_smoothing"] = self.label_smoothing
        config["smoothing_classes"] = self.smoothing_classes
        return config


def check_sparse_labels(labels: Any, num_classes: int, *, ignore_class: int | None = None) -> None:
    """Checks integer class labels on the host: each row's label an integer in
    `[0, num_classes)` (or `ignore_class`), named before the first step (in the step, a label
    out of range is a NaN loss for `SparseCrossEntropy`, a graph error for Keras' loss under
    TensorFlow); a float label such as 1.5 would be cast to 1.

    Args:
        labels: `[rows, ...]` labels (`[rows]`, `[rows, 1]`, or one per pixel), any integer,
            bool or float dtype.
        num_classes: the model's outputs.
        ignore_class: a label allowed outside the range (Keras' `ignore_class`).

    Raises:
        ValueError: naming the first offending row (its index in `labels`), its label and
            `num_classes`.
    """
    labels = np.asarray(labels)
    if labels.ndim < 1 or labels.dtype.kind not in "biuf":
        raise ValueError(
            f"integer labels must be numbers, one row per example, got {labels.dtype} labels "
            f"of shape {labels.shape}"
        )
    if labels.dtype.kind == "f":
        bad = ~np.isfinite(labels)
        bad[~bad] = labels[~bad] != np.round(labels[~bad])
        if bad.any():
            where = tuple(np.argwhere(bad)[0])
            raise ValueError(
                f"label {labels[where].item()} of row {where[0]} is not an integer class"
            )
    bad = (labels < 0) | (labels >= num_classes)
    if ignore_class is not None:
        bad &= labels != ignore_class
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        label = labels[where].item()
        raise ValueError(
            f"label {int(label) if isinstance(label, float) else label} of row {where[0]} is "
            f"outside [0, {num_classes}) (the model's {num_classes} outputs)"
        )


def check_loss_targets(loss: Any, y_true: Any, num_outputs: int) -> None:
    """Checks array targets on the host for `loss`, where it can say what they must be: the
    loss's own `check_targets(y_true, num_outputs)` hook (`SparseCrossEntropy`), or the
    integer-label rule of `check_sparse_labels` for Keras' `SparseCategoricalCrossentropy`
    (honouring its `ignore_class`); any other loss: nothing checked.

    Example:
        >>> sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        >>> check_loss_targets(sparse, np.array([0, -1]), 3)
        Traceback (most recent call last):
        ...
        ValueError: label -1 of row 1 is outside [0, 3) (the model's 3 outputs)

    Raises:
        ValueError: targets the loss would read wrong, named (first row, label, outputs).
    """
    if hasattr(loss, "check_targets"):
        loss.check_targets(y_true, num_outputs)
    elif isinstance(loss, keras.losses.SparseCategoricalCrossentropy):
        ignore = getattr(loss, "_fn_kwargs", {}).get("ignore_class")
        check_sparse_labels(y_true, num_outputs, ignore_class=ignore)
