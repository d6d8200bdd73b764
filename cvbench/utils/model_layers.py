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
