"""ImageNet starting points: the files keras.applications publishes, fetched as Keras does.

`weights="imagenet"` in `resnet50` / `resnet101` / `resnet152` (with `variant="v1"`, the
keras.applications layout) and in `inception_v3` fetches keras.applications' own file with
`keras.utils.get_file` from its published URL, checks its published MD5 hash and caches it
where Keras caches it (`cache_subdir="models"` under `$KERAS_HOME`, else `~/.keras`), so a
file keras.applications already downloaded is reused, and the other way round.

The URLs and hashes are keras.applications' (Keras 3.15, `keras/src/applications/resnet.py`
`BASE_WEIGHTS_PATH` and `WEIGHTS_HASHES`, `inception_v3.py` `WEIGHTS_PATH`,
`WEIGHTS_PATH_NO_TOP` and the `file_hash` arguments of its `get_file` calls).

    >>> PUBLISHED[("resnet50", False)].fname
    'resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5'

Another number of classes than the files' 1000 gets a new classifier: the `_notop` file is
fetched and the head keeps the builder's initialisation (`new_head_message` states it).

The input normalization each file was trained with is part of the model's contract
(`weights_normalization`): keras.applications' ResNets take caffe-style BGR minus the means
(103.939, 116.779, 123.68), unscaled; cvbench's ResNet builders permute the first
convolution's input channels when loading them (`rgb_stem`), so the model takes RGB minus
the same means (`CAFFE_MEAN_RGB`, std 1). Inception V3 takes `x / 127.5 - 1` (mean = std =
127.5). A classification task whose recipe starts from such weights feeds that normalization
(`cvbench.tasks.classification`), and its model files put it in front of the model.

    >>> weights_normalization("resnet50", "imagenet")
    InputNormalization(mean=(123.68, 116.779, 103.939), std=(1.0, 1.0, 1.0), source='caffe')
"""

from __future__ import annotations

import os
from dataclasses import dataclass

IMAGENET = "imagenet"

_RESNET_BASE = "https://storage.googleapis.com/tensorflow/keras-applications/resnet/"
_INCEPTION_BASE = "https://storage.googleapis.com/tensorflow/keras-applications/inception_v3/"

# None: Keras' own cache directory ($KERAS_HOME or ~/.keras). Tests point it elsewhere.
CACHE_DIR: str | None = None
CACHE_SUBDIR = "models"


@dataclass(frozen=True)
class PublishedFile:
    """One published weight file: its cache name, URL and MD5 hash."""

    fname: str
    origin: str
    file_hash: str


def _resnet(depth: int, top_hash: str, notop_hash: str) -> dict:
    files = {}
    for include_top, file_hash in ((True, top_hash), (False, notop_hash)):
        suffix = "" if include_top else "_notop"
        fname = f"resnet{depth}_weights_tf_dim_ordering_tf_kernels{suffix}.h5"
        files[(f"resnet{depth}", include_top)] = PublishedFile(
            fname, _RESNET_BASE + fname, file_hash
        )
    return files


# (cvbench model name, include_top) -> the file keras.applications downloads.
PUBLISHED: dict[tuple[str, bool], PublishedFile] = {
    **_resnet(50, "2cb95161c43110f7111970584f804107", "4d473c1dd8becc155b73f8504c6f6626"),
    **_resnet(101, "f1aeb4b969a6efcfb50fad2f0c20cfc5", "88cf7a10940856eca736dc7b7e228a21"),
    **_resnet(152, "100835be76be38e30d865e96f2aaae62", "ee4c566cf9a93f14d82f913c2dc6dd0c"),
    ("inception_v3", True): PublishedFile(
        "inception_v3_weights_tf_dim_ordering_tf_kernels.h5",
        _INCEPTION_BASE + "inception_v3_weights_tf_dim_ordering_tf_kernels.h5",
        "9a0d58056eeedaa3f26cb7ebd46da564",
    ),
    ("inception_v3", False): PublishedFile(
        "inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5",
        _INCEPTION_BASE + "inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5",
        "bcbd6486424b2319ff4ef7d526e38f63",
    ),
}
IMAGENET_CLASSES = 1000


@dataclass(frozen=True)
class InputNormalization:
    """The input a set of weights was trained on, for RGB `[0, 255]` pixels `x`:
    `(x - mean) / std` per channel; `source` names the convention ("caffe", "inception")."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    source: str


# keras.applications.imagenet_utils.preprocess_input: mode "caffe" (ResNet) subtracts the BGR
# means [103.939, 116.779, 123.68] from BGR pixels, unscaled: in RGB order (the model's
# stem permuted, `rgb_stem`) the means reverse. Mode "tf" (InceptionV3) is x / 127.5 - 1.
CAFFE = InputNormalization((123.68, 116.779, 103.939), (1.0, 1.0, 1.0), "caffe")
INCEPTION = InputNormalization((127.5, 127.5, 127.5), (127.5, 127.5, 127.5), "inception")


# Keras 3 weight files of keras.applications models, by their number of Conv2D layers:
# ResNet-N has 1 + 3 x (blocks) + 4 shortcut convs; Inception V3 has 94.
KERAS3_APPLICATIONS: dict[int, tuple[str, str]] = {
    53: ("ResNet50", "name"),
    104: ("ResNet101", "name"),
    155: ("ResNet152", "name"),
    94: ("InceptionV3", "order"),
}


def is_legacy_h5(path: str | os.PathLike) -> bool:
    """Whether `path` is an HDF5 file in the legacy Keras weights layout (`layer_names`
    attribute on the root or `model_weights` group; `cvbench.models.weights` reads it)."""
    import h5py

    path = os.fspath(path)
    if not os.path.isfile(path) or not h5py.is_hdf5(path):
        return False
    with h5py.File(path, "r") as f:
        group = f.get("model_weights", f)
        return "layer_names" in group.attrs or "layer_names0" in group.attrs


def _keras3_conv_count(path: str) -> int | None:
    """Number of `conv2d*` layer groups of a Keras 3 weights file, None if not one."""
    import h5py

    if not os.path.isfile(path) or not h5py.is_hdf5(path):
        return None
    with h5py.File(path, "r") as f:
        group = f.get("layers")
        if not isinstance(group, h5py.Group):
            return None
        return sum(1 for k in group if k == "conv2d" or k.startswith("conv2d_"))


def is_keras_applications_file(path: str | os.PathLike) -> bool:
    """Whether `path` holds keras.applications weights: a legacy `.h5` file or a Keras 3
    `.weights.h5` file of one of `KERAS3_APPLICATIONS` (BGR-trained ResNets, Inception V3)."""
    path = os.fspath(path)
    return is_legacy_h5(path) or _keras3_conv_count(path) in KERAS3_APPLICATIONS


def is_keras_applications_weights(weights: str | os.PathLike | None) -> bool:
    """Whether `weights` are keras.applications': `"imagenet"`, or a file in one of their
    formats (`is_keras_applications_file`: a legacy `.h5`, or a Keras 3
    `.weights.h5` of a keras.applications ResNet / InceptionV3)."""
    if weights is None:
        return False
    if isinstance(weights, str) and weights == IMAGENET:
        return True
    return is_keras_applications_file(weights)


def weights_normalization(
    name: str, weights: str | os.PathLike | None
) -> InputNormalization | None:
    """The input normalization model `name` started from `weights` expects (module doc).

    Args:
        name: a cvbench model name ("resnet50", "inception_v3", ...).
        weights: the builder's `weights`.

    Returns:
        `CAFFE` for a bottleneck ResNet (50/101/152) and `INCEPTION` for Inception V3 from
        keras.applications' weights; None otherwise (random weights, cvbench's own files,
        torchvision state dicts: the recipe's normalization applies).
    """
    if not is_keras_applications_weights(weights):
        return None
    if name == "inception_v3":
        return INCEPTION
    if name in {"resnet50", "resnet101", "resnet152"}:
        return CAFFE
    return None


# The builder arguments keras.applications' models fix (their layers' settings without
# weights): a recipe starting from their weights builds this architecture.
# keras.applications' ResNet: BatchNormalization(epsilon=1.001e-5); InceptionV3's conv2d_bn:
# BatchNormalization(scale=False) (Keras' epsilon 1e-3), mixed9/mixed10 pool branch
# AveragePooling2D.
ARCHITECTURE: dict[str, dict[str, object]] = {
    "resnet50": {"bn_epsilon": 1.001e-5},
    "resnet101": {"bn_epsilon": 1.001e-5},
    "resnet152": {"bn_epsilon": 1.001e-5},
    "inception_v3": {"bn_epsilon": 1e-3, "last_block_pooling": "average"},
}


def weights_architecture(name: str, weights: str | os.PathLike | None) -> dict[str, object]:
    """The builder arguments (`ARCHITECTURE`) model `name` needs to compute what
    keras.applications' model computes with `weights`; `{}` for other weights."""
    if weights_normalization(name, weights) is None:
        return {}
    return dict(ARCHITECTURE.get(name, {}))


def new_head_message(name: str, *, file_classes: int, num_classes: int) -> str:
    """The one line that states a new classifier: the weights' head has `file_classes`
    outputs, the model `num_classes`."""
    return (
        f"{name}: the weights' classifier has {file_classes} classes, the model "
        f"{num_classes}: a new head (the builder's dense_initializer), the backbone's "
        "weights loaded"
    )


def imagenet_models() -> list[str]:
    """The model names that have `weights="imagenet"`, sorted."""
    return sorted({name for name, _ in PUBLISHED})


def check_imagenet_args(
    name: str,
    *,
    include_top: bool,
    num_classes: int,
    bn_scale: bool,
    variant: str | None = None,
) -> None:
    """Checks that `weights="imagenet"` fits the requested model, before anything is built.

    Args:
        name: the cvbench model name (`"resnet50"`, `"inception_v3"`, ...).
        include_top: whether the model has the classifier.
        num_classes: its width (any: another width than 1000 gets a new head, from the
            `_notop` file).
        bn_scale: whether the model's batch norms have gamma (keras.applications' ResNets
            have it and need it; its Inception V3 has not, and loads into either: a missing
            gamma is 1).
        variant: the ResNet variant (`"v1"` only: keras.applications' files are ResNet v1;
            None: the builder's choice, v1).

    Raises:
        ValueError: saying what keras.applications publishes and what to pass instead.
    """
    if (name, include_top) not in PUBLISHED:
        raise ValueError(
            f"weights='imagenet': keras.applications publishes ImageNet weights for "
            f"{imagenet_models()} only, not {name!r}; pass weights=None or a weight file"
        )
    if variant is not None and variant != "v1":
        raise ValueError(
            f"weights='imagenet' are keras.applications' ResNet v1 weights; build {name} with "
            f"variant='v1' (got variant={variant!r}), or convert torchvision v1.5 weights with "
            "cvbench.models.torchvision_weights"
        )
    if name != "inception_v3" and not bn_scale:
        raise ValueError(
            f"weights='imagenet': keras.applications' {name} batch norms have gamma; build "
            f"it with bn_scale=True (got bn_scale={bn_scale!r})"
        )
    del include_top, num_classes  # another width gets a new head (imagenet_file)


def imagenet_file(name: str, *, include_top: bool, num_classes: int) -> str:
    """`imagenet_weights` for a model with `num_classes` outputs: with the top and 1000
    classes the file with the classifier, else the `_notop` file (a new head, stated in one
    warning line, `new_head_message`)."""
    import warnings

    top = include_top and num_classes == IMAGENET_CLASSES
    if include_top and not top:
        warnings.warn(
            new_head_message(name, file_classes=IMAGENET_CLASSES, num_classes=num_classes),
            stacklevel=4,
        )
    return imagenet_weights(name, include_top=top)


def imagenet_weights(name: str, *, include_top: bool) -> str:
    """Fetches (or finds in Keras' cache) keras.applications' ImageNet file for `name`.

    Args:
        name: a model of `imagenet_models()`.
        include_top: the file with the 1000-class classifier, or the `_notop` file.

    Returns:
        The local path of the file (`<cache>/models/<fname>`), its MD5 hash checked.

    Raises:
        ValueError: for a model without a published file, or a file whose hash differs
            (from `keras.utils.get_file`).
        ConnectionError: (an `OSError`) when the download fails (offline): one line naming
            the URL, the cache path to put the file in, and the `--weights FILE`
            (`weights=FILE`) alternative.
    """
    import keras

    if (name, include_top) not in PUBLISHED:
        raise ValueError(
            f"keras.applications publishes ImageNet weights for {imagenet_models()}; got {name!r}"
        )
    entry = PUBLISHED[(name, include_top)]
    try:
        return keras.utils.get_file(
            entry.fname,
            entry.origin,
            cache_subdir=CACHE_SUBDIR,
            file_hash=entry.file_hash,
            cache_dir=CACHE_DIR,
        )
    except ValueError:  # a hash mismatch: Keras' message names the file
        raise
    except Exception as err:  # Keras: "URL fetch failure on <url>: <code> -- <reason>"
        reason = " ".join(str(err).split())
        raise ConnectionError(
            f"cannot download {entry.origin} ({reason}); offline, put that file in "
            f"{cache_path(entry.fname)}, or pass --weights FILE (weights=FILE) with a local "
            "copy of it"
        ) from None


def cache_path(fname: str) -> str:
    """Where `keras.utils.get_file` caches `fname` (`CACHE_DIR`, else `$KERAS_HOME`, else
    `~/.keras`; then `models/`): the path to put a published file in for offline use."""
    if CACHE_DIR is not None:
        base = os.path.expanduser(CACHE_DIR)
    else:  # keras.src.backend.config: $KERAS_HOME, else ~/.keras
        base = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(base, CACHE_SUBDIR, fname)
