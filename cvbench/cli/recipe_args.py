"""The flags of `cvbench train` that set a recipe's knobs: each is a setting of
`cvbench.tasks.recipes.SETTINGS` (the flag is its name with dashes), given to the task as
`TaskOptions(settings=..., reasons=...)`, so its deviation names the flag."""

from __future__ import annotations

import argparse
from typing import Any

from cvbench.cli.args import float_list, non_negative_float, positive_int


def add_recipe_flags(p: argparse.ArgumentParser) -> None:
    """Adds the knob flags of `cvbench train` (besides those of `add_model_and_data`)."""
    _add_optimizer_flags(p)
    _add_schedule_flags(p)
    _add_augmentation_flags(p)
    _add_precision_and_weights_flags(p)


def _add_optimizer_flags(p: argparse.ArgumentParser) -> None:
    """--epochs, the learning rate and the update rule with its regularization."""
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=None,
        help="epochs to train (default: the recipe's: 90 for the ResNets, SSD320 its 12,500 "
        "steps at 8 x 32 scaled to the global batch)",
    )
    p.add_argument(
        "--lr",
        type=non_negative_float,
        default=None,
        help="base learning rate at the recipe's reference batch (256 images), scaled "
        "linearly to the global batch",
    )
    p.add_argument("--optimizer", choices=("sgd", "lars"), default=None, help="update rule")
    p.add_argument("--momentum", type=non_negative_float, default=None, help="momentum")
    p.add_argument(
        "--nesterov", action=argparse.BooleanOptionalAction, default=None, help="Nesterov momentum"
    )
    p.add_argument(
        "--weight-decay",
        type=non_negative_float,
        default=None,
        help="L2 weight decay (SSD: the L2 weight of its kernel regularizers)",
    )
    p.add_argument(
        "--label-smoothing", type=non_negative_float, default=None, help="label smoothing"
    )


def _add_schedule_flags(p: argparse.ArgumentParser) -> None:
    """The learning rate's warmup and decay."""
    p.add_argument(
        "--warmup-epochs", type=non_negative_float, default=None, help="linear warmup epochs"
    )
    p.add_argument(
        "--schedule",
        choices=("cosine", "polynomial", "step", "constant"),
        default=None,
        help="decay after the warmup",
    )
    p.add_argument("--power", type=non_negative_float, default=None, help="polynomial power")
    p.add_argument(
        "--boundaries", type=float_list, default=None, help="step-decay epochs, e.g. 30,60,80"
    )
    p.add_argument(
        "--decay-from",
        choices=("warmup_end", "start"),
        default=None,
        help="where the decay's progress counts from: after the warmup, or step 0 over all "
        "steps (DLE's cosine)",
    )


def _add_augmentation_flags(p: argparse.ArgumentParser) -> None:
    """Mixup and the training crop."""
    p.add_argument("--mixup", type=non_negative_float, default=None, help="mixup alpha (0: off)")
    p.add_argument(
        "--crop-area-range",
        type=area_range,
        default=None,
        metavar="LOW,HIGH",
        help="training random crop's area as a fraction of the image, e.g. 0.35,1 (NVIDIA's "
        "ResNet-50: 0.05,1; Inception V3: 0.1,1; SSD320: 0.75,1); raise LOW for small data "
        "or small images",
    )


def _add_precision_and_weights_flags(p: argparse.ArgumentParser) -> None:
    """fp16 loss scaling, and the weights training starts from."""
    p.add_argument(
        "--loss-scale",
        type=non_negative_float,
        default=None,
        help="fp16 loss scale: the static value, or the initial dynamic one",
    )
    p.add_argument(
        "--dynamic-loss-scale",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="dynamic fp16 loss scaling (--no-dynamic-loss-scale: static --loss-scale)",
    )
    p.add_argument(
        "--weights",
        default=None,
        help="classifier weights to start from: a weight file, or imagenet",
    )
    p.add_argument(
        "--backbone-weights",
        default=None,
        help="SSD backbone weights: a keras.applications ResNet-50 _notop file, or imagenet "
        "(required: the SSD recipe freezes every batch norm)",
    )


def area_range(text: str) -> tuple[float, float]:
    """`"0.35,1"` -> (0.35, 1.0): a crop's area range, 0 < low <= high <= 1.

    Example:
        >>> area_range("0.35,1")
        (0.35, 1.0)
        >>> area_range("0.5")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected LOW,HIGH with 0 < LOW <= HIGH <= 1 ... got '0.5'
    """
    try:
        values = float_list(text)
    except argparse.ArgumentTypeError:
        values = ()
    if len(values) != 2 or not 0 < values[0] <= values[1] <= 1:
        raise argparse.ArgumentTypeError(
            "expected LOW,HIGH with 0 < LOW <= HIGH <= 1 (a fraction of the image's area), "
            f"e.g. 0.35,1, got {text!r}"
        )
    return values[0], values[1]


def flag(setting: str) -> str:
    """The flag of a setting: `"warmup_epochs"` -> `"--warmup-epochs"`."""
    return "--" + setting.replace("_", "-")


def recipe_settings(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """`(settings, reasons)` of the parsed flags: every setting the command has a flag for
    (None where not given), and the flag as each one's reason."""
    from cvbench.tasks.recipes import SETTINGS

    names = [name for name in SETTINGS if hasattr(args, name)]
    return {name: getattr(args, name) for name in names}, {name: flag(name) for name in names}
