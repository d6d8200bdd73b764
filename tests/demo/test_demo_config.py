import pytest

from cvbench.demo.config import DemoConfig, demo_precision


def test_precision_follows_the_hardware():
    assert demo_precision(has_gpu=True, flags=frozenset()) == "mixed_float16"
    assert demo_precision(has_gpu=False, flags=frozenset({"avx2", "avx512_bf16"})) == (
        "mixed_bfloat16"
    )
    assert demo_precision(has_gpu=False, flags=frozenset({"amx_bf16"})) == "mixed_bfloat16"
    # AVX2 / plain AVX-512 only: bfloat16 is emulated and slower than float32.
    assert demo_precision(has_gpu=False, flags=frozenset({"avx2", "avx512f"})) == "float32"


def test_quick_is_smaller_than_the_default():
    full, quick = DemoConfig(), DemoConfig.quick()
    assert quick.cls_train_per_class < full.cls_train_per_class
    assert quick.det_num_train < full.det_num_train
    assert quick.replace(seed=3).seed == 3


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cls_epochs": 0}, "cls_epochs must be a number > 0, got 0"),
        ({"seed": -1}, "seed must be a number >= 0, got -1"),
        ({"det_batch_size": 2.5}, "det_batch_size must be an int, got 2.5"),
        ({"ssd_depth": True}, "ssd_depth must be a number > 0, got True"),
        ({"det_image_size": 16}, "det_image_size=16"),
    ],
)
def test_bad_settings_are_named(changes, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        DemoConfig(**changes)
