"""The model contract's one owner (#38): `ModelInfo`'s typed parts (`InputSettings`,
`DetectionSettings` with `NmsSettings`), built and checked once, read by every caller; the
named score thresholds; the one table of the resize rule's two spellings; the dataset
hand-over to the Trainer."""

from __future__ import annotations

import dataclasses
import importlib
import json

import numpy as np
import pytest

from cvbench.utils.errors import BadFileError
from cvbench.utils.model_file import (
    COCO_SCORE_THRESHOLD,
    DATASET_ATTRIBUTE,
    DEPRECATED_RESIZE_SPELLINGS,
    DISPLAY_SCORE_THRESHOLD,
    EVAL_CROP_OF_RULE,
    EVAL_CROP_RULES,
    RESIZE_RULES,
    DetectionSettings,
    InputContract,
    InputSettings,
    ModelInfo,
    NmsSettings,
    attach_inputs,
    attached_inputs,
    check_model_matches_info,
    info_from_json,
    resize_rule_of_eval_crop,
)

pytestmark = pytest.mark.backend_agnostic

# SSD320 v1.2's post-processing (specs.md: OD API batch_non_max_suppression of its config)
SSD320_NMS = {"iou_threshold": 0.6, "score_threshold": 1e-8, "max_per_class": 100,
              "max_total": 100}  # fmt: skip
SSD320_ANCHORS = {"min_level": 3, "max_level": 7, "anchor_scale": 4.0,
                  "aspect_ratios": [1.0, 2.0, 0.5], "scales_per_octave": 2}  # fmt: skip


def _detector(**detection) -> ModelInfo:
    settings = {"anchors": {}, "scales": [10, 10, 5, 5], "postprocess": {}} | detection
    return ModelInfo(task="detection", class_names=("a", "b"), image_size=(64, 64),
                     resize="stretch", detection=settings)  # fmt: skip


# ----------------------------------------------------------------- the input part
@pytest.mark.parametrize("size", [(224, 224), (10, 13)])
def test_the_input_part_is_built_once_from_the_flat_fields(size):
    info = ModelInfo(task="classification", class_names=["a"], image_size=list(size),
                     resize="crop_then_resize", crop_fraction=0.5, input_mean=[1, 2, 3],
                     input_std=(4, 5, 6))  # fmt: skip
    assert info.inputs == InputSettings(
        image_size=size, resize="crop_then_resize", crop_fraction=0.5,
        input_mean=(1.0, 2.0, 3.0), input_std=(4.0, 5.0, 6.0),
    )  # fmt: skip
    # the flat fields read the checked values: tuples of floats, as before
    assert (info.image_size, info.input_mean) == (size, (1.0, 2.0, 3.0))
    # dataclasses.replace builds the parts again from the changed flat field
    assert dataclasses.replace(info, resize="center_crop").inputs.resize == "center_crop"
    # ModelInfo.of(parts) is the flat construction
    built = ModelInfo.of(task="classification", class_names=("a",), inputs=info.inputs)
    assert built == info and built.inputs == info.inputs


@pytest.mark.parametrize(("field", "value", "message"), [
    ("resize", "squash", "resize must be one of"),
    ("interpolation", "bicubic", "interpolation must be one of"),
    ("quantize_uint8", 1, "quantize_uint8 must be a bool"),
    ("dct_method", "FLOAT", "dct_method must be one of"),
    ("input_std", (1, 0, 1), "input_std must be > 0 per channel"),
    ("input_mean", (1, 2), "input_mean must be 3 finite numbers"),
    ("crop_fraction", 1.5, r"crop_fraction must be in \(0, 1\]"),
])  # fmt: skip
def test_the_input_part_checks_each_field_for_both_spellings(field, value, message):
    with pytest.raises(ValueError, match=message):
        InputSettings(image_size=(8, 8), **{field: value})
    with pytest.raises(ValueError, match=message):  # the same check through ModelInfo
        ModelInfo(task="classification", class_names=("a",), image_size=(8, 8),
                  **{field: value})  # fmt: skip


# ----------------------------------------------------------------- the resize vocabulary
def test_the_pipeline_and_the_model_file_speak_one_resize_vocabulary():
    # Changed on purpose (#38): the pipeline's crops are the model file's rule names (the
    # table of two spellings is gone); the old names stay importable as identity/aliases.
    from cvbench.data.read.image_preprocessing import EVAL_CROPS
    from cvbench.data.read.model_inputs import RESIZE_OF_EVAL_CROP

    # every rule but "stretch" is an evaluation crop, by the same name
    assert EVAL_CROPS == EVAL_CROP_RULES == ("center_crop", "crop_then_resize")
    assert set(EVAL_CROPS) == set(RESIZE_RULES) - {"stretch"}
    assert {rule: rule for rule in EVAL_CROPS} == EVAL_CROP_OF_RULE
    for crop in EVAL_CROPS:
        assert resize_rule_of_eval_crop(crop) == crop
        assert InputSettings(image_size=(8, 8), resize=crop).eval_crop == crop
        assert RESIZE_OF_EVAL_CROP[crop] == crop
    # the deprecated spelling is read as the rule it names, wherever it is accepted
    assert DEPRECATED_RESIZE_SPELLINGS == {"resize_then_crop": "center_crop"}
    assert resize_rule_of_eval_crop("resize_then_crop") == "center_crop"
    assert RESIZE_OF_EVAL_CROP["resize_then_crop"] == "center_crop"
    with pytest.raises(ValueError, match=r"eval_crop must be one of .*center_crop.*'central'"):
        resize_rule_of_eval_crop("central")
    with pytest.raises(ValueError, match="'stretch' is no evaluation crop"):
        InputSettings(image_size=(8, 8), resize="stretch").eval_crop  # noqa: B018


# ----------------------------------------------------------------- the detection part
def test_the_detection_part_fills_ssd320s_nms_and_keeps_the_anchors_given():
    info = _detector(postprocess={"max_total": 5})
    assert isinstance(info.detection, DetectionSettings)
    assert info.detection.postprocess == NmsSettings(max_total=5)
    assert info.detection.scales == (10.0, 10.0, 5.0, 5.0)
    assert info.detection.anchors == {}  # multiscale_anchors' own defaults apply
    assert info.head is info.detection and info.head.task == "detection"
    # its JSON (what the model file stores): every NMS field, SSD320's where not given
    assert info.to_dict()["detection"] == {
        "anchors": {}, "scales": [10.0, 10.0, 5.0, 5.0],
        "postprocess": SSD320_NMS | {"max_total": 5},
    }  # fmt: skip


def test_the_detection_part_reads_as_the_dict_it_was():
    info = _detector(anchors=SSD320_ANCHORS)
    expected = {"anchors": SSD320_ANCHORS, "scales": [10.0, 10.0, 5.0, 5.0],
                "postprocess": SSD320_NMS}  # fmt: skip
    # equal to its JSON dict both ways, indexable, dict()-able
    assert info.detection == expected and expected == info.detection
    assert dict(info.detection) == expected and len(info.detection) == 3
    assert info.detection["postprocess"]["iou_threshold"] == 0.6
    # a read gives fresh values: changing them changes nothing in the frozen part
    info.detection["postprocess"]["max_total"] = 1
    info.detection["anchors"]["min_level"] = 4
    assert info.detection.postprocess.max_total == 100 and info.detection == expected
    with pytest.raises(KeyError):
        info.detection["nms"]


@pytest.mark.parametrize(("detection", "message"), [
    ({"anchors": {}, "postprocess": {}}, r"detection settings lack \['scales'\]"),
    ({"anchors": {}, "scales": [1, 1, 1, 1], "postprocess": {}, "extra": 1},
     r"unknown detection settings \['extra'\]"),
    ({"anchors": {}, "scales": [1, 1, 1, 1], "postprocess": {"nms_sigma": 0.5}},
     r"unknown post-processing settings \['nms_sigma'\]"),
    ({"anchors": {"levels": 3}, "scales": [1, 1, 1, 1], "postprocess": {}},
     r"unknown anchor settings \['levels'\]"),
    ({"anchors": {}, "scales": [1, 1, 1], "postprocess": {}}, "scales must be 4 numbers > 0"),
    ({"anchors": {}, "scales": [1, 1, 0, 1], "postprocess": {}}, "scales must be 4 numbers > 0"),
    ({"anchors": {}, "scales": [1, 1, 1, 1], "postprocess": {"max_total": 0}},
     "max_total must be an int >= 1"),
    ({"anchors": {}, "scales": [1, 1, 1, 1], "postprocess": {"iou_threshold": "0.6"}},
     "iou_threshold must be a finite number"),
    ({"anchors": [], "scales": [1, 1, 1, 1], "postprocess": {}}, "anchors must be an object"),
    ([1], "detection settings must be an object"),
])  # fmt: skip
def test_bad_detection_settings_are_named_in_the_file(detection, message):
    data = {"task": "detection", "class_names": ["a"], "image_size": [8, 8],
            "resize": "stretch", "detection": detection}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        ModelInfo.from_dict(data)
    with pytest.raises(BadFileError, match=f"m.keras: cvbench.json: {message}"):
        info_from_json(data, path="m.keras")


def test_a_model_file_written_before_the_parts_loads_unchanged():
    # the cvbench.json of an SSD file from before #38 (the dict as detection_settings() gave it)
    old = {"format": 1, "task": "detection", "class_names": ["a"], "image_size": [320, 320],
           "resize": "stretch", "crop_fraction": 0.875, "model": "ssd320",
           "interpolation": "bilinear", "quantize_uint8": False, "dct_method": "",
           "fancy_upscaling": True, "input_mean": None, "input_std": None,
           "detection": {"anchors": SSD320_ANCHORS, "scales": [10.0, 10.0, 5.0, 5.0],
                         "postprocess": SSD320_NMS}}  # fmt: skip
    info = info_from_json(json.loads(json.dumps(old)), path="old.keras")
    assert info.to_dict() == old  # written again: the same JSON
    assert ModelInfo.from_dict(info.to_dict()) == info


def test_the_task_and_its_head_agree():
    with pytest.raises(ValueError, match="required for, and only for, detectors"):
        ModelInfo(task="classification", class_names=("a",), image_size=(8, 8),
                  detection={"anchors": {}, "scales": [1, 1, 1, 1], "postprocess": {}})  # fmt: skip
    with pytest.raises(ValueError, match="required for, and only for, detectors"):
        ModelInfo(task="detection", class_names=("a",), image_size=(8, 8))
    with pytest.raises(ValueError, match="task must be one of"):
        ModelInfo(task="segmentation", class_names=("a",), image_size=(8, 8))


def test_each_head_checks_the_models_outputs():
    import keras

    inputs = keras.Input((8, 8, 3))
    flat = keras.layers.Flatten()(inputs)
    classifier = keras.Model(inputs, keras.layers.Dense(2)(flat))
    detector = keras.Model(inputs, {"boxes": keras.layers.Dense(4)(flat),
                                    "classes": keras.layers.Dense(2)(flat)})  # fmt: skip
    cls_info = ModelInfo(task="classification", class_names=("a", "b"), image_size=(8, 8))
    det_info = dataclasses.replace(_detector(), image_size=(8, 8))
    check_model_matches_info(classifier, cls_info, path="c.keras")
    check_model_matches_info(detector, det_info, path="d.keras")
    with pytest.raises(BadFileError, match="says detection, but the model does not output"):
        check_model_matches_info(classifier, det_info, path="d.keras")
    with pytest.raises(BadFileError, match="says classification, but the model has several"):
        check_model_matches_info(detector, cls_info, path="c.keras")
    three = dataclasses.replace(cls_info, class_names=("a", "b", "c"))
    with pytest.raises(BadFileError, match="has 3 class names but the model outputs 2"):
        check_model_matches_info(classifier, three, path="c.keras")


# ----------------------------------------------------------------- one typed builder
def test_the_task_the_default_and_the_decoder_share_one_typed_builder():
    from cvbench.detection.predict import Decoder, detection_settings, ssd_detection_settings
    from cvbench.tasks import DetectionTask, TaskOptions

    typed = ssd_detection_settings()
    assert typed == detection_settings() == {"anchors": SSD320_ANCHORS,
                                             "scales": [10.0, 10.0, 5.0, 5.0],
                                             "postprocess": SSD320_NMS}  # fmt: skip
    task = DetectionTask(TaskOptions(model="ssd320", image_size=64))
    assert isinstance(task.detection_settings, DetectionSettings)
    assert task.detection_settings == typed and task.model_info().detection == typed
    # a Decoder of the typed part and one of its JSON decode alike (516 anchors at 64 px)
    rng = np.random.default_rng(0)
    outputs = {"boxes": rng.normal(size=(2, 516, 4)), "classes": rng.normal(size=(2, 516, 3))}
    a, b = Decoder(typed, (64, 64)), Decoder(typed.to_dict(), (64, 64))
    assert a.settings == b.settings and a.anchors.shape == (516, 4)
    for key, value in a(outputs).items():
        np.testing.assert_array_equal(value, b(outputs)[key])


# ----------------------------------------------------------------- the two thresholds
def test_each_score_threshold_has_one_name_and_one_value():
    from cvbench.inference.detection import SCORE_THRESHOLD
    from cvbench.tasks.recipes import get_recipe

    postprocess = importlib.import_module("cvbench.detection.postprocess")
    # COCO evaluation keeps every box above 1e-8 (SSD320 v1.2's config); detect shows > 0.5
    assert COCO_SCORE_THRESHOLD == 1e-8 and DISPLAY_SCORE_THRESHOLD == 0.5
    assert postprocess.SCORE_THRESHOLD == NmsSettings().score_threshold == COCO_SCORE_THRESHOLD
    assert get_recipe("ssd320_v1.2").detection.score_threshold == COCO_SCORE_THRESHOLD
    assert SCORE_THRESHOLD == DISPLAY_SCORE_THRESHOLD


# ----------------------------------------------------------------- the hand-over
def test_the_hand_over_is_one_pair_of_functions():
    from cvbench.data.read.image_preprocessing import ImagePreprocessing
    from cvbench.data.read.model_inputs import ATTRIBUTE, ClassifierInputs, attach
    from cvbench.training.export import INPUTS_ATTRIBUTE, adopt_inputs

    assert ATTRIBUTE == INPUTS_ATTRIBUTE == DATASET_ATTRIBUTE  # spelled once, read by both

    class Data:
        pass

    inputs = ClassifierInputs(8, ImagePreprocessing(), ("a", "b"))
    assert isinstance(inputs, InputContract)  # what the Trainer reads of it
    data = Data()
    assert attach(data, inputs) is data and attached_inputs(data) is inputs
    assert attach_inputs(Data(), None) is not None and attached_inputs(Data()) is None

    class Stub:
        model_info = export_transform = None

        class model:  # noqa: N801 (what adopt_inputs reads of a Keras model)
            output_shape = (None, 2)

    stub = Stub()
    adopt_inputs(stub, Data(), data)
    assert stub.model_info == inputs.model_info(2) and stub.model_info.resize == "center_crop"
    assert stub.model_info.class_names == ("a", "b")
    assert stub.export_transform == inputs.user_model
