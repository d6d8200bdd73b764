"""Batch-norm folding: an inference copy of a functional model with every foldable
`BatchNormalization` merged into the `Conv2D` before it.

In inference a batch norm is the per-channel affine map
`y = gamma * (x - moving_mean) / sqrt(moving_variance + epsilon) + beta`. When `x` is the
output of a convolution (no activation) that nothing else reads, the map goes into the
convolution's weights: with `s = gamma / sqrt(moving_variance + epsilon)`,

    kernel' = kernel * s        (per output channel, the kernel's last axis)
    bias'   = (bias - moving_mean) * s + beta        (bias = 0 for a convolution without one)

so `conv'(x) == bn(conv(x))` up to float rounding (computed in float64, stored in the
layer's variable dtype).

What is folded: in a functional graph of built-in layers (nested functional models
included, e.g. the SSD's ResNet backbone), each node of a `BatchNormalization` (or
subclass, e.g. `FreezableBatchNormalization`) over the last axis whose single input is the
output of a `Conv2D` node (or subclass, e.g. `FastConv2D`) with a linear activation,
channels-last, read by that batch norm only. A convolution shared by several nodes (the SSD
head's towers: one convolution, one batch norm per pyramid level) gets one folded copy per
node. What is not: layers that call a convolution and a batch norm inside their own `call`
(the SSD's `FeaturePyramid` and `WeightSharedHead`); convert those to functional built-in
layers first (`cvbench.utils.plain_keras.to_plain_keras`). They are kept as they are.

The original model is not changed; the folded model shares its non-folded layers (and so
their variables) with it.
"""

from __future__ import annotations

import collections
from typing import Any

import keras
import numpy as np
from keras import tree

from cvbench.utils.model_layers import all_layers


def fold_batchnorm(model: keras.Model) -> keras.Model:
    """A functional copy of `model` for inference with the batch norms folded (module
    docstring).

    Args:
        model: a functional `keras.Model` (built-in layers, nested functional models).

    Returns:
        A new functional model with the same inputs and output structure; call it with
        `training=False` semantics only (the folded layers have no batch statistics).

    Raises:
        ValueError: for a model that is not functional (subclassed or Sequential), naming it.
    """
    if not _is_functional(model):
        raise ValueError(
            f"fold_batchnorm needs a functional model; got {type(model).__name__} "
            f"{getattr(model, 'name', '')!r}"
        )
    return _fold(model)


def count_batchnorms(model: keras.Model) -> int:
    """Number of `BatchNormalization` layers in `model`, nested layers and models included."""
    return sum(isinstance(layer, keras.layers.BatchNormalization) for layer in all_layers(model))


def _is_functional(layer: Any) -> bool:
    return isinstance(layer, keras.Model) and hasattr(layer, "_nodes_by_depth")


def _nodes(model: keras.Model) -> list[Any]:
    """The model's operation nodes, inputs first (the order `Functional` runs them)."""
    nodes = []
    for depth in sorted(model._nodes_by_depth, reverse=True):
        nodes.extend(n for n in model._nodes_by_depth[depth] if n.operation and not n.is_input)
    return nodes


def _foldable_conv(layer: Any) -> bool:
    return (
        isinstance(layer, keras.layers.Conv2D)
        and layer.data_format == "channels_last"
        and layer.activation in (None, keras.activations.linear)
    )


def _foldable_bn(layer: Any) -> bool:
    return (
        isinstance(layer, keras.layers.BatchNormalization)
        and layer.axis in (-1, 3)
        and not getattr(layer, "renorm", False)
    )


def _plan(model: keras.Model, nodes: list[Any]) -> dict[int, Any]:
    """`{id(conv node): bn node}` for each pair to fold."""
    readers = collections.Counter()
    producer = {}
    for node in nodes:
        for tensor in node.input_tensors:
            readers[id(tensor)] += 1
        for tensor in node.outputs:
            producer[id(tensor)] = node
    for tensor in model.outputs:
        readers[id(tensor)] += 1
    plan = {}
    for node in nodes:
        if not _foldable_bn(node.operation) or len(node.input_tensors) != 1:
            continue
        if node.arguments.kwargs.get("training"):
            continue
        (tensor,) = node.input_tensors
        conv_node = producer.get(id(tensor))
        if (
            conv_node is not None
            and _foldable_conv(conv_node.operation)
            and len(conv_node.input_tensors) == 1
            and len(conv_node.outputs) == 1
            and readers[id(tensor)] == 1
        ):
            plan[id(conv_node)] = node
    return plan


def folded_weights(conv: keras.layers.Conv2D, bn: keras.layers.BatchNormalization) -> tuple:
    """`(kernel, bias)` of the convolution computing `bn(conv(x))` in inference (module
    docstring), as numpy arrays of the conv's variable dtype."""
    kernel = np.asarray(keras.ops.convert_to_numpy(conv.kernel), np.float64)
    out_channels = kernel.shape[-1]
    bias = (
        np.asarray(keras.ops.convert_to_numpy(conv.bias), np.float64)
        if conv.use_bias
        else np.zeros(out_channels)
    )

    def value(variable: Any, default: float) -> np.ndarray:
        if variable is None:
            return np.full(out_channels, default)
        return np.asarray(keras.ops.convert_to_numpy(variable), np.float64)

    gamma = value(bn.gamma, 1.0)
    beta = value(bn.beta, 0.0)
    mean = value(bn.moving_mean, 0.0)
    variance = value(bn.moving_variance, 1.0)
    scale = gamma / np.sqrt(variance + bn.epsilon)
    dtype = keras.backend.standardize_dtype(conv.kernel.dtype)
    return (kernel * scale).astype(dtype), ((bias - mean) * scale + beta).astype(dtype)


def _folded_conv(conv: Any, bn: Any, name: str, inputs: Any) -> Any:
    config = {
        k: v
        for k, v in conv.get_config().items()
        if k not in ("fast_gradients", "kernel_regularizer", "bias_regularizer")
    }
    config.update(name=name, use_bias=True, activation=None, bias_initializer="zeros")
    folded = keras.layers.Conv2D(**config)
    outputs = folded(inputs)
    folded.set_weights(list(folded_weights(conv, bn)))
    return outputs


def _fold(model: keras.Model) -> keras.Model:
    nodes = _nodes(model)
    plan = _plan(model, nodes)
    folded_bn_nodes = {id(bn_node) for bn_node in plan.values()}
    uses = collections.Counter(id(node.operation) for node in nodes)
    nested = {}
    inputs = [
        keras.Input(batch_shape=x.shape, dtype=x.dtype, name=x._keras_history[0].name)
        for x in model.inputs
    ]
    tensors = {id(x): y for x, y in zip(model.inputs, inputs, strict=True)}
    for node in nodes:
        op = node.operation
        args, kwargs = node.arguments.fill_in(tensors)
        if id(node) in plan:
            bn = plan[id(node)].operation
            name = op.name if uses[id(op)] == 1 else f"{op.name}_{bn.name}"
            outputs = _folded_conv(op, bn, name, args[0])
        elif id(node) in folded_bn_nodes:
            outputs = args[0]  # the folded convolution already applied it
        elif _is_functional(op):
            if id(op) not in nested:
                nested[id(op)] = _fold(op)
            outputs = nested[id(op)](*args, **kwargs)
        else:
            outputs = op(*args, **kwargs)
        for x, y in zip(node.outputs, tree.flatten(outputs), strict=True):
            tensors[id(x)] = y
    outputs = [tensors[id(x)] for x in model.outputs]
    structure = tree.pack_sequence_as(model._outputs_struct, outputs)
    return keras.Model(
        tree.pack_sequence_as(model._inputs_struct, inputs), structure, name=model.name
    )
