"""Train ResNet-50 or Inception V3 on ImageNet TFRecords with cvbench's public API.

One GPU:
    python examples/train_imagenet.py --model resnet50 --precision fp16 \
        --data-dir /data/imagenet_tfrecord

Eight GPUs on one machine (Horovod), and two machines with eight GPUs each:
    horovodrun -np 8 -H localhost:8 python examples/train_imagenet.py --model resnet50 \
        --precision fp16 --data-dir /data/imagenet_tfrecord
    horovodrun -np 16 -H server1:8,server2:8 python examples/train_imagenet.py \
        --model resnet50 --precision fp16 --data-dir /data/imagenet_tfrecord

The recipe is NVIDIA's (ResNet-50 v1.5: SGD 0.875, 0.256 per 256 images, 8 warmup epochs, cosine,
label smoothing 0.1; Inception V3: LARC + polynomial decay). `cvbench train` does the same
with every setting as a flag; this script shows the few calls it takes.
"""

from __future__ import annotations

import argparse

from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.training import TrainConfig


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Trains, evaluates and returns the validation metrics (`loss`, `top1`, and `top5` for
    more than 5 classes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="resnet18..152 or inception_v3")
    parser.add_argument("--data-dir", required=True, help="ImageNet TFRecords directory")
    parser.add_argument("--precision", default="auto", help="fp16, bf16, fp32 or auto")
    parser.add_argument("--image-size", type=int, default=None, help="default: the model's")
    parser.add_argument("--num-classes", type=int, default=None, help="default: 1000")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="images per GPU and step (the recipe's)"
    )
    parser.add_argument("--epochs", type=int, default=None, help="epochs (the recipe's: 90)")
    parser.add_argument("--log-dir", default=None, help="default: runs/<model>")
    parser.add_argument("--resume", action="store_true", help="continue the run in --log-dir")
    args = parser.parse_args(argv)

    task = ClassificationTask(
        TaskOptions(
            model=args.model,
            data_dir=args.data_dir,
            image_size=args.image_size,
            num_classes=args.num_classes,
            # The model's recipe (resnet50_v1.5_90e for resnet50), these settings resolved
            # into it as deviations.
            settings={"batch_size": args.batch_size, "epochs": args.epochs},
        )
    )
    run = prepare_run(  # the Trainer, with the task's model, loss, metrics and recipe
        task,
        precision=args.precision,
        config=TrainConfig(
            log_dir=args.log_dir or f"runs/{args.model}",
            checkpoint_every=1000,
            resume=args.resume,
            seed=1234,
        ),
        seed=1234,
    )
    results = run.fit(evaluate="end")  # the recipe's run: exactly its planned steps
    if run.trainer.is_chief:
        # no top-5 of 5 classes or fewer: it would be 1.0 whatever the model
        shown = [f"top-{k} {results[f'top{k}']:.4f}" for k in (1, 5) if f"top{k}" in results]
        print("  ".join(shown))
    return results


if __name__ == "__main__":
    main()
