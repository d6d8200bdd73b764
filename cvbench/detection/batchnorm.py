"""Batch normalization whose statistics can be frozen while its scale and offset train.

SSD320 v1.2 trains with `freeze_batchnorm: true`: every batch norm normalizes with its moving
mean and variance (never the batch's, never updating them), while gamma and beta stay
trainable (the OD API passes `is_training=False` to batch norm, not `trainable=False`).
Keras' `BatchNormalization(trainable=False)` would freeze gamma and beta as well; this layer
keeps them trainable and only fixes the statistics.

At inference it is `BatchNormalization` exactly: the model files cvbench writes for users
hold a plain `BatchNormalization` in its place (`cvbench.utils.plain_keras.to_plain_keras`).
"""

from __future__ import annotations

from typing import Any

import keras

from cvbench.models.batchnorm import FusedBatchNormalization


@keras.saving.register_keras_serializable(package="cvbench")
class FreezableBatchNormalization(FusedBatchNormalization):
    """`keras.layers.BatchNormalization` with a `frozen` switch (inference statistics always),
    computed as `cvbench.models.batchnorm.FusedBatchNormalization` computes it.

    Args:
        frozen: normalize with the moving statistics even when called with `training=True`,
            and never update them. Gamma and beta remain trainable.
        **kwargs: as `FusedBatchNormalization` (`keras.layers.BatchNormalization`'s and
            `fused`).

    Example:
        >>> import numpy as np
        >>> bn = FreezableBatchNormalization(frozen=True)
        >>> x = np.full((2, 3), 5.0, "float32")
        >>> y = bn(x, training=True)  # moving mean 0, variance 1: y = x / sqrt(1 + 1e-3)
        >>> round(float(y[0, 0]), 4)
        4.9975
    """

    def __init__(self, *, frozen: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.frozen = bool(frozen)

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        if self.frozen:
            training = False
        return super().call(inputs, training=training, mask=mask)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "frozen": self.frozen}
