"""Which convolutions take FastConv2D's fast gradients depends on the CPU (#42): on a CPU
with AVX-512 only stride-1 1x1 convolutions (the k x k and strided rewritings measured slower
than oneDNN's own backward kernels there), on other CPUs all of them. The gradients of
either path are checked against a float64 reference computed here with NumPy."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from cvbench.models import layers as layers_module
from cvbench.models.layers import ALL, POINTWISE, FastConv2D, fast_gradient_kinds

TF_CPU = keras.config.backend() == "tensorflow" and layers_module.tensorflow_on_cpu_only()


@pytest.mark.parametrize(
    "flags, kinds",
    [
        ({"avx2", "avx512f", "avx512_bf16"}, POINTWISE),  # this project's AMD EPYC
        ({"avx2", "avx512f"}, POINTWISE),
        ({"avx2", "fma"}, ALL),  # an AVX2 laptop or CI runner
        (set(), ALL),  # no /proc/cpuinfo (ARM, macOS): as before
    ],
)
def test_kinds_follow_the_cpu_flags(flags, kinds):
    assert fast_gradient_kinds(flags) == kinds


@pytest.mark.parametrize(
    "cap, kinds",
    [
        (None, POINTWISE),
        ("", POINTWISE),
        ("ALL", POINTWISE),
        ("avx512_core_bf16", POINTWISE),  # any case, as oneDNN reads it
        ("AVX10_1_512_AMX", POINTWISE),
        ("AVX2", ALL),  # benchmarks/cpu_check.py --emulate-avx2: the AVX2 kernels run
        ("AVX2_VNNI", ALL),
        ("SSE41", ALL),
    ],
)
def test_a_onednn_cap_below_avx512_gives_what_an_avx2_cpu_gets(cap, kinds):
    assert fast_gradient_kinds({"avx2", "avx512f", "avx512_bf16"}, onednn_max_isa=cap) == kinds
    # Without AVX-512 in the flags no cap lets oneDNN run AVX-512 kernels.
    assert fast_gradient_kinds({"avx2"}, onednn_max_isa=cap) == ALL


@pytest.mark.parametrize("name", ["ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"])
def test_this_machine_reads_the_cap_from_the_environment(monkeypatch, name):
    monkeypatch.setattr(layers_module, "cpu_flags", lambda: {"avx2", "avx512f"})
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    layers_module._this_cpu_kinds.cache_clear()
    try:
        assert fast_gradient_kinds() == POINTWISE
        layers_module._this_cpu_kinds.cache_clear()
        monkeypatch.setenv(name, "AVX2")
        assert fast_gradient_kinds() == ALL
    finally:
        layers_module._this_cpu_kinds.cache_clear()


@pytest.mark.parametrize(
    "kernel, strides, padding, all_kinds, pointwise",
    [
        (1, 1, "same", True, True),
        (1, 1, "valid", True, True),
        (1, 2, "same", True, False),  # strided 1x1: the subsampling's gradient is a scatter
        (3, 1, "same", True, False),  # 3x3: nine tap slices copied per step
        ((1, 7), 1, "same", True, False),
        (3, 2, "same", False, False),  # never fast
    ],
)
def test_which_convolutions_each_kind_covers(kernel, strides, padding, all_kinds, pointwise):
    conv = FastConv2D(2, kernel, strides=strides, padding=padding)
    assert conv.uses_fast_gradients(kinds=ALL) == (all_kinds and TF_CPU)
    assert conv.uses_fast_gradients(kinds=POINTWISE) == (pointwise and TF_CPU)


@pytest.mark.skipif(not TF_CPU, reason="the kinds are checked on TensorFlow without a GPU")
def test_a_bad_kinds_value_is_named():
    with pytest.raises(ValueError, match="kinds must be 'pointwise' or 'all', got 'some'"):
        FastConv2D(2, 1).uses_fast_gradients(kinds="some")


def _reference_gradients(x, kernel):
    """float64 d/dx and d/dkernel of sum(conv(x, kernel)^2), stride 1, "same" padding, odd
    kernel: y[b, h, w, o] = sum_{i, j, c} xp[b, h + i, w + j, c] k[i, j, c, o] with xp the
    input padded by kh // 2 and kw // 2; g = 2 y; dk[i, j] = xp[:, i:i+H, j:j+W]^T g; dxp
    gets g k[i, j]^T added at the same offsets, dx is dxp without the padding."""
    x, kernel = x.astype(np.float64), kernel.astype(np.float64)
    kh, kw = kernel.shape[:2]
    _, h, w, _ = x.shape
    ph, pw = kh // 2, kw // 2
    xp = np.pad(x, [(0, 0), (ph, ph), (pw, pw), (0, 0)])
    y = sum(
        np.einsum("bhwc,co->bhwo", xp[:, i : i + h, j : j + w], kernel[i, j])
        for i in range(kh)
        for j in range(kw)
    )
    g = 2 * y
    taps = [
        [np.einsum("bhwc,bhwo->co", xp[:, i : i + h, j : j + w], g) for j in range(kw)]
        for i in range(kh)
    ]
    dk = np.array(taps)
    dxp = np.zeros_like(xp)
    for i in range(kh):
        for j in range(kw):
            dxp[:, i : i + h, j : j + w] += np.einsum("bhwo,co->bhwc", g, kernel[i, j])
    return dxp[:, ph : ph + h, pw : pw + w], dk


def _gradients(layer, x):
    import tensorflow as tf

    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.cast(layer(x), "float32") ** 2)
    return [np.float64(g) for g in tape.gradient(loss, [x, layer.kernel])]


@pytest.mark.skipif(not TF_CPU, reason="the fast gradients exist only on TensorFlow's CPU path")
@pytest.mark.parametrize("kinds", [ALL, POINTWISE])
@pytest.mark.parametrize("kernel", [1, 3])
def test_gradients_of_either_kind_match_a_float64_reference(kernel, kinds, monkeypatch):
    monkeypatch.setattr(layers_module, "_this_cpu_kinds", lambda: kinds)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 6, 5, 3)).astype("float32")
    conv = FastConv2D(4, kernel, padding="same", use_bias=False)
    conv.build(x.shape)
    conv.kernel.assign(rng.normal(size=(kernel, kernel, 3, 4)).astype("float32"))
    # A 3x3 takes the fast path only under ALL; a stride-1 1x1 under both.
    assert conv.uses_fast_gradients() == (kinds == ALL or kernel == 1)
    want = _reference_gradients(x, keras.ops.convert_to_numpy(conv.kernel))
    for got, ref in zip(_gradients(conv, x), want, strict=True):
        # float32 sums of at most 3 x 3 x 4 = 36 products (input gradient) or 2 x 6 x 5 = 60
        # (kernel gradient) of values of order 1-10: within 1e-5 relative of the largest.
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.skipif(not TF_CPU, reason="the fast gradients exist only on TensorFlow's CPU path")
def test_a_3x3_without_the_fast_path_is_conv2d_bit_for_bit(monkeypatch):
    # Under POINTWISE a 3x3 FastConv2D runs Keras' Conv2D and TensorFlow's own gradients:
    # the same operations, so the same bits (the step's numbers are Keras').
    monkeypatch.setattr(layers_module, "_this_cpu_kinds", lambda: POINTWISE)
    x = np.random.default_rng(5).normal(size=(2, 6, 6, 3)).astype("float32")
    fast = FastConv2D(4, 3, padding="same", use_bias=False)
    plain = keras.layers.Conv2D(4, 3, padding="same", use_bias=False)
    fast.build(x.shape)
    plain.build(x.shape)
    plain.set_weights(fast.get_weights())
    for got, want in zip(_gradients(fast, x), _gradients(plain, x), strict=True):
        np.testing.assert_array_equal(got, want)
