"""The ResNet depth builders are one table (`resnet.DEPTHS`): each `resnet{depth}` keeps the
public signature, name and docstring it had as a hand-written wrapper, and builds what
`build_resnet(depth=...)` builds."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from cvbench.models import build_resnet, resnet, resnet18, resnet34, resnet50, resnet101, resnet152

BUILDERS = {18: resnet18, 34: resnet34, 50: resnet50, 101: resnet101, 152: resnet152}


def test_one_builder_per_table_row():
    assert sorted(resnet.DEPTHS) == sorted(BUILDERS) == sorted(resnet.STAGE_BLOCKS)
    for depth, spec in resnet.DEPTHS.items():
        assert resnet.STAGE_BLOCKS[depth] == spec.blocks
        # He et al. table 1: bottleneck blocks from 50 layers on.
        assert spec.bottleneck == (depth >= 50)


@pytest.mark.parametrize("depth", sorted(BUILDERS))
def test_signature_is_build_resnet_less_depth(depth):
    builder = BUILDERS[depth]
    ours = inspect.signature(builder)
    full = inspect.signature(build_resnet).parameters
    assert list(ours.parameters) == [p for p in full if p != "depth"]
    for name, param in ours.parameters.items():
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
        assert param.default == full[name].default
        assert param.annotation == full[name].annotation
    assert ours.return_annotation == inspect.signature(build_resnet).return_annotation
    assert builder.__name__ == builder.__qualname__ == f"resnet{depth}"
    assert builder.__module__ == "cvbench.models.resnet"


def test_docstrings_as_before():
    # The hand-written wrappers' first lines: kind of block and blocks per stage.
    assert inspect.getdoc(resnet18) == (
        "ResNet-18 (basic blocks, 2-2-2-2). Arguments and returns as `build_resnet`."
    )
    assert inspect.getdoc(resnet152) == (
        "ResNet-152 (bottleneck blocks, 3-8-36-3). Arguments and returns as `build_resnet`."
    )
    assert inspect.getdoc(resnet50).splitlines()[1:] == [
        "",
        "25,557,032 trainable parameters at 1000 classes without conv bias (v1 and v1.5).",
    ]


@pytest.mark.parametrize(
    "call",
    [
        lambda: resnet18(depth=34),  # the depth is the builder's own
        lambda: resnet18(10),  # keyword-only, as before
        lambda: resnet18(num_class=10),  # a misspelt keyword
    ],
)
def test_refuses_what_the_wrappers_refused(call):
    with pytest.raises(TypeError):
        call()


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("depth", [18, 50])
def test_builds_what_build_resnet_builds(depth):
    kwargs = {"num_classes": 3, "input_shape": (32, 32, 3), "variant": "v1"}
    ours = BUILDERS[depth](**kwargs)
    theirs = build_resnet(depth=depth, **kwargs)
    assert ours.name == theirs.name == f"resnet{depth}"
    assert [layer.name for layer in ours.layers] == [layer.name for layer in theirs.layers]
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in theirs.weights]
    # ResNet-18 at 3 classes: torchvision's 11,689,512 at 1000 classes less 997 * (512 + 1)
    # head parameters = 11,178,051 trainable; plus 2 moving statistics for each of the 4,800
    # batch-norm channels (stem 64, conv2 4 x 64, conv3 5 x 128, conv4 5 x 256, conv5 5 x 512).
    if depth == 18:
        trainable = sum(int(w.numpy().size) for w in ours.trainable_weights)
        assert trainable == 11_178_051
        assert ours.count_params() == 11_178_051 + 2 * 4_800


def test_pretrained_does_not_import_weights():
    # The file recognition lives in `pretrained` (below `weights`): no import circle.
    source = Path(resnet.pretrained.__file__).read_text()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not any(m.startswith("cvbench.models.weights") for m in imported)
    from cvbench.models import weights

    assert weights.is_keras_applications_file is resnet.pretrained.is_keras_applications_file
