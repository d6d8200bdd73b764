"""Train a ResNet on synthetic shapes with cvbench's public API: nothing to download.

    python examples/train_shapes.py --output-dir runs/shapes            # a few minutes on a CPU
    python examples/train_shapes.py --output-dir /tmp/shapes --tiny     # a smoke run, ~30 s

The steps are the ones a real ImageNet run takes, on a data set small enough for a laptop:

1. draw a folder-per-class image set (`train/<class>/*.JPEG`, `val/<class>/*.JPEG`) with the
   shapes generator shipped in the package (circles, squares, triangles, crosses, diamonds,
   stars on noisy backgrounds);
2. convert it to ImageNet-format TFRecords with `build_imagenet` (what `cvbench
   build-imagenet` runs);
3. read the records with `cvbench.data.imagenet_dataset` (with the demo's flip-only
   augmentation, `cvbench.demo.classify.shapes_preprocessing`: NVIDIA's ImageNet crop, down
   to 5% of the image, would cut most shapes in pieces);
4. train a registry ResNet with `cvbench.training.Trainer` (Adam on the library's
   warmup + cosine schedule, label smoothing, JSON-lines and TensorBoard logs);
5. evaluate top-1 over every validation image and write `metrics.json`.

Each part is called by hand here, as in your own code; `cvbench.tasks.prepare_run` does steps
3-5 in one call (what `cvbench train` and the demo use). The notebook
`examples/walkthrough.ipynb` does the same with plots; `docs/walkthrough.md` explains each
call.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras

# build_imagenet numbers the class folders in sorted order: record label i + 1 is CLASSES[i].
SHAPE_CLASSES = ("circle", "cross", "diamond", "square", "star", "triangle")


def make_records(
    data_dir: Path, *, image_size: int, train_per_class: int, val_per_class: int, seed: int
) -> Path:
    """Draws the shapes set under `data_dir/raw` and builds its TFRecords in `data_dir/records`.

    A second call with the same arguments reuses both (the raw set carries its arguments, the
    builder's manifest lists its finished shards).

    Returns:
        The records folder (`train-*`, `validation-*`).
    """
    from cvbench.data.builders.imagenet_builder import build_imagenet
    from cvbench.demo.shapes_data import write_classification_set

    raw = write_classification_set(
        data_dir / "raw",
        image_size=image_size,
        train_per_class=train_per_class,
        val_per_class=val_per_class,
        seed=seed,
    )
    records = data_dir / "records"
    build_imagenet(
        raw.path,
        records,
        train_shards=4,
        val_shards=2,
        num_workers=1,
        seed=seed,
        overwrite=not raw.reused,  # records of an earlier set with other arguments
        progress=False,
    )
    return records


def train_and_evaluate(
    records: Path,
    log_dir: Path | None,
    *,
    model_name: str = "resnet18",
    image_size: int = 48,
    batch_size: int = 32,
    epochs: int = 2,
    learning_rate: float = 0.002,
    seed: int = 0,
) -> tuple[Any, keras.callbacks.History, dict[str, float]]:
    """Trains `model_name` on the records and evaluates it on the validation split.

    Returns:
        (the Trainer, the fit history, `{"loss": ..., "top1": ...}` over all validation
        images).
    """
    import keras

    from cvbench import get_model
    from cvbench.data import imagenet_dataset, num_examples
    from cvbench.demo.classify import shapes_preprocessing
    from cvbench.tasks import top_k_accuracy
    from cvbench.training import ScheduleConfig, TrainConfig, Trainer, build_schedule
    from cvbench.training.losses import SparseCrossEntropy

    steps = num_examples(records, "train") // batch_size
    if steps < 1:
        raise ValueError(f"{records} holds fewer training images than one batch of {batch_size}")
    schedule = build_schedule(
        # base_lr is the peak for a batch of `reference_batch`: the peak is `learning_rate`.
        ScheduleConfig(base_lr=learning_rate, reference_batch=batch_size, warmup_epochs=0.3),
        global_batch=batch_size,
        steps_per_epoch=steps,
        epochs=epochs,
    )
    trainer = Trainer(
        lambda: get_model(
            model_name,
            num_classes=len(SHAPE_CLASSES),
            input_shape=(image_size, image_size, 3),
            classifier_activation=None,  # logits: the loss applies the softmax
        ),
        SparseCrossEntropy(label_smoothing=0.1),
        keras.optimizers.Adam(learning_rate=schedule),
        precision="float32",
        distribution="single",
        metrics=[top_k_accuracy(1, "top1")],  # cvbench eval's: a NaN row is never right
        config=TrainConfig(
            log_dir=None if log_dir is None else str(log_dir),
            log_every=max(1, steps // 4),
            burn_in_steps=min(5, steps * epochs - 1),
            keep_checkpoints=1,
            seed=seed,
            export=False,
            progress_bar=False,
        ),
    )
    # Decode, resize, flip (training) and normalize: the demo's flip-only augmentation.
    train_fn, eval_fn = shapes_preprocessing(image_size)

    def epoch_data(epoch: int) -> Any:  # a fresh, differently shuffled pass per epoch
        return imagenet_dataset(
            records,
            "train",
            batch_size=batch_size,
            image_size=image_size,
            training=True,
            seed=seed + epoch,
            train_preprocess=train_fn,
        )

    validation = imagenet_dataset(
        records,
        "validation",
        batch_size=batch_size,
        image_size=image_size,
        training=False,
        eval_preprocess=eval_fn,
    )
    history = trainer.fit(epoch_data, epochs=epochs, steps_per_epoch=steps)
    return trainer, history, trainer.evaluate(validation)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", required=True, help="data, logs and metrics.json")
    parser.add_argument("--model", default="resnet18", help="a registry classifier")
    parser.add_argument("--image-size", type=int, default=48, help="image side, pixels")
    parser.add_argument("--train-per-class", type=int, default=400, help="of 6 classes")
    parser.add_argument("--val-per-class", type=int, default=100, help="of 6 classes")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.002, help="peak Adam learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--tiny", action="store_true", help="32 px, 16 + 4 images per class, 1 epoch (a smoke run)"
    )
    args = parser.parse_args(argv)
    if args.tiny:
        args.image_size, args.train_per_class, args.val_per_class = 32, 16, 4
        args.epochs, args.batch_size = 1, 16
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the script; returns what it writes to `metrics.json`."""
    from cvbench.utils.io import write_json_atomic

    args = parse_args(argv)
    out = Path(args.output_dir)
    start = time.perf_counter()
    records = make_records(
        out / "data",
        image_size=args.image_size,
        train_per_class=args.train_per_class,
        val_per_class=args.val_per_class,
        seed=args.seed,
    )
    data_seconds = time.perf_counter() - start
    _, history, results = train_and_evaluate(
        records,
        out / "logs",
        model_name=args.model,
        image_size=args.image_size,
        batch_size=args.batch_size,
        epochs=args.epochs,
        learning_rate=args.lr,
        seed=args.seed,
    )
    metrics = {
        "top1": results["top1"],
        "val_loss": results["loss"],
        "train_loss": [float(v) for v in history.history["loss"]],
        "val_images": args.val_per_class * len(SHAPE_CLASSES),
        "data_seconds": round(data_seconds, 1),
        "total_seconds": round(time.perf_counter() - start, 1),
        "settings": {k: v for k, v in vars(args).items() if k != "output_dir"},
    }
    write_json_atomic(out / "metrics.json", metrics)
    print(
        f"top-1 {metrics['top1']:.3f} on {metrics['val_images']} validation images "
        f"({metrics['total_seconds']:.0f} s); {out / 'metrics.json'}"
    )
    return metrics


if __name__ == "__main__":
    main()
