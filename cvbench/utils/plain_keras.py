"""Model files for users: copies of trained models made of built-in Keras layers only.

cvbench trains with layers of its own (`FastConv2D`, a `Conv2D` with faster gradients;
`FusedBatchNormalization`, a `BatchNormalization` computed by TensorFlow's fused kernel;
`FreezableBatchNormalization`; the SSD's composite `FeaturePyramid` and `WeightSharedHead`)
and with training-only details (L2 kernel regularizers, a mixed-precision policy). None of
them changes what the model computes at inference, and none should be needed to load a file
a user gets. `to_plain_keras(model)` copies a functional model (nested ones included) layer
by layer, by three rules:

1. a built-in Keras layer (or operation) stays as it is;
2. a layer whose class subclasses a built-in layer becomes that built-in class, its config
   filtered to the arguments the built-in accepts (`FastConv2D` -> `Conv2D`,
   `FusedBatchNormalization` and `FreezableBatchNormalization` -> `BatchNormalization`):
   the subclass may change training only, not the inference function;
3. a composite layer provides `to_functional(input_shape) -> keras.Model`, a functional
   model of (subclasses of) built-in layers computing its call in inference mode, built on
   the layer's own sublayers (`input_shape` as `build` receives it); that model is converted
   in its place, under the layer's name.

Anything else raises `ValueError` naming the layer and its class. Every copy computes in
float32 (policy "float32"), has no regularizer, and holds the same weights. The copy shares
no variable with `model`.

`with_input_normalization(model, mean=..., std=...)` puts a classifier's input normalization
into the model (a built-in `Rescaling`), so the file takes `[0, 255]` RGB as the
`cvbench.utils.model_file` contract says.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import keras

_FLOAT32 = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}}
_CONTAINERS = ("Functional", "Sequential")


def _is_builtin(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "keras"


def _builtin_base(cls: type) -> type | None:
    """The first built-in Keras layer class among `cls`'s bases (not `Layer` itself)."""
    for base in cls.__mro__[1:]:
        if not _is_builtin(base) or base in (keras.layers.Layer, keras.Model):
            continue
        if (
            issubclass(base, keras.layers.Layer)
            and getattr(keras.layers, base.__name__, None) is base
        ):
            return base
    return None


def _accepted(cls: type) -> set[str]:
    """The keyword arguments `cls.__init__` accepts (its own and its bases')."""
    names = set()
    for base in cls.__mro__:
        if "__init__" in vars(base) and issubclass(base, keras.layers.Layer):
            params = inspect.signature(base.__init__).parameters.values()
            names |= {p.name for p in params if p.kind is not p.VAR_KEYWORD}
    return names - {"self"}


def _clean(config: dict[str, Any]) -> dict[str, Any]:
    """A layer config with the float32 policy and no regularizers."""
    out = dict(config)
    if "dtype" in out and not isinstance(out["dtype"], str):
        out["dtype"] = _FLOAT32
    for key in out:
        if key.endswith("_regularizer"):
            out[key] = None
    return out


def _input_shapes(entry: dict[str, Any]) -> Any:
    """The input shape(s) of a layer's first call, from its functional-config entry."""

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict) and obj.get("class_name") == "__keras_tensor__":
            return tuple(obj["config"]["shape"])
        if isinstance(obj, dict):
            return None
        if isinstance(obj, list | tuple):
            return [walk(x) for x in obj]
        return None

    return walk(entry["inbound_nodes"][0]["args"][0])


def _convert_layer(layer: Any, entry: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The serialized plain copy of `layer` and where its weights come from."""
    cls = type(layer)
    if isinstance(layer, keras.Model) and _is_builtin(cls) and cls.__name__ in _CONTAINERS:
        serialized, sources = _convert_model(layer)
        return {**entry, **serialized}, sources
    if _is_builtin(cls):
        return {**entry, "config": _clean(entry["config"])}, layer
    if callable(getattr(layer, "to_functional", None)):
        functional = layer.to_functional(_input_shapes(entry))
        serialized, sources = _convert_model(functional)
        serialized["config"]["name"] = layer.name
        return {**entry, **serialized}, sources
    base = _builtin_base(cls)
    if base is None:
        raise ValueError(
            f"layer {layer.name!r} of class {cls.__module__}.{cls.__qualname__} is neither a "
            "built-in Keras layer, nor a subclass of one, nor has a to_functional() method"
        )
    accepted = _accepted(base)
    config = {k: v for k, v in _clean(entry["config"]).items() if k in accepted}
    return {
        **entry,
        "module": "keras.layers",
        "class_name": base.__name__,
        "registered_name": None,
        "config": config,
    }, layer


def _convert_model(model: keras.Model) -> tuple[dict[str, Any], dict[str, Any]]:
    """`(serialized plain copy, {layer name: weight source})` of a Functional/Sequential."""
    serialized = keras.saving.serialize_keras_object(model)
    config = _clean(serialized["config"])
    by_name = {op.name: op for op in getattr(model, "operations", model.layers)}
    entries, sources = [], {}
    for entry in config["layers"]:
        name = entry.get("name") or entry["config"]["name"]
        if entry["class_name"] == "InputLayer" or name not in by_name:
            entries.append(entry)  # inputs (and a Sequential's implicit one) carry no weights
            continue
        converted, sources[name] = _convert_layer(by_name[name], entry)
        entries.append(converted)
    config["layers"] = entries
    out = {k: v for k, v in serialized.items() if k != "compile_config"}
    return {**out, "config": config}, sources


def _copy_weights(model: keras.Model, sources: dict[str, Any]) -> None:
    for layer in model.layers:
        source = sources.get(layer.name)
        if isinstance(source, dict):
            _copy_weights(layer, source)
        elif source is not None and source.weights:
            values = source.get_weights()
            if len(values) != len(layer.weights):
                raise ValueError(
                    f"layer {layer.name!r}: {len(values)} weights to copy into "
                    f"{len(layer.weights)} (a subclass with variables of its own)"
                )
            layer.set_weights(values)


def _check_builtin(obj: Any, where: str) -> None:
    """Raises for any serialized object of a module outside Keras (e.g. an initializer)."""
    if isinstance(obj, dict):
        module = obj.get("module")
        if isinstance(module, str) and "class_name" in obj and module.split(".")[0] != "keras":
            raise ValueError(f"{where}: {module}.{obj['class_name']} is not a built-in of Keras")
        for value in obj.values():
            _check_builtin(value, where)
    elif isinstance(obj, list | tuple):
        for value in obj:
            _check_builtin(value, where)


def to_plain_keras(model: keras.Model) -> keras.Model:
    """A copy of `model` made of built-in Keras layers only (module docstring).

    Args:
        model: a functional (or Sequential) `keras.Model`, possibly nesting others.

    Returns:
        A new functional model: same inputs, outputs (structure and names) and weights,
        float32 policy, no regularizers; it loads with plain `keras.saving.load_model` in a
        process that never imports cvbench.

    Raises:
        ValueError: for a model that is not functional or Sequential, or a layer that none of
            the rules covers (naming the layer and its class).

    Example:
        >>> from cvbench.utils.plain_keras import to_plain_keras
        >>> class MyDense(keras.layers.Dense):  # a subclass: becomes Dense
        ...     pass
        >>> inputs = keras.Input((3,))
        >>> model = keras.Model(inputs, MyDense(2, kernel_regularizer="l2")(inputs))
        >>> plain = to_plain_keras(model)
        >>> type(plain.layers[-1]).__name__, plain.layers[-1].kernel_regularizer
        ('Dense', None)
    """
    cls = type(model)
    if not (isinstance(model, keras.Model) and _is_builtin(cls) and cls.__name__ in _CONTAINERS):
        raise ValueError(
            f"to_plain_keras needs a functional or Sequential keras.Model; got {cls.__name__} "
            f"{getattr(model, 'name', model)!r}"
        )
    serialized, sources = _convert_model(model)
    _check_builtin(serialized, f"model {model.name!r}")
    plain = keras.saving.deserialize_keras_object(serialized, safe_mode=True)
    _copy_weights(plain, sources)
    return plain


def with_input_normalization(
    model: keras.Model,
    *,
    mean: Sequence[float],
    std: Sequence[float] | None = None,
    name: str = "input_normalization",
) -> keras.Model:
    """`model` behind a built-in `Rescaling` computing `(x - mean) / std` per channel.

    For a classifier trained on normalized images (`cvbench.data.read.preprocessing.normalize`),
    the result takes `[0, 255]` RGB. A normalization by `mean' = -mean / std`,
    `std' = 1 / std` undoes one (`x * std + mean`).

    Args:
        model: a model taking `(B, H, W, C)` normalized images.
        mean: per-channel means (C values) subtracted from the input.
        std: per-channel standard deviations (C values) the result is divided by; None: 1.
        name: the `Rescaling` layer's name.

    Returns:
        A functional model `x -> model((x - mean) / std)`, float32, named as `model`.

    Raises:
        ValueError: for a mean or std whose length is not the model's channels, or a std
            that is not positive.

    Example:
        >>> import numpy as np
        >>> inputs = keras.Input((1, 1, 2))
        >>> identity = keras.Model(inputs, keras.layers.Identity()(inputs))
        >>> model = with_input_normalization(identity, mean=(10.0, 20.0), std=(2.0, 4.0))
        >>> out = model(np.array([[[[12.0, 28.0]]]], "float32"))  # (12-10)/2, (28-20)/4
        >>> keras.ops.convert_to_numpy(out).tolist()
        [[[[1.0, 2.0]]]]
    """
    shape = tuple(model.input_shape[1:])
    channels = shape[-1]
    mean = [float(m) for m in mean]
    std = [1.0] * len(mean) if std is None else [float(s) for s in std]
    if len(mean) != channels or len(std) != channels:
        raise ValueError(
            f"mean and std need {channels} values (the model's channels); got {mean!r}, {std!r}"
        )
    if not all(s > 0 for s in std):
        raise ValueError(f"std must be positive; got {std!r}")
    inputs = keras.Input(shape, name="images", dtype="float32")
    rescale = keras.layers.Rescaling(
        [1.0 / s for s in std],
        offset=[-m / s for m, s in zip(mean, std, strict=True)],
        name=name,
        dtype="float32",
    )
    return keras.Model(inputs, model(rescale(inputs)), name=model.name)
