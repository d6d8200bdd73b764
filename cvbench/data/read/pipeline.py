"""The second half of every input pipeline: examples -> training or evaluation batches.

A reader (`cvbench.data.read.imagenet`, `.coco`, `.tfds`) gives a dataset of *example* dicts
(TFRecord readers: the serialized `record`; TFDS: its fields) with `source` and `index`,
which name a damaged record, a `parse` (record -> its fields, with `filename`; None when the
examples are parsed already) and a per-example `transform` (decode + augmentation); this
module does the rest, the same way for every reader:

* `train_batches`: shuffle -> a stateless seed per example (`seed` key, int64 [2]) ->
  guarded `parse` + `transform` -> `check` -> `to_element` -> batch (dropping the
  remainder) -> prefetch;
* `eval_batches`: guarded `parse` + `transform` -> `check` -> `to_element` -> the pad
  element repeated -> exactly `steps` full batches (asserted as the cardinality) -> prefetch.

*Guarded*: the parse and the transform are one function per example, so whatever fails in
either (a record that is no `tf.train.Example`, damaged box lists, an undecodable image)
raises one error naming the record and its file and saying which of these it met
(`_damage_message`, worked out on the failure path only) (`corrupt.checked_map`: a plain
parallel map over chunks of examples, which finds the failed example only after a failure),
or with `skip_corrupt=True` the example is skipped, printed and counted once
(`corrupt.guarded_map`, one small dataset per example). Both give the same elements in the
same order, so a seed gives the same batches either way. Both set
`tf.data.Options.deterministic` (training when a seed is given, evaluation always) and map
fusion. `check` (the label check) runs after the guard, on the parsed example: its error is
never skipped.

`train_pipeline` / `eval_pipeline` are the classification instances (ImageNet records and
TFDS), on examples with:

* `encoded`: scalar string, the encoded image;
* `label`: int32, 0-based class;
* `boxes`: float32 [num_boxes, 4] normalized `[ymin, xmin, ymax, xmax]` (may be empty);
* `filename`, `source`: strings naming the image and the file it came from;
* `index`: int64, the record's position in `source`.

`label_check` makes a label outside the model's classes an error naming the record (the
`check` `imagenet_dataset(num_classes=...)` adds; `check_labels` is it over a dataset).

`train_pipeline` yields `(images, labels)` batches; `eval_pipeline` yields
`(images, labels, weights)` batches where padding rows have weight 0 (see its docstring).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import tensorflow as tf

from cvbench.data._distributed import resolve_shards
from cvbench.data.image_io import DEFAULT_MAX_PIXELS
from cvbench.data.read.corrupt import (
    CorruptRecordCounter,
    apply_policy,
    checked_map,
    guarded_map,
    no_autograph,
    or_default,
    reorder_laps,
)
from cvbench.data.read.image_header import bounded_image, over_limit, over_limit_message
from cvbench.data.read.image_preprocessing import ImagePreprocessing
from cvbench.data.read.preprocessing import preprocess_for_eval, preprocess_for_train
from cvbench.data.read.ranks import rank_seed
from cvbench.data.read.spec import ReadSpec
from cvbench.data.tfrecord import (
    BOX_LISTS_DIFFER,
    BOX_NOT_FINITE,
    checked_boxes,
    record_box_lists_differ,
)

TrainPreprocess = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tf.Tensor]
EvalPreprocess = Callable[[tf.Tensor], tf.Tensor]
Transform = Callable[[dict], Any]
ToElement = Callable[[Any, dict], Any]
Parse = Callable[[dict], dict]
Check = Callable[[dict], dict]

#: What the guard says of a record the parse refuses: no `tf.train.Example` at all ...
NOT_AN_EXAMPLE = "not a tf.train.Example"
#: ... or a `tf.train.Example`, but without a feature the reader needs (or of another type).
NOT_THE_READERS = "a tf.train.Example without the features this reader needs (or of other types)"


def check_preprocessing(
    preprocessing: ImagePreprocessing | None, hook: Any, hook_name: str
) -> None:
    """`preprocessing` is None or an `ImagePreprocessing`, and not given with `hook` (a custom
    preprocess function replaces the whole recipe, so its knobs would be ignored)."""
    if preprocessing is not None and not isinstance(preprocessing, ImagePreprocessing):
        raise ValueError(
            f"preprocessing must be an ImagePreprocessing or None, got {preprocessing!r}"
        )
    if preprocessing is not None and hook is not None:
        raise ValueError(
            f"{hook_name} replaces the whole preprocessing, so preprocessing={preprocessing!r} "
            f"would be ignored; pass one of them"
        )


def check_args(dtype: Any, *, num_classes: int | None = None) -> tf.DType:
    """Validates a reader's own arguments (`num_classes`: None or a positive int; the shared
    ones are `ReadSpec`'s); returns `dtype` as a floating `tf.DType`."""
    if num_classes is not None:
        _check_num_classes(num_classes)
    try:
        tf_dtype = tf.as_dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be a floating dtype name, got {dtype!r}") from None
    if not tf_dtype.is_floating:
        raise ValueError(f"dtype must be a floating dtype (float32, bfloat16, ...), got {dtype!r}")
    return tf_dtype


def _image_and_record(e: dict) -> list:
    """`<filename> (record <index> of <source>)`, as string tensors to join: where an
    example came from, in every data error."""
    return [e["filename"], " (record ", tf.strings.as_string(e["index"]), " of ", e["source"], ")"]


def _damage_message(parse: Parse | None, max_pixels: int | None) -> Callable[[dict], tf.Tensor]:
    """example -> what is wrong with it, for an example the guarded parse + transform failed
    on: `damaged record (record N of FILE): not a tf.train.Example` (or one without the
    features the reader needs), `damaged record NAME (record N of FILE): its bbox coordinate lists
    differ in length` (or a coordinate not finite), `image NAME (record N of FILE) is H x W =
    P pixels, over the limit of M (max_pixels, --max-pixels)` (`image_header.bounded_image`), else
    `undecodable image NAME (record N of FILE)`. It parses the example again to tell
    (`or_default`): the failure path only."""

    def parsed(e: dict) -> tuple:
        p = parse(e) if parse is not None else e
        boxes = p.get("boxes", tf.zeros([0, 4]))
        boxes_ok = tf.reduce_all(tf.math.is_finite(boxes))
        return tf.constant(True), p.get("filename", tf.constant("")), boxes_ok, _too_large(p)

    def _too_large(p: dict) -> tf.Tensor:
        if max_pixels is None or "encoded" not in p:
            return tf.constant("")
        big = or_default(lambda b: over_limit(b, max_pixels), p["encoded"], tf.constant(False))
        return tf.cond(
            big, lambda: over_limit_message(p["encoded"], max_pixels), lambda: tf.constant("")
        )

    def message(e: dict) -> tf.Tensor:
        where = [" (record ", tf.strings.as_string(e["index"]), " of ", e["source"], ")"]
        if parse is None:
            ok, name, boxes_ok, large = parsed(e)
        else:
            default = (tf.constant(False), tf.constant(""), tf.constant(True), tf.constant(""))
            ok, name, boxes_ok, large = or_default(parsed, e, default)
        refused = tf.strings.join(["damaged record", *where, ": ", _refused_record(e)])
        boxes = tf.strings.join(["damaged record ", name, *where, ": ", _box_damage(e)])
        image = tf.strings.join(["undecodable image ", name, *where])
        image = tf.where(large == "", image, tf.strings.join(["image ", name, *where, " ", large]))
        return tf.where(ok, tf.where(boxes_ok, image, boxes), refused)

    return message


def _refused_record(e: dict) -> tf.Tensor:
    """Why the parse refused the record of `e`: `NOT_AN_EXAMPLE`, or `NOT_THE_READERS` when it
    parses as a `tf.train.Example` with no features asked for."""
    if "record" not in e:
        return tf.constant(NOT_THE_READERS)

    def is_example(record: tf.Tensor) -> tf.Tensor:
        spec = {"cvbench/no-such-feature": tf.io.VarLenFeature(tf.string)}
        parsed = tf.io.parse_single_example(record, spec)
        return tf.size(parsed["cvbench/no-such-feature"].values) >= 0  # True, once parsed

    ok = or_default(is_example, e["record"], tf.constant(False))
    return tf.where(ok, NOT_THE_READERS, NOT_AN_EXAMPLE)


def _box_damage(e: dict) -> tf.Tensor:
    """How the boxes of `e` (which are not all finite) are damaged: `BOX_LISTS_DIFFER`, told
    from the serialized record when there is one, else `BOX_NOT_FINITE`."""
    if "record" not in e:
        return tf.constant(BOX_NOT_FINITE)
    differ = or_default(record_box_lists_differ, e["record"], tf.constant(False))
    return tf.where(differ, BOX_LISTS_DIFFER, BOX_NOT_FINITE)


def _check_num_classes(num_classes: Any) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")


def check_labels(examples: tf.data.Dataset, num_classes: int) -> tf.data.Dataset:
    """Raises on an example whose `label` is outside [0, `num_classes`) (`label_check` over
    `examples`).

    Args:
        examples: example dicts with `label` (int32, 0-based), `filename`, `source`, `index`.
        num_classes: the model's classes.

    Raises:
        ValueError: `num_classes` is not a positive int.
    """
    return examples.map(no_autograph(label_check(num_classes)))


def label_check(num_classes: int) -> Check:
    """example -> the example, raising when its `label` is outside [0, `num_classes`).

    The error takes the path an undecodable image's does (a `tf.debugging.Assert` in the
    dataset: `tf.errors.InvalidArgumentError` when the example is read, see
    `cvbench.data.read.corrupt`), with a message naming the label (0-based, and as stored,
    1-based), the class count, the image and its record: `label 3 (stored as 4) is outside
    [0, 3) for num_classes=3: image a.JPEG (record 2 of /data/train-00000-of-00001)`. It is
    always an error (`skip_corrupt` does not skip it): the records and the model disagree on
    the classes. The check costs a comparison per example; the message is only built for
    an offending one. The readers run it after the corrupt-record guard (`read_batches`'
    `check`), on the parsed example.

    Args:
        num_classes: the model's classes.

    Raises:
        ValueError: `num_classes` is not a positive int.
    """
    _check_num_classes(num_classes)

    def message(e: dict) -> tf.Tensor:
        return tf.strings.join(
            [
                "label ",
                tf.strings.as_string(e["label"]),
                " (stored as ",
                tf.strings.as_string(e["label"] + 1),
                f") is outside [0, {num_classes}) for num_classes={num_classes}: image ",
                *_image_and_record(e),
            ]
        )

    def check(e: dict) -> dict:
        def fail() -> tf.Tensor:
            with tf.control_dependencies([tf.debugging.Assert(False, [message(e)])]):
                return tf.constant(False)

        inside = tf.logical_and(e["label"] >= 0, e["label"] < num_classes)
        done = tf.cond(inside, lambda: tf.constant(True), fail)
        with tf.control_dependencies([done]):
            return tf.nest.map_structure(tf.identity, e)

    return check


def _guarded(
    ds: tf.data.Dataset,
    transform: Transform,
    to_element: ToElement,
    output_spec: Any,
    *,
    parse: Parse | None,
    check: Check | None,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    deterministic: bool,
    max_pixels: int | None,
) -> tf.data.Dataset:
    """`parse`, the image's header bound (`image_header.bounded_image`: an image of more than
    `max_pixels` pixels is corrupt before anything decodes it) and `transform` over
    examples, as one guarded function: a corrupt example raises (`checked_map`, the fast
    path) or is skipped (`guarded_map`), named by `_damage_message`; then `check` and
    `to_element` on the parsed example (unguarded)."""

    def parse_and_transform(e: dict) -> tuple:
        parsed = parse(e) if parse is not None else e
        if max_pixels is not None and "encoded" in parsed:
            parsed = {**parsed, "encoded": bounded_image(parsed["encoded"], max_pixels)}
        return transform(parsed), parsed

    if output_spec is not None:  # the parsed example's spec: a trace of the parse alone
        parsed_spec = ds.map(no_autograph(parse)).element_spec if parse else ds.element_spec
        output_spec = (output_spec, parsed_spec)

    def element(out: tuple) -> Any:
        transformed, parsed = out
        return to_element(transformed, check(parsed) if check is not None else parsed)

    message = _damage_message(parse, max_pixels)
    if not skip_corrupt:
        mapped = checked_map(
            ds,
            parse_and_transform,
            message_fn=message,
            output_spec=output_spec,
            deterministic=deterministic,
        )
        return mapped.map(lambda out, e: element(out), num_parallel_calls=tf.data.AUTOTUNE)
    guarded = guarded_map(
        ds, parse_and_transform, output_spec=output_spec, deterministic=deterministic
    )
    checked = apply_policy(
        guarded,
        lambda t: t[1],
        lambda t: message(t[2]),
        skip_corrupt=skip_corrupt,
        counter=counter,
        reorder=reorder_laps(deterministic),
    )
    return checked.map(lambda out, ok, e: element(out), num_parallel_calls=tf.data.AUTOTUNE)


def _options(deterministic: bool) -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = deterministic
    # Consecutive maps run as one function (the seed step; the check and `to_element`), which saves
    # a function call and a hand-over between threads per example; results are unchanged.
    options.experimental_optimization.map_fusion = True
    return options


def _parts(transform: Any, to_element: Any, output_spec: Any, pad: Any) -> tuple:
    """`(transform, to_element, output_spec, pad)`: a `BatchTransform`'s, or the arguments."""
    if isinstance(transform, BatchTransform):
        return transform.transform, transform.to_element, transform.output_spec, transform.pad
    return transform, to_element, output_spec, pad


def train_batches(
    examples: tf.data.Dataset,
    transform: Transform | BatchTransform,
    *,
    to_element: ToElement | None = None,
    batch_size: int,
    seed: int | None,
    shuffle_buffer: int,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    output_spec: Any = None,
    parse: Parse | None = None,
    check: Check | None = None,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> tf.data.Dataset:
    """Shuffle, seed, parse and transform (guarded), check, batch dropping the remainder,
    prefetch.

    Args:
        examples: example dicts (repeat them before calling for an endless stream).
        transform: parsed example (with `seed`, int64 [2], a stateless random seed) -> a
            nest of tensors of static shape; an error at run time marks the example corrupt.
            Or a `BatchTransform`, which brings `to_element` and `output_spec`.
        to_element: `(transform output, parsed example) -> element`, the batch element
            (unguarded, converted by AutoGraph unless wrapped in `no_autograph`: e.g. pick
            the label, or run a target encoder).
        batch_size: elements per batch.
        seed: makes shuffling and the per-example seeds deterministic; None:
            nondeterministic.
        shuffle_buffer: examples in the shuffle buffer (1 disables shuffling).
        skip_corrupt: skip and count examples `transform` fails on instead of raising.
        counter: counts them.
        output_spec: the `tf.TensorSpec` nest `transform` returns (traced if None).
        parse: example -> parsed example (keeping the example's other keys), run with
            `transform` inside the guard, so a record it refuses is named or skipped as
            corrupt; None: the examples are parsed already.
        check: parsed example -> the same, raising on one that is not for this model (the
            label check), after the guard: never skipped.
        max_pixels: the most pixels an example's `encoded` image may claim in its header
            (`ReadSpec.max_pixels`): more is a corrupt example, found before decoding.

    Returns:
        Batches of `to_element`'s structure, each with a leading batch dimension.
    """
    transform, to_element, output_spec, _ = _parts(transform, to_element, output_spec, None)
    if shuffle_buffer > 1:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    seeds = tf.data.Dataset.random(seed=seed).batch(2)
    ds = tf.data.Dataset.zip((examples, seeds)).map(no_autograph(lambda e, s: {**e, "seed": s}))
    ds = _guarded(
        ds,
        transform,
        to_element,
        output_spec,
        parse=parse,
        check=check,
        skip_corrupt=skip_corrupt,
        counter=counter,
        deterministic=seed is not None,
        max_pixels=max_pixels,
    )
    ds = ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return ds.with_options(_options(seed is not None))


def eval_batches(
    examples: tf.data.Dataset,
    transform: Transform | BatchTransform,
    *,
    to_element: ToElement | None = None,
    pad: Any = None,
    batch_size: int,
    steps: int,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    output_spec: Any = None,
    parse: Parse | None = None,
    check: Check | None = None,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> tf.data.Dataset:
    """Parse and transform (guarded) and check every example once, in order; pad to exactly
    `steps` full batches.

    Padding elements fill the last batch and any further batches up to `steps`, so that every
    rank runs the same number of steps (collective ops in step) with static shapes.

    Args:
        examples: example dicts, one pass, at most `steps * batch_size` of them.
        transform: example -> a nest of tensors of static shape; or a `BatchTransform`,
            which brings `to_element`, `output_spec` and `pad`.
        to_element: `(transform output, example) -> element`.
        pad: the padding element, of `to_element`'s structure (e.g. a zero image, weight 0).
        batch_size: elements per batch.
        steps: batches to yield (`cvbench.data.read.reader.eval_steps` of the largest rank).
        skip_corrupt: skip and count examples `transform` fails on instead of raising.
        counter: counts them.
        output_spec: the `tf.TensorSpec` nest `transform` returns (traced if None).
        parse, check, max_pixels: as in `train_batches`.

    Returns:
        Exactly `steps` batches (the dataset's cardinality) of `to_element`'s structure.
    """
    transform, to_element, output_spec, pad = _parts(transform, to_element, output_spec, pad)
    ds = _guarded(
        examples,
        transform,
        to_element,
        output_spec,
        parse=parse,
        check=check,
        skip_corrupt=skip_corrupt,
        counter=counter,
        deterministic=True,
        max_pixels=max_pixels,
    )
    ds = ds.concatenate(tf.data.Dataset.from_tensors(pad).repeat()).take(steps * batch_size)
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.apply(tf.data.experimental.assert_cardinality(steps)).prefetch(tf.data.AUTOTUNE)
    return ds.with_options(_options(True))


@dataclass(frozen=True)
class BatchTransform:
    """What a reader does to each example, and how the result becomes a batch element: the
    *transform* half of the skeleton (`read_batches`), one for training and one for
    evaluation.

    Attributes:
        transform: example -> a nest of tensors of static shape (training examples carry a
            `seed`, int64 [2], for stateless random augmentation); an error at run time
            marks the example corrupt.
        to_element: `(transform output, example) -> element` (unguarded).
        output_spec: the `tf.TensorSpec` nest `transform` returns (traced if None).
        pad: evaluation: the padding element, of `to_element`'s structure (e.g. a zero
            image, weight 0); None for training.
    """

    transform: Transform
    to_element: ToElement
    output_spec: Any = None
    pad: Any = None


@dataclass(frozen=True)
class RankRead:
    """One rank's reading of a split: the `ReadSpec`, this rank's shard (resolved) and seed
    (`ranks.rank_seed`), and the corrupt-record counter (None unless skipping)."""

    spec: ReadSpec
    num_shards: int
    shard_index: int
    seed: int | None
    counter: CorruptRecordCounter | None

    @classmethod
    def of(cls, spec: ReadSpec) -> RankRead:
        """The rank's reading of `spec` (its shards, else the launcher's size and rank)."""
        num_shards, shard_index = resolve_shards(spec.num_shards, spec.shard_index)
        counter = spec.corrupt_counter if spec.skip_corrupt else None
        return cls(spec, num_shards, shard_index, rank_seed(spec.seed, shard_index), counter)

    @property
    def skip_corrupt(self) -> bool:
        return self.spec.skip_corrupt


class ExampleSource(Protocol):
    """Where a rank's examples come from: the *read and parse* half of the skeleton
    (`read_batches`). `cvbench.data.read.reader.RecordExamples` (TFRecord files and a parse
    function) and `cvbench.data.read.tfds.TfdsExamples` plug in here.

    Examples are dicts with `source` and `index`, which name a damaged record in error
    messages: `RecordExamples`' hold the serialized `record`, parsed by `parse` inside the
    corrupt-record guard; `TfdsExamples`' are parsed already (their `parse` is None; a
    source without `parse` is taken as such).
    """

    #: example -> parsed example (its fields and `filename`, keeping the example's other
    #: keys), run inside the guard; None: the examples are parsed already.
    parse: Parse | None

    #: True when `train` shuffles the examples itself (then the batches are not shuffled
    #: again); False: `read_batches` shuffles with `spec.shuffle_buffer`.
    shuffles: bool

    def train(self, rank: RankRead) -> tf.data.Dataset:
        """The rank's training examples (repeated when `rank.spec.repeat`)."""

    def eval(self, rank: RankRead) -> tuple[tf.data.Dataset, int]:
        """The rank's evaluation examples (one pass, in order) and the batches every rank
        yields (`ranks.eval_steps` of the largest rank)."""


def read_batches(
    examples: ExampleSource,
    spec: ReadSpec,
    transform: BatchTransform,
    *,
    check: Check | None = None,
) -> tf.data.Dataset:
    """The reader skeleton (after Model Garden's `InputReader(decoder, parser)`): a source
    of parsed examples and a transform -> this rank's training or evaluation batches.

    Every reader (ImageNet records, TFDS, COCO) is this function with its own `examples`
    and `transform`: the rank's shard and seed, the corrupt-record policy, the shuffle,
    the padding of evaluation to the same number of full batches on every rank and the
    dataset options are the same for all.

    Args:
        examples: where the examples come from (`ExampleSource`).
        spec: the reading arguments (`spec.training` picks the training or evaluation
            recipe).
        transform: the transform of `spec`'s mode (`BatchTransform`; for evaluation with
            its `pad`).
        check: parsed example -> the same, raising on one not for this model (e.g.
            `label_check`); it runs after the guard, so its error is never skipped.

    Returns:
        Training: `train_batches`' (endless with `spec.repeat`); evaluation:
        `eval_batches`' (exactly `steps` batches, its cardinality).
    """
    rank = RankRead.of(spec)
    batching = {
        "skip_corrupt": rank.skip_corrupt,
        "counter": rank.counter,
        "parse": getattr(examples, "parse", None),
        "check": check,
        "max_pixels": spec.max_pixels,
    }
    if spec.training:
        return train_batches(
            examples.train(rank),
            transform,
            batch_size=spec.batch_size,
            seed=rank.seed,
            shuffle_buffer=1 if examples.shuffles else spec.shuffle_buffer or 1,
            **batching,
        )
    ds, steps = examples.eval(rank)
    return eval_batches(ds, transform, batch_size=spec.batch_size, steps=steps, **batching)


def classification_transform(
    *,
    training: bool,
    image_size: int,
    dtype: tf.DType,
    preprocess: TrainPreprocess | EvalPreprocess | None = None,
    preprocessing: ImagePreprocessing | None = None,
) -> BatchTransform:
    """The classification recipe as a `BatchTransform` (ImageNet records and TFDS):
    training `(image, label)` elements augmented by `preprocess_for_train`, evaluation
    `(image, label, 1.0)` elements resized and cropped by `preprocess_for_eval`, padded with
    `(zero image, 0, 0.0)`.

    Args:
        training: the training or the evaluation recipe.
        image_size: output height and width.
        dtype: image dtype.
        preprocess: training `(image_bytes, boxes, seed[2]) -> image`, evaluation
            `image_bytes -> image`, replacing the recipe.
        preprocessing: the recipe's knobs (`ImagePreprocessing`); None: the defaults. Not
            with `preprocess`.

    Raises:
        ValueError: `preprocessing` is not an `ImagePreprocessing`, or is given with
            `preprocess`.
    """
    check_preprocessing(preprocessing, preprocess, "preprocess")
    spec = tf.TensorSpec([image_size, image_size, 3], dtype)
    recipe = preprocess_for_train if training else preprocess_for_eval
    if preprocess is None:
        preprocess = functools.partial(
            recipe, image_size=image_size, dtype=dtype, preprocessing=preprocessing
        )
    if training:
        return BatchTransform(
            lambda e: preprocess(e["encoded"], checked_boxes(e["boxes"]), e["seed"]),
            no_autograph(lambda image, e: (image, e["label"])),
            spec,
        )
    pad = (tf.zeros([image_size, image_size, 3], dtype), tf.constant(0, tf.int32), tf.constant(0.0))
    return BatchTransform(
        lambda e: preprocess(_encoded_of_a_sound_record(e)),
        no_autograph(lambda image, e: (image, e["label"], tf.constant(1.0))),
        spec,
        pad,
    )


def _encoded_of_a_sound_record(e: dict) -> tf.Tensor:
    """`e["encoded"]`, once `e`'s boxes are checked (`checked_boxes`): evaluation does not
    use them, but a damaged record is refused (or skipped) there as in training. Examples
    without boxes (a caller's own source of `eval_pipeline`) have nothing to check."""
    if "boxes" not in e:
        return e["encoded"]
    with tf.control_dependencies([checked_boxes(e["boxes"])]):
        return tf.identity(e["encoded"])


def classification_recipe(
    spec: ReadSpec,
    *,
    train_preprocess: TrainPreprocess | None,
    eval_preprocess: EvalPreprocess | None,
    preprocessing: ImagePreprocessing | None,
    num_classes: int | None = None,
) -> tuple[BatchTransform, Any]:
    """The classification readers' (ImageNet records, TFDS) checked recipe for `spec`'s
    mode: `(classification_transform, the caller's preprocess function of that mode or
    None)`.

    Raises:
        ValueError: a dtype that is not floating, a bad `num_classes`, `preprocessing` given
            with the mode's preprocess function (naming it).
    """
    dtype = check_args(spec.dtype, num_classes=num_classes)
    own = train_preprocess if spec.training else eval_preprocess
    check_preprocessing(preprocessing, own, f"{'train' if spec.training else 'eval'}_preprocess")
    transform = classification_transform(
        training=spec.training,
        image_size=spec.image_size,
        dtype=dtype,
        preprocess=own,
        preprocessing=preprocessing,
    )
    return transform, own


def train_pipeline(
    examples: tf.data.Dataset,
    *,
    batch_size: int,
    image_size: int,
    dtype: tf.DType,
    seed: int | None,
    shuffle_buffer: int,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    preprocess: TrainPreprocess | None = None,
    preprocessing: ImagePreprocessing | None = None,
) -> tf.data.Dataset:
    """Classification training: shuffle, augment, batch (dropping the remainder), prefetch
    (`classification_transform` and `train_batches`).

    Returns:
        `(images [batch, image_size, image_size, 3] dtype, labels [batch] int32)` batches.

    Raises:
        ValueError: `preprocessing` is not an `ImagePreprocessing`, or is given with
            `preprocess`.
    """
    recipe = {"image_size": image_size, "dtype": dtype, "preprocessing": preprocessing}
    return train_batches(
        examples,
        classification_transform(training=True, preprocess=preprocess, **recipe),
        batch_size=batch_size,
        seed=seed,
        shuffle_buffer=shuffle_buffer,
        skip_corrupt=skip_corrupt,
        counter=counter,
    )


def eval_pipeline(
    examples: tf.data.Dataset,
    *,
    batch_size: int,
    image_size: int,
    dtype: tf.DType,
    steps: int,
    skip_corrupt: bool,
    counter: CorruptRecordCounter | None,
    preprocess: EvalPreprocess | None = None,
    preprocessing: ImagePreprocessing | None = None,
) -> tf.data.Dataset:
    """Classification evaluation: decode, resize, central crop, pad to `steps` full batches
    (`classification_transform` and `eval_batches`).

    Every example of `examples` appears once, in order, with weight 1.0; padding rows (zero
    image, label 0, weight 0.0) fill the last batch and any further batches up to `steps`, so
    that every rank runs the same number of steps (collective ops in step) with static
    shapes. Count correct predictions with the weights (Keras metrics take them as
    `sample_weight`; `model.evaluate` uses the third element as sample weights).

    Returns:
        `(images [batch, image_size, image_size, 3] dtype, labels [batch] int32,
        weights [batch] float32)` batches; exactly `steps` of them (its cardinality).

    Raises:
        ValueError: `preprocessing` is not an `ImagePreprocessing`, or is given with
            `preprocess`.
    """
    recipe = {"image_size": image_size, "dtype": dtype, "preprocessing": preprocessing}
    return eval_batches(
        examples,
        classification_transform(training=False, preprocess=preprocess, **recipe),
        batch_size=batch_size,
        steps=steps,
        skip_corrupt=skip_corrupt,
        counter=counter,
    )
