"""Every layer of a Keras model, nested models and layers included: one wrapper for the one
private Keras API cvbench relies on for it (`Layer._flatten_layers`)."""

from __future__ import annotations

from typing import Any


def all_layers(model: Any, *, include_self: bool = False) -> list[Any]:
    """Every layer inside `model` (a Keras model or layer), at any depth, each once.

    `model.layers` lists only the direct children: the layers of a nested model (the
    backbone of an SSD) and the sublayers a custom layer holds as attributes are not in it,
    and Keras 3 has no public API that walks them. This calls Keras' own walk, the private
    `model._flatten_layers(include_self=..., recursive=True)`, so that every place that needs
    it (precision checks, weight-decay exclusions, batch-norm folding, fast convolutions, the
    SSD's batch-norm momentum) sees the same layers, and a change of that private API is
    fixed here only.

    Args:
        model: the model (or layer) whose layers to list.
        include_self: put `model` itself first.

    Returns:
        The layers, input layers included, each once (by identity: a layer shared by two
        calls is listed once): depth first, the layers inside a nested model or layer right
        after it (in Keras' order, the reverse of the order they were tracked in).
    """
    return list(model._flatten_layers(include_self=include_self, recursive=True))


def switch_layers(model: Any, layer_class: type, attribute: str, enabled: bool) -> Any:
    """Sets the switch `attribute` to `enabled` on every `layer_class` layer of `model`,
    nested layers included, in place (before the model is compiled or traced): what
    `set_fast_gradients` and `set_fused_batchnorm` turn on or off.

    Returns:
        `model` (for chaining).

    Raises:
        ValueError: for an `enabled` that is not a bool, or a model without such a layer.

    Example:
        >>> import keras
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)], name="m")
        >>> dense = switch_layers(model, keras.layers.Dense, "use_bias", False).layers[0]
        >>> dense.use_bias
        False
        >>> switch_layers(model, keras.layers.Conv2D, "use_bias", False)
        Traceback (most recent call last):
        ...
        ValueError: model 'm' has no Conv2D layer
    """
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be a bool, got {enabled!r}")
    layers = [layer for layer in all_layers(model) if isinstance(layer, layer_class)]
    if not layers:
        raise ValueError(f"model {model.name!r} has no {layer_class.__name__} layer")
    for layer in layers:
        setattr(layer, attribute, enabled)
    return model
