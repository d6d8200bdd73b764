"""Classifying images with a trained classifier: top-k class names and probabilities.

In the spirit of keras-hub's `ImageClassifier.predict` and torchvision's
`weights.meta["categories"]`: the model file carries its class names (`ModelInfo`), so the
results name the classes. Images are read and resized as `cvbench.inference.images` says;
the model outputs logits and the probabilities are their softmax.

Example:
    >>> import keras, numpy as np
    >>> from cvbench.inference import ModelInfo
    >>> from cvbench.inference.classification import classify
    >>> model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.GlobalAveragePooling2D(),
    ...                           keras.layers.Dense(2, kernel_initializer="ones")])
    >>> info = ModelInfo(task="classification", class_names=("a", "b"), image_size=(8, 8))
    >>> [c.class_names for c in classify(model, np.zeros((1, 8, 8, 3)), info=info, top_k=1)]
    [('a',)]
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from cvbench.inference.images import (
    MAX_IMAGE_PIXELS,
    Batch,
    OnSkip,
    ReadOptions,
    Source,
    predict_batches,
)
from cvbench.inference.resolve import resolve_model
from cvbench.utils.model_file import ModelInfo


@dataclass(frozen=True)
class Classification:
    """The top-k classes of one image.

    Attributes:
        source: the image's path, or its index in an array or dataset input.
        class_ids: class indices, by decreasing probability (ties: lower index first);
            empty when the model's logits for the image were not all finite (NaN or
            infinite: a broken output ranks no class, as evaluation counts it wrong).
        class_names: their names (`ModelInfo.class_names`).
        scores: their probabilities (softmax of the logits over all classes).
        image_size: `(height, width)` of the original image in pixels.
    """

    source: Source
    class_ids: tuple[int, ...]
    class_names: tuple[str, ...]
    scores: tuple[float, ...]
    image_size: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the line `cvbench predict --json` prints); a score that is not
        finite (a model that outputs NaN) is None (JSON `null`)."""
        return {
            "source": self.source,
            "image_size": list(self.image_size),
            "classes": [
                {"class_id": i, "class_name": n, "score": finite_or_none(s)}
                for i, n, s in zip(self.class_ids, self.class_names, self.scores, strict=True)
            ],
        }


def finite_or_none(value: float) -> float | None:
    """`value` as a float, or None when it is NaN or infinite (strict JSON has neither).

    Example:
        >>> finite_or_none(0.5), finite_or_none(float("nan")), finite_or_none(float("-inf"))
        (0.5, None, None)
    """
    value = float(value)
    return value if math.isfinite(value) else None


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64 (stable: the maximum is subtracted first)."""
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # a row with NaN or inf: NaN (`classify` ranks none)
        shifted = logits - logits.max(axis=-1, keepdims=True)
        exp = np.exp(shifted)
        return exp / exp.sum(axis=-1, keepdims=True)


def top_k_indices(probabilities: np.ndarray, k: int) -> np.ndarray:
    """`(B, k)` indices of the `k` largest probabilities per row, largest first, ties by lower
    index."""
    return np.argsort(-probabilities, axis=-1, kind="stable")[:, :k]


def classify(
    model: Any,
    inputs: Any,
    *,
    info: ModelInfo | None = None,
    top_k: int = 5,
    batch_size: int = 32,
    skip_corrupt: bool = False,
    on_skip: OnSkip | None = None,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
) -> list[Classification]:
    """Classifies images with a classifier.

    Args:
        model: a `keras.Model` outputting `(B, num_classes)` logits from `(B, H, W, 3)`
            float32 RGB in `[0, 255]`, or the path of a `.keras` file with its `ModelInfo`.
        inputs: image paths or folders, an array `(H, W, 3)` / `(B, H, W, 3)`, a list of
            arrays, or a `tf.data.Dataset` of images (see `cvbench.inference.images`).
        info: the model's `ModelInfo`; default the file's. Required with a model object,
            which does not say what input it expects (`default_info(model,
            task="classification")` states the defaults: [0, 255] RGB, its input size,
            "center_crop", classes named "0", "1", ...).
        top_k: classes kept per image (at most the number of classes).
        batch_size: images per model call (fewer where `batch_size` model inputs would hold
            more than `max_image_pixels` pixels).
        skip_corrupt: skip image files that cannot be read or are over `max_image_pixels`
            (no result for them) instead of raising.
        on_skip: called with the `cvbench.inference.images.ImageFileError` of each file
            skipped.
        max_image_pixels: the largest width x height of an image file decoded (checked from
            its header first).

    Returns:
        One `Classification` per image, in input order.

    Raises:
        ValueError: for `top_k < 1`, a detector, a model file or object without `ModelInfo`, an
            `info` that contradicts the model (an `image_size` that is not its fixed input
            size, a class count that is not its outputs'), a model output that is not
            `(B, num_classes)`, or bad inputs (naming the file).
        FileNotFoundError: for a missing model or image file.
        BadFileError: (a `ValueError`) for a malformed model file, a model input
            (`ModelInfo.image_size`) over `max_image_pixels`, or an image file that cannot be
            read, is corrupt or is over a limit (unless `skip_corrupt`).
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1; got {top_k!r}")
    model, info = resolve_model(model, info=info, task="classification")
    read = ReadOptions(batch_size, skip_corrupt, on_skip, max_image_pixels)
    results_of = functools.partial(_classifications, info=info, k=min(top_k, info.num_classes))
    return predict_batches(model, inputs, info, results_of, read=read)


def _classifications(logits: Any, batch: Batch, *, info: ModelInfo, k: int) -> list[Classification]:
    """The top-`k` `Classification` of each image of `batch` from the model's logits."""
    logits = np.asarray(logits)
    if logits.shape != (len(batch.sources), info.num_classes):
        raise ValueError(
            f"the classifier must output (batch, {info.num_classes}) logits for "
            f"{info.num_classes} class names; got {logits.shape}"
        )
    probabilities = softmax(logits)
    ranked = top_k_indices(probabilities, k)
    finite = np.isfinite(logits).all(axis=-1)  # a row with NaN or inf ranks no class
    return [
        Classification(
            source=batch.sources[row],
            class_ids=tuple(int(i) for i in ids),
            class_names=tuple(info.class_names[i] for i in ids),
            scores=tuple(float(probabilities[row, i]) for i in ids),
            image_size=batch.geometries[row].original_size,
        )
        for row, ids in enumerate(r if ok else r[:0] for r, ok in zip(ranked, finite, strict=True))
    ]
