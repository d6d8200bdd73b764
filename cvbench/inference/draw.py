"""Pictures of the results: PNGs with labelled boxes (detection) or a top-k caption
(classification), drawn with Pillow on the original image at its original size.

`draw_detection` / `draw_classification` draw one image; `draw_results` re-reads the inputs
(`cvbench.inference.images.iter_images`) and writes one PNG per result into a folder, named
after the image file (`photo.jpg` -> `photo.png`; a second `photo.*` from another folder gets
`photo-1.png`) or after the index (`000003.png`) for array and dataset inputs. Files are
written atomically, and only once every name has been checked: a drawing never replaces an
input image (a folder of inputs is no place for their drawings), nor an existing file unless
`overwrite=True` (`check_drawing_paths`).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from cvbench.inference.box_formats import from_yxyx, to_yxyx
from cvbench.inference.images import MAX_IMAGE_PIXELS, image_paths, iter_images, read_image
from cvbench.inference.outputs import check_folder_path, check_output_files, errors_naming
from cvbench.utils.files import recording
from cvbench.utils.io import atomic_path, when_replaced

if TYPE_CHECKING:  # not imported at run time: they load Keras, which the path checks need not
    from cvbench.inference.classification import Classification
    from cvbench.inference.detection import Detection

#: Box colours, cycled by class index.
PALETTE = (
    (230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
    (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212),
)  # fmt: skip


def _font(image: Image.Image) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=max(8, min(image.size) // 20))


def _to_pil(image: Any) -> Image.Image:
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    array = np.clip(np.asarray(image, dtype=np.float32), 0, 255).round().astype(np.uint8)
    return Image.fromarray(array)


def _label(draw: ImageDraw.ImageDraw, xy: tuple[float, float], text: str, font, fill) -> None:
    left, top, right, bottom = draw.textbbox(xy, text, font=font)
    draw.rectangle((left - 1, top - 1, right + 1, bottom + 1), fill=fill)
    draw.text(xy, text, fill=(255, 255, 255), font=font)


def draw_detection(image: Any, detection: Detection) -> Image.Image:
    """The image with each box outlined and labelled `name score`.

    Args:
        image: the original image, `(H, W, 3)` RGB in `[0, 255]` or a PIL image.
        detection: its `Detection` (boxes in pixels of this image, any `box_format`).

    Returns:
        A new RGB PIL image of the original size.
    """
    picture = _to_pil(image)
    draw = ImageDraw.Draw(picture)
    font = _font(picture)
    width = max(1, min(picture.size) // 100)
    xyxy = from_yxyx(to_yxyx(detection.boxes, detection.box_format), "xyxy")
    for box, cls, name, score in zip(
        xyxy, detection.class_ids, detection.class_names, detection.scores, strict=True
    ):
        color = PALETTE[int(cls) % len(PALETTE)]
        x0, y0, x1, y1 = (float(v) for v in box)
        draw.rectangle((x0, y0, max(x0, x1), max(y0, y1)), outline=color, width=width)
        _label(draw, (x0 + 1, y0 + 1), f"{name} {score:.2f}", font, color)
    return picture


def draw_classification(image: Any, classification: Classification) -> Image.Image:
    """The image with its top-k classes as a caption, one `name score` line each, top left.

    Args:
        image: the original image, `(H, W, 3)` RGB in `[0, 255]` or a PIL image.
        classification: its `Classification`.

    Returns:
        A new RGB PIL image of the original size.
    """
    picture = _to_pil(image)
    draw = ImageDraw.Draw(picture)
    font = _font(picture)
    y = 2.0
    for name, score in zip(classification.class_names, classification.scores, strict=True):
        text = f"{name} {score:.2f}"
        _label(draw, (2.0, y), text, font, (0, 0, 0))
        y = draw.textbbox((2.0, y), text, font=font)[3] + 3
    return picture


def _names(sources: Sequence[Any]) -> list[str]:
    names, used = [], set()
    for source in sources:
        stem = Path(source).stem if isinstance(source, str) else f"{int(source):06d}"
        name, n = stem, 0
        while name in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name)
        names.append(f"{name}.png")
    return names


def drawing_paths(sources: Sequence[Any], directory: str | os.PathLike) -> list[Path]:
    """The PNG `draw_results` writes for each source (module docstring), in `directory`.

    Example:
        >>> [str(p) for p in drawing_paths(["a/photo.jpg", "b/photo.png", 3], "out")]
        ['out/photo.png', 'out/photo-1.png', 'out/000003.png']
    """
    return [Path(directory) / name for name in _names(sources)]


def check_drawing_paths(
    paths: Sequence[Path], *, input_files: Sequence[Path] = (), overwrite: bool = False
) -> None:
    """Checks, before anything is written, that the drawings at `paths` replace no input
    image (the same file, through any link), no folder, and no existing file unless
    `overwrite` (`cvbench.inference.outputs.check_output_files`).

    Raises:
        ValueError: naming the first path that may not be written.
    """
    check_output_files(paths, input_files=input_files, overwrite=overwrite, what="drawing")


def draw_results(
    results: Sequence[Detection | Classification],
    inputs: Any,
    directory: str | os.PathLike,
    *,
    overwrite: bool = False,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
    on_written: Callable[[Path], Any] | None = None,
    record_outputs: bool = False,
) -> list[Path]:
    """Writes one PNG per result into `directory` (created if needed; when a failure or a
    signal stops the drawing before any PNG is written there, the folders it created are
    removed again: no empty folder is left behind).

    Each PNG is handed to `on_written` as soon as it is in place, before the next is drawn,
    so that the drawings of a run stopped part-way are known too; with `record_outputs`
    each is recorded as cvbench's before its rename (`cvbench.utils.files.recording`: the
    CLI's, for a rerun with `--overwrite` to replace).

    Args:
        results: what `detect` or `classify` returned for `inputs`.
        inputs: the same inputs (read again for the original pixels; image files are read
            by the results' sources, so files that `skip_corrupt` skipped are not met).
        directory: the output folder.
        overwrite: replace existing files (never an input image).
        max_image_pixels: as `read_image`.
        on_written: called with each drawing's path once it is written (None: nothing).
        record_outputs: record each drawing as cvbench's output (`recording`).

    Returns:
        The paths written, in the order of `results`.

    Raises:
        ValueError: when `inputs` do not give one image per result, or a drawing would
            replace an input image or (without `overwrite`) an existing file; nothing is
            written then.
    """
    directory = Path(directory)
    sources = [r.source for r in results]
    paths = drawing_paths(sources, directory)
    by_path = bool(sources) and all(isinstance(s, str) for s in sources)
    check_folder_path(directory)
    check_drawing_paths(paths, input_files=_input_files(inputs), overwrite=overwrite)
    with _folder_for_the_run(directory):
        write = functools.partial(_write_png, on_written=on_written, record=record_outputs)
        return _draw_each(results, inputs, paths, by_path, max_image_pixels, write)


@contextlib.contextmanager
def _folder_for_the_run(directory: Path) -> Iterator[None]:
    """Makes `directory` and its missing parents for the block; when the block fails or a
    signal stops it (any exception, `KeyboardInterrupt` and `StopSignalReceived` too), the
    folders it made that are still empty are removed, deepest first: never one that existed
    before, nor one that holds anything (`os.rmdir` removes only empty folders)."""
    made = []
    for folder in (directory, *directory.parents):
        if os.path.lexists(folder):
            break
        made.append(folder)
    with errors_naming(directory):
        directory.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for folder in made:
            with contextlib.suppress(OSError):  # not empty (a drawing written), or gone
                os.rmdir(folder)
        raise


def _draw_each(
    results: Sequence[Detection | Classification],
    inputs: Any,
    paths: list[Path],
    by_path: bool,
    max_image_pixels: int,
    write: Callable[[Image.Image, Path], None],
) -> list[Path]:
    """`draw_results`' drawings, each written by `write(picture, path)` before the next is
    drawn; returns their paths."""
    from cvbench.inference.detection import Detection

    written = []
    images = None if by_path else iter_images(inputs)
    for result, path in zip(results, paths, strict=True):
        if by_path:
            source = result.source
            image = read_image(source, max_image_pixels=max_image_pixels)
        else:
            source, image = next(images, (None, None))
        if source != result.source:
            raise ValueError(
                f"inputs give image {source!r} where the results have {result.source!r}"
            )
        if isinstance(result, Detection):
            picture = draw_detection(image, result)
        else:
            picture = draw_classification(image, result)
        write(picture, path)
        written.append(path)
    return written


def _write_png(
    picture: Image.Image,
    path: Path,
    *,
    on_written: Callable[[Path], Any] | None,
    record: bool,
) -> None:
    """Writes `picture` to `path` atomically (recorded as cvbench's before its rename with
    `record`), then hands `path` to `on_written`: also when a signal stops the write right
    after the file is in place (`when_replaced`), so that no drawing written is unknown."""
    then = on_written if on_written is not None else (lambda _: None)
    recorded = recording(path) if record else contextlib.nullcontext()
    with when_replaced(path, then), recorded, errors_naming(path), atomic_path(path) as tmp:
        picture.save(tmp, format="PNG")


def _input_files(inputs: Any) -> list[Path]:
    """The image files of path inputs (none for arrays and datasets)."""
    if isinstance(inputs, str | os.PathLike) or (
        isinstance(inputs, Sequence)
        and inputs
        and all(isinstance(x, str | os.PathLike) for x in inputs)
    ):
        return image_paths(inputs)
    return []
