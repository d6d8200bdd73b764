"""SparseCrossEntropy: soft labels (mixup) and smoothing over more classes than outputs (DLE).

NVIDIA DeepLearningExamples' ResNet-50 v1.5 (TensorFlow/Classification/ConvNets,
`model/resnet.py` l.151-153) smooths over `n_classes=1001` outputs (`main.py` l.61) while the
1,000 labels are 0-based: one output no label names. `smoothing_classes=K` on a model with
`C < K` outputs uses the target `(1 - s) * one_hot + s / K` on the `C` outputs and drops the
rest; the tests below show that this is DLE's loss up to a constant and has DLE's gradient.
"""

import math

import numpy as np
import pytest

from cvbench.training.losses import SparseCrossEntropy

pytestmark = pytest.mark.backend_agnostic


def value(loss, labels, logits):
    return float(loss(np.asarray(labels), np.asarray(logits, "float32")))


def log_softmax(z):
    z = np.asarray(z, "float64")
    return z - np.log(np.sum(np.exp(z - z.max()))) - z.max()


def dle_loss(label, logits, extra_logits, s):
    """DLE's loss on `C + len(extra)` outputs, smoothed over all of them (float64)."""
    z = np.concatenate([logits, extra_logits])
    k = z.size
    target = np.full(k, s / k)
    target[label] += 1 - s
    return -np.sum(target * log_softmax(z))


def extra_logit_at_its_target(logits, s, k):
    """The one extra logit at which DLE's extra output has its target probability s / k."""
    # e^b / (S + e^b) = s / k, with S = sum(e^z): e^b = S (s / k) / (1 - s / k).
    total = np.sum(np.exp(np.asarray(logits, "float64")))
    return np.log(total * (s / k) / (1 - s / k))


def test_smoothing_over_more_classes_than_outputs_exact():
    # softmax(log(1, 1, 2, 4)) = (1, 1, 2, 4) / 8; label 3, s = 0.2 over K = 5 classes:
    # off the label 0.2 / 5 = 0.04, on it 0.8 + 0.04 = 0.84 (total 0.96: 0.04 dropped).
    logits = np.log([[1.0, 1.0, 2.0, 4.0]])
    expected = -(2 * 0.04 * math.log(1 / 8) + 0.04 * math.log(2 / 8) + 0.84 * math.log(4 / 8))
    assert value(SparseCrossEntropy(0.2, smoothing_classes=5), [3], logits) == pytest.approx(
        expected, rel=1e-6
    )
    # Over the 4 outputs (the default): 0.05 off, 0.85 on: a different value.
    default = -(2 * 0.05 * math.log(1 / 8) + 0.05 * math.log(2 / 8) + 0.85 * math.log(4 / 8))
    assert value(SparseCrossEntropy(0.2), [3], logits) == pytest.approx(default, rel=1e-6)
    assert value(SparseCrossEntropy(0.2, smoothing_classes=4), [3], logits) == pytest.approx(
        default, rel=1e-6
    )
    assert abs(expected - default) > 1e-2


def test_the_loss_is_dles_up_to_a_constant_over_1001_classes():
    # With DLE's extra output at its target s / K (e^b from extra_logit_at_its_target):
    # DLE - ours = -sum(t) log(sum(t)) - (s / K) log(s / K), sum(t) = 1 - s / K, whatever
    # the 1,000 logits are.
    s, k = 0.1, 1001
    constant = -(1 - s / k) * math.log(1 - s / k) - (s / k) * math.log(s / k)
    ours = SparseCrossEntropy(s, smoothing_classes=k)
    rng = np.random.default_rng(0)
    for label in (0, 517, 999):
        logits = rng.normal(0.0, 2.0, size=1000)
        b = extra_logit_at_its_target(logits, s, k)
        reference = dle_loss(label, logits, [b], s)
        assert reference - value(ours, [label], logits[None]) == pytest.approx(constant, abs=2e-5)


def test_the_gradient_is_dles_when_its_extra_output_sits_at_its_target():
    # DLE's gradient on the real logits is p_i - t_i (p: softmax over all K outputs); ours,
    # by central differences, must match it (renormalizing the target would scale it by
    # 1 / sum(t) = 1 / 0.96; smoothing over the C outputs would move t).
    s, k = 0.2, 5
    logits = np.array([0.3, -1.0, 0.8, 1.5])
    label = 2
    b = extra_logit_at_its_target(logits, s, k)
    p = np.exp(log_softmax(np.concatenate([logits, [b]])))
    assert p[-1] == pytest.approx(s / k)
    t = np.full(k, s / k)
    t[label] += 1 - s
    dle_grad = (p - t)[:4]
    ours = numeric_gradient(SparseCrossEntropy(s, smoothing_classes=k), label, logits)
    np.testing.assert_allclose(ours, dle_grad, atol=2e-4)
    # The knob matters: over the C = 4 outputs (the default) the gradient is off DLE's by
    # more than 10x that tolerance.
    default = numeric_gradient(SparseCrossEntropy(s), label, logits)
    assert np.max(np.abs(default - dle_grad)) > 2e-3


def numeric_gradient(loss, label, logits, eps=1e-2):
    """Central differences of `loss` at `logits` (float32 loss, float64 arithmetic)."""
    grad = np.zeros_like(logits)
    for i in range(logits.size):
        up, down = logits.copy(), logits.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (value(loss, [label], up[None]) - value(loss, [label], down[None])) / (2 * eps)
    return grad


def test_soft_labels_exact():
    logits = np.log([[1.0, 3.0], [1.0, 1.0]])  # softmax (1/4, 3/4) and (1/2, 1/2)
    labels = np.array([[0.3, 0.7], [1.0, 0.0]], "float32")
    expected = [-(0.3 * math.log(0.25) + 0.7 * math.log(0.75)), math.log(2.0)]
    loss = SparseCrossEntropy(reduction=None)
    np.testing.assert_allclose(np.asarray(loss(labels, logits)), expected, rtol=1e-6)
    # s = 0.2 over 2 classes: (1 - s) y + s / 2 = (0.34, 0.66) and (0.9, 0.1).
    smoothed = [-(0.34 * math.log(0.25) + 0.66 * math.log(0.75)), math.log(2.0)]
    smooth = SparseCrossEntropy(0.2, reduction=None)
    np.testing.assert_allclose(np.asarray(smooth(labels, logits)), smoothed, rtol=1e-6)


def test_one_hot_soft_labels_equal_integer_labels():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(6, 5)).astype("float32")
    labels = np.array([0, 4, 2, 2, 1, 3])
    one_hot = np.eye(5, dtype="float32")[labels]
    for loss in (SparseCrossEntropy(), SparseCrossEntropy(0.1, smoothing_classes=7)):
        assert value(loss, one_hot, logits) == pytest.approx(value(loss, labels, logits), rel=1e-6)
    # [batch, 1] integer labels stay integer labels.
    loss = SparseCrossEntropy(0.1)
    assert value(loss, labels[:, None], logits) == pytest.approx(
        value(loss, labels, logits), rel=1e-6
    )


def test_config_round_trip():
    loss = SparseCrossEntropy(0.1, smoothing_classes=1001)
    again = SparseCrossEntropy.from_config(loss.get_config())
    assert (again.label_smoothing, again.smoothing_classes) == (0.1, 1001)
    assert SparseCrossEntropy().get_config()["smoothing_classes"] is None


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "1001"])
def test_bad_smoothing_classes_name_the_value(bad):
    with pytest.raises(ValueError, match=f"smoothing_classes must be .*got {bad!r}"):
        SparseCrossEntropy(0.1, smoothing_classes=bad)


def test_fewer_smoothing_classes_than_outputs_and_wrong_soft_labels_are_errors():
    with pytest.raises(ValueError, match="smoothing_classes=3 is below the logits' 4 classes"):
        value(SparseCrossEntropy(0.1, smoothing_classes=3), [0], np.zeros((1, 4)))
    with pytest.raises(ValueError, match=r"soft labels must have the logits' 4 classes.*\(1, 3\)"):
        value(SparseCrossEntropy(), np.full((1, 3), 1 / 3), np.zeros((1, 4)))
