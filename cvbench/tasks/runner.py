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
    cvbench: recipe resnet18_cvbench: global batch 4 = 1 x 4, peak LR 0.004, ...
    >>> run.train.steps_per_epoch, sorted(run.fit(epochs=1, evaluate="end"))
    epoch 1: loss ... top1 ... top5 ... skipped 0 of 2 steps (0 in the run)
    (2, ['loss', 'top1', 'top5'])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras

from cvbench.tasks.base import Task, TrainData
from cvbench.tasks.recipes import Recipe, RecipePlan, fit_lengths, plan
from cvbench.tasks.recipes.plan import loss_scaling, planned_schedule
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
        plan: the task's recipe at this run's global batch (`cvbench.tasks.recipes.plan`).
        callers_own: the recipe's parts the caller replaced (e.g. "optimizer and schedule",
            "training preprocessing"); the run log's recipe event names them.
        history: the `keras.callbacks.History` of the last `fit` (None before).
    """

    task: Task
    trainer: Trainer
    train: TrainData
    batch_size: int
    plan: RecipePlan
    callers_own: tuple[str, ...] = ()
    history: keras.callbacks.History | None = None

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
                (`fit_lengths(plan)`: exactly its total steps).
            steps_per_epoch: steps per epoch (default: the plan's with `epochs` None, else the
                training data's).
            evaluate: "end" (after training), "epoch" (after every epoch, recorded in the
                epoch logs as `val_<name>`; the last one is returned) or "none".
            callbacks: Keras callbacks for `Trainer.fit`.

        Returns:
            The last evaluation's results, or None with `evaluate="none"`.
        """
        if evaluate not in EVALUATE_CHOICES:
            raise ValueError(f"evaluate must be one of {EVALUATE_CHOICES}, got {evaluate!r}")
        if epochs is None:
            epochs, planned_steps = fit_lengths(self.plan)
            steps_per_epoch = steps_per_epoch or planned_steps
        # The resolved recipe: the run log's first event, written once the checkpoints allow
        # the run (a refused resume writes nothing).
        record = recipe_record(self.task.recipe, self.plan, callers_own=self.callers_own)
        self.trainer.run_events = [("recipe", record)]
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
    """The Trainer of `task`: its model builder (or `model`), loss and metrics, its recipe's
    optimizer and schedule unless `optimizer` is given, and what its export writes for users
    (`task.user_model`, `task.model_info()`). Enough to evaluate (`task.evaluate(trainer,
    ...)`); to train use `prepare_run`, which also plans the recipe at the run's batch."""
    if optimizer is None:
        optimizer = task.recipe.optimizer
        schedule = task.recipe.schedule if schedule is None else schedule
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
    precision: str = "auto",
    config: TrainConfig | None = None,
    distribution: Any = "auto",
    seed: int | None = None,
    steps_per_epoch: int | None = None,
) -> TaskRun:
    """The Trainer for `task` and this rank's training data, following the task's recipe.

    `batch_size` defaults to the recipe's batch per GPU; the plan at this run's global batch
    (`cvbench.tasks.recipes.plan`, printed on rank 0: `run.plan.describe()`) gives the
    optimizer (`recipe.optimizer`), the schedule (`planned_schedule`: the peak rate scaled to
    the global batch, warmup and decay in steps), the loss scaling of `config`
    (`loss_scaling`) and, in `fit`, the run's length. Change a knob on the recipe
    (`TaskOptions(settings=...)`, `Recipe.with_overrides`), not here.

    Args:
        task: a task (`make_task`, `ClassificationTask`, `DetectionTask`).
        batch_size: images per rank and step (default: the recipe's `run.batch_per_gpu`).
        optimizer: instead of the recipe's: an `OptimizerConfig`, a ready Keras optimizer,
            or a function `(steps_per_epoch, global_batch) -> optimizer` called once the
            data's size is known (the demo's Adam).
        schedule: with an `OptimizerConfig` of your own: its schedule (default: the
            Trainer's `ScheduleConfig()`).
        precision: the Trainer's precision ("auto", "fp32", "bf16", "fp16"; "auto" is
            fp16 on a GPU, the recipes' AMP).
        config: the Trainer's run settings (its loss scaling is the recipe's).
        distribution: "auto" (Horovod under horovodrun; on JAX every local device), "single",
            or a `Distribution`.
        seed: seeds the training data order (per epoch); None: nondeterministic.
        steps_per_epoch: steps in an epoch when it is not the data's (the plan is made for
            it: synthetic data has `options.synthetic_steps`).

    Returns:
        A `TaskRun`.

    Raises:
        ValueError: `check_trainable` of the task (SSD with frozen batch norms and no
            backbone weights).
    """
    dist = get_distribution(distribution)
    recipe = task.recipe
    batch_size = batch_size or recipe.run.batch_per_gpu
    check = getattr(task, "check_trainable", None)
    if check is not None:
        check()
    train = task.train_data(batch_size=batch_size, distribution=dist, seed=seed)
    steps = steps_per_epoch or train.steps_per_epoch
    run_plan = plan(
        recipe, num_gpus=dist.size, train_images=steps * batch_size * dist.size,
        batch_per_gpu=batch_size,
    )  # fmt: skip
    banner = f"cvbench: recipe {recipe.name}: {run_plan.describe()}"
    if dist.num_devices != dist.size:  # JAX data parallelism: processes x their devices
        per_device = batch_size * dist.size // dist.num_devices
        banner += f" (over {dist.num_devices} devices: {per_device} images per device)"
    callers_own = tuple(getattr(task, "callers_own", tuple)())
    if optimizer is None:
        optimizer = recipe.optimizer
        schedule = planned_schedule(recipe, run_plan)
    else:
        callers_own = ("optimizer and schedule", *callers_own)
    if callers_own:
        banner += f" ({', '.join(callers_own)}: the caller's)"
    if dist.is_chief:
        print(banner, flush=True)
    config = dataclasses.replace(config or TrainConfig(), **loss_scaling(recipe))
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
    return TaskRun(
        task=task, trainer=trainer, train=train, batch_size=batch_size, plan=run_plan,
        callers_own=callers_own,
    )  # fmt: skip


def run_settings(task: Task) -> dict[str, Any]:
    """What a resume of a run of `task` must agree on besides the Trainer's own plan: the
    model, image size, classes, and the recipe with every knob (after overrides). The data's
    location is not in it (records may move between runs)."""
    recipe = task.recipe
    return {
        "model": task.options.model,
        "image_size": task.image_size,
        "num_classes": task.num_classes,
        "recipe": recipe.name,
        "knobs": dict(recipe.knobs()),
    }


def recipe_record(
    recipe: Recipe, run: RecipePlan, *, callers_own: tuple[str, ...] = ()
) -> dict[str, Any]:
    """What the run log records of a recipe: `{"recipe": name, "knobs": {knob: value},
    "deviations": [{"knob", "reference", "reason"}], "plan": {...}}`, and `"callers_own"`:
    the parts the caller replaced (their knobs in `knobs` are not what ran), when any."""
    record = {
        "recipe": recipe.name,
        "knobs": dict(recipe.knobs()),
        "deviations": [dataclasses.asdict(d) for d in recipe.deviations],
        "plan": dataclasses.asdict(run),
    }
    if callers_own:
        record["callers_own"] = list(callers_own)
    return record
