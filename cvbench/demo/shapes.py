"""Synthetic "shapes" images: coloured polygons on noisy, textured backgrounds.

Every shape is a polygon in a unit frame ([-1, 1] on both axes, y pointing down), rotated by a
small angle, scaled and translated into the image. Its bounding box is the extent of the
transformed vertices, so the box is exact by construction (not measured from pixels).

Rendering is deterministic: the same `numpy.random.Generator` state gives the same pixels.
Images are drawn at twice their size and box-filtered down, which anti-aliases the edges.

Boxes returned here are COCO `[x, y, width, height]` in pixels of the final image (float),
which is the format the demo writes to its COCO JSON files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

# Class order defines the class index (0-based); COCO category ids are index + 1.
SHAPE_NAMES: tuple[str, ...] = ("circle", "square", "triangle", "cross", "diamond", "star")

# Saturated fill colours, far from the muted backgrounds drawn by `_background`.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 210, 60),
    "blue": (50, 90, 240),
    "yellow": (240, 225, 40),
    "magenta": (225, 50, 220),
    "cyan": (40, 220, 225),
    "orange": (250, 140, 20),
    "white": (245, 245, 245),
}

_SUPERSAMPLE = 2
_MAX_ROTATION_DEG = 15.0  # a square rotated by 15 degrees is still far from a diamond (45)


def _unit_polygon(name: str) -> np.ndarray:
    """Vertices of shape `name` in the unit frame, float64 [V, 2] as (x, y)."""
    if name == "circle":
        t = np.linspace(0.0, 2.0 * math.pi, 48, endpoint=False)
        return np.stack([np.cos(t), np.sin(t)], axis=1)
    if name == "square":
        return np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=np.float64) * 0.85
    if name == "triangle":
        # Equilateral, pointing up, centroid at the origin, circumradius 1.
        angles = np.deg2rad([-90.0, 30.0, 150.0])
        return np.stack([np.cos(angles), np.sin(angles)], axis=1)
    if name == "cross":
        a = 0.32  # half the arm width
        return np.array(
            [
                [-a, -1],
                [a, -1],
                [a, -a],
                [1, -a],
                [1, a],
                [a, a],
                [a, 1],
                [-a, 1],
                [-a, a],
                [-1, a],
                [-1, -a],
                [-a, -a],
            ],
            dtype=np.float64,
        )
    if name == "diamond":
        return np.array([[0, -1], [0.8, 0], [0, 1], [-0.8, 0]], dtype=np.float64)
    if name == "star":
        angles = np.deg2rad(-90.0 + 36.0 * np.arange(10))
        radii = np.where(np.arange(10) % 2 == 0, 1.0, 0.45)
        return np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)
    raise ValueError(f"unknown shape {name!r}; expected one of {SHAPE_NAMES}")


@dataclass(frozen=True)
class PlacedShape:
    """One shape placed in an image.

    Attributes:
        label: class index into `SHAPE_NAMES` (0-based).
        polygon: float64 [V, 2] vertices (x, y) in image pixels.
        colour: the RGB fill colour.
    """

    label: int
    polygon: np.ndarray
    colour: tuple[int, int, int]

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        """COCO `[x, y, width, height]` of the polygon, in pixels."""
        x0, y0 = self.polygon.min(axis=0)
        x1, y1 = self.polygon.max(axis=0)
        return float(x0), float(y0), float(x1 - x0), float(y1 - y0)

    @property
    def area(self) -> float:
        """Polygon area in square pixels (shoelace formula)."""
        x, y = self.polygon[:, 0], self.polygon[:, 1]
        return float(0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def place_shape(
    label: int, *, center: tuple[float, float], size: float, angle_deg: float, colour: str
) -> PlacedShape:
    """Places shape `label` with its unit frame scaled to `size` pixels across.

    Args:
        label: class index into `SHAPE_NAMES`.
        center: (x, y) of the unit frame's origin, in pixels.
        size: the unit frame's width in pixels (the shape's box is at most about this wide).
        angle_deg: rotation, degrees, clockwise on screen.
        colour: a key of `COLOURS`.

    Returns:
        The `PlacedShape`.
    """
    if not 0 <= label < len(SHAPE_NAMES):
        raise ValueError(f"label must be in [0, {len(SHAPE_NAMES)}), got {label}")
    if size <= 0:
        raise ValueError(f"size must be positive, got {size}")
    if colour not in COLOURS:
        raise ValueError(f"unknown colour {colour!r}; expected one of {tuple(COLOURS)}")
    t = math.radians(angle_deg)
    rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    poly = _unit_polygon(SHAPE_NAMES[label]) @ rot.T * (size / 2.0) + np.asarray(center)
    return PlacedShape(label=label, polygon=poly, colour=COLOURS[colour])


def _background(rng: np.random.Generator, size: int) -> Image.Image:
    """A muted, low-frequency colour field with thin random strokes, at supersampled size."""
    big = size * _SUPERSAMPLE
    grid = int(rng.integers(3, 8))
    base = rng.uniform(40.0, 150.0)
    field = base + rng.uniform(-35.0, 35.0, size=(grid, grid, 3))
    img = Image.fromarray(np.clip(field, 0, 255).astype(np.uint8)).resize(
        (big, big), Image.Resampling.BICUBIC
    )
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 9))):
        xy = rng.uniform(0, big, size=4).tolist()
        shade = tuple(int(v) for v in np.clip(base + rng.uniform(-50, 50, size=3), 0, 255))
        draw.line(xy, fill=shade, width=int(rng.integers(1, 2 * _SUPERSAMPLE + 1)))
    return img


def render(
    rng: np.random.Generator, size: int, shapes: list[PlacedShape], *, noise_std: float = 10.0
) -> np.ndarray:
    """Draws `shapes` (in order, later on top) over a fresh random background.

    Args:
        rng: the random generator (background, noise).
        size: image height and width in pixels.
        shapes: shapes with polygons in pixels of the `size` x `size` image.
        noise_std: standard deviation of the per-pixel Gaussian noise added at the end.

    Returns:
        uint8 [size, size, 3] RGB image.
    """
    img = _background(rng, size)
    draw = ImageDraw.Draw(img)
    for s in shapes:
        pts = [(float(x), float(y)) for x, y in s.polygon * _SUPERSAMPLE]
        draw.polygon(pts, fill=s.colour)
    img = img.resize((size, size), Image.Resampling.BOX)
    arr = np.asarray(img, dtype=np.float32)
    if noise_std > 0:
        arr = arr + rng.normal(0.0, noise_std, size=arr.shape)
    return np.clip(np.rint(arr), 0, 255).astype(np.uint8)


def _random_shape(
    rng: np.random.Generator, label: int, size: float, center: tuple[float, float]
) -> PlacedShape:
    return place_shape(
        label,
        center=center,
        size=size,
        angle_deg=float(rng.uniform(-_MAX_ROTATION_DEG, _MAX_ROTATION_DEG)),
        colour=str(rng.choice(list(COLOURS))),
    )


def classification_example(
    rng: np.random.Generator, label: int, image_size: int
) -> tuple[np.ndarray, PlacedShape]:
    """One image dominated by a single shape of class `label`.

    The shape spans 45-80% of the image and its centre is jittered by up to 10% of the size.

    Returns:
        (uint8 [image_size, image_size, 3] image, the placed shape).
    """
    if image_size < 16:
        raise ValueError(f"image_size must be at least 16, got {image_size}")
    frac = rng.uniform(0.45, 0.8)
    jitter = rng.uniform(-0.1, 0.1, size=2) * image_size
    center = (image_size / 2 + float(jitter[0]), image_size / 2 + float(jitter[1]))
    shape = _random_shape(rng, label, frac * image_size, center)
    return render(rng, image_size, [shape]), shape


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """IoU of two COCO [x, y, w, h] boxes."""
    ix = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def detection_example(
    rng: np.random.Generator,
    image_size: int,
    *,
    max_objects: int = 4,
    min_size: float = 0.2,
    max_size: float = 0.5,
    max_iou: float = 0.1,
) -> tuple[np.ndarray, list[PlacedShape]]:
    """One image with 1..`max_objects` shapes, each fully inside the image.

    The number of shapes and each shape's class are drawn first; then each shape is placed by
    rejection sampling so that it lies inside the image and no two boxes overlap with IoU
    above `max_iou` (occlusion stays small). A shape that fails 50 placements is dropped
    (an image always keeps at least one shape).

    Args:
        rng: the random generator.
        image_size: image height and width in pixels.
        max_objects: the most shapes per image.
        min_size: smallest shape size as a fraction of `image_size`.
        max_size: largest shape size as a fraction of `image_size`.
        max_iou: the largest IoU allowed between two boxes.

    Returns:
        (uint8 [image_size, image_size, 3] image, the placed shapes in drawing order).
    """
    if max_objects < 1:
        raise ValueError(f"max_objects must be at least 1, got {max_objects}")
    if not 0 < min_size <= max_size <= 1:
        raise ValueError(f"need 0 < min_size <= max_size <= 1, got {min_size}, {max_size}")
    wanted = int(rng.integers(1, max_objects + 1))
    shapes: list[PlacedShape] = []
    for _ in range(wanted):
        # The label is drawn before placement so that rejections do not favour small classes.
        label = int(rng.integers(len(SHAPE_NAMES)))
        for _attempt in range(50):
            size = rng.uniform(min_size, max_size) * image_size
            center = tuple(float(c) for c in rng.uniform(0, image_size, size=2))
            cand = _random_shape(rng, label, size, center)
            x, y, w, h = cand.bbox
            inside = x >= 0 and y >= 0 and x + w <= image_size and y + h <= image_size
            if inside and all(_iou(cand.bbox, s.bbox) <= max_iou for s in shapes):
                shapes.append(cand)
                break
    if not shapes:  # only reachable with sizes close to the whole image
        size = min_size * image_size
        c = image_size / 2
        label = int(rng.integers(len(SHAPE_NAMES)))
        shapes.append(place_shape(label, center=(c, c), size=size, angle_deg=0.0, colour="white"))
    return render(rng, image_size, shapes), shapes
