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
    epoch 1: loss ... top1 ... top5 ... skipped 0 of 2 steps (0 in the run)
    (2, ['loss', 'top1', 'top5'])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import keras

from cvbench.tasks.base import Task, TrainData
from cvbench.tasks.recipes import (
    Recipe,
    RecipePlan,
    fit_lengths,
    optimizer_config,
    plan,
    schedule_kwargs,
    train_config_kwargs,
)
from cvbench.training.config import OptimizerConfig, ScheduleConfig, TrainConfig
from cvbench.training.distributed import get_distribution
from cvbench.training.run_log import RunLog
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
        plan: the recipe at this run's global batch (`cvbench.tasks.recipes.plan`), None
            for a task without a recipe.
    """

    task: Task
    trainer: Trainer
    train: TrainData
    batch_size: int
    history: keras.callbacks.History | None = None
    plan: RecipePlan | None = None

    def record_recipe(self) -> None:
        """Appends the resolved recipe to the run log (`log_dir/train_log.jsonl`, rank 0): a
        `recipe` event with its name, every knob, the deviations from the reference
        (knob, reference, reason) and the plan."""
        recipe = getattr(self.task.options, "recipe", None)
        if recipe is None or self.plan is None:
            return
        self.trainer.claim_log_dir()  # before the first write: the fit's checks and lock
        log = RunLog(self.trainer.log_dir, enabled=self.trainer.is_chief, progress_bar=False)
        try:
            log.record("recipe", **recipe_record(recipe, self.plan))
        finally:
            log.close()

    def evaluate(self) -> dict[str, float]:
        """The task's evaluation over the whole validation set (identical on every rank)."""
        return self.task.evaluate(self.trainer, batch_size=self.batch_size)

    def fit(
        self,
        *,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        evaluate: str = "end",
        callbacks: Sequence[keras.callbacks.Callback] = (),
    ) -> dict[str, float] | None:
        """Trains `epochs` epochs and evaluates as asked.

        Args:
            epochs: epochs to train (a resumed run continues); default: the recipe's run
                (`fit_lengths(plan)`: exactly its total steps); required without a recipe.
            steps_per_epoch: steps per epoch (default: the recipe's plan, else the training
                data's).
            evaluate: "end" (after training), "epoch" (after every epoch, recorded in the
                epoch logs as `val_<name>`; the last one is returned) or "none".
            callbacks: Keras callbacks for `Trainer.fit`.

        Returns:
            The last evaluation's results, or None with `evaluate="none"`.
        """
        if evaluate not in EVALUATE_CHOICES:
            raise ValueError(f"evaluate must be one of {EVALUATE_CHOICES}, got {evaluate!r}")
        if self.plan is not None and epochs is None:
            epochs, planned_steps = fit_lengths(self.plan)
            steps_per_epoch = steps_per_epoch or planned_steps
        if epochs is None:
            raise ValueError("fit(epochs=...) is needed for a task without a recipe")
        self.record_recipe()
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
        recipe = getattr(task.options, "recipe", None)
        if recipe is not None:
            optimizer = optimizer_config(recipe)
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
    batch_size: int | None = None,
    optimizer: OptimizerConfig | keras.optimizers.Optimizer | OptimizerFactory | None = None,
    schedule: ScheduleConfig | float | None = None,
    schedule_changes: Mapping[str, Any] | None = None,
    precision: str = "auto",
    config: TrainConfig | None = None,
    distribution: Any = "auto",
    seed: int | None = None,
    steps_per_epoch: int | None = None,
) -> TaskRun:
    """The Trainer for `task` and this rank's training data.

    With a recipe (`task.options.recipe`) the run follows it: `batch_size` defaults to its
    batch per GPU, and the plan at this run's global batch (`cvbench.tasks.recipes.plan`,
    printed on rank 0: `run.plan.describe()`) gives the optimizer (`optimizer_config`), the
    schedule (`schedule_kwargs`: the peak rate scaled to the global batch, warmup and decay
    in steps), the loss scaling of `config` (`train_config_kwargs`) and, in `fit`, the run's
    length. Without a recipe: the task's `recipe()` defaults.

    Args:
        task: a task (`make_task`, `ClassificationTask`, `DetectionTask`).
        batch_size: images per rank and step (required without a recipe).
        optimizer: an `OptimizerConfig` (default: the task's recipe), a ready Keras
            optimizer, or a function `(steps_per_epoch, global_batch) -> optimizer` called
            once the data's size is known.
        schedule: with an `OptimizerConfig`: the schedule (default: the recipe's when the
            optimizer is the recipe's too, else `ScheduleConfig()`).
        schedule_changes: `ScheduleConfig` fields set on the recipe's schedule (those no
            recipe knob holds, e.g. `boundaries_epochs`).
        precision: the Trainer's precision ("auto", "fp32", "bf16", "fp16"; "auto" is
            fp16 on a GPU, the recipes' AMP).
        config: the Trainer's run settings.
        distribution: "auto" (Horovod under horovodrun), "single", or a `Distribution`.
        seed: seeds the training data order (per epoch); None: nondeterministic.
        steps_per_epoch: steps in an epoch when it is not the data's (the plan is made for
            it: synthetic data has `options.synthetic_steps`).

    Returns:
        A `TaskRun`.

    Raises:
        ValueError: no `batch_size` without a recipe; `check_trainable` of the task (SSD
            with frozen batch norms and no backbone weights).
    """
    dist = get_distribution(distribution)
    recipe = getattr(task.options, "recipe", None)
    if recipe is not None:
        batch_size = batch_size or recipe.run.batch_per_gpu
    if batch_size is None:
        raise ValueError("prepare_run(batch_size=...) is needed for a task without a recipe")
    check = getattr(task, "check_trainable", None)
    if check is not None:
        check()
    train = task.train_data(batch_size=batch_size, distribution=dist, seed=seed)
    run_plan = None
    if recipe is not None:
        steps = steps_per_epoch or train.steps_per_epoch
        run_plan = plan(
            recipe, num_gpus=dist.size, train_images=steps * batch_size * dist.size,
            batch_per_gpu=batch_size,
        )  # fmt: skip
        if dist.is_chief:
            print(f"cvbench: recipe {recipe.name}: {run_plan.describe()}", flush=True)
        if optimizer is None:
            optimizer = optimizer_config(recipe)
            if schedule is None:
                schedule = ScheduleConfig(**schedule_kwargs(recipe, run_plan))
                schedule = schedule.replace(**dict(schedule_changes or {}))
        config = dataclasses.replace(config or TrainConfig(), **train_config_kwargs(recipe))
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
    trainer.run_settings = run_settings(task)
    return TaskRun(task=task, trainer=trainer, train=train, batch_size=batch_size, plan=run_plan)


def run_settings(task: Task) -> dict[str, Any]:
    """What a resume of a run of `task` must agree on besides the Trainer's own plan: the
    model, image size, classes, label smoothing, and the recipe with every knob (after
    overrides). The data's location is not in it (records may move between runs)."""
    options = task.options
    recipe = getattr(options, "recipe", None)
    names = ("model", "image_size", "num_classes", "label_smoothing")
    return {
        **{name: getattr(options, name, None) for name in names},
        "recipe": None if recipe is None else recipe.name,
        "knobs": {} if recipe is None else dict(recipe.knobs()),
    }


def recipe_record(recipe: Recipe, run: RecipePlan) -> dict[str, Any]:
    """What the run log records of a recipe: `{"recipe": name, "knobs": {knob: value},
    "deviations": [{"knob", "reference", "reason"}], "plan": {...}}`."""
    return {
        "recipe": recipe.name,
        "knobs": dict(recipe.knobs()),
        "deviations": [dataclasses.asdict(d) for d in recipe.deviations],
        "plan": dataclasses.asdict(run),
    }
