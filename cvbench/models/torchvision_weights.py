"""torchvision ResNet state dicts into cvbench's v1.5 ResNets (the same function, same logits).

torchvision's `resnet18` .. `resnet152` are ResNet v1.5 (stride in the 3x3 conv of a
bottleneck), as cvbench's default `variant="v1.5"`, with the same padding (conv1 3 pixels,
the max pool 1 pixel after a ReLU, so zeros and torchvision's -inf padding agree, the strided
3x3 1 pixel each side) and no conv bias. Module names map onto keras.applications-style names:

    conv1 / bn1                          -> conv1_conv / conv1_bn
    layer{s}.{i}.conv{j} / .bn{j}        -> conv{s+1}_block{i+1}_{j}_conv / _{j}_bn
    layer{s}.{i}.downsample.0 / .1       -> conv{s+1}_block{i+1}_0_conv / _0_bn
    fc                                   -> predictions

Conv kernels `(out, in, kh, kw)` become `(kh, kw, in, out)`, the FC weight `(out, in)`
becomes `(in, out)`; batch norm `weight, bias, running_mean, running_var` become
`gamma, beta, moving_mean, moving_variance`; `num_batches_tracked` is dropped. torchvision's
batch norms use epsilon 1e-5: build the model with `bn_epsilon=1e-5` for the same logits
(cvbench's default 1.001e-5 differs by about 5e-7 relative). Inputs are the same as
torchvision's: RGB, `(x / 255 - mean) / std` with the ImageNet mean and std, channels last.

Files: a `.pth` / `.pt` state dict (loaded with `torch.load(..., weights_only=True)`; torch
needed), or an `.npz` of it (`np.savez(path, **{k: v.numpy() for k, v in sd.items()})`; no
torch needed).

    >>> torchvision_to_cvbench_name("layer1.0.downsample.1.running_var")
    ('conv2_block1_0_bn', 'moving_variance')
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import keras

_BN = {
    "weight": "gamma",
    "bias": "beta",
    "running_mean": "moving_mean",
    "running_var": "moving_variance",
}
_BLOCK = re.compile(r"^layer([1-4])\.(\d+)\.(conv[1-3]|bn[1-3]|downsample\.[01])\.(\w+)$")
_STEM = re.compile(r"^(conv1|bn1|fc)\.(\w+)$")
_SKIPPED = "num_batches_tracked"


def torchvision_to_cvbench_name(key: str) -> tuple[str, str] | None:
    """Maps a torchvision ResNet state-dict key to `(cvbench layer, weight name)`.

    Returns:
        The pair, or None for `num_batches_tracked` (a counter with no cvbench variable).

    Raises:
        ValueError: for a key that is not a torchvision ResNet key.
    """
    if key.endswith(f".{_SKIPPED}"):
        return None
    if m := _STEM.match(key):
        module, param = m.groups()
        if module == "conv1" and param == "weight":
            return "conv1_conv", "kernel"
        if module == "bn1" and param in _BN:
            return "conv1_bn", _BN[param]
        if module == "fc" and param in ("weight", "bias"):
            return "predictions", "kernel" if param == "weight" else "bias"
    elif m := _BLOCK.match(key):
        stage, index, module, param = m.groups()
        prefix = f"conv{int(stage) + 1}_block{int(index) + 1}"
        if module.startswith("downsample"):
            j, is_bn = "0", module.endswith("1")
        else:
            j, is_bn = module[-1], module.startswith("bn")
        if is_bn and param in _BN:
            return f"{prefix}_{j}_bn", _BN[param]
        if not is_bn and param == "weight":
            return f"{prefix}_{j}_conv", "kernel"
    raise ValueError(f"{key!r} is not a torchvision ResNet state-dict key")


def read_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Reads a torchvision state dict from `.pth` / `.pt` (through torch) or `.npz`.

    Returns:
        key -> float32 numpy array, in torchvision's layout.

    An `.npz` file gets the checks of a training checkpoint before any array is read
    (`cvbench.utils.model_file.check_npz`: members inside the file, sizes that deflate can
    give, `.npy` headers that match their data), so a small file cannot ask for gigabytes.

    Raises:
        ValueError: for a missing file, another suffix, or a `.pth` file without torch
            installed (saying how to convert it).
        BadFileError: (a `ValueError`) for a file that is not a regular file, a malformed or
            crafted `.npz`, or a `.pth` that torch cannot read or that is not a flat state
            dict, naming the file.
    """
    from cvbench.utils.errors import BadFileError
    from cvbench.utils.files import check_regular, open_input
    from cvbench.utils.model_file import load_npz

    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"torchvision weights file not found: {path!r}")
    check_regular(path, what="weights file")
    if path.endswith(".npz"):
        return load_npz(path, what="weights file")
    if not path.endswith((".pth", ".pt")):
        raise ValueError(f"torchvision weights must be .pth, .pt or .npz; got {path!r}")
    try:
        import torch
    except ImportError as e:
        raise ValueError(
            f"reading {path!r} needs torch (pip install torch); or, where torch is installed, "
            "convert it once: np.savez('weights.npz', **{k: v.numpy() for k, v in "
            "torch.load(path).items()}) and pass the .npz"
        ) from e
    try:
        with open_input(path, what="weights file") as f:
            state = torch.load(f, map_location="cpu", weights_only=True)
    except BadFileError:
        raise
    except Exception as err:  # noqa: BLE001 (what torch raises for a bad file varies)
        raise BadFileError(f"{path} is not a valid weights file: {err}") from None
    if not isinstance(state, Mapping):
        raise BadFileError(f"{path} holds a {type(state).__name__}, not a state dict")
    return {k: v.detach().cpu().numpy() for k, v in state.items()}


def _to_keras_layout(weight: str, value: np.ndarray) -> np.ndarray:
    if weight == "kernel" and value.ndim == 4:  # (out, in, kh, kw) -> (kh, kw, in, out)
        return np.transpose(value, (2, 3, 1, 0))
    if weight == "kernel" and value.ndim == 2:  # (out, in) -> (in, out)
        return value.T
    return value


def load_torchvision_weights(
    model: keras.Model, weights: str | os.PathLike | Mapping[str, np.ndarray]
) -> None:
    """Loads a torchvision ResNet state dict into a cvbench ResNet (`variant="v1.5"`).

    Every model variable must get a value, except a conv bias (set to zero: torchvision
    convs have none) and the classifier when one side has none (a model without top skips
    `fc`; a file without `fc` leaves the classifier as initialised). Nothing is assigned
    unless everything fits.

    Args:
        model: `cvbench.models.resnet18` .. `resnet152`, `variant="v1.5"` (v1 and v1.5
            coincide for 18/34).
        weights: a `.pth` / `.pt` / `.npz` file (see `read_state_dict`) or the state dict
            itself (key -> array).

    Raises:
        ValueError: for an unknown key, a layer or weight missing on either side, or a shape
            that differs (naming the torchvision key and both shapes).
    """
    _check_v15(model)
    state = read_state_dict(weights) if isinstance(weights, (str, os.PathLike)) else weights
    where = "the state dict" if isinstance(weights, Mapping) else f"{os.fspath(weights)!r}"
    has_top = "predictions" in {layer.name for layer in model.layers}
    values: dict[tuple[str, str], tuple[str, np.ndarray]] = {}
    for key, value in state.items():
        target = torchvision_to_cvbench_name(key)
        if target is None or (target[0] == "predictions" and not has_top):
            continue
        values[target] = (key, np.asarray(value))
    plan = _assignments(model, values, where=where)
    for variable, value in plan:
        variable.assign(value)


def _check_v15(model: keras.Model) -> None:
    """Refuses a bottleneck ResNet built with `variant="v1"` (the stride in the first 1x1)."""
    names = {layer.name for layer in model.layers}
    if "conv3_block1_3_conv" in names and model.get_layer("conv3_block1_1_conv").strides != (
        1,
        1,
    ):
        raise ValueError(
            f"torchvision ResNets are v1.5 (stride in the 3x3 conv); {model.name!r} was built "
            "with variant='v1': build it with variant='v1.5'"
        )


def _assignments(
    model: keras.Model, values: dict[tuple[str, str], tuple[str, np.ndarray]], *, where: str
) -> list[tuple[Any, np.ndarray]]:
    """`(variable, value)` for every variable of `model`, from `values` (keyed by layer and
    variable name, consumed), in Keras' layout; raises before anything is assigned unless
    every variable and every value has its counterpart (module rules)."""
    import keras  # here: read_state_dict works without Keras (e.g. next to torch only)

    plan = []
    for layer in model.layers:
        for variable in layer.trainable_weights + layer.non_trainable_weights:
            target = (layer.name, variable.name)
            if target not in values:
                if variable.name == "bias" and isinstance(layer, keras.layers.Conv2D):
                    plan.append((variable, np.zeros(variable.shape, "float32")))
                    continue
                if layer.name == "predictions" and not any(t[0] == "predictions" for t in values):
                    continue
                raise ValueError(
                    f"{where} does not fit {model.name!r}: no value for {layer.name}/"
                    f"{variable.name}"
                )
            key, value = values.pop(target)
            value = _to_keras_layout(variable.name, value)
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(
                    f"{where}: {key!r} has shape {tuple(value.shape)} after conversion, "
                    f"{layer.name}/{variable.name} expects {tuple(variable.shape)}"
                )
            plan.append((variable, value.astype("float32")))
    if values:
        extra = sorted(key for key, _ in values.values())
        raise ValueError(
            f"{where} does not fit {model.name!r}: keys without a layer in the model: "
            f"{extra[:5]}{' ...' if len(extra) > 5 else ''}"
        )
    return plan
