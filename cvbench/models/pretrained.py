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
"""

from __future__ import annotations

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
        num_classes: its width (must be 1000 with the top, as keras.applications requires).
        bn_scale: whether the model's batch norms have gamma (keras.applications' ResNets
            have it, its Inception V3 has not).
        variant: the ResNet variant (`"v1"` only: keras.applications' files are ResNet v1).

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
    file_scale = name != "inception_v3"
    if bn_scale != file_scale:
        raise ValueError(
            f"weights='imagenet': keras.applications' {name} batch norms "
            f"{'have' if file_scale else 'have no'} gamma; build it with bn_scale={file_scale} "
            f"(got bn_scale={bn_scale!r})"
        )
    if include_top and num_classes != IMAGENET_CLASSES:
        raise ValueError(
            f"weights='imagenet' with include_top=True needs num_classes={IMAGENET_CLASSES}; "
            f"got {num_classes!r} (use include_top=False for another head)"
        )


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
        Exception: what `keras.utils.get_file` raises when the download fails.
    """
    import keras

    if (name, include_top) not in PUBLISHED:
        raise ValueError(
            f"keras.applications publishes ImageNet weights for {imagenet_models()}; got {name!r}"
        )
    entry = PUBLISHED[(name, include_top)]
    return keras.utils.get_file(
        entry.fname,
        entry.origin,
        cache_subdir=CACHE_SUBDIR,
        file_hash=entry.file_hash,
        cache_dir=CACHE_DIR,
    )
