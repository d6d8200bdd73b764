"""Loading weight files into cvbench models: keras.applications legacy HDF5 and Keras 3.

Five formats are accepted:

- The legacy Keras HDF5 weights format that keras.applications downloads
  (`resnet50_weights_tf_dim_ordering_tf_kernels.h5`, `..._notop.h5`,
  `inception_v3_weights_tf_dim_ordering_tf_kernels[_notop].h5`): the root group (or its
  `model_weights` group) has a `layer_names` attribute listing the layers in model order; each
  layer group has a `weight_names` attribute (e.g. `conv1_conv/kernel:0`) naming datasets under
  it, in legacy order (trainable then non-trainable weights).
- Keras 3 `.weights.h5` files of keras.applications models (`ResNet50`, `ResNet101`,
  `ResNet152`, `InceptionV3`, with or without top, written by their `save_weights`): groups
  `layers/<class>_<k>/vars/<i>` named by layer class, not layer name, with the variables by
  position. The file is read into the keras.applications model it came from (recognised by its
  number of convolutions: 53, 104, 155 or 94), whose layers then give the legacy names and
  order, and loaded as a legacy file (`read_keras3_applications`).
- Other Keras 3 `.weights.h5` files (cvbench's own, `model.save_weights`), loaded with
  `model.load_weights` (the architecture must match exactly).
- torchvision ResNet state dicts (`.pth`, `.pt`, `.npz`): see `torchvision_weights`.
- cvbench's own model files (`.keras`: a training export's `model.keras`, `save_model`'s),
  loaded by layer name (`read_cvbench_model`): fine-tuning a cvbench model on other data. A
  cvbench checkpoint (`.npz` of `model/<i>` arrays) is refused, naming `--resume` and the
  run's exported model.

Legacy files are paired with the model's layers either by layer name (ResNet: the names are
keras.applications' own) or by position among layers with weights (Inception V3:
keras.applications names its layers automatically, `conv2d_17`, so only the order is stable;
this is how Keras itself loads these files). The classifier `predictions` may be present in only
one side: a "notop" file into a model with a top leaves the classifier as initialised, a top
file into a model without one skips it.

A classifier `predictions` of another width in the file than in the model is not loaded:
the model keeps its new head, stated in one warning line (`pretrained.new_head_message`).
A batch norm with a scale gamma in the model but none in the file (keras.applications'
Inception V3) gets gamma = 1, the same function.

A convolution bias in the file but not in the model (keras.applications ResNets use conv bias,
cvbench defaults to none) is folded into the following batch norm `X_bn` of conv `X_conv`:
`BN(conv(x) + b)` with moving mean `m` equals `BN(conv(x))` with moving mean `m - b` in
inference, and in training the batch mean absorbs `b` in both. A bias in the model but not in
the file is set to zero.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Literal

import keras
import numpy as np

from cvbench.models import pretrained
from cvbench.models.pretrained import (
    # Which files are keras.applications' is decided in `pretrained` (which `weights=`
    # starting points are theirs); re-exported here, where the files are read.
    KERAS3_APPLICATIONS,
    _keras3_conv_count,
    is_keras_applications_file,  # noqa: F401 (re-export)
    is_legacy_h5,
)
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import check_regular
from cvbench.utils.model_file import DEFLATE_MAX_RATIO, byte_count

HEAD = "predictions"
_SUFFIX_CONV, _SUFFIX_BN = "_conv", "_bn"
TORCHVISION_SUFFIXES = (".pth", ".pt", ".npz")
# Layer names of the Keras 2.0-2.2 ResNet50 (another layout: BN epsilon 1e-3, 7x7 avg pool).
_OLD_RESNET50_PREFIX = "res2a_branch"


@dataclass(frozen=True)
class FileLayer:
    """One layer's weights read from a legacy file: short names ('kernel') and arrays."""

    name: str
    weight_names: tuple[str, ...]
    values: tuple[np.ndarray, ...]


def read_keras3_applications(path: str | os.PathLike) -> tuple[list[FileLayer], str]:
    """Reads a Keras 3 `.weights.h5` file of a keras.applications model (see module doc).

    Args:
        path: the file.

    Returns:
        `(layers, match)`: one `FileLayer` per layer with weights, in the model's order, with
        keras.applications' layer and weight names; `match` is how to pair them with a
        cvbench model (`"name"` for ResNets, `"order"` for Inception V3).

    Raises:
        ValueError: if the file is not one of `KERAS3_APPLICATIONS` or does not load into it.
    """
    import h5py

    path = os.fspath(path)
    count = _keras3_conv_count(path)
    if count not in KERAS3_APPLICATIONS:
        raise ValueError(
            f"{path!r} is not a Keras 3 weights file of a keras.applications model "
            f"{sorted(v[0] for v in KERAS3_APPLICATIONS.values())} ({count} conv layers)"
        )
    app, match = KERAS3_APPLICATIONS[count]
    with h5py.File(path, "r") as f:
        dense = f["layers"].get("dense")
        classes = None if dense is None else int(dense["vars"]["0"].shape[-1])
    builder = getattr(keras.applications, app)
    kwargs = {"weights": None, "include_top": classes is not None}
    if classes is not None:
        kwargs.update(classes=classes, classifier_activation=None)
    source = builder(**kwargs)
    try:
        source.load_weights(path)
    except (ValueError, KeyError) as e:
        raise ValueError(f"{path!r} does not load into keras.applications.{app}: {e}") from e
    layers_out = []
    for layer in source.layers:
        variables = layer.trainable_weights + layer.non_trainable_weights
        if variables:
            values = tuple(keras.ops.convert_to_numpy(v) for v in variables)
            layers_out.append(FileLayer(layer.name, tuple(v.name for v in variables), values))
    return layers_out, match


def _attr_strings(group, name: str) -> list[str]:
    """Reads a (possibly chunked: name0, name1, ...) string-list attribute."""
    if name in group.attrs:
        raw = list(group.attrs[name])
    else:
        raw, chunk = [], 0
        while f"{name}{chunk}" in group.attrs:
            raw.extend(group.attrs[f"{name}{chunk}"])
            chunk += 1
    return [r.decode("utf8") if isinstance(r, bytes) else str(r) for r in raw]


def _short_name(weight_name: str) -> str:
    """'conv1_conv/kernel:0' (Keras 2) or 'conv1_conv/kernel' (Keras 3) -> 'kernel'."""
    return weight_name.split("/")[-1].split(":")[0]


def read_legacy_h5(path: str | os.PathLike) -> list[FileLayer]:
    """Reads the layers that have weights from a legacy Keras HDF5 weights file, in order.

    Args:
        path: the `.h5` file.

    Returns:
        One `FileLayer` per layer with weights, in the file's `layer_names` order; arrays
        keep the file's dtype and shapes (e.g. a conv kernel is `(kh, kw, c_in, c_out)`).
    """
    import h5py

    layers_out = []
    with h5py.File(os.fspath(path), "r") as f:
        group = f.get("model_weights", f)
        for layer_name in _attr_strings(group, "layer_names"):
            layer_group = group[layer_name]
            weight_names = _attr_strings(layer_group, "weight_names")
            if not weight_names:
                continue
            values = tuple(_read_dataset(layer_group, w, path) for w in weight_names)
            shorts = tuple(_short_name(w) for w in weight_names)
            layers_out.append(FileLayer(layer_name, shorts, values))
    return layers_out


def _read_dataset(group, name: str, path: str | os.PathLike) -> np.ndarray:
    """The HDF5 dataset `group[name]` as an array, once the bytes it declares are at most
    `DEFLATE_MAX_RATIO` times those it stores (a small file cannot ask for gigabytes).

    Raises:
        BadFileError: naming the file, the dataset and both sizes.
    """
    import h5py

    dataset = group.get(name)
    if not isinstance(dataset, h5py.Dataset):
        raise BadFileError(f"{os.fspath(path)}: {group.name}/{name} is not a dataset")
    declared = int(dataset.size) * dataset.dtype.itemsize
    stored = int(dataset.id.get_storage_size())
    if declared > DEFLATE_MAX_RATIO * max(stored, 1):
        raise BadFileError(
            f"{os.fspath(path)}: dataset {dataset.name} declares {byte_count(declared)} of "
            f"shape {dataset.shape} but stores {byte_count(stored)}, more than compression can "
            f"give ({DEFLATE_MAX_RATIO}:1)"
        )
    return np.asarray(dataset)


#: The ways `load_weights` pairs a legacy file's layers with the model's.
_MATCHES = ("name", "order")


def load_weights(
    model: keras.Model, path: str | os.PathLike, *, match: Literal["name", "order"]
) -> None:
    """Loads a weight file of any format of the module docstring into `model`.

    Args:
        model: a functional model built by `cvbench.models`.
        path: the weight file.
        match: how legacy-file layers pair with model layers: `"name"` or `"order"`
            (position among layers with weights; see the module docstring). A Keras 3
            keras.applications file brings its own; torchvision files pair by name.

    Raises:
        ValueError: an unknown `match` (whatever the file), the file is missing, or a layer
            or shape does not match (the message names the layer, the weight and both shapes).
        BadFileError: (a `ValueError`) the file is not a regular file, in an unknown format,
            malformed, or declares arrays larger than it can hold (an `.npz` gets the checks of
            a checkpoint, `cvbench.utils.model_file.check_npz`; an HDF5 dataset at most
            `DEFLATE_MAX_RATIO` times the bytes it stores), naming it.
    """
    if match not in _MATCHES:  # checked here: only a legacy file's reader would look at it
        raise ValueError(f"match must be one of {list(_MATCHES)}; got {match!r}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"weights file not found: {path!r}")
    check_regular(path, what="weights file")
    try:
        _load_any(model, path, match)
    except OSError as err:
        if err.errno is not None:  # the disk, not the file's content
            raise
        raise BadFileError(f"{path} is not a valid weights file: {err}") from None


def _load_any(model: keras.Model, path: str, match: str) -> None:
    if is_legacy_h5(path):
        _load_legacy(model, path, read_legacy_h5(path), match)
    elif path.endswith(".keras"):
        _load_legacy(model, path, read_cvbench_model(path), "name")
    elif path.endswith(".npz") and _is_cvbench_checkpoint(path):
        raise ValueError(
            f"weights={path!r} is a cvbench training checkpoint: continue its run with "
            "--resume (same folder), or fine-tune from the model its run exported "
            "(RUN/export/model.keras) with --weights"
        )
    elif path.endswith(TORCHVISION_SUFFIXES):
        from cvbench.models import torchvision_weights

        torchvision_weights.load_torchvision_weights(model, path)
    elif _keras3_conv_count(path) in KERAS3_APPLICATIONS:
        file_layers, file_match = read_keras3_applications(path)
        _load_legacy(model, path, file_layers, file_match)
    elif path.endswith(".weights.h5"):
        try:
            model.load_weights(path)
        except (ValueError, KeyError) as e:
            raise ValueError(f"{path!r} does not fit model {model.name!r}: {e}") from e
    else:
        raise BadFileError(
            f"weights={path!r} is neither a keras.applications-style legacy .h5 file (with a "
            "'layer_names' attribute), a Keras 3 '.weights.h5' file, a cvbench model file "
            f"('.keras'), nor a torchvision state dict {TORCHVISION_SUFFIXES}"
        )


def read_cvbench_model(path: str | os.PathLike) -> list[FileLayer]:
    """The layers with weights of a `.keras` model file (cvbench's `model.keras`: a training
    export or `save_model`; loaded safely by `cvbench.utils.model_file.load_model`), nested
    models flattened (an export wraps the network in its input normalization), for loading
    by layer name into a model of the same architecture (a classifier of another width is
    left as initialised: fine-tuning to other classes)."""
    from cvbench.utils.model_file import load_model

    loaded, _ = load_model(path)
    return [
        FileLayer(
            layer.name,
            tuple(v.path.rsplit("/", 1)[-1] for v in layer.weights),
            tuple(keras.ops.convert_to_numpy(v) for v in layer.weights),
        )
        for layer in _leaf_layers(loaded)
        if layer.weights
    ]


def _leaf_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The layers of `model`, those of nested models in their place."""
    out = []
    for layer in model.layers:
        out.extend(_leaf_layers(layer) if isinstance(layer, keras.Model) else [layer])
    return out


def _is_cvbench_checkpoint(path: str) -> bool:
    """Whether the `.npz` at `path` is a cvbench checkpoint (`model/<i>` arrays), after the
    checks every `.npz` gets (`check_npz`: a crafted file is a `BadFileError` first).

    Raises:
        BadFileError: a malformed or crafted `.npz`, naming it.
    """
    import zipfile

    from cvbench.utils.files import open_input
    from cvbench.utils.model_file import check_npz

    try:
        with open_input(path, what="weights file") as f:
            check_npz(path, f, what="weights file")
            with zipfile.ZipFile(f) as archive:
                return any(name.startswith("model/") for name in archive.namelist()[:8])
    except zipfile.BadZipFile:
        return False  # the torchvision reader names what is wrong with it


def _pair_layers(
    model: keras.Model, file_layers: list[FileLayer], match: str, path: str
) -> list[tuple[keras.layers.Layer, FileLayer]]:
    model_layers = [layer for layer in model.layers if layer.weights]
    model_names = {layer.name for layer in model_layers}
    file_names = [fl.name for fl in file_layers]
    # The classifier may be on one side only ("notop" file, or a model without top).
    if HEAD in file_names and HEAD not in model_names and file_names[-1] == HEAD:
        file_layers = file_layers[:-1]
    if HEAD in model_names and HEAD not in file_names:
        model_layers = [layer for layer in model_layers if layer.name != HEAD]
    # A classifier of another width on both sides: the model keeps its new head.
    if HEAD in model_names and HEAD in file_names:
        ours = model.get_layer(HEAD).kernel.shape[-1]
        theirs = file_layers[file_names.index(HEAD)].values[0].shape[-1]
        if ours != theirs:
            warnings.warn(
                pretrained.new_head_message(model.name, file_classes=theirs, num_classes=ours),
                stacklevel=5,
            )
            file_layers = [fl for fl in file_layers if fl.name != HEAD]
            file_names = [fl.name for fl in file_layers]
            model_layers = [layer for layer in model_layers if layer.name != HEAD]

    if match == "name":
        if any(name.startswith(_OLD_RESNET50_PREFIX) for name in file_names):
            raise ValueError(
                f"{path!r} is the pre-2019 keras.applications ResNet50 file (layer names like "
                "'res2a_branch2a', batch-norm epsilon 1e-3), a different layout; use the current "
                "keras.applications file (layer names like 'conv2_block1_1_conv')"
            )
        by_name = {fl.name: fl for fl in file_layers}
        missing = [layer.name for layer in model_layers if layer.name not in by_name]
        extra = sorted(set(by_name) - {layer.name for layer in model_layers})
        if missing or extra:
            raise ValueError(
                f"{path!r} does not fit model {model.name!r}: layers missing from the file: "
                f"{missing[:5]}{' ...' if len(missing) > 5 else ''}; layers in the file but not "
                f"in the model: {extra[:5]}{' ...' if len(extra) > 5 else ''}"
            )
        return [(layer, by_name[layer.name]) for layer in model_layers]
    if match == "order":
        if len(model_layers) != len(file_layers):
            raise ValueError(
                f"{path!r} does not fit model {model.name!r}: the file has "
                f"{len(file_layers)} layers with weights, the model {len(model_layers)}"
            )
        return list(zip(model_layers, file_layers, strict=True))
    raise ValueError(f"match must be 'name' or 'order'; got {match!r}")


def _load_legacy(model: keras.Model, path: str, file_layers: list[FileLayer], match: str) -> None:
    pairs = _pair_layers(model, file_layers, match, path)
    # Check every layer before assigning anything, so a bad file leaves the model untouched.
    plan: list[tuple[keras.Variable, np.ndarray]] = []
    folds: list[tuple[str, np.ndarray]] = []
    for layer, fl in pairs:
        plan_layer, fold = _plan_layer(layer, fl, path)
        plan.extend(plan_layer)
        if fold is not None:
            folds.append((layer.name, fold))
    bn_by_conv = {}
    for conv_name, _ in folds:
        bn_name = conv_name.removesuffix(_SUFFIX_CONV) + _SUFFIX_BN
        if not conv_name.endswith(_SUFFIX_CONV) or bn_name not in _layer_names(model):
            raise ValueError(
                f"{path!r}: layer {conv_name!r} has a bias in the file but not in the model, "
                f"and no batch norm {bn_name!r} follows it to fold the bias into; build the "
                "model with conv_bias=True"
            )
        bn_by_conv[conv_name] = model.get_layer(bn_name)
    for variable, value in plan:
        variable.assign(value)
    for conv_name, bias in folds:
        moving_mean = bn_by_conv[conv_name].moving_mean
        mean = keras.ops.convert_to_numpy(moving_mean).astype(np.float64)
        moving_mean.assign((mean - bias.astype(np.float64)).astype(moving_mean.dtype))


def _layer_names(model: keras.Model) -> set[str]:
    return {layer.name for layer in model.layers}


def _plan_layer(
    layer: keras.layers.Layer, fl: FileLayer, path: str
) -> tuple[list[tuple[keras.Variable, np.ndarray]], np.ndarray | None]:
    """Pairs one layer's variables with file arrays; returns (assignments, bias to fold)."""
    variables = layer.trainable_weights + layer.non_trainable_weights  # legacy order
    ours = {v.name: v for v in variables}
    theirs = dict(zip(fl.weight_names, fl.values, strict=True))
    where = f"{path!r}: layer {layer.name!r} (file layer {fl.name!r})"
    if len(theirs) != len(fl.values) or not set(theirs) <= set(ours) | {"bias"}:
        # Unrecognised weight names: fall back to the legacy positional order.
        if len(variables) != len(fl.values):
            raise ValueError(
                f"{where}: the file has {len(fl.values)} weights {list(fl.weight_names)}, the "
                f"model {len(variables)} {[v.name for v in variables]}"
            )
        theirs = {v.name: value for v, value in zip(variables, fl.values, strict=True)}
    is_conv = isinstance(layer, keras.layers.Conv2D)
    plan = []
    for name, variable in ours.items():
        if name in theirs:
            value = theirs[name]
        elif name == "bias" and is_conv:
            value = np.zeros(variable.shape, dtype="float32")
        elif name == "gamma" and isinstance(layer, keras.layers.BatchNormalization):
            # A batch norm without scale (keras.applications' Inception V3) is gamma = 1.
            value = np.ones(variable.shape, dtype="float32")
        else:
            raise ValueError(f"{where}: weight {name!r} is missing from the file")
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"{where}: weight {name!r} has shape {tuple(value.shape)} in the file, the "
                f"model expects {tuple(variable.shape)}"
            )
        plan.append((variable, value))
    fold = None
    if "bias" in theirs and "bias" not in ours:
        if not is_conv:
            raise ValueError(f"{where}: the file has a bias, the model layer has none")
        fold = theirs["bias"]
        channels = (ours["kernel"].shape[-1],)
        if tuple(fold.shape) != channels:
            raise ValueError(
                f"{where}: weight 'bias' has shape {tuple(fold.shape)} in the file, the "
                f"kernel has {channels[0]} filters"
            )
    return plan, fold
