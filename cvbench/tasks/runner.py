"""One path from a task to a trained, evaluated model: `prepare_run` builds the Trainer from
the task (model builder, loss, metrics, recipe), then the task's training data with the
Trainer's ranks, and `TaskRun` trains and evaluates.

`cvbench train`/`eval`, `examples/train_imagenet.py` and the demo all build through here:

    >>> from cvbench.tasks import TaskOptions, make_task, prepare_run
    >>> from cvbench.training import TrainConfig
    >>> task = make_task(TaskOptions(model="resnet18", image_size=32, num_classes=4,
    ...                              synthetic_steps=2, settings={"epochs": 1}))
    >>> run = prepare_run(task, batch_size=4, precision="fp32",
    ...                   config=TrainConfig(log_every=0, progress_bar=False, export=False))
    cvbench: recipe resnet18_cvbench: global batch 4 = 1 x 4, peak LR 0.004 (0.256 x 4 / 256), ...
    >>> run.train.steps_per_epoch, sorted(run.fit(evaluate="end"))  # the plan's 1 epoch
    epoch 1: loss ... top1 ... skipped 0 of 2 steps (0 in the run)
    (2, ['loss', 'top1'])
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras

from cvbench.tasks.base import Task, TrainData
from cvbench.tasks.recipes import Recipe, RecipePlan, fit_lengths, plan
from cvbench.tasks.recipes.plan import loss_scaling, planned_schedule
from cvbench.tasks.recipes.resolve import check_batch_size
from cvbench.training.config import OptimizerConfig, ScheduleConfig, TrainConfig
from cvbench.training.distributed import get_distribution
from cvbench.training.run_dir import (
    RESULTS_READ_LIMIT,
    RunFolder,
    check_layout,
    foreign_results,
)
from cvbench.training.run_log import RunLog, read_run_history
from cvbench.training.trainer import Trainer
from cvbench.utils.errors import BadFileError
from cvbench.utils.files import read_json, recording
from cvbench.utils.io import write_json_atomic

EVALUATE_CHOICES = ("end", "epoch", "none")
#: `RunNotes.callers_own`'s entry for an optimizer (and schedule) `prepare_run` was given.
CALLERS_SCHEDULE = "optimizer and schedule"
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
        notes: what the banner and the run log's recipe event say besides the recipe: the
            precision used and why, the overrides, the parts the caller replaced.
        history: the `keras.callbacks.History` of the last `fit` (None before).
        final_per_class: the run's last evaluation also reports a detector's AP per class
            (`AP/<class>`, `DetectionTask.per_category`); `cvbench train` sets it, for
            `results.json` and `plots/per_class_ap.png`. The evaluations before it do not.
    """

    task: Task
    trainer: Trainer
    train: TrainData
    batch_size: int
    plan: RecipePlan
    notes: RunNotes
    history: keras.callbacks.History | None = None
    final_per_class: bool = False
    _length_checked: bool = dataclasses.field(default=False, init=False, repr=False)

    def evaluate(self, *, final: bool = False) -> dict[str, float]:
        """The task's evaluation over the whole validation set (identical on every rank);
        with `final` and `final_per_class`, a detector's AP per class too."""
        per_class = final and self.final_per_class and hasattr(self.task, "per_category")
        if not per_class:
            return self.task.evaluate(self.trainer, batch_size=self.batch_size)
        before, self.task.per_category = self.task.per_category, True
        try:
            return self.task.evaluate(self.trainer, batch_size=self.batch_size)
        finally:
            self.task.per_category = before

    def epoch_history(self) -> dict[str, list[float]]:
        """The run's epochs as the run log records them (a resumed run: every session's,
        the last record of each epoch): `{"epoch": [1, 2, ...], "loss": [...],
        "learning_rate": [...], <metric>: [...], "val_<metric>": [...]}`, each list as long
        as "epoch" (NaN where an epoch lacks the value). The rate is the schedule's at each
        epoch's last step. Empty without a `log_dir` (and on ranks other than 0's files)."""
        log_dir = self.trainer.log_dir
        if log_dir is None or not RunFolder(log_dir).log.is_file():
            return {}
        events = read_run_history(RunFolder(log_dir).log)
        return epoch_history(events, self.trainer.learning_rate_at)

    def write_results(
        self, results: dict[str, float] | None, *, plots: Sequence[str | Path] = ()
    ) -> dict[str, Any]:
        """Ends the run's folder with its results (rank 0, with a `log_dir`): the final
        metrics as a `results` event of `train_log.jsonl` and as TensorBoard scalars
        `results/<name>` at the run's last step, and `results.json` (`results_record`:
        the metrics, the plan, the precision, the files written), atomically, never through
        a link, recorded as cvbench's (`files.recording`: a later run or `--overwrite` knows
        it as the training's). Returns that record ({} on other ranks or without a
        `log_dir`).

        A `results.json` that is not a training's (`run_dir.foreign_results`: another
        command wrote it while the run trained) is never replaced: the results stay in the
        run log, and `BadFileError` says so. Without `results` (not evaluated), the metrics
        of a training's `results.json` of the same step are kept (`recorded_metrics`): a
        finished run ended again never loses its result.

        Args:
            results: the last evaluation's (`fit`'s return; None: not evaluated).
            plots: the PNG files drawn of the run (listed in the record).

        Raises:
            BadFileError: `results.json` is another's (exit 1 in the command).
        """
        log_dir = self.trainer.log_dir
        if log_dir is None or not self.trainer.is_chief:
            return {}
        check_layout(log_dir)  # results.json, plots/: not links, of their kinds
        if not results:  # never an empty result over the same step's full one
            results = recorded_metrics(log_dir, self.trainer.state["step"])
        record = results_record(self, results or {}, plots=plots)
        log = RunLog(log_dir, enabled=True, progress_bar=False)
        try:
            log.record("results", metrics=record["metrics"], files=record["files"])
            log.scalars(self.trainer.state["step"], record["metrics"], prefix="results/")
        finally:
            log.close()
        path = RunFolder(log_dir).results
        why = foreign_results(log_dir)
        if why is not None:
            raise BadFileError(
                f"{path} appeared while the run trained ({why}) and was not replaced; the "
                f"results are in {RunFolder(log_dir).log} (its results event)"
            )
        with recording(path):
            write_json_atomic(path, record)
        return record

    @contextlib.contextmanager
    def holding_log_dir(self) -> Iterator[None]:
        """Holds the run folder's lock (`Trainer.claim_log_dir`, every rank calls it) for
        the whole block: `cvbench train` holds it from its start to its `results.json`, so
        that no `cvbench eval --log-dir` (which refuses a held folder) writes there while
        the run trains, evaluates or ends. `fit` inside the block holds it once more."""
        self.trainer.claim_log_dir()
        try:
            yield
        finally:
            self.trainer.release_log_dir()

    def fit(
        self,
        *,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        evaluate: str = "end",
        callbacks: Sequence[keras.callbacks.Callback] = (),
        eval_count: int | None = None,
    ) -> dict[str, float] | None:
        """Trains `epochs` epochs and evaluates as asked.

        The run's length is the plan's (`prepare_run`, from the recipe's `run.epochs`): call
        `fit()` without `epochs`, as `cvbench train` does, and plan another length on the
        recipe, `TaskOptions(settings={"epochs": N})` (`--epochs N`). With the recipe's
        schedule, `epochs` (or `steps_per_epoch`) that make another length than the plan's
        train that many steps, but the schedule is not replanned: it ends with them and keeps
        the plan's peak rate and warmup (a 2-epoch `fit` of a 90-epoch plan never leaves
        its warmup), and the banner and `results.json` keep the plan's length; the first
        such `fit` of the run warns once, in one line, saying so (`length_warning`). A
        schedule of the caller's (`prepare_run(optimizer=...)`) is laid over `fit`'s length
        as asked, without a warning.

        Args:
            epochs: epochs to train (a resumed run continues); default: the recipe's run
                (`fit_lengths(plan)`: exactly its total steps).
            steps_per_epoch: steps per epoch (default: the plan's with `epochs` None, else the
                training data's).
            evaluate: "end" (after training), "epoch" (after every epoch, recorded in the
                epoch logs as `val_<name>`; the last one is returned) or "none".
            callbacks: Keras callbacks for `Trainer.fit`.
            eval_count: evaluate this many times, evenly over the run, instead (NVIDIA's SSD
                `eval_count`): after the epochs `eval_epochs(epochs, eval_count)`, the last
                one the run's end; recorded like `evaluate="epoch"` (`val_<name>` in the epoch
                logs, the run log and TensorBoard); the last one is returned.

        Returns:
            The last evaluation's results, or None with `evaluate="none"`. With "epoch"
            or `eval_count`, a run already finished (resumed with no epoch left to train)
            is evaluated once, as with "end": its result is the finished model's.
        """
        if evaluate not in EVALUATE_CHOICES:
            raise ValueError(f"evaluate must be one of {EVALUATE_CHOICES}, got {evaluate!r}")
        if evaluate != "none" or eval_count is not None:
            self._check_evaluation_split(evaluate, eval_count)
        if epochs is None and steps_per_epoch == self.plan.steps_per_epoch:
            steps_per_epoch = None  # the plan's own: its length's divisor (fit_lengths) rules
        asked = (epochs, steps_per_epoch)
        if epochs is None:
            epochs, planned_steps = fit_lengths(self.plan)
            steps_per_epoch = steps_per_epoch or planned_steps
        steps_per_epoch = steps_per_epoch or self.train.steps_per_epoch
        if not self._length_checked:
            self._length_checked = True  # the first fit lays the schedule out
            warning = length_warning(self, *asked, epochs * steps_per_epoch)
            if warning and self.trainer.is_chief:
                warnings.warn(warning, UserWarning, stacklevel=2)
        trainer, final_epoch = self.trainer, epochs
        chosen = range(1, epochs + 1)
        if eval_count is not None:
            chosen = eval_epochs(epochs, eval_count)
            evaluate = "epoch"

        def validation() -> dict[str, float]:
            # called at every epoch end, after the epoch counter moved on
            epoch = trainer.state["epoch"]
            return self.evaluate(final=epoch == final_epoch) if epoch in chosen else {}

        # The run log's first event, written once the checkpoints allow the run (not on refusal).
        record = recipe_record(self.task.recipe, self.plan, notes=self.notes)
        self.trainer.run_events = [("recipe", record)]
        self.history = self.trainer.fit(
            self.train.data,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            batch_size=self.batch_size,
            validation_data=validation if evaluate == "epoch" else None,
            callbacks=callbacks,
        )
        if evaluate == "end":
            return self.evaluate(final=True)
        if evaluate == "epoch":
            last = {k: v[-1] for k, v in self.history.history.items() if k.startswith("val_")}
            if not last:  # no epoch left to train (a finished run fitted again): evaluate it
                return self.evaluate(final=True)
            return {k[len("val_") :]: float(v) for k, v in last.items()}
        return None

    def _check_evaluation_split(self, evaluate: str, eval_count: int | None) -> None:
        """Refuses a fit that will evaluate on records without the split the task evaluates on
        (`check_evaluation_split`), before its first step: found only when evaluating, the
        whole run was trained first."""
        check = getattr(self.task, "check_evaluation_split", None)
        if check is None:  # a task of the caller's own
            return
        try:
            check()
        except FileNotFoundError as error:
            when, drop = f"evaluate={evaluate!r}", ""
            if eval_count is not None:
                when, drop = f"eval_count={eval_count}", " and no eval_count"
            split = self.task.evaluation_split
            raise FileNotFoundError(
                f"no {split} split to evaluate on ({error}): fit({when}) evaluates on it; "
                f"pass evaluate='none'{drop} to train without evaluating"
            ) from None


def length_warning(
    run: TaskRun, epochs: int | None, steps_per_epoch: int | None, total: int
) -> str | None:
    """What `TaskRun.fit(epochs=epochs, steps_per_epoch=steps_per_epoch)` training `total`
    steps warns of, or None: a run of the recipe's schedule whose length is not the plan's
    (the schedule is not replanned for it: it keeps the plan's warmup); says how to plan the
    run instead. None with the caller's schedule, or at the plan's length."""
    planned = run.plan
    if planned is None or run.notes is None:  # a run put together without a plan
        return None
    if not run.notes.recipes_schedule or total == planned.total_steps:
        return None
    recipe = run.task.recipe
    call = ", ".join(
        f"{name}={value}"
        for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch))
        if value is not None
    )
    if recipe.run.epochs is not None:
        length = f"{recipe.run.epochs:g} epochs"
    else:
        length = f"{recipe.run.images} images"
    rises = " (as long as the run or longer: the rate only rises)"
    rises = rises if planned.warmup_steps >= total else ""
    message = (
        f"fit({call}) trains {total} steps, not the {planned.total_steps} steps {recipe.name} "
        f"is planned for ({length}): the schedule ends with these {total} steps but keeps "
        f"the plan's peak LR {planned.peak_lr:g} and {planned.warmup_steps}-step "
        f"warmup{rises}; to plan the run"
    )
    if epochs is not None:
        message += (
            f', make the task with TaskOptions(settings={{"epochs": {epochs}}}) (cvbench '
            f"train --epochs {epochs})"
        )
    if steps_per_epoch is not None and steps_per_epoch != planned.steps_per_epoch:
        message += f", pass steps_per_epoch={steps_per_epoch} to prepare_run"
    return message + " and call fit()"


#: The run folder's results file (`TaskRun.write_results`).
RESULTS_NAME = RunFolder.RESULTS


def recorded_metrics(log_dir: str | Path, step: int) -> dict[str, float]:
    """The metrics of the training's `results.json` in `log_dir` when it records step
    `step` (the run has not trained since), else {}: what `TaskRun.write_results` keeps
    rather than writing no metrics over them. {} for a file that is not a training's
    (`foreign_results`), unreadable, or of another step.

    Example:
        >>> import tempfile
        >>> recorded_metrics(tempfile.mkdtemp(), 4)  # no results.json
        {}
    """
    path = RunFolder(log_dir).results
    if not path.is_file() or foreign_results(log_dir) is not None:
        return {}
    try:
        record = read_json(path, limit=RESULTS_READ_LIMIT, what="results file")
    except (OSError, BadFileError):
        return {}
    if not isinstance(record, dict) or record.get("steps") != step:
        return {}
    metrics = record.get("metrics")
    if not isinstance(metrics, dict):
        return {}
    kept = {}
    for name, value in metrics.items():
        if value is None:  # a NaN metric is written as null
            kept[name] = math.nan
        elif isinstance(value, int | float) and not isinstance(value, bool):
            kept[name] = float(value)
        else:
            return {}
    return kept


def results_record(
    run: TaskRun, metrics: dict[str, float], *, plots: Sequence[str | Path] = ()
) -> dict[str, Any]:
    """What `results.json` holds: `model`, `task`, `recipe`, `metrics` (the final
    evaluation), `epochs` and `steps` done, `plan` (the recipe's plan, as the run log's
    recipe event), `precision` and `precision_reason`, and `files`: the paths written,
    relative to the run folder: `checkpoint` (the newest valid), `model` (each entry of
    `export/` but cvbench's records of it: `export/model.keras`, `export/saved_model`, ...),
    `log`, `tensorboard` (when
    written) and `plots`."""
    log_dir = run.trainer.log_dir
    folder = RunFolder(log_dir)
    files: dict[str, Any] = {"log": folder.LOG}
    checkpoint = _newest_checkpoint(log_dir)
    if checkpoint is not None:
        files["checkpoint"] = checkpoint.relative_to(log_dir).as_posix()
    if folder.export.is_dir() and not folder.export.is_symlink():
        names = [p.name for p in folder.export.iterdir() if not p.name.startswith(".")]
        files["model"] = sorted(f"{folder.EXPORT}/{name}" for name in names)  # not the records
    if folder.tensorboard.is_dir():
        files["tensorboard"] = folder.TENSORBOARD
    files["plots"] = [Path(p).relative_to(log_dir).as_posix() for p in plots]
    return {
        "model": run.task.options.model,
        "task": run.task.recipe.task,
        "recipe": run.task.recipe.name,
        "metrics": {k: float(v) for k, v in metrics.items()},
        "epochs": int(run.trainer.state["epoch"]),
        "steps": int(run.trainer.state["step"]),
        "plan": dataclasses.asdict(run.plan),
        "precision": run.notes.precision,
        "precision_reason": run.notes.precision_reason,
        "files": files,
    }


def written_line(log_dir: str | Path, record: dict[str, Any]) -> str:
    """The last line of a run: what was written where, from `results_record`'s files.

    Example:
        >>> line = written_line("run", {"files": {"log": "train_log.jsonl", "plots": [],
        ...     "checkpoint": "checkpoints/ckpt-0000000004.npz",
        ...     "model": ["export/model.keras", "export/saved_model"]}})
        >>> print(line.replace("; ", ";\\n"))
        cvbench: wrote run/results.json;
        model run/export/model.keras, run/export/saved_model;
        checkpoint run/checkpoints/ckpt-0000000004.npz;
        log run/train_log.jsonl
    """
    root = str(log_dir).rstrip("/") or "/"
    files = record["files"]

    def at(names) -> str:
        names = [names] if isinstance(names, str) else names
        return ", ".join(f"{root}/{name}" for name in names)

    parts = [f"cvbench: wrote {root}/{RESULTS_NAME}"]
    for key, what in (("plots", "plots"), ("model", "model"), ("checkpoint", "checkpoint"),
                      ("log", "log"), ("tensorboard", "TensorBoard")):  # fmt: skip
        if files.get(key):
            parts.append(f"{what} {at(files[key])}")
    return "; ".join(parts)


def epoch_history(
    events: Sequence[dict[str, Any]], learning_rate: Callable[[int], float | None] | None = None
) -> dict[str, list]:
    """`TaskRun.epoch_history` of run-log `events`; with `learning_rate` (`step -> rate`, e.g.
    `Trainer.learning_rate_at`), the rate at each epoch's last step as "learning_rate".

    Example:
        >>> events = [{"event": "epoch", "epoch": 1, "step": 2, "loss": 2.0, "val_top1": 0.25},
        ...           {"event": "epoch", "epoch": 2, "step": 4, "loss": 1.5},
        ...           {"event": "epoch", "epoch": 2, "step": 4, "loss": 1.4}]  # resumed
        >>> epoch_history(events)
        {'epoch': [1, 2], 'step': [2, 4], 'loss': [2.0, 1.4], 'val_top1': [0.25, nan]}
    """
    last: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.get("event") == "epoch" and isinstance(event.get("epoch"), int):
            last[event["epoch"]] = event
    epochs = sorted(last)
    if not epochs:
        return {}
    skip = {"event", "time", "epoch", "step", "skipped", "skipped_steps", "loss_scale"}
    names = [k for e in epochs for k in last[e] if k not in skip]
    history: dict[str, list] = {"epoch": epochs, "step": [last[e]["step"] for e in epochs]}
    for name in dict.fromkeys(names):
        history[name] = [_number(last[e].get(name)) for e in epochs]
    if learning_rate is not None:
        rates = [learning_rate(step) for step in history["step"]]
        if any(r is not None for r in rates):
            history["learning_rate"] = [math.nan if r is None else r for r in rates]
    return history


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _newest_checkpoint(log_dir: Path) -> Path | None:
    """The newest checkpoint of the run whose metadata reads, found without loading its
    arrays (`find_checkpoint` would load and verify every array again, and warn again about
    each invalid newer file the resume already reported)."""
    from cvbench.training.checkpoint import CheckpointManager, read_checkpoint_meta

    for path in reversed(CheckpointManager(RunFolder(log_dir).checkpoints).checkpoints()):
        try:
            read_checkpoint_meta(path)
        except (OSError, ValueError):
            continue
        return path
    return None


def eval_epochs(epochs: int, count: int) -> frozenset[int]:
    """The epochs (1-based) after which a run of `epochs` epochs evaluates `count` times,
    evenly: `ceil(k * epochs / count)` for k = 1..count, so the last is the run's end.

    Example:
        >>> sorted(eval_epochs(50, 4)), sorted(eval_epochs(3, 3)), sorted(eval_epochs(7, 1))
        ([13, 25, 38, 50], [1, 2, 3], [7])

    Raises:
        ValueError: `count` below 1 or above `epochs` (at most one evaluation per epoch).
    """
    if not isinstance(count, int) or not 1 <= count <= epochs:
        raise ValueError(
            f"eval_count must be between 1 and the run's {epochs} epochs (one evaluation per "
            f"epoch at most), got {count!r}"
        )
    return frozenset(-(-k * epochs // count) for k in range(1, count + 1))


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
        ValueError: a `batch_size` that is not a positive int (`check_batch_size`);
            `check_trainable` of the task (SSD with frozen batch norms and no backbone
            weights).
    """
    if batch_size is not None:
        check_batch_size(batch_size)  # 0 ran at the recipe's batch without a word
    dist = get_distribution(distribution)
    config = config or TrainConfig()
    if _resumes_a_checkpoint(config) and hasattr(task, "restore_from_checkpoint"):
        # First: what the run is (the knobs a moved starting weights file decided, taken
        # from the checkpoint) is settled before anything reads the recipe, the training
        # pipeline's preprocessing included.
        task.restore_from_checkpoint(recorded=lambda: _recorded_knobs(config))
    recipe = task.recipe
    batch_size = batch_size or recipe.run.batch_per_gpu
    train, run_plan = _data_and_plan(task, dist, batch_size, seed, steps_per_epoch)
    own_optimizer = optimizer is not None
    if not own_optimizer:
        optimizer, schedule = recipe.optimizer, planned_schedule(recipe, run_plan)
    if callable(optimizer) and not isinstance(optimizer, keras.optimizers.Optimizer):
        optimizer = optimizer(train.steps_per_epoch, batch_size * dist.size)
    config = dataclasses.replace(config, **loss_scaling(recipe))
    settings = run_settings(task)
    notes = run_notes(task, dist, batch_size, precision=precision, own_optimizer=own_optimizer)
    if dist.is_chief:
        print("\n".join(notes.banner(recipe, run_plan)), flush=True)
    trainer = build_trainer(
        task, optimizer=optimizer, schedule=schedule, precision=precision, config=config,
        distribution=dist,
    )  # fmt: skip
    trainer.run_settings = settings
    return TaskRun(
        task=task, trainer=trainer, train=train, batch_size=batch_size, plan=run_plan,
        notes=notes,
    )  # fmt: skip


def _recorded_knobs(config: TrainConfig) -> dict[str, Any]:
    """The recipe knobs the newest valid checkpoint of the run in `config.log_dir` records
    (`{}`: none valid, or none recorded; the Trainer then refuses or compares as always)."""
    from cvbench.training.checkpoint import find_checkpoint, read_checkpoint_meta

    try:
        meta = read_checkpoint_meta(find_checkpoint(config.log_dir))
    except (OSError, ValueError):  # none valid: the Trainer's own check says so
        return {}
    settings = meta.get("state", {}).get("settings") or {}
    return settings.get("knobs") or {}


def _resumes_a_checkpoint(config: TrainConfig) -> bool:
    """Whether a run with `config` resumes from a checkpoint of its folder: `resume` and a
    checkpoint file there. The Trainer then restores the newest valid one (every weight of
    the model) or, when none is valid, refuses the run (`resume.check_resumed`): either way
    the starting weights are not needed. Only the names are listed: the Trainer reads the
    checkpoint itself, once."""
    if not config.resume or config.log_dir is None:
        return False
    from cvbench.training.checkpoint import CheckpointManager

    return bool(CheckpointManager(RunFolder(config.log_dir).checkpoints).checkpoints())


def _data_and_plan(
    task: Task, dist: Any, batch_size: int, seed: int | None, steps_per_epoch: int | None
) -> tuple[Any, RecipePlan]:
    """`(training data, plan)`: this rank's training data of `task` (which first checks that
    it can train) and its recipe planned at the run's global batch and epoch length."""
    check = getattr(task, "check_trainable", None)
    if check is not None:
        check()
    train = task.train_data(batch_size=batch_size, distribution=dist, seed=seed)
    steps = steps_per_epoch or train.steps_per_epoch
    run_plan = plan(
        task.recipe, num_gpus=dist.size, train_images=steps * batch_size * dist.size,
        batch_per_gpu=batch_size,
    )  # fmt: skip
    return train, run_plan


def run_notes(
    task: Task, dist: Any, batch_size: int, *, precision: str, own_optimizer: bool
) -> RunNotes:
    """What a run of `task` on the ranks of `dist` states besides its plan: the precision
    the Trainer will use for the asked `precision` and why, the recipe's overrides, the
    parts the caller replaced (`own_optimizer`: the optimizer and schedule), the devices."""
    from cvbench.training.precision import resolve_precision

    recipe = task.recipe
    callers_own = tuple(getattr(task, "callers_own", tuple)())
    if own_optimizer:
        callers_own = (CALLERS_SCHEDULE, *callers_own)
    changed, devices = overrides(recipe), devices_note(dist, batch_size)
    used = resolve_precision(precision)
    return RunNotes(
        precision=used,
        precision_reason=precision_note(recipe, used, precision),
        overrides=changed,
        callers_own=callers_own,
        devices=devices,
    )


def run_settings(task: Task) -> dict[str, Any]:
    """What a resume of a run of `task` must agree on besides the Trainer's own plan: the
    model, image size, classes, and the recipe with every knob (after overrides); and what
    reads its records (`data_pipeline`: "tf", "grain", "dali"; None on synthetic data) and,
    for grain, with how many workers (`data_workers`), which a resume names in a warning
    when they changed (`resume.pipeline_change`), and which training shards the data
    position counts batches of (`train_records`, `splits.records_identity`; a resume names
    another build or sharding, `resume.records_change`). The data's location is not in it
    (records may move between runs)."""
    from cvbench.data.read.splits import records_identity

    recipe = task.recipe
    pipeline = task.source().name if task.options.data_dir else None
    records = {"train_records": records_identity(task.split_files("train"))} if pipeline else {}
    return {
        "model": task.options.model,
        "image_size": task.image_size,
        "num_classes": task.num_classes,
        "recipe": recipe.name,
        "knobs": dict(recipe.knobs()),
        "data_pipeline": pipeline,
        # grain's workers batch the records dealt to them: their number changes the batches
        **({"data_workers": task.options.data_workers or 0} if pipeline == "grain" else {}),
        **records,
    }


def recipe_record(recipe: Recipe, run: RecipePlan, *, notes: RunNotes | None = None) -> dict:
    """What the run log records of a recipe: `{"recipe": name, "knobs": {knob: value},
    "deviations": [{"knob", "reference", "reason"}], "plan": {...}}`, and with `notes`:
    `"precision"`, `"precision_reason"`, `"overrides"` ([{"knob", "value", "reason"}]) and,
    when any, `"callers_own"` (the parts the caller replaced: their knobs are not what ran)."""
    record: dict[str, Any] = {
        "recipe": recipe.name,
        "knobs": dict(recipe.knobs()),
        "deviations": [dataclasses.asdict(d) for d in recipe.deviations],
        "plan": dataclasses.asdict(run),
    }
    if notes is not None:
        record.update(precision=notes.precision, precision_reason=notes.precision_reason)
        record["overrides"] = [
            {"knob": knob, "value": value, "reason": reason}
            for knob, value, reason in notes.overrides
        ]
        if notes.callers_own:
            record["callers_own"] = list(notes.callers_own)
    return record


@dataclass(frozen=True)
class RunNotes:
    """What a run states besides its recipe and plan.

    Attributes:
        precision: the Keras policy the Trainer uses.
        precision_reason: why (`precision_note`).
        overrides: `(knob, value, reason)` of each knob set away from the named recipe
            (flags, `TaskOptions` arguments, the data's classes).
        callers_own: the recipe's parts the caller replaced ("optimizer and schedule",
            "training preprocessing", ...).
        devices: JAX data parallelism's split, e.g. "over 4 devices: 2 images per device"
            ("" with one device per rank).
    """

    precision: str
    precision_reason: str
    overrides: tuple[tuple[str, Any, str], ...] = ()
    callers_own: tuple[str, ...] = ()
    devices: str = ""

    @property
    def recipes_schedule(self) -> bool:
        """Whether the run's optimizer and schedule are the recipe's (not the caller's)."""
        return CALLERS_SCHEDULE not in self.callers_own

    def banner(self, recipe: Recipe, run: RecipePlan) -> list[str]:
        """The lines rank 0 prints: `cvbench: recipe R: <plan>, precision P (why)` with the
        caller's parts, then `cvbench: overrides: ...` when there are any. With the caller's
        optimizer and schedule the plan is only the batch and the steps per epoch: the rate,
        warmup and length the recipe would plan are not the run's."""
        devices = f" ({self.devices})" if self.devices else ""
        plan_line = run.describe(schedule=self.recipes_schedule)
        first = f"cvbench: recipe {recipe.name}: {plan_line}{devices}, precision "
        first += self.precision
        first += f" ({self.precision_reason})"
        if self.callers_own:
            first += f"; {', '.join(self.callers_own)}: the caller's"
        lines = [first]
        if self.overrides:
            text = "; ".join(f"{k} {v!r} ({reason})" for k, v, reason in self.overrides)
            lines.append(f"cvbench: overrides of {recipe.name}: {text}")
        return lines


def devices_note(dist: Any, batch_size: int) -> str:
    """ "over N devices: k images per device" when the ranks' devices are more than the
    ranks (JAX data parallelism: processes x their devices), else ""."""
    devices = getattr(dist, "num_devices", dist.size)
    if devices == dist.size:
        return ""
    return f"over {devices} devices: {batch_size * dist.size // devices} images per device"


def precision_note(recipe: Recipe, used: str, asked: str) -> str:
    """Why the run uses `used`: "asked", or auto's reason; and the recipe's precision when
    it differs (e.g. NVIDIA's mixed_float16 on a machine without a GPU)."""
    from cvbench.training.config import canonical_precision
    from cvbench.training.precision import precision_reason

    reason = precision_reason(asked)
    recipes = canonical_precision(recipe.run.precision)
    if recipes != used:
        reason += f"; the recipe's is {recipes}"
    return reason


def overrides(recipe: Recipe) -> tuple[tuple[str, Any, str], ...]:
    """`(knob, value, reason)` for each knob of `recipe` that differs from the registered
    recipe of its name (none for a recipe that is not registered)."""
    from cvbench.tasks.recipes import get_recipe

    try:
        named = get_recipe(recipe.name)
    except (KeyError, ValueError):
        return ()
    reference = dict(named.knobs())
    found = []
    for knob, value in recipe.knobs():
        if knob in reference and value != reference[knob]:
            deviation = recipe.deviation(knob)
            found.append((knob, value, deviation.reason if deviation else "set"))
    return tuple(found)
