"""`all_layers`: every layer of a model, nested models and a custom layer's sublayers
included, each once, in Keras' order; the one place cvbench calls Keras' private walk."""

from __future__ import annotations

from pathlib import Path

import keras
import pytest

from cvbench.utils.model_layers import all_layers

pytestmark = pytest.mark.backend_agnostic

ROOT = Path(__file__).resolve().parents[2]


class Block(keras.layers.Layer):
    """A custom layer holding two sublayers as attributes (not in any `.layers` list)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(3, name="block_dense")
        self.norm = keras.layers.BatchNormalization(name="block_norm")

    def call(self, x):
        return self.norm(self.dense(x))


def nested_model() -> keras.Model:
    inner_input = keras.Input((4,), name="inner_input")
    x = keras.layers.Dense(3, name="inner_a")(inner_input)
    x = keras.layers.Dense(4, name="inner_b")(x)
    inner = keras.Model(inner_input, x, name="inner")
    inputs = keras.Input((4,), name="outer_input")
    y = keras.layers.Dense(4, name="first")(inputs)
    y = inner(y)
    y = Block(name="block")(y)
    shared = keras.layers.Dense(3, name="shared")
    y = shared(shared(y))  # one layer, two calls
    return keras.Model(inputs, keras.layers.Dense(1, name="last")(y), name="outer")


def test_every_layer_at_any_depth_each_once_in_keras_order():
    model = nested_model()
    assert [layer.name for layer in model.layers] == [
        "outer_input", "first", "inner", "block", "shared", "last",
    ]  # fmt: skip
    expected = [
        "outer_input", "first",
        "inner", "inner_b", "inner_a", "inner_input",  # a nested model's layers after it
        "block", "block_norm", "block_dense",  # a custom layer's sublayers after it
        "shared", "last",
    ]  # fmt: skip
    assert [layer.name for layer in all_layers(model)] == expected
    assert [layer.name for layer in all_layers(model, include_self=True)] == ["outer", *expected]
    assert all_layers(model)[2] is model.get_layer("inner")


def test_a_single_layer_has_none_inside():
    dense = keras.layers.Dense(2, name="alone")
    assert all_layers(dense) == [] and all_layers(dense, include_self=True) == [dense]


def test_no_other_code_calls_the_private_keras_walk():
    # Keras' `_flatten_layers` is private: `all_layers` is the one caller, so a change of it
    # is fixed in one place (this file names it only in this check).
    here = Path(__file__).resolve()
    callers = [
        str(path.relative_to(ROOT))
        for folder in ("cvbench", "tests", "scripts", "benchmarks", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.resolve() != here and "_flatten_layers" in path.read_text(encoding="utf-8")
    ]
    assert callers == ["cvbench/utils/model_layers.py"]
