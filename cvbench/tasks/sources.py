"""Where a task's records are read through: one `DataSource` object per input path, which the
task asks instead of switching on a string.

A source reads a split of a records folder into this rank's batches (`read`, given the
`cvbench.data.read.spec.ReadSpec` and the task's reader options) and counts its records
(`count`), the two things `RecordTask` needs. The strings users give (`--data-backend`,
`TaskOptions.reader`, `ClassificationTask(data_backend=...)`) map to a source once, at the
edge (`RecordTask.source`); a new input path (a plain image folder, another loader) is a new
class with these two methods, not a new branch in the tasks:

- `RecordSource`: tf.data over TFRecords through the task's own reader function
  (`cvbench.data.imagenet_dataset`, `cvbench.data.coco_dataset`): every task, every recipe;
- `DaliSource`: ImageNet records through NVIDIA DALI (`imagenet_dali_dataset`);
- `GrainSource`: ImageNet records through grain, without TensorFlow
  (`imagenet_grain_dataset`).

Importing this module imports no TensorFlow, DALI nor grain: each source imports its reader
when it reads.

Example:
    >>> GrainSource(workers=2).name, DaliSource(device="mixed").name
    ('grain', 'dali')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

#: The devices DALI decodes on: libjpeg-turbo on the CPU, or nvJPEG on the GPU ("mixed").
DALI_DEVICES = ("cpu", "mixed")


class DataSource(Protocol):
    """What a task reads its records through (see the module docstring)."""

    #: How messages and the run's banner name it: "tf", "dali", "grain".
    name: str
    #: Whether its pipelines count skipped corrupt records in the spec's `corrupt_counter`
    #: (made by `corrupt_counter()`); else the spec gets none.
    counts_corrupt: bool

    def read(self, data_dir: str, *, spec: Any, **options: Any) -> Any:
        """This rank's batches of `spec.split` in `data_dir` (`options`: the task's reader
        options, e.g. `num_classes`, `preprocessing`)."""

    def count(self, data_dir: str, split: str, *, skip_corrupt: bool) -> int:
        """The records of `split` in `data_dir`."""


def tf_corrupt_counter() -> Any:
    """tf.data's counter of skipped corrupt records (`cvbench.data.CorruptRecordCounter`);
    what a source without its own `corrupt_counter` method counts in."""
    from cvbench.data import CorruptRecordCounter

    return CorruptRecordCounter()


@dataclass(frozen=True)
class RecordSource:
    """tf.data over TFRecords: `dataset_fn(data_dir, spec=spec, **options)` (the task's
    reader, e.g. `imagenet_dataset`) and `count_fn(data_dir, split, skip_corrupt=...)`
    (e.g. `num_examples`)."""

    dataset_fn: Callable[..., Any]
    count_fn: Callable[..., int]
    name: ClassVar[str] = "tf"
    counts_corrupt: ClassVar[bool] = True

    def read(self, data_dir: str, *, spec: Any, **options: Any) -> Any:
        return self.dataset_fn(data_dir, spec=spec, **options)

    def count(self, data_dir: str, split: str, *, skip_corrupt: bool) -> int:
        return self.count_fn(data_dir, split, skip_corrupt=skip_corrupt)

    def corrupt_counter(self) -> Any:
        """A `CorruptRecordCounter` (tf.data's)."""
        return tf_corrupt_counter()


@dataclass(frozen=True)
class DaliSource:
    """ImageNet records through NVIDIA DALI (`cvbench.data.dali.dataset.imagenet_dali_dataset`:
    the same recipe and element structure; needs the records' index files and the
    `cvbench[dali]` extra).

    Attributes:
        device: "cpu" (libjpeg-turbo) or "mixed" (nvJPEG on the GPU).

    Raises:
        ValueError: an unknown `device`.
    """

    device: str = "cpu"
    name: ClassVar[str] = "dali"
    counts_corrupt: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.device not in DALI_DEVICES:
            raise ValueError(f"dali_device must be one of {DALI_DEVICES}, got {self.device!r}")

    def read(
        self,
        data_dir: str,
        *,
        spec: Any,
        train_preprocess: Any = None,
        eval_preprocess: Any = None,
        **options: Any,
    ) -> Any:
        """`imagenet_dali_dataset` (the tf.data-only preprocess functions are refused by the
        task before reading: they are None here)."""
        from cvbench.data.dali.dataset import imagenet_dali_dataset

        return imagenet_dali_dataset(data_dir, spec=spec, device=self.device, **options)

    def count(self, data_dir: str, split: str, *, skip_corrupt: bool) -> int:
        from cvbench.data import num_examples

        return num_examples(data_dir, split, skip_corrupt=skip_corrupt)


@dataclass(frozen=True)
class GrainSource:
    """ImageNet records through grain, without TensorFlow
    (`cvbench.data.grain.dataset.imagenet_grain_dataset`: the same recipe and batches).

    Attributes:
        workers: worker processes per rank decoding and augmenting (0: in the process);
            the batches do not depend on it.

    Raises:
        ValueError: `workers` is not an int >= 0.
    """

    workers: int = 0
    name: ClassVar[str] = "grain"
    counts_corrupt: ClassVar[bool] = True

    def __post_init__(self) -> None:
        w = self.workers
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"data_workers must be an int >= 0, got {w!r}")

    def read(self, data_dir: str, *, spec: Any, **options: Any) -> Any:
        from cvbench.data.grain.dataset import imagenet_grain_dataset

        return imagenet_grain_dataset(data_dir, spec=spec, num_workers=self.workers, **options)

    def count(self, data_dir: str, split: str, *, skip_corrupt: bool) -> int:
        """The records of `split` without TensorFlow (`grain.dataset.count_records`)."""
        from cvbench.data.grain.dataset import count_records

        return count_records(data_dir, split, skip_corrupt=skip_corrupt)

    def corrupt_counter(self) -> Any:
        """A `cvbench.data.grain.records.SkippedRecords`: counts across grain's worker
        processes, without TensorFlow."""
        from cvbench.data.grain.records import SkippedRecords

        return SkippedRecords()
