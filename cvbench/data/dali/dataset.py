"""`imagenet_dali_dataset`: DALI batches with the element structure of `imagenet_dataset`.

The pipeline is `cvbench.data.dali.pipeline.imagenet_dali_pipeline`; this module turns its
outputs into batches the Trainer consumes (`cvbench.training.inputs` takes any re-iterable
of batches), as NumPy arrays (`arrays="numpy"`, every Keras backend) or as `jax.Array`s
through DALI's JAX plugin (`arrays="jax"`, for `KERAS_BACKEND=jax`):

* training: `(images, labels)`, endless, every batch full (DALI's reader wraps around at the
  end of an epoch, so there is no remainder to drop);
* evaluation: `(images, labels, weights)`, exactly `steps` batches on every rank,
  `steps = ceil(ceil(records / ranks) / batch_size)` as tf.data's; every validation record
  once across ranks (`reader.rank_segments`' contiguous ranges), weight 1.0; padding rows have
  a zero image, label 0 and weight 0.0, as tf.data's.

`DaliBatches` is re-iterable: each `iter()` reads a freshly built pipeline (the first one the
pipeline built when the dataset was made, to check the arguments), so with a `seed` every
iteration yields the same stream, and the Trainer's resume (which skips the batches already
consumed, `itertools.islice`) returns to the same position, at the cost of decoding the
skipped batches. Without a seed a resumed run sees other crops and another order.

NumPy batches work with the TensorFlow, JAX and PyTorch backends alike; with `device="mixed"`
their images are copied from the GPU to the host once per batch (`as_cpu`). `arrays="jax"`
reads the pipeline through `nvidia.dali.plugin.jax.DALIGenericIterator` (the plugin's public
iterator, part of the main DALI package), which hands each output to JAX by DLPack: on the GPU
with `device="mixed"`, on the CPU device with `device="cpu"`. The evaluation's padding rows
are zeroed with `jnp.where` and the label check reads the labels back to the host (one int32
per row). Same pipeline, same seed: the two kinds give equal batches. DALI's TensorFlow
plugin is not used (it must be compiled against the installed TensorFlow; see docs/data.md).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from cvbench.data._distributed import resolve_shards
from cvbench.data.dali.pipeline import DTYPES, dali_spec, imagenet_dali_pipeline, import_dali
from cvbench.data.dali_index import read_index
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.ranks import eval_steps, eval_steps_of
from cvbench.data.read.reader import rank_segments
from cvbench.data.read.spec import ReadSpec
from cvbench.data.read.splits import list_split_files
from cvbench.data.worker_pool import default_num_workers


def to_numpy(outputs: Any) -> np.ndarray:
    """A copy, as NumPy, of one pipeline output (a CPU or GPU DALI TensorList)."""
    if hasattr(outputs, "as_cpu"):  # a GPU TensorList ("mixed")
        outputs = outputs.as_cpu()
    # A copy: DALI reuses its output buffers at the next `run()`.
    return np.array(outputs.as_tensor())


ARRAYS = ("numpy", "jax")


def import_dali_jax() -> Any:
    """`nvidia.dali.plugin.jax`, or an ImportError saying that `arrays="jax"` needs JAX."""
    try:
        import jax  # noqa: F401
    except ImportError as e:
        raise ImportError(
            'arrays="jax" needs JAX (pip install jax) for DALI\'s JAX plugin; '
            'use arrays="numpy" without it'
        ) from e
    import nvidia.dali.plugin.jax as dali_jax

    return dali_jax


def _cast(images: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        import ml_dtypes

        return images.astype(ml_dtypes.bfloat16)
    return images


class DaliBatches:
    """A re-iterable of NumPy or JAX batches from a DALI pipeline (see the module docstring).

    Args:
        make_pipeline: `() -> built pipeline`, called at each `iter()`.
        training: endless `(images, labels)`, or `steps` `(images, labels, weights)`.
        batch_size: rows per batch.
        image_size: output height and width (for padding batches).
        dtype: the images' dtype name.
        steps: evaluation: the batches to yield.
        num_records: evaluation: the records of this rank (0: only padding batches).
        num_classes: a label outside [0, num_classes) raises ValueError; None: unchecked.
        source: names the records in that error.
        first: a pipeline already built by `make_pipeline` (checking the arguments), used by
            the first iteration instead of building another.
        arrays: "numpy" (copies out of DALI) or "jax" (`jax.Array`s through DALI's JAX
            plugin).
    """

    def __init__(
        self,
        make_pipeline: Callable[[], Any],
        *,
        training: bool,
        batch_size: int,
        image_size: int,
        dtype: str,
        steps: int | None = None,
        num_records: int = 0,
        num_classes: int | None = None,
        source: str = "",
        first: Any = None,
        arrays: str = "numpy",
    ) -> None:
        if arrays not in ARRAYS:
            raise ValueError(f"arrays must be one of {ARRAYS}, got {arrays!r}")
        self.arrays = arrays
        self.make_pipeline = make_pipeline
        self.training = training
        self.batch_size = batch_size
        self.image_size = image_size
        self.dtype = dtype
        self.steps = steps
        self.num_records = num_records
        self.num_classes = num_classes
        self.source = source
        self._first = first

    def _pipeline(self) -> Any:
        pipe, self._first = self._first, None
        return pipe if pipe is not None else self.make_pipeline()

    def _check(self, labels: np.ndarray, real: Any = True) -> np.ndarray:
        n = self.num_classes
        if n is not None:
            bad = labels[((labels < 0) | (labels >= n)) & real]
            if bad.size:
                raise ValueError(
                    f"label {int(bad[0])} of a record of {self.source} is outside [0, {n}) for "
                    f"num_classes={n} (stored labels are 1-based: stored {int(bad[0]) + 1})"
                )
        return labels

    def __len__(self) -> int:
        if self.training:
            raise TypeError("the DALI training stream is endless")
        return self.steps

    def __iter__(self) -> Iterator[tuple]:
        if self.arrays == "jax":
            return self._train_jax() if self.training else self._eval_jax()
        return self._train() if self.training else self._eval()

    def _train(self) -> Iterator[tuple]:
        pipe = self._pipeline()
        while True:
            images, labels = pipe.run()
            yield _cast(to_numpy(images), self.dtype), self._check(to_numpy(labels))

    def _jax_outputs(self, names: list[str]) -> Iterator[dict]:
        """The pipeline's outputs as `{name: jax.Array}`, through DALI's JAX iterator.

        `size=-1` without a reader name: the iterator runs the pipeline until it stops, and
        DALI's reader never stops (it wraps around), so the caller takes what it needs.
        """
        dali_jax = import_dali_jax()
        return dali_jax.DALIGenericIterator(self._pipeline(), output_map=names, size=-1)

    def _jax_cast(self, images: Any) -> Any:
        import jax.numpy as jnp

        return images.astype(jnp.bfloat16) if self.dtype == "bfloat16" else images

    def _train_jax(self) -> Iterator[tuple]:
        for out in self._jax_outputs(["images", "labels"]):
            self._check(np.asarray(out["labels"]))
            yield self._jax_cast(out["images"]), out["labels"]

    def _eval_jax(self) -> Iterator[tuple]:
        import jax.numpy as jnp

        read = eval_steps(self.num_records, self.batch_size) if self.num_records else 0
        if read:
            outputs = self._jax_outputs(["images", "labels", "weights"])
            for _ in range(read):
                out = next(outputs)
                images, labels, weights = out["images"], out["labels"], out["weights"]
                pad = weights == 0  # DALI pads with the last record: make it tf.data's pad
                self._check(np.asarray(labels), ~np.asarray(pad))
                images = jnp.where(pad[:, None, None, None], jnp.zeros_like(images), images)
                labels = jnp.where(pad, jnp.zeros_like(labels), labels)
                yield self._jax_cast(images), labels, weights
        for _ in range(self.steps - read):
            images, labels, weights = self._padding()
            yield jnp.asarray(images), jnp.asarray(labels), jnp.asarray(weights)

    def _padding(self) -> tuple:
        b, s = self.batch_size, self.image_size
        np_dtype = np.float16 if self.dtype == "float16" else np.float32
        return (
            _cast(np.zeros((b, s, s, 3), np_dtype), self.dtype),
            np.zeros((b,), np.int32),
            np.zeros((b,), np.float32),
        )

    def _eval(self) -> Iterator[tuple]:
        read = eval_steps(self.num_records, self.batch_size) if self.num_records else 0
        if read:
            pipe = self._pipeline()
            for _ in range(read):
                images, labels, weights = (to_numpy(o) for o in pipe.run())
                pad = weights == 0  # DALI pads with the last record: make it tf.data's pad
                self._check(labels, ~pad)
                images[pad] = 0
                labels[pad] = 0
                yield _cast(images, self.dtype), labels, weights
        for _ in range(self.steps - read):
            yield self._padding()


def imagenet_dali_dataset(
    data_dir: str | os.PathLike,
    split: str | None = None,
    *,
    spec: ReadSpec | None = None,
    num_threads: int | None = None,
    device: str = "cpu",
    preprocessing: ImagePreprocessing | None = None,
    index_dir: str | os.PathLike | None = None,
    file_pattern: str | None = None,
    num_classes: int | None = None,
    arrays: str = "numpy",
    **read: Any,
) -> DaliBatches:
    """ImageNet-format TFRecords through DALI, as batches shaped like `imagenet_dataset`'s.

    Args:
        data_dir, split, spec, preprocessing, index_dir, file_pattern, **read: as
            `imagenet_dali_pipeline` (the spec's dtype: "float32", "float16" or "bfloat16").
        num_threads: DALI's CPU threads; None: the cores this process may use, the size of
            tf.data's threadpool.
        device: "cpu" or "mixed" (nvJPEG on the GPU of the local rank).
        num_classes: the model's classes: a label outside [0, num_classes) raises an error
            naming it when its batch is read; None: not checked.
        arrays: "numpy": NumPy batches (any Keras backend); "jax": `jax.Array`s through
            DALI's JAX plugin (`nvidia.dali.plugin.jax`), on the GPU with `device="mixed"`,
            for `KERAS_BACKEND=jax`. Equal batches for equal arguments.

    Returns:
        A `DaliBatches` (re-iterable; see the module docstring for the element structure).

    Raises:
        ImportError: DALI is not installed (names the `cvbench[dali]` extra), or
            `arrays="jax"` without JAX.
        FileNotFoundError: no data, or a missing index file (named, with `cvbench dali-index`).
        ValueError: bad arguments or a recipe knob DALI does not implement.
    """
    spec = dali_spec(spec, split=split, **read)
    split, training, batch_size = spec.split, spec.training, spec.batch_size
    image_size, dtype = spec.image_size, spec.dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if arrays not in ARRAYS:
        raise ValueError(f"arrays must be one of {ARRAYS}, got {arrays!r}")
    import_dali()
    if arrays == "jax":
        import_dali_jax()
    num_shards, shard_index = resolve_shards(spec.num_shards, spec.shard_index)
    threads = num_threads if num_threads is not None else default_num_workers()
    spec = dataclasses.replace(spec, num_shards=num_shards, shard_index=shard_index)
    kwargs = dict(
        spec=spec,
        num_threads=threads,
        device=device,
        preprocessing=preprocessing,
        index_dir=index_dir,
        file_pattern=file_pattern,
    )

    def make() -> Any:
        return imagenet_dali_pipeline(data_dir, **kwargs)

    common = dict(
        training=training,
        batch_size=batch_size,
        image_size=image_size,
        dtype=dtype,
        num_classes=num_classes,
        source=f"{split!r} in {data_dir}",
        arrays=arrays,
    )
    if training:  # built now: bad arguments or data fail here, not at the first batch
        return DaliBatches(make, first=make(), **common)
    files = list_split_files(data_dir, split, file_pattern)
    counts = [len(read_index(f, index_dir)) for f in files]
    mine = sum(s.take for s in rank_segments(files, counts, num_shards, shard_index))
    steps = eval_steps_of(sum(counts), num_shards, batch_size)
    first = make() if mine else None
    return DaliBatches(make, steps=steps, num_records=mine, first=first, **common)
