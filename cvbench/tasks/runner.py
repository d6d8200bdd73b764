"""One path from a task to a trained, evaluated model: `prepare_run` builds the Trainer from
the task (model builder, loss, metrics, recipe), then the task's training data with the
Trainer's ranks, and `TaskRun` trains and evaluates.

`cvbench train`/`eval`, `examples/train_imagenet.py` and the demo all build through here:

    >>> from cvbench.tasks import TaskOptions, make_task, prepare_run
    >>> from cvbench.training import TrainConfig
    >>> task = make_task(TaskOptions(model="resnet18", image_size=32, num_classes=4,
    ...                              synthetic_steps=2))
    >>> run = prepare_run(task, batch_size=4, precision="fp32",
    ...                   config=TrainConfig(log_every=0, progress_bar=False, export=False))
    >>> run.train.steps_per_epoch, sorted(run.fit(epochs=1, evaluate="end"))
    (2, ['loss', 'top1', 'top5'])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras

from cvbench.tasks.base import Task, TrainData
from cvbench.training.config import OptimizerConfig, ScheduleConfig, TrainConfig
from cvbench.training.distributed import get_distribution
from cvbench.training.trainer import Trainer

EVALUATE_CHOICES = ("end", "epoch", "none")
#: `optimizer` may be a function of the run's size: `(steps_per_epoch, global_batch) -> opt`.
OptimizerFactory = Callable[[int, int], keras.optimizers.Optimizer]


@dataclass
class TaskRun:
    """A task with its Trainer and this rank's training data (`prepare_run` makes it).

    Attributes:
        task: the task.
        trainer: the Trainer built from the task.
        train: this rank's training data and steps per epoch.
        batch_size: images per rank and step.
        history: the `keras.callbacks.History` of the last `fit` (None before).
    """

    task: Task
    trainer: Trainer
    train: TrainData
    batch_size: int
    history: keras.callbacks.History | None = None

    def evaluate(self) -> dict[str, float]:
        """The task's evaluation over the whole validation set (identical on every rank)."""
        return self.task.evaluate(self.trainer, batch_size=self.batch_size)

    def fit(
        self,
        *,
        epochs: int,
        steps_per_epoch: int | None = None,
        evaluate: str = "end",
        callbacks: Sequence[keras.callbacks.Callback] = (),
    ) -> dict[str, float] | None:
        """Trains `epochs` epochs and evaluates as asked.

        Args:
            epochs: epochs to train (a resumed run continues).
            steps_per_epoch: steps per epoch (default: the training data's).
            evaluate: "end" (after training), "epoch" (after every epoch, recorded in the
                epoch logs as `val_<name>`; the last one is returned) or "none".
            callbacks: Keras callbacks for `Trainer.fit`.

        Returns:
            The last evaluation's results, or None with `evaluate="none"`.
        """
        if evaluate not in EVALUATE_CHOICES:
            raise ValueError(f"evaluate must be one of {EVALUATE_CHOICES}, got {evaluate!r}")
        self.history = self.trainer.fit(
            self.train.data,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch or self.train.steps_per_epoch,
            batch_size=self.batch_size,
            validation_data=self.evaluate if evaluate == "epoch" else None,
            callbacks=callbacks,
        )
        if evaluate == "end":
            return self.evaluate()
        if evaluate == "epoch":
            last = {k: v[-1] for k, v in self.history.history.items() if k.startswith("val_")}
            return {k[len("val_") :]: float(v) for k, v in last.items()}
        return None


def build_trainer(
    task: Task,
    *,
    optimizer: OptimizerConfig | keras.optimizers.Optimizer | None = None,
    schedule: ScheduleConfig | float | None = None,
    precision: str = "auto",
    config: TrainConfig | None = None,
    distribution: Any = "auto",
    model: keras.Model | None = None,
) -> Trainer:
    """The Trainer of `task`: its model builder (or `model`), loss and metrics, the recipe
    unless `optimizer` is given, and what its export writes for users (`task.user_model`,
    `task.model_info()`). Enough to evaluate (`task.evaluate(trainer, ...)`); to train
    use `prepare_run`, which also sizes the optimizer by the data."""
    if optimizer is None:
        optimizer, recipe_schedule = task.recipe()
        schedule = recipe_schedule if schedule is None else schedule
    return Trainer(
        task.build_model if model is None else model,
        task.loss(),
        optimizer,
        schedule=schedule,
        precision=precision,
        metrics=task.metrics(),
        distribution=get_distribution(distribution),
        config=config,
        model_info=task.model_info(),
        export_transform=task.user_model,
    )


def prepare_run(
    task: Task,
    *,
    batch_size: int,
    optimizer: OptimizerConfig | keras.optimizers.Optimizer | OptimizerFactory | None = None,
    schedule: ScheduleConfig | float | None = None,
    precision: str = "auto",
    config: TrainConfig | None = None,
    distribution: Any = "auto",
    seed: int | None = None,
) -> TaskRun:
    """The Trainer for `task` and this rank's training data.

    Args:
        task: a task (`make_task`, `ClassificationTask`, `DetectionTask`).
        batch_size: images per rank and step.
        optimizer: an `OptimizerConfig` (default: the task's recipe), a ready Keras
            optimizer, or a function `(steps_per_epoch, global_batch) -> optimizer` called
            once the data's size is known.
        schedule: with an `OptimizerConfig`: the schedule (default: the recipe's when the
            optimizer is the recipe's too, else `ScheduleConfig()`).
        precision: the Trainer's precision ("auto", "fp32", "bf16", "fp16").
        config: the Trainer's run settings.
        distribution: "auto" (Horovod under horovodrun), "single", or a `Distribution`.
        seed: seeds the training data order (per epoch); None: nondeterministic.

    Returns:
        A `TaskRun`.
    """
    dist = get_distribution(distribution)
    train = task.train_data(batch_size=batch_size, distribution=dist, seed=seed)
    if callable(optimizer) and not isinstance(optimizer, keras.optimizers.Optimizer):
        optimizer = optimizer(train.steps_per_epoch, batch_size * dist.size)
    trainer = build_trainer(
        task,
        optimizer=optimizer,
        schedule=schedule,
        precision=precision,
        config=config,
        distribution=dist,
    )
    return TaskRun(task=task, trainer=trainer, train=train, batch_size=batch_size)
