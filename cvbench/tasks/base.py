"""The Task protocol and what every task shares: its options, its training data, and the
synthetic-or-records switch.

A task bundles everything one job needs besides the Trainer: the model builder, the loss,
the metrics, the reference recipe, the training data and the evaluation. The Trainer knows no
task; `cvbench.tasks.runner.prepare_run` puts the two together for the CLI, the examples
and the demo. Ranks come from the Trainer's `Distribution`: a task never takes a rank or a
size of its own.

The protocol (what a task class provides):

    class MyTask:
        name: str                                   # "classification", "detection"
        data_backends: tuple[str, ...]              # what reads its records: "tf", "dali", ...
        image_size: int; num_classes: int
        class_names: tuple[str, ...] | None         # from the data's metadata, else None

        @classmethod
        def models(cls) -> list[str]: ...           # model names this task covers

        def __init__(self, options: TaskOptions, **task_specific): ...
        def build_model(self) -> keras.Model        # called under the precision policy
        def loss(self) -> Callable                  # loss(y_true, y_pred) -> scalar
        def metrics(self) -> list                   # Keras metrics for training/evaluation
        recipe: Recipe                              # options.recipe fitted to the data
        def synthetic_batch(self, batch_size, seed) -> tuple   # NumPy (x, y)
        def train_data(self, *, batch_size, distribution, seed) -> TrainData
        def evaluate(self, trainer, *, batch_size) -> dict[str, float]
            # the whole validation set once across ranks; identical results on every rank
        def model_info(self) -> ModelInfo           # what inference needs, in model files
        def user_model(self, model) -> keras.Model  # built-in layers, [0, 255] RGB in
        def from_user_model(self, model) -> keras.Model  # a [0, 255] model fed by the pipeline
        def postprocess(self) -> Callable | None    # outputs -> predictions (None: as they are)

Tasks reading records (`RecordTask`) also count what `options.skip_corrupt` skipped
(`corrupt_records()`, this rank's count).

`batch_size` is per rank. Construction imports no TensorFlow: tasks build and train on
synthetic data under any Keras backend. Records are read by tf.data, or, for ImageNet-format
records, by grain without TensorFlow (`TaskOptions.reader`, `record_reader`): the default on
the JAX backend where TensorFlow cannot be imported.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import keras

from cvbench.data.image_io import DEFAULT_MAX_PIXELS, check_max_pixels
from cvbench.tasks.recipes import Recipe, resolve_recipe
from cvbench.utils.model_file import ModelInfo

if TYPE_CHECKING:
    from cvbench.data.dataset_info import DatasetInfo
    from cvbench.tasks.sources import DataSource

#: Batches of a synthetic evaluation (no validation set to cover).
SYNTHETIC_EVAL_BATCHES = 2
#: The deviation reason of a recipe given the classes of its data.
DATA_CLASSES_REASON = "the classes of the data (its dataset_info.json)"
#: The record readers: tf.data, or grain (`cvbench.data.grain`, no TensorFlow).
READERS = ("tf", "grain")
#: The tasks whose records grain reads (ImageNet-format records).
GRAIN_TASKS = ("classification",)


@dataclass(frozen=True)
class TaskOptions:
    """What the user chose about the task (from CLI flags or code), resolved into one recipe.

    Attributes:
        model: model name (one of the task's `models()`); None: the recipe's model.
        data_dir: directory of TFRecords; None means synthetic data.
        image_size: input height and width; None: the recipe's (a setting, as in
            `settings`).
        num_classes: classifier width; None: the data's (`dataset_info.json` beside the
            records, written by the builders; records without it need `num_classes`), or on
            synthetic data the recipe's (1000 ImageNet classes, 90 COCO ids). A value the
            data's metadata disagrees with is an error.
        label_smoothing: classification label smoothing; None: the recipe's.
        synthetic_steps: steps per epoch on synthetic data.
        skip_corrupt: skip and count corrupt records and undecodable images instead of
            stopping with an error naming the file and record (`RecordTask.corrupt_records`).
        max_pixels: the most pixels a record's image may claim in its header, checked
            before decoding (`cvbench.data.read.spec.ReadSpec.max_pixels`; more is a corrupt
            record); the builders' bound by default (64 megapixels); None: none.
        recipe: a named recipe (`cvbench.tasks.recipes`: a `Recipe` or its name, e.g.
            "resnet50_v1.5_90e") for `model`; None: the model's default recipe. After
            construction it is the resolved `Recipe`: `settings` and the fields above applied
            (`resolve_recipe`), each a deviation with its reason. The task and `prepare_run`
            take every knob from it (model, loss, input size, batch, optimizer, schedule, loss
            scaling, run length). Knobs can also be set directly with
            `recipe.with_overrides(...)`.
        settings: more settings by name (`cvbench.tasks.recipes.SETTINGS`: `lr`,
            `batch_size`, `epochs`, `weight_decay`, ...; None values are not set).
        reasons: setting -> the reason its deviation records (the CLI passes its flags).
        reader: what reads `data_dir`'s records: "tf" (tf.data) or "grain" (TensorFlow-free,
            ImageNet-format records: `cvbench.data.grain.dataset.imagenet_grain_dataset`,
            the same recipe and batches); None: "grain" on the JAX backend when TensorFlow
            cannot be imported, else "tf" (`record_reader`).
        data_workers: grain: worker processes per rank decoding and augmenting (0: in the
            process; they re-import `__main__`, so a script needs `if __name__ ==
            "__main__":`). The record order and each record's augmentation do not depend on
            it; which training records share a batch does (each worker batches the records
            dealt to it), so a resume with another number is named in a warning. tf.data
            sizes its own threads.

    Raises:
        ValueError: a bad size or count; an unknown recipe or setting; a recipe for another
            model; a model without a recipe; a setting the recipe has no knob for; an
            unknown `reader`.
    """

    model: str | None = None
    data_dir: str | None = None
    image_size: int | None = None
    num_classes: int | None = None
    label_smoothing: float | None = None
    synthetic_steps: int = 100
    skip_corrupt: bool = False
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    recipe: Recipe | str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    reader: str | None = None
    data_workers: int = 0

    def __post_init__(self) -> None:
        check_max_pixels(self.max_pixels)
        workers = self.data_workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"data_workers must be an int >= 0, got {workers!r}")
        if self.reader is not None and self.reader not in READERS:
            raise ValueError(f"reader must be one of {READERS} or None, got {self.reader!r}")
        for name in ("image_size", "num_classes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.synthetic_steps, int) or self.synthetic_steps < 1:
            raise ValueError(
                f"synthetic_steps must be a positive int, got {self.synthetic_steps!r}"
            )
        fields = {name: getattr(self, name) for name in ("image_size", "num_classes")}
        fields["label_smoothing"] = self.label_smoothing
        recipe = resolve_recipe(
            self.model,
            self.recipe,
            settings={**fields, **self.settings},
            reasons=self.reasons,
        )
        object.__setattr__(self, "recipe", recipe)
        object.__setattr__(self, "model", recipe.model)
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        object.__setattr__(self, "reasons", MappingProxyType(dict(self.reasons)))


@dataclass(frozen=True)
class TrainData:
    """A rank's training data (arrays, a re-iterable, or `epoch -> batches`) and the number
    of steps in an epoch."""

    data: Any
    steps_per_epoch: int


def tensorflow_importable() -> bool:
    """Whether `import tensorflow` works in this process (imports it when it does)."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


def record_reader(options: TaskOptions) -> str:
    """The reader of `options.data_dir`'s records: `options.reader`, or by default "grain"
    on the JAX backend where TensorFlow cannot be imported, else "tf"."""
    if options.reader is not None:
        return options.reader
    if keras.config.backend() == "jax" and not tensorflow_importable():
        return "grain"
    return "tf"


def records_info(options: TaskOptions, *, kind: str) -> DatasetInfo | None:
    """The `DatasetInfo` of `options.data_dir` (None for synthetic data, or for records
    without a metadata file when `options.num_classes` says how many classes there are).

    Args:
        options: the task options.
        kind: the kind of records the task reads ("imagenet" or "coco").

    Raises:
        FileNotFoundError: the folder holds raw images (class folders, COCO JSON) and no
            records: one line naming the builder command to run first.
        ValueError: records without `dataset_info.json` and no `num_classes` (naming the
            folder and `num_classes`); a metadata file of another kind or unreadable (naming
            the file).
    """
    if options.data_dir is None:
        return None
    from cvbench.data.dataset_info import DATASET_INFO_NAME, dataset_info_path, read_dataset_info

    info = read_dataset_info(options.data_dir)
    if info is None:
        from cvbench.data.read.raw_data import raw_data_message

        raw = raw_data_message(options.data_dir)  # images where records were expected
        if raw is not None:
            raise FileNotFoundError(raw)
        if options.num_classes is None:
            raise ValueError(
                f"{options.data_dir} has no {DATASET_INFO_NAME} (the builders write one "
                "beside the records; these were written by another tool or an older "
                "cvbench), so the number of classes is unknown: pass num_classes "
                "(--num-classes)"
            )
        return None
    if info.kind != kind:
        raise ValueError(
            f"{dataset_info_path(options.data_dir)} describes {info.kind} records, but this "
            f"task reads {kind} records (cvbench build-{kind})"
        )
    return info


def class_count_error(
    options: TaskOptions, info: DatasetInfo, *, default: int | None = None, note: str = ""
) -> ValueError:
    """The error for an explicit `num_classes` that the data's metadata disagrees with: it
    names both numbers and the file; `default` is the width used without `num_classes`
    (default `info.num_classes`), `note` what else is accepted."""
    from cvbench.data.dataset_info import dataset_info_path

    default = info.num_classes if default is None else default
    return ValueError(
        f"num_classes (--num-classes) is {options.num_classes} but "
        f"{dataset_info_path(options.data_dir)} lists {info.num_classes} classes; leave it "
        f"unset to use the data's {default}{note}"
    )


class Task(Protocol):
    """See the module docstring."""

    name: str
    data_backends: tuple[str, ...]
    image_size: int
    num_classes: int
    class_names: tuple[str, ...] | None
    recipe: Recipe

    def build_model(self) -> keras.Model: ...

    def loss(self) -> Callable: ...

    def metrics(self) -> list: ...

    def synthetic_batch(self, batch_size: int, seed: int) -> tuple: ...

    def train_data(self, *, batch_size: int, distribution: Any, seed: int | None) -> TrainData: ...

    def evaluate(self, trainer: Any, *, batch_size: int) -> dict[str, float]: ...

    def model_info(self) -> ModelInfo: ...  # what inference needs, stored in model files

    def user_model(self, model: keras.Model) -> keras.Model: ...  # built-in layers, [0, 255]

    def from_user_model(self, model: keras.Model) -> keras.Model: ...  # fed by the pipeline

    def postprocess(self) -> Callable | None: ...  # outputs -> predictions; None: as they are


def records_train_data(
    make_dataset: Callable[[int | None], Any],
    *,
    num_records: int,
    batch_size: int,
    num_ranks: int,
    data_dir: Any,
    seed: int | None,
) -> TrainData:
    """Training data read from records: `make_dataset(seed)` builds one epoch's pipeline,
    called with `seed + epoch` (a new shuffle and augmentation order each epoch; None stays
    None, nondeterministic), and the full global batches of `num_records` records per epoch.

    Raises:
        ValueError: naming `data_dir` when there is not one global batch of records.
    """
    global_batch = batch_size * num_ranks
    steps = num_records // global_batch
    if steps < 1:
        raise ValueError(
            f"{data_dir} has fewer training images than one global batch of {global_batch}"
        )
    return TrainData(lambda epoch: make_dataset(None if seed is None else seed + epoch), steps)


def repeated(batch: Any, steps: int) -> Callable[[int], Iterable]:
    """An epoch function yielding `batch` `steps` times: a `tf.data.Dataset` batch is taken
    from, any other batch is repeated."""
    if hasattr(batch, "take"):
        return lambda epoch: batch.take(steps)
    return lambda epoch: itertools.repeat(batch, steps)


def synthetic_train_data(task: Task, *, batch_size: int, seed: int | None, steps: int) -> TrainData:
    """`steps` copies per epoch of the task's synthetic batch, put on the device once (so
    steps do not copy it from the host)."""
    batch = task.synthetic_batch(batch_size, seed or 0)
    batch = keras.tree.map_structure(keras.ops.convert_to_tensor, batch)
    return TrainData(repeated(batch, steps), steps)


class RecordTask(abc.ABC):
    """What the tasks reading TFRecords share: `options.data_dir` of records, or synthetic
    batches when it is None. A subclass names its reader (`dataset_fn`), its record count
    (`count_records`) and the reader's extra arguments (`dataset_options`, training only:
    `train_options`), and provides `synthetic_batch`. With `options.skip_corrupt` every
    pipeline it reads skips corrupt records into one counter (`corrupt_records`)."""

    options: TaskOptions
    image_size: int
    _corrupt_counter: Any = None
    #: The split `evaluate` reads.
    evaluation_split: str = "validation"
    #: True when a checkpoint restores every weight of the model `build_model` builds
    #: (`restore_from_checkpoint`): it is built without its starting weights, whose file
    #: may have moved since the run began (or a download would be needed).
    restoring: bool = False

    def restore_from_checkpoint(self, recorded: Callable[[], dict[str, Any]] | None = None) -> None:
        """States that the models this task builds from now on get every weight from a
        checkpoint (`cvbench eval`, a resume): `build_model` reads no starting weights.
        `recorded` returns that checkpoint's knobs (a resume's: a task whose starting
        weights decided some of its knobs takes them from there when the file is gone)."""
        del recorded  # what a task of its own may need
        self.restoring = True

    @abc.abstractmethod
    def dataset_fn(self) -> Callable[..., Any]:
        """The pipeline function: `(data_dir, *, spec: ReadSpec, **options) ->
        tf.data.Dataset` (or batches), `options` being `dataset_options()` and, for training,
        `train_options()` (see `cvbench.data.read.spec`)."""

    @abc.abstractmethod
    def count_records(self, split: str) -> int:
        """The number of records of `split` in `options.data_dir`."""

    def split_files(self, split: str) -> list[str]:
        """The shard files of `split` in `options.data_dir`, in order
        (`cvbench.data.read.splits.list_split_files`; named `<split>-NNNNN-of-NNNNN`)."""
        from cvbench.data.read.splits import list_split_files

        return list_split_files(self.options.data_dir, split)

    def check_evaluation_split(self) -> None:
        """Lists the shards of the split `evaluate` reads (`evaluation_split`), so that a run
        that will evaluate finds a missing or damaged split before its first step rather than
        after its last; nothing to check on synthetic data.

        Raises:
            FileNotFoundError, BadFileError: as `split_files`.
        """
        if self.options.data_dir is not None:
            self.split_files(self.evaluation_split)

    @abc.abstractmethod
    def synthetic_batch(self, batch_size: int, seed: int) -> tuple:
        """One random NumPy batch `(x, y)` shaped as the records' batches."""

    def dataset_options(self) -> dict[str, Any]:
        """Extra arguments of `dataset_fn` for every split."""
        return {}

    def train_options(self) -> dict[str, Any]:
        """Extra arguments of `dataset_fn` for training only."""
        return {}

    def callers_own(self) -> tuple[str, ...]:
        """The recipe's parts the task's caller replaced (e.g. "training preprocessing");
        default none."""
        return ()

    def train_dataset(self, dataset: Any, *, seed: int | None, distribution: Any) -> Any:
        """The training pipeline as the task trains on it (e.g. mixup); default: unchanged."""
        return dataset

    def read(self, split: str, *, batch_size: int, distribution: Any, **kwargs: Any) -> Any:
        """This rank's pipeline over `split` (shards from `distribution`'s rank and size),
        read through the task's `source()`, skipping and counting corrupt records with
        `options.skip_corrupt`: one `cvbench.data.read.spec.ReadSpec` (`kwargs` that are its
        fields, e.g. `training`, `seed`, go into it) and the reader's own options
        (`dataset_options`, the other `kwargs`)."""
        from cvbench.data.read.spec import READ_FIELDS, ReadSpec

        fields = {k: v for k, v in kwargs.items() if k in READ_FIELDS}
        options = {k: v for k, v in kwargs.items() if k not in READ_FIELDS}
        source = self.source()
        spec = ReadSpec(
            split=split,
            batch_size=batch_size,
            image_size=self.image_size,
            num_shards=distribution.size,
            shard_index=distribution.rank,
            skip_corrupt=self.options.skip_corrupt,
            corrupt_counter=self._counter(source) if source.counts_corrupt else None,
            max_pixels=self.options.max_pixels,
            **fields,
        )
        return source.read(self.options.data_dir, spec=spec, **self.dataset_options(), **options)

    def data_source(self) -> DataSource | None:
        """The source the task's caller chose (e.g. `ClassificationTask(data_backend=...)`),
        or None: `source()` then follows `options.reader`. Default None."""
        return None

    def source(self) -> DataSource:
        """What reads this task's records (`cvbench.tasks.sources`): `data_source()`, else
        grain when `reader()` says so, else tf.data through the task's own `dataset_fn` and
        `count_records` (`RecordSource`).

        Raises:
            ValueError: grain where it does not apply (`reader`).
        """
        from cvbench.tasks.sources import GrainSource, RecordSource

        chosen = self.data_source()
        if self.reader() == "grain":
            workers = self.options.data_workers
            return chosen if isinstance(chosen, GrainSource) else GrainSource(workers)
        if chosen is not None:
            return chosen
        return RecordSource(self.dataset_fn(), lambda _dir, split, **_: self.count_records(split))

    def reader(self) -> str:
        """What reads this task's records: "tf" or "grain" (`record_reader`, or the task's
        chosen source), checked: grain reads ImageNet-format records with the recipe's own
        preprocessing, not DALI's.

        Raises:
            ValueError: grain for another task, with DALI, or with tf.data-only options
                (preprocess functions, mixup).
        """
        chosen = self.data_source()
        if chosen is not None and chosen.name == "grain":
            reader = "grain"
        else:
            reader = record_reader(self.options)
        if reader != "grain":
            return reader
        name = getattr(self, "name", type(self).__name__)
        unsupported = {
            f"the {name} task (grain reads ImageNet-format records)": name not in GRAIN_TASKS,
            "the DALI data backend": chosen is not None and chosen.name == "dali",
            "train_preprocess / eval_preprocess (tf.data functions)": bool(self.callers_own()),
            "mixup (a tf.data transformation)": bool(getattr(self, "mixup_alpha", lambda: 0)()),
        }
        for what, present in unsupported.items():
            if present:
                raise ValueError(f"the grain reader does not support {what}; use reader='tf'")
        return reader

    def _count(self, split: str) -> int:
        """The records of `split`, counted by the task's source (grain's without
        TensorFlow)."""
        return self.source().count(
            self.options.data_dir, split, skip_corrupt=self.options.skip_corrupt
        )

    def _counter(self, source: Any) -> Any:
        """The counter of this task's skipped corrupt records, of `source`'s kind
        (`corrupt_counter()`: tf.data's `CorruptRecordCounter`, grain's `SkippedRecords`;
        made on the first read with `skip_corrupt`), or None."""
        if self.options.skip_corrupt and self._corrupt_counter is None:
            from cvbench.tasks.sources import tf_corrupt_counter

            make = getattr(source, "corrupt_counter", tf_corrupt_counter)
            self._corrupt_counter = make()
        return self._corrupt_counter

    def corrupt_records(self) -> int:
        """Records this rank's pipelines skipped as corrupt so far (0 without
        `skip_corrupt`); exact for pipelines read to their end, while records still in a
        shuffle or prefetch buffer are not counted yet."""
        return 0 if self._corrupt_counter is None else self._corrupt_counter.count

    def check_evaluated(self, evaluated: int, split: str, distribution: Any) -> None:
        """Refuses an evaluation that scored no record of `split` (`evaluated`: the records
        scored over all ranks, so every rank calls this, as it sums the skipped counts):
        every record skipped as corrupt (`skip_corrupt`), or a split that holds none. Its
        numbers (top-1 0, loss 0, AP -1) would otherwise read as a measured model. Both
        tasks' `evaluate` call it, so `cvbench eval` and training validation refuse alike.

        Raises:
            BadFileError: naming the split, the data folder and how many records were
                skipped (exit 1 in the command; nothing is written).
        """
        if evaluated > 0 or self.options.data_dir is None:
            return
        import numpy as np

        from cvbench.utils.errors import BadFileError

        mine = np.array([self.corrupt_records()], np.float64)
        skipped = int(distribution.sum_arrays([mine])[0][0])
        where = f"the {split} split of {self.options.data_dir}"
        if skipped:
            records, were = ("record", "was") if skipped == 1 else ("records", "were")
            raise BadFileError(
                f"all {skipped} {records} of {where} {were} skipped as corrupt "
                "(--skip-corrupt): nothing was evaluated"
            )
        raise BadFileError(f"{where} holds no records: nothing was evaluated")

    def train_data(self, *, batch_size: int, distribution: Any, seed: int | None) -> TrainData:
        """This rank's training batches, a new order each epoch, and the steps per epoch
        (synthetic: `options.synthetic_steps` copies of `synthetic_batch`)."""
        if self.options.data_dir is None:
            return synthetic_train_data(
                self, batch_size=batch_size, seed=seed, steps=self.options.synthetic_steps
            )
        options = self.train_options()
        return records_train_data(
            lambda epoch_seed: self.train_dataset(
                self.read(
                    "train",
                    batch_size=batch_size,
                    distribution=distribution,
                    training=True,
                    seed=epoch_seed,
                    **options,
                ),
                seed=epoch_seed,
                distribution=distribution,
            ),
            num_records=self._count("train"),
            batch_size=batch_size,
            num_ranks=distribution.size,
            data_dir=self.options.data_dir,
            seed=seed,
        )
