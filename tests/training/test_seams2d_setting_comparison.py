"""One comparison of a checkpoint's recorded settings with the current ones
(`cvbench.training.resume.compare_settings`), used by the resume's plan check and by the
classification task's check of an older checkpoint that records no input normalization.

Before, the task compared on its own (lists as tuples, no former spellings): a checkpoint of
an older cvbench recording `preprocessing.eval_crop: "resize_then_crop"` (today's
"center_crop") was refused as a different normalization, though the resume itself read it as
the same setting."""

from __future__ import annotations

import pytest

from cvbench.training.resume import UNSET, _setting_differences, compare_settings


@pytest.mark.backend_agnostic
def test_compare_settings_gives_each_differing_key_with_both_sides():
    stored = {"a": [1, 2], "b": 0.1, "gone": "x", "eval_crop": "resize_then_crop"}
    now = {"a": (1, 2), "b": 0.2, "added": None, "eval_crop": "center_crop"}
    # a: [1, 2] and (1, 2) are the same JSON value; eval_crop: the former spelling of
    # "center_crop"; b differs; gone is on one side only; added is None on the side that has
    # it, which a lacking key equals (a knob added since). Sorted by key.
    assert compare_settings(stored, now) == {
        "b": (0.1, 0.2),
        "gone": ("x", UNSET),
    }
    assert compare_settings({}, {}) == {}
    assert repr(UNSET) == "unset"


def test_a_lacking_key_equals_none():
    # Regression (review of stop 47): a knob added since with a None default
    # (model.weights_normalization) made every older checkpoint "differ" from its resume, as
    # the resume's own comparison never did (old.get(key) != new.get(key)).
    assert compare_settings({"k": None}, {}) == {}
    assert compare_settings({}, {"k": None}) == {}
    assert compare_settings({"k": None}, {"k": None}) == {}
    assert compare_settings({}, {"k": 0}) == {"k": (UNSET, 0)}  # 0 is a value, not None


def test_the_resume_messages_are_unchanged():
    stored = {"settings": {"knobs": {"preprocessing.eval_crop": "resize_then_crop", "a": 1}},
              "optimizer": {"lr": 0.1, "nested": {"x": [1, 2]}}}  # fmt: skip
    now = {"settings": {"knobs": {"preprocessing.eval_crop": "center_crop", "a": 2, "b": "s"}},
           "optimizer": {"lr": 0.1, "nested": {"x": [1, 3]}}}  # fmt: skip
    assert _setting_differences(stored, now) == [
        "optimizer.nested.x [1, 2] in the checkpoint, [1, 3] now",
        "settings.knobs.a 1 in the checkpoint, 2 now",
        'settings.knobs.b unset in the checkpoint, "s" now',
    ]
    # a group an older checkpoint does not record is not compared
    assert _setting_differences({"optimizer": {"lr": 1}}, now) == [
        "optimizer.lr 1 in the checkpoint, 0.1 now",
        "optimizer.nested.x unset in the checkpoint, [1, 3] now",
    ]


def _recipe():
    from cvbench.tasks.recipes.resolve import resolve_recipe

    settings = {"image_size": 32, "num_classes": 3, "weights": "/gone/notop.h5"}
    return resolve_recipe("resnet50", settings=settings)


def _stored_knobs(recipe, **changes):
    """`recipe`'s knobs as a checkpoint of an older cvbench stores them: JSON values (lists
    for tuples), no `model.weights_normalization`."""
    from cvbench.training.resume import describe

    knobs = describe(dict(recipe.knobs()))
    del knobs["model.weights_normalization"]
    return {**knobs, **changes}


# (changes to the stored knobs, the knobs both checks name as differing)
CASES = {
    "as recorded": ({}, []),
    "former spelling": ({"preprocessing.eval_crop": "resize_then_crop"}, []),
    "another mean": ({"preprocessing.mean": [1.0, 2.0, 3.0]}, ["preprocessing.mean"]),
    "mean and std": (
        {"preprocessing.mean": [0, 0, 0], "preprocessing.std": [1, 1, 1]},
        ["preprocessing.mean", "preprocessing.std"],
    ),
    "another crop rule": ({"preprocessing.eval_crop": "stretch"}, ["preprocessing.eval_crop"]),
}


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("case", list(CASES))
def test_the_task_and_the_resume_agree_on_what_differs(case):
    from cvbench.tasks.classification import _check_unrecorded_normalization

    changes, expected = CASES[case]
    recipe = _recipe()
    stored = _stored_knobs(recipe, **changes)
    now = {"knobs": dict(recipe.knobs())}
    resumed = _setting_differences({"settings": {"knobs": stored}}, {"settings": now})
    named = [line.split()[0].removeprefix("settings.knobs.") for line in resumed]
    # model.weights_normalization, unset in an older checkpoint and None now, is no difference
    assert named == sorted(expected)
    if not expected:
        _check_unrecorded_normalization(recipe, stored)  # no error
        return
    with pytest.raises(ValueError) as error:
        _check_unrecorded_normalization(recipe, stored)
    assert f"({', '.join(expected)} differ)" in str(error.value)


def test_a_knob_one_side_lacks_is_not_a_normalization_difference():
    from cvbench.tasks.classification import _check_unrecorded_normalization

    recipe = _recipe()
    stored = _stored_knobs(recipe, **{"preprocessing.another_versions_knob": 1})
    del stored["preprocessing.flip"]  # a knob the older version did not have
    _check_unrecorded_normalization(recipe, stored)  # no error
