"""Classification loss: softmax cross-entropy on integer labels, with label smoothing."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="cvbench")
class SparseCrossEntropy(keras.losses.Loss):
    """Softmax cross-entropy from logits and integer labels, with label smoothing.

    With smoothing `s` over `C` classes the target is `(1 - s) * one_hot + s / C`, as in
    `keras.losses.CategoricalCrossentropy(label_smoothing=s)` and NVIDIA's recipe (s = 0.1).
    Computed in float32 whatever the logits' dtype.

    Example:
        >>> loss = SparseCrossEntropy(label_smoothing=0.0)
        >>> round(float(loss([0], [[0.0, 0.0]])), 4)  # -log(1/2)
        0.6931

    Args:
        label_smoothing: `s` in [0, 1).
        name: loss name.
        **kwargs: `keras.losses.Loss` arguments (reduction).

    Call arguments:
        y_true: [batch] integer labels in [0, C).
        y_pred: [batch, C] logits.

    A label outside [0, C) one-hot encodes to zeros and gets a loss of 0: the loss does not
    check (an assertion inside the train step made TensorFlow's deterministic runs differ
    between processes, and XLA and JAX drop run-time assertions anyway). The input pipeline
    does: `imagenet_dataset(num_classes=C)`, which the classification task always passes,
    raises an error naming the label, the class count, the file and the record.
    """

    def __init__(
        self, label_smoothing: float = 0.0, name: str = "sparse_cross_entropy", **kwargs
    ) -> None:
        super().__init__(name=name, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        logits = ops.cast(y_pred, "float32")
        num_classes = ops.shape(logits)[-1]
        labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
        target = ops.one_hot(labels, num_classes, dtype="float32")
        if self.label_smoothing:
            s = self.label_smoothing
            target = target * (1.0 - s) + s / ops.cast(num_classes, "float32")
        log_probs = ops.log_softmax(logits, axis=-1)
        return -ops.sum(target * log_probs, axis=-1)

    def get_config(self) -> dict:
        config = super().get_config()
        config["label_smoothing"] = self.label_smoothing
        return config
