"""`cvbench.models.load_weights` refuses an unknown `match` whatever the file: before, only a
legacy `.h5` file's reader looked at it, so `match="bogus"` loaded a `.keras` file silently."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.models import load_weights

pytestmark = pytest.mark.backend_agnostic


def _model():
    inputs = keras.Input((2,))
    return keras.Model(inputs, keras.layers.Dense(1, name="d")(inputs))


def test_an_unknown_match_is_refused_for_a_keras_file(tmp_path):
    source = _model()
    source.get_layer("d").set_weights([np.ones((2, 1), "float32"), np.zeros(1, "float32")])
    path = tmp_path / "m.keras"
    source.save(path)
    target = _model()
    before = [w.copy() for w in target.get_layer("d").get_weights()]
    with pytest.raises(
        ValueError, match=r"^match must be one of \['name', 'order'\]; got 'bogus'$"
    ):
        load_weights(target, path, match="bogus")
    for kept, now in zip(before, target.get_layer("d").get_weights(), strict=True):
        np.testing.assert_array_equal(kept, now)
    with pytest.raises(ValueError, match=r"^match must be one of .*; got None$"):
        load_weights(target, tmp_path / "missing.keras", match=None)
    load_weights(target, path, match="name")
    np.testing.assert_array_equal(target.get_layer("d").get_weights()[0], [[1.0], [1.0]])
