"""torchvision ResNet state dicts into cvbench ResNets: same logits as torchvision's forward.

CI has no torch, so the reference is torchvision's forward written out in numpy (NCHW,
`(out, in, kh, kw)` kernels, `Conv2d(padding=k // 2)`, `MaxPool2d(3, 2, padding=1)`,
`BatchNorm2d(eps=1e-5)` in eval mode, `BasicBlock` / `Bottleneck` v1.5 with the stride in the
3x3 conv, `downsample = conv1x1(stride) + BN` where the stride or the width changes, average
pool, `fc`), and the state dict's keys are written from torchvision's module names
(`torchvision/models/resnet.py`: `conv1`, `bn1`, `layer1..4`, `downsample.0/1`, `fc`), not
from the converter's table.
"""

from __future__ import annotations

import builtins

import keras
import numpy as np
import pytest

from cvbench.models import resnet18, resnet50
from cvbench.models.torchvision_weights import (
    load_torchvision_weights,
    read_state_dict,
    torchvision_to_cvbench_name,
)

agnostic = pytest.mark.backend_agnostic

# torchvision's `layers` and block expansion per depth (resnet.py: resnet18 [2, 2, 2, 2]
# BasicBlock, resnet50 [3, 4, 6, 3] Bottleneck with expansion 4).
ARCH = {18: ((2, 2, 2, 2), False), 50: ((3, 4, 6, 3), True)}
EPS = 1e-5  # torchvision's BatchNorm2d default


def _state_dict(depth: int, num_classes: int, seed: int) -> dict[str, np.ndarray]:
    """A random state dict with torchvision's keys and shapes for resnet{depth}."""
    rng = np.random.default_rng(seed)
    sd: dict[str, np.ndarray] = {}

    def conv(key, c_out, c_in, k):
        fan_in = c_in * k * k
        sd[f"{key}.weight"] = rng.normal(0, np.sqrt(2.0 / fan_in), (c_out, c_in, k, k))

    def bn(key, c, small=False):
        lo, hi = (0.1, 0.3) if small else (0.5, 1.5)  # small gamma on the residual branch end
        sd[f"{key}.weight"] = rng.uniform(lo, hi, c)
        sd[f"{key}.bias"] = rng.normal(0, 0.1, c)
        sd[f"{key}.running_mean"] = rng.normal(0, 0.1, c)
        sd[f"{key}.running_var"] = rng.uniform(0.5, 1.5, c)
        sd[f"{key}.num_batches_tracked"] = np.array(7, dtype=np.int64)

    layers, bottleneck = ARCH[depth]
    expansion = 4 if bottleneck else 1
    conv("conv1", 64, 3, 7)
    bn("bn1", 64)
    inplanes = 64
    for s, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True), 1):
        for i in range(blocks):
            stride = 2 if (i == 0 and s > 1) else 1
            key = f"layer{s}.{i}"
            if bottleneck:
                conv(f"{key}.conv1", planes, inplanes, 1)
                bn(f"{key}.bn1", planes)
                conv(f"{key}.conv2", planes, planes, 3)
                bn(f"{key}.bn2", planes)
                conv(f"{key}.conv3", planes * 4, planes, 1)
                bn(f"{key}.bn3", planes * 4, small=True)
            else:
                conv(f"{key}.conv1", planes, inplanes, 3)
                bn(f"{key}.bn1", planes)
                conv(f"{key}.conv2", planes, planes, 3)
                bn(f"{key}.bn2", planes, small=True)
            if stride != 1 or inplanes != planes * expansion:
                conv(f"{key}.downsample.0", planes * expansion, inplanes, 1)
                bn(f"{key}.downsample.1", planes * expansion)
            inplanes = planes * expansion
    sd["fc.weight"] = rng.normal(0, 0.05, (num_classes, inplanes))
    sd["fc.bias"] = rng.normal(0, 0.1, num_classes)
    return {k: v.astype(np.float32) if v.dtype != np.int64 else v for k, v in sd.items()}


def _conv_nchw(x, w, stride, pad):
    """torch.nn.functional.conv2d(x, w, stride=stride, padding=pad), in numpy (im2col)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
    return np.einsum("nckluv,ockl->nouv", cols, w, optimize=True)


def _bn_nchw(x, sd, key):
    scale = sd[f"{key}.weight"] / np.sqrt(sd[f"{key}.running_var"] + EPS)
    shift = sd[f"{key}.bias"] - sd[f"{key}.running_mean"] * scale
    return x * scale[None, :, None, None] + shift[None, :, None, None]


def _torchvision_forward(sd, depth: int, images_nhwc: np.ndarray) -> np.ndarray:
    """torchvision ResNet.forward in eval mode: logits (N, num_classes), float64."""
    relu = lambda t: np.maximum(t, 0.0)  # noqa: E731
    x = np.transpose(images_nhwc, (0, 3, 1, 2)).astype(np.float64)
    x = relu(_bn_nchw(_conv_nchw(x, sd["conv1.weight"], 2, 3), sd, "bn1"))
    # MaxPool2d(3, 2, padding=1) pads with -inf.
    x = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    h, w = (x.shape[2] - 3) // 2 + 1, (x.shape[3] - 3) // 2 + 1
    x = np.max(
        [x[:, :, i : i + 2 * h : 2, j : j + 2 * w : 2] for i in range(3) for j in range(3)], 0
    )
    layers, bottleneck = ARCH[depth]
    for s, blocks in enumerate(layers, 1):
        for i in range(blocks):
            stride = 2 if (i == 0 and s > 1) else 1
            key = f"layer{s}.{i}"
            if bottleneck:
                y = relu(_bn_nchw(_conv_nchw(x, sd[f"{key}.conv1.weight"], 1, 0), sd, f"{key}.bn1"))
                y = relu(
                    _bn_nchw(_conv_nchw(y, sd[f"{key}.conv2.weight"], stride, 1), sd, f"{key}.bn2")
                )
                y = _bn_nchw(_conv_nchw(y, sd[f"{key}.conv3.weight"], 1, 0), sd, f"{key}.bn3")
            else:
                y = relu(
                    _bn_nchw(_conv_nchw(x, sd[f"{key}.conv1.weight"], stride, 1), sd, f"{key}.bn1")
                )
                y = _bn_nchw(_conv_nchw(y, sd[f"{key}.conv2.weight"], 1, 1), sd, f"{key}.bn2")
            if f"{key}.downsample.0.weight" in sd:
                x = _conv_nchw(x, sd[f"{key}.downsample.0.weight"], stride, 0)
                x = _bn_nchw(x, sd, f"{key}.downsample.1")
            x = relu(x + y)
    pooled = x.mean(axis=(2, 3))
    return pooled @ sd["fc.weight"].T.astype(np.float64) + sd["fc.bias"]


def _images(size: int) -> np.ndarray:
    # torchvision's input: (x / 255 - mean) / std, here already normalised, channels last.
    return np.random.default_rng(5).normal(0.0, 1.0, (2, size, size, 3)).astype("float32")


def _assert_same_logits(got: np.ndarray, expected: np.ndarray) -> None:
    scale = float(np.abs(expected).max())
    assert scale > 0.1  # a non-trivial function of the input
    # float32 (ours) vs float64 (reference): rounding only.
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)


@agnostic
@pytest.mark.parametrize("size", [32, 40])  # 40: sizes that are not multiples of 32
def test_resnet18_npz_gives_torchvision_logits(tmp_path, size):
    sd = _state_dict(18, num_classes=5, seed=0)
    path = tmp_path / "resnet18.npz"
    np.savez(path, **sd)
    model = resnet18(
        num_classes=5,
        input_shape=(size, size, 3),
        bn_epsilon=EPS,
        classifier_activation=None,
        weights=path,  # the builder dispatches .npz to the converter
    )
    x = _images(size)
    expected = _torchvision_forward(sd, 18, x)
    _assert_same_logits(keras.ops.convert_to_numpy(model(x, training=False)), expected)


def test_resnet50_bottleneck_state_dict_gives_torchvision_logits():
    sd = _state_dict(50, num_classes=4, seed=1)
    model = resnet50(
        num_classes=4, input_shape=(32, 32, 3), bn_epsilon=EPS, classifier_activation=None
    )
    load_torchvision_weights(model, sd)
    x = _images(32)
    expected = _torchvision_forward(sd, 50, x)
    _assert_same_logits(keras.ops.convert_to_numpy(model(x, training=False)), expected)


def test_name_mapping_examples():
    assert torchvision_to_cvbench_name("conv1.weight") == ("conv1_conv", "kernel")
    assert torchvision_to_cvbench_name("bn1.running_mean") == ("conv1_bn", "moving_mean")
    assert torchvision_to_cvbench_name("layer3.5.conv2.weight") == ("conv4_block6_2_conv", "kernel")
    assert torchvision_to_cvbench_name("layer4.0.downsample.0.weight") == (
        "conv5_block1_0_conv",
        "kernel",
    )
    assert torchvision_to_cvbench_name("layer2.1.bn3.weight") == ("conv3_block2_3_bn", "gamma")
    assert torchvision_to_cvbench_name("fc.weight") == ("predictions", "kernel")
    assert torchvision_to_cvbench_name("layer1.0.bn1.num_batches_tracked") is None
    with pytest.raises(ValueError, match="'layer5.0.conv1.weight' is not a torchvision"):
        torchvision_to_cvbench_name("layer5.0.conv1.weight")


@agnostic
def test_model_without_top_skips_fc_and_conv_bias_is_zeroed():
    sd = _state_dict(18, num_classes=5, seed=2)
    model = resnet18(include_top=False, input_shape=(32, 32, 3), conv_bias=True)
    load_torchvision_weights(model, sd)
    kernel = keras.ops.convert_to_numpy(model.get_layer("conv1_conv").kernel)
    np.testing.assert_array_equal(kernel, np.transpose(sd["conv1.weight"], (2, 3, 1, 0)))
    bias = keras.ops.convert_to_numpy(model.get_layer("conv2_block1_1_conv").bias)
    np.testing.assert_array_equal(bias, np.zeros(64, "float32"))


@agnostic
def test_other_depth_or_class_count_raises_and_leaves_model_untouched():
    model = resnet18(num_classes=5, input_shape=(32, 32, 3))
    before = [keras.ops.convert_to_numpy(v) for v in model.weights]
    with pytest.raises(ValueError, match=r"'fc.weight' has shape \(512, 7\) after conversion"):
        load_torchvision_weights(model, _state_dict(18, num_classes=7, seed=3))
    # ResNet-50's first block conv is 1x1 where ResNet-18's is 3x3.
    sd50 = _state_dict(50, num_classes=5, seed=3)
    with pytest.raises(ValueError, match=r"'layer1.0.conv1.weight' has shape \(1, 1, 64, 64\)"):
        load_torchvision_weights(model, sd50)
    # Keys the model has no layer for (an extra block) are named.
    extra = {**_state_dict(18, num_classes=5, seed=3), "layer1.2.conv1.weight": np.ones(1)}
    with pytest.raises(ValueError, match=r"keys without a layer in the model: \['layer1.2"):
        load_torchvision_weights(model, extra)
    for a, v in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(a, keras.ops.convert_to_numpy(v))


def test_v1_model_is_refused():
    model = resnet50(variant="v1", input_shape=(32, 32, 3), num_classes=4)
    with pytest.raises(ValueError, match="variant='v1.5'"):
        load_torchvision_weights(model, _state_dict(50, num_classes=4, seed=4))


def test_pth_without_torch_says_how_to_convert(tmp_path, monkeypatch):
    path = tmp_path / "resnet18.pth"
    path.write_bytes(b"not read")
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name.split(".")[0] == "torch":
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ValueError, match=r"needs torch \(pip install torch\).*np.savez"):
        read_state_dict(path)


def test_missing_file_and_other_suffix_raise(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        read_state_dict(tmp_path / "missing.npz")
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    with pytest.raises(ValueError, match=r"must be \.pth, \.pt or \.npz"):
        read_state_dict(other)
