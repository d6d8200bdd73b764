"""One resize vocabulary (#38): `ImagePreprocessing.eval_crop` takes the model file's rule
names ("center_crop", "crop_then_resize"); the pipeline's former "resize_then_crop" is a
deprecated spelling read as "center_crop" where settings come in (the constructor, a recipe
override); anything else is refused naming the value and the known rules. Every reader
(tf.data, grain, DALI's check) and inference then do the same thing for each rule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from imagenet_testdata import encode

from cvbench.data.read.image_preprocessing import EVAL_CROPS, ImagePreprocessing
from cvbench.data.read.model_inputs import ClassifierInputs
from cvbench.utils.model_file import RESIZE_RULES

SPELLINGS = [
    ("center_crop", "center_crop"),
    ("resize_then_crop", "center_crop"),  # deprecated spelling
    ("crop_then_resize", "crop_then_resize"),
]


def test_the_evaluation_crops_are_the_model_files_rules():
    assert EVAL_CROPS == ("center_crop", "crop_then_resize")
    assert set(EVAL_CROPS) <= set(RESIZE_RULES)
    assert ImagePreprocessing().eval_crop == "center_crop"  # DLE's ResNet-50 default


@pytest.mark.parametrize(("spelling", "rule"), SPELLINGS)
def test_the_constructor_reads_each_spelling_as_its_rule(spelling, rule):
    p = ImagePreprocessing(eval_crop=spelling)
    assert p.eval_crop == rule
    # dataclasses.replace goes through the constructor too
    assert dataclasses.replace(ImagePreprocessing(), eval_crop=spelling).eval_crop == rule
    # the old spelling makes the very same value as the rule's name
    assert p == ImagePreprocessing(eval_crop=rule)


@pytest.mark.parametrize("value", ["central", "stretch", "Center_Crop", None, 1])
def test_an_unknown_crop_is_refused_naming_the_value_and_the_known_ones(value):
    # "stretch" is a resize rule but no evaluation crop (it would not keep the aspect ratio
    # a classifier was evaluated with)
    with pytest.raises(ValueError) as info:
        ImagePreprocessing(eval_crop=value)
    message = str(info.value)
    assert message.startswith("eval_crop must be one of ('center_crop', 'crop_then_resize')")
    assert message.endswith(f"got {value!r}")


@pytest.mark.parametrize(("spelling", "rule"), SPELLINGS)
def test_a_recipe_override_in_the_old_spelling_is_no_deviation(spelling, rule):
    from cvbench.tasks.recipes import default_recipe

    recipe = default_recipe("resnet50")  # reference: DLE's shorter side then central crop
    changed = recipe.with_overrides({"preprocessing.eval_crop": spelling}, reason="--test")
    assert changed.value("preprocessing.eval_crop") == rule
    deviation = changed.deviation("preprocessing.eval_crop")
    if rule == "center_crop":
        assert deviation is None and changed == recipe
    else:
        assert (deviation.reference, deviation.reason) == ("center_crop", "--test")


@pytest.mark.parametrize(("spelling", "rule"), SPELLINGS)
@pytest.mark.parametrize("shape", [(45, 37), (30, 52)])
def test_every_reader_and_inference_agree_on_each_rule(tf, pp, spelling, rule, shape):
    from cvbench.data.grain.augment import eval_image
    from cvbench.inference.resize import resize_image

    # mean 0, std 1: the pipeline's scaled pixels are the [0, 255] view itself
    p = ImagePreprocessing(eval_crop=spelling, mean=(0.0,) * 3, std=(1.0,) * 3)
    image = np.random.default_rng(7).integers(0, 256, (*shape, 3), dtype=np.uint8)
    png = tf.constant(encode(image, "PNG"))
    tf_view = pp.preprocess_for_eval(png, image_size=16, preprocessing=p).numpy()
    grain_view = eval_image(image, image_size=16, preprocessing=p)
    info = ClassifierInputs(16, p, ("a", "b")).model_info(2)  # the model file's contract
    assert info.resize == rule
    served, _ = resize_image(image, info)
    np.testing.assert_array_equal(grain_view, tf_view)
    np.testing.assert_array_equal(served, tf_view)
    # the rule matters: the other one gives other pixels on these non-square images
    other = ImagePreprocessing(
        eval_crop=next(r for r in EVAL_CROPS if r != rule), mean=(0.0,) * 3, std=(1.0,) * 3
    )
    other_view = pp.preprocess_for_eval(png, image_size=16, preprocessing=other).numpy()
    assert not np.array_equal(other_view, tf_view)


@pytest.mark.parametrize(("spelling", "rule"), SPELLINGS)
def test_the_dali_pipeline_takes_center_crop_in_either_spelling(spelling, rule):
    from cvbench.data.dali.pipeline import check_dali_preprocessing

    p = ImagePreprocessing(eval_crop=spelling)
    if rule == "center_crop":
        assert check_dali_preprocessing(p).eval_crop == "center_crop"
    else:
        with pytest.raises(ValueError, match="supports only eval_crop='center_crop', got "):
            check_dali_preprocessing(p)
