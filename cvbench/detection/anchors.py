"""Multiscale grid anchors, as the TF Object Detection API's `MultiscaleGridAnchorGenerator`.

Rule (read from that generator and `grid_anchor_generator.tile_anchors`):

- Level `l` in `min_level..max_level` has stride `s = 2**l` and a base anchor of side
  `anchor_scale * s` pixels.
- Its feature map is `ceil(H / s)` x `ceil(W / s)` (`feature_map_sizes`: what the ResNet + FPN
  of `cvbench.detection.ssd` produce, every stride-2 layer mapping `n` to `ceil(n / 2)`).
- Anchor centres sit at `(i * s + offset_y, j * s + offset_x)` pixels for grid cell `(i, j)`,
  where `offset_y = s / 2` if `H` is divisible by `s`, else 0 (and the same for x with `W`).
  At 320 this puts the centres of levels 3-6 mid-cell but those of level 7 (stride 128) on
  the cell corners.
- Per location: every (aspect ratio `a`, octave scale `k`) pair, with scale
  `2 ** (k / scales_per_octave)`, height `base * scale / sqrt(a)` and width
  `base * scale * sqrt(a)` (so `a` is width / height).
- Pixel corners are divided by `H` (y) and `W` (x); anchors are not clipped.

Order (the head's output order must and does follow it): level by level from `min_level`;
within a level row-major over the grid (y, then x); within a location aspect-ratio-major,
octave scale minor: `(a0, k0), (a0, k1), (a1, k0), ...`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: SSD320 v1.2's anchors (the OD API config's `multiscale_anchor_generator`): the defaults of
#: every function here, and `ANCHOR_SETTINGS`, the `ModelInfo.detection["anchors"]` of SSD320.
MIN_LEVEL = 3
MAX_LEVEL = 7
ANCHOR_SCALE = 4.0
ASPECT_RATIOS = (1.0, 2.0, 0.5)
SCALES_PER_OCTAVE = 2


def anchor_settings() -> dict:
    """SSD320 v1.2's `multiscale_anchors` keyword arguments (a fresh dict, lists for tuples,
    as JSON holds them).

    Example:
        >>> anchor_settings()["aspect_ratios"]
        [1.0, 2.0, 0.5]
    """
    return {
        "min_level": MIN_LEVEL,
        "max_level": MAX_LEVEL,
        "anchor_scale": ANCHOR_SCALE,
        "aspect_ratios": list(ASPECT_RATIOS),
        "scales_per_octave": SCALES_PER_OCTAVE,
    }


def image_hw(image_size: int | Sequence[int]) -> tuple[int, int]:
    """`(height, width)` of an image size given as an int (square) or a pair.

    Raises:
        ValueError: unless `image_size` is a positive int or a pair of positive ints.
    """
    if isinstance(image_size, (int, np.integer)) and not isinstance(image_size, bool):
        hw = (int(image_size), int(image_size))
    elif (
        isinstance(image_size, Sequence)
        and len(image_size) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in image_size)
    ):
        hw = (int(image_size[0]), int(image_size[1]))
    else:
        raise ValueError(
            f"image_size must be an int or a (height, width) pair of ints; got {image_size!r}"
        )
    if min(hw) < 1:
        raise ValueError(f"image_size must be positive; got {image_size!r}")
    return hw


def _check_levels(min_level: int, max_level: int) -> None:
    if not (1 <= min_level <= max_level):
        raise ValueError(
            f"need 1 <= min_level <= max_level; got min_level={min_level!r}, "
            f"max_level={max_level!r}"
        )


def feature_map_sizes(
    image_size: int | Sequence[int], *, min_level: int = MIN_LEVEL, max_level: int = MAX_LEVEL
) -> list[tuple[int, int]]:
    """Feature-map sizes of pyramid levels `min_level..max_level`: `ceil(side / 2**level)`.

    Args:
        image_size: model input size, an int (square) or `(height, width)`.
        min_level: finest pyramid level (stride `2**min_level`).
        max_level: coarsest pyramid level.

    Returns:
        One `(height, width)` per level, finest first.

    Example:
        >>> feature_map_sizes(320)
        [(40, 40), (20, 20), (10, 10), (5, 5), (3, 3)]
    """
    height, width = image_hw(image_size)
    _check_levels(min_level, max_level)
    return [
        (math.ceil(height / 2**level), math.ceil(width / 2**level))
        for level in range(min_level, max_level + 1)
    ]


def anchors_per_location(
    *,
    aspect_ratios: Sequence[float] = ASPECT_RATIOS,
    scales_per_octave: int = SCALES_PER_OCTAVE,
) -> int:
    """Number of anchors at each feature-map location: `len(aspect_ratios) * scales_per_octave`.

    Example:
        >>> anchors_per_location()
        6
    """
    return len(aspect_ratios) * scales_per_octave


def multiscale_anchors(
    image_size: int | Sequence[int],
    *,
    min_level: int = MIN_LEVEL,
    max_level: int = MAX_LEVEL,
    anchor_scale: float = ANCHOR_SCALE,
    aspect_ratios: Sequence[float] = ASPECT_RATIOS,
    scales_per_octave: int = SCALES_PER_OCTAVE,
) -> np.ndarray:
    """Every anchor of the pyramid, in the order of the detection head's outputs.

    See the module docstring for the rule and the order; the defaults are SSD320 v1.2's.

    Args:
        image_size: model input size, an int (square) or `(height, width)`.
        min_level: finest pyramid level (stride `2**min_level`).
        max_level: coarsest pyramid level.
        anchor_scale: base anchor side in units of the level's stride.
        aspect_ratios: width / height ratios placed at every location.
        scales_per_octave: number of octave scales `2**(k / scales_per_octave)`, `k = 0, 1, ...`.

    Returns:
        `(N, 4)` float32 numpy array of anchors, `[ymin, xmin, ymax, xmax]` normalized to
        `[0, 1]` (anchors may reach outside), with
        `N = sum(h_l * w_l) * len(aspect_ratios) * scales_per_octave`.

    Raises:
        ValueError: for a bad size, level range, scale or aspect ratio (naming the value).

    Example:
        >>> multiscale_anchors(320).shape
        (12804, 4)
    """
    height, width = image_hw(image_size)
    _check_levels(min_level, max_level)
    if not anchor_scale > 0:
        raise ValueError(f"anchor_scale must be positive; got {anchor_scale!r}")
    if isinstance(scales_per_octave, bool) or not (
        isinstance(scales_per_octave, int) and scales_per_octave >= 1
    ):
        raise ValueError(f"scales_per_octave must be an int >= 1; got {scales_per_octave!r}")
    ratios = np.asarray(aspect_ratios, dtype=np.float64)
    if ratios.ndim != 1 or ratios.size == 0 or not np.all(ratios > 0):
        raise ValueError(
            f"aspect_ratios must be a non-empty sequence of positive numbers; got {aspect_ratios!r}"
        )
    octave_scales = 2.0 ** (np.arange(scales_per_octave, dtype=np.float64) / scales_per_octave)
    # Basis boxes: aspect-ratio-major, scale-minor (the generator's meshgrid(scales, ratios)).
    scale = np.tile(octave_scales, ratios.size)
    sqrt_ratio = np.repeat(np.sqrt(ratios), scales_per_octave)

    levels = []
    sizes = feature_map_sizes((height, width), min_level=min_level, max_level=max_level)
    for level, (grid_h, grid_w) in zip(range(min_level, max_level + 1), sizes, strict=True):
        stride = 2.0**level
        base = anchor_scale * stride
        heights = base * scale / sqrt_ratio  # (K,)
        widths = base * scale * sqrt_ratio
        offset_y = stride / 2 if height % stride == 0 else 0.0
        offset_x = stride / 2 if width % stride == 0 else 0.0
        cy = np.arange(grid_h, dtype=np.float64) * stride + offset_y
        cx = np.arange(grid_w, dtype=np.float64) * stride + offset_x
        # (grid_h, grid_w, K): y outermost, then x, then the basis box.
        cy = cy[:, None, None]
        cx = cx[None, :, None]
        corners = np.stack(
            np.broadcast_arrays(
                (cy - heights / 2) / height,
                (cx - widths / 2) / width,
                (cy + heights / 2) / height,
                (cx + widths / 2) / width,
            ),
            axis=-1,
        )
        levels.append(corners.reshape(-1, 4))
    return np.concatenate(levels, axis=0).astype(np.float32)
