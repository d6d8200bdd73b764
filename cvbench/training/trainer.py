"""The Trainer: mixed precision, Horovod data parallelism, checkpoints, logs, throughput.

One training step is Keras' own (`train_on_batch` on a `TrainingModel`), so the same loop
runs on TensorFlow (with or without Horovod) and on JAX (one process). What the Trainer adds
around it:

- precision: the model is built under the dtype policy; mixed_float16 wraps the optimizer in
  `keras.optimizers.LossScaleOptimizer` (dynamic or static loss scaling);
- distribution (`cvbench.training.distributed`): gradients averaged inside the optimizer
  before the loss-scale check, rank 0's variables broadcast at the start and after a resume,
  metrics averaged over ranks, only rank 0 printing and writing, all ranks stopping together;
- checkpoints every N steps and at epoch ends, resume from the newest valid one, with the
  data position (`cvbench.training.inputs`), and the lock on the run folder (the base class
  in `cvbench.training.trainer_checkpoints`);
- NVIDIA-style throughput lines and summary, a JSON-lines log, TensorBoard scalars, a
  progress bar, and a `.keras` / SavedModel export at the end.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras

from cvbench.training import resume
from cvbench.training.config import OptimizerConfig, ScheduleConfig, TrainConfig
from cvbench.training.determinism import enable_determinism
from cvbench.training.distributed import Distribution, get_distribution
from cvbench.training.epoch_loop import LoopState, TrainState, rank_source, run_epochs
from cvbench.training.evaluation import evaluate_over_ranks
from cvbench.training.export import adopt_inputs
from cvbench.training.inputs import check_array_targets
from cvbench.training.loop_callbacks import (
    Checkpointing,
    KerasCallbacks,
    ThroughputCallback,
    loop_callbacks,
)
from cvbench.training.optimizers import assemble_optimizer, check_optimizer_args
from cvbench.training.precision import (
    build_model_with_policy,
    check_model_policy,
    resolve_precision,
)
from cvbench.training.run_dir import RunDirectory, RunFolder
from cvbench.training.run_log import RunLog
from cvbench.training.signals import StopRequest
from cvbench.training.step_timing import benchmark_source, model_step, time_steps
from cvbench.training.throughput import ThroughputSummary
from cvbench.training.trainer_checkpoints import (
    _TrainerCheckpoints,
    holding_log_dir,
    in_distribution_scope,
)
from cvbench.training.training_model import TrainingModel
from cvbench.utils.model_file import ModelInfo


class Trainer(_TrainerCheckpoints):
    """Trains a Keras model with mixed precision, optionally data-parallel under Horovod.

    Example:
        >>> import numpy as np, keras
        >>> def build():
        ...     inputs = keras.Input((4,))
        ...     return keras.Model(inputs, keras.layers.Dense(3, dtype="float32")(inputs))
        >>> trainer = Trainer(build, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        ...                   schedule=0.1, precision="float32", distribution="single",
        ...                   config=TrainConfig(log_every=0, progress_bar=False, seed=0))
        >>> x, y = np.ones((8, 4), "float32"), np.zeros((8,), "int32")
        >>> history = trainer.fit((x, y), epochs=1, batch_size=4)  # doctest: +ELLIPSIS
        epoch 1: loss ...
        >>> trainer.state["step"]
        2

    Args:
        model: a `keras.Model`, or a function returning one; a function is called with the
            precision policy in force, so the layers get it (required for a mixed precision
            unless the model was already built under it).
        loss: `loss(y_true, y_pred) -> scalar` on whatever structures the data and model give.
        optimizer: an `OptimizerConfig` (default: momentum SGD, NVIDIA's ResNet-50 settings)
            or a ready `keras.optimizers.Optimizer` (then `schedule` must be None).
        schedule: the learning rate with an `OptimizerConfig`: a `ScheduleConfig` (default;
            base rate per 256 images, scaled by the global batch), a float, or a
            `keras.optimizers.schedules.LearningRateSchedule`.
        precision: "mixed_float16" / "fp16", "mixed_bfloat16" / "bf16", "float32" / "fp32",
            or "auto" (fp16 with a GPU, bf16 without).
        distribution: "auto" (Horovod under horovodrun/mpirun, else one process), "horovod",
            "single" or a `Distribution`.
        metrics: Keras metrics (names or instances) compiled for training and evaluation.
        config: the run settings (`TrainConfig`).
        model_info: what inference needs (`cvbench.utils.model_file.ModelInfo`), stored in
            the exported `model.keras`.
        export_transform: `trained model -> model for users` (a task's `user_model`);
            default `cvbench.utils.plain_keras.to_plain_keras`.

    Attributes:
        run_settings: what else a resume must agree on (JSON values), compared with the
            checkpoint's together with the optimizer and schedule: `prepare_run` sets the
            task's (model, image size, classes, label smoothing, recipe knobs); empty by
            default. Reading it adds the run's identity (`resume.run_identity`): the seed
            (`config.seed`), the class names of `model_info` and the Keras backend, which
            a resume compares too (records rebuilt with other class folders shift every
            label; another seed or backend is named in a warning).

    Raises:
        ValueError: for inconsistent settings (named in the message).
    """

    def __init__(
        self,
        model: keras.Model | Callable[[], keras.Model],
        loss: Callable,
        optimizer: OptimizerConfig | keras.optimizers.Optimizer | None = None,
        *,
        schedule: ScheduleConfig
        | float
        | keras.optimizers.schedules.LearningRateSchedule
        | None = None,
        precision: str = "auto",
        distribution: str | Distribution = "auto",
        metrics: Sequence[Any] = (),
        config: TrainConfig | None = None,
        model_info: ModelInfo | None = None,
        export_transform: Callable[[keras.Model], keras.Model] | None = None,
    ) -> None:
        self.config = config or TrainConfig()
        self.model_info = model_info
        self.export_transform = export_transform
        if self.config.deterministic:  # JAX: before get_distribution starts its backend
            enable_determinism(keras.config.backend())
        self.distribution = get_distribution(distribution)
        self.precision = resolve_precision(precision)
        if self.config.compression == "fp16" and self.precision != "mixed_float16":
            raise ValueError(
                "compression='fp16' needs precision mixed_float16 (dynamic loss scaling "
                f"catches the overflows it can cause), got precision {self.precision!r}"
            )
        self._optimizer_spec, self._schedule_spec = check_optimizer_args(optimizer, schedule)
        self._seed_everything()
        with self.distribution.scope():
            self.model = self._take_model(model)
            self.training_model = TrainingModel(self.model, loss)
        self.metrics = list(metrics)
        for metric in self.metrics:  # instances made before the Trainer hold variables
            self.distribution.adopt_variables(getattr(metric, "variables", ()))
        self.optimizer: keras.optimizers.Optimizer | None = None
        self._trained_variables: tuple = ()  # the trainable variables it was built for
        # Where training stands; checkpointed. `data_seed` orders array data (rank 0's seed).
        self.train_state = TrainState()
        # The last fit's throughput summary (None before, or with no step past the burn-in).
        self.throughput: ThroughputSummary | None = None
        # What else a resume must agree on (JSON values, e.g. the task's image size and
        # recipe knobs; set by the task layer): see `cvbench.training.resume`.
        self._run_settings: dict[str, Any] = {}
        # Events `fit` writes to the run log first, once the checkpoints allow the run (e.g.
        # the task layer's resolved recipe): `(event, fields)`.
        self.run_events: list[tuple[str, dict[str, Any]]] = []
        self.global_batch: int | None = None
        self._planned_steps: int | None = None  # epochs x steps of the fit that set up the run
        self._planned_epochs: int | None = None
        self._compiled = False
        self._synced = False
        self._run_dir: RunDirectory | None = None  # rank 0's lock on log_dir, once claimed
        # The position (step, epochs done) whose checkpoint is on disk: resumed from or
        # last written ((-1, -1): none).
        self._checkpointed = (-1, -1)

    # ----------------------------------------------------------------- properties
    @property
    def state(self) -> dict[str, Any]:
        """Where training stands, as a dict (a copy of `train_state`, the typed value the
        Trainer updates): `step`, `epoch`, `batch_in_epoch`, `consumed`, `data_seed`,
        `skipped_steps`, and the current epoch's `epoch_applied`, `epoch_skipped` and
        `epoch_sums` (a resume ends a part-done epoch with the means over all its steps)."""
        return self.train_state.to_dict()

    @state.setter
    def state(self, values: dict[str, Any]) -> None:
        self.train_state = TrainState.from_dict(values, self.train_state)

    @property
    def rank(self) -> int:
        """This process' rank (0 without Horovod)."""
        return self.distribution.rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self.distribution.size

    @property
    def is_chief(self) -> bool:
        """True on rank 0, which prints and writes files."""
        return self.distribution.is_chief

    @property
    def log_dir(self) -> Path | None:
        """The run directory, or None."""
        return Path(self.config.log_dir) if self.config.log_dir is not None else None

    @property
    def loss_scale(self) -> float | None:
        """The current loss scale (dynamic or static, mixed_float16), else None."""
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer) and self.optimizer.built:
            return float(keras.ops.convert_to_numpy(self.optimizer.dynamic_scale))
        return None

    @property
    def learning_rate(self) -> float | None:
        """The learning rate of the last applied step (of the next one before any)."""
        if self.optimizer is None:
            return None
        inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        return self.learning_rate_at(int(keras.ops.convert_to_numpy(inner.iterations)))

    def learning_rate_at(self, step: int) -> float | None:
        """The learning rate of the step that made `step` steps applied (the schedule at
        `step - 1`, at 0 for step 0; a constant rate at any step); None without an
        optimizer."""
        if self.optimizer is None:
            return None
        inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        rate = inner._learning_rate
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            return float(keras.ops.convert_to_numpy(rate(max(step - 1, 0))))
        return float(keras.ops.convert_to_numpy(inner.learning_rate))

    # ----------------------------------------------------------------- set-up
    def _take_model(self, model: keras.Model | Callable[[], keras.Model]) -> keras.Model:
        """`model` checked against the precision policy (variables laid out for the
        distribution), or built by the function `model` under it."""
        if isinstance(model, keras.Model):
            check_model_policy(model, self.precision)
            self.distribution.adopt_variables(model.variables)
            return model
        if callable(model):
            return build_model_with_policy(model, self.precision)
        raise ValueError(f"model must be a keras.Model or a function building one, got {model!r}")

    def _seed_everything(self) -> None:
        seed = self.config.seed
        if seed is None and self.config.deterministic:
            seed = 0
        if seed is not None:
            keras.utils.set_random_seed(seed)

    def _jit_compile(self) -> bool | str:
        # Horovod ranks run without XLA by default; JAX's one step over the global batch is jitted.
        horovod = self.size > 1 and not self.distribution.global_steps
        if horovod and self.config.jit_compile == "auto":
            return False
        return self.config.jit_compile

    def _compile(self, optimizer: keras.optimizers.Optimizer | str) -> None:
        # As weighted metrics, so that batches' sample weights (0 for padding rows) count.
        self.training_model.compile(
            optimizer=optimizer,
            weighted_metrics=list(self.metrics) or None,
            jit_compile=self._jit_compile(),
        )
        self._compiled = True

    @in_distribution_scope
    def compile_for_inference(self) -> None:
        """Compiles the model for evaluation or forward passes when nothing has yet (no
        optimizer is built: `fit` or `prepare` builds the real one later)."""
        if not self._compiled:
            self._compile("sgd")

    def _make_optimizer(self, *, global_batch: int, steps_per_epoch: int | None, epochs: int):
        return assemble_optimizer(
            self._optimizer_spec,
            self._schedule_spec,
            model=self.training_model,
            precision=self.precision,
            config=self.config,
            distribution=self.distribution,
            global_batch=global_batch,
            steps_per_epoch=steps_per_epoch,
            epochs=epochs,
        )

    def _check_ready_optimizer(self) -> None:
        """Raises `ValueError` naming a ready optimizer that was already built for variables
        that are not this model's (it cannot update them)."""
        optimizer = self._optimizer_spec
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            return
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        if not inner.built:
            return
        known = getattr(inner, "_trainable_variables_indices", {})
        variables = self.training_model.trainable_variables
        missing = [v.path for v in variables if inner._var_key(v) not in known]
        if missing:
            raise ValueError(
                f"the optimizer {optimizer.name!r} was already built for another model's "
                f"variables (not {missing[0]!r}): pass a new one, e.g. "
                f"{type(inner).__name__}(...) made again"
            )

    def _check_trainable_unchanged(self) -> None:
        """Raises `ValueError` when the model's trainable variables are no longer those the
        optimizer was built for (a layer's `trainable` set after the first `fit`): its slots
        and the traced step are for the old set, so the change would be ignored (TensorFlow)
        or fail inside the step (JAX)."""
        built = self._trained_variables
        now = tuple(self.training_model.trainable_variables)
        if len(built) == len(now) and all(a is b for a, b in zip(built, now, strict=True)):
            return
        built_ids, now_ids = {id(v) for v in built}, {id(v) for v in now}
        unfrozen = [v.path for v in now if id(v) not in built_ids]
        frozen = [v.path for v in built if id(v) not in now_ids]
        changes = []
        if unfrozen:
            changes.append(f"{_some(unfrozen)} made trainable")
        if frozen:
            changes.append(f"{_some(frozen)} made non-trainable")
        raise ValueError(
            f"the model's trainable variables changed since this Trainer built its optimizer "
            f"for {len(built)} of them: {'; '.join(changes) or 'their order changed'}. A "
            "Trainer keeps the trainable set of its first fit (its optimizer slots and train "
            "step are built for it): for a new stage (e.g. fine-tuning after training the "
            "head) make a new Trainer with the same model, whose first fit builds an "
            "optimizer for the new set (give it its own log_dir), or set the layers' "
            "trainable back"
        )

    @property
    def run_settings(self) -> dict[str, Any]:
        """What else a resume must agree on: the settings the task layer set, with the run's
        seed, class names and Keras backend (`resume.run_identity`)."""
        names = self.model_info.class_names if self.model_info is not None else None
        identity = resume.run_identity(
            seed=self.config.seed, class_names=names, keras_backend=keras.config.backend()
        )
        return {**self._run_settings, **identity}

    @run_settings.setter
    def run_settings(self, settings: dict[str, Any]) -> None:
        self._run_settings = dict(settings)

    @in_distribution_scope
    def prepare(self, *, global_batch: int, steps_per_epoch: int | None, epochs: int) -> None:
        """Sets the Trainer up for training without `fit` (what `fit` does first, and what the
        benchmarks call): builds the optimizer for `epochs` x `steps_per_epoch` steps of
        `global_batch` images (first call), restores a checkpoint or syncs the ranks
        (raising as `fit` does when the checkpoints refuse the resume)."""
        if self.optimizer is None:
            self.optimizer = self._make_optimizer(
                global_batch=global_batch, steps_per_epoch=steps_per_epoch, epochs=epochs
            )
            self._check_ready_optimizer()
            self._compile(self.optimizer)
            self.optimizer.build(self.training_model.trainable_variables)
            # The variables the optimizer (its slots) and the traced step are for.
            self._trained_variables = tuple(self.training_model.trainable_variables)
            # A ready optimizer made before the Trainer holds variables made outside the
            # distribution's scope (its iteration count and learning rate; its slots if it was
            # built): laid out as those made in it, or one jitted step cannot take them all.
            self.distribution.adopt_variables(self.optimizer.variables)
            self.global_batch = global_batch
            if steps_per_epoch is not None:
                self._planned_steps = epochs * steps_per_epoch
                self._planned_epochs = epochs
        else:
            self._check_trainable_unchanged()
            if global_batch != self.global_batch:
                raise ValueError(
                    f"this Trainer was set up for a global batch of {self.global_batch}, the "
                    f"data gives {global_batch}"
                )
        first = not self._synced
        self._resume_or_sync()
        if first and self.config.resume:
            # checkpoints, none valid: refused, not step 0 again
            resume.check_resumed(self.train_state.step, self.checkpoint_dir, self.distribution)

    # ----------------------------------------------------------------- fit
    @holding_log_dir
    @in_distribution_scope
    def fit(
        self,
        train_data: Any,
        *,
        epochs: int = 1,
        steps_per_epoch: int | None = None,
        batch_size: int | None = None,
        validation_data: Any = None,
        validation_steps: int | None = None,
        validation_batch_size: int | None = None,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        chief_callbacks: Sequence[keras.callbacks.Callback] = (),
        shuffle: bool = True,
    ) -> keras.callbacks.History:
        """Trains until `epochs` epochs are complete (continuing from `trainer.state`).

        Args:
            train_data: NumPy arrays `(x, y[, sample_weight])`, a re-iterable of batches
                (`tf.data.Dataset`, already sharded per rank) or a function `epoch -> batches`
                (see `cvbench.training.inputs`).
            epochs: train until this many epochs are done (a resumed run continues).
            steps_per_epoch: batches per epoch (required under Horovod unless the data is
                arrays or has a known length).
            batch_size: rows per rank and step for array data (for other data, only needed
                when it cannot be read from the dataset).
            validation_data: evaluated at each epoch end (see `evaluate`), or a function
                `() -> dict[str, float]` called there instead (every rank calls it; e.g. a
                task's evaluation). Its results enter the epoch logs as `val_<name>`.
            validation_steps: batches of validation data per evaluation (None: all;
                required for data that repeats forever, which is refused before epoch 1).
            validation_batch_size: batch size for array validation data.
            callbacks: Keras callbacks run on every rank (they see `trainer.training_model`).
            chief_callbacks: Keras callbacks run on rank 0 only (writers).
            shuffle: reshuffle array data every epoch (seeded).

        Returns:
            A `keras.callbacks.History` with the epoch logs (averaged over ranks).

        Raises:
            TrainingInterruptedError: a SIGTERM or SIGINT arrived: the step in progress was
                finished and checkpointed (rank 0); `resume=True` continues after it.
            ValueError: with `resume=True`, the newest valid checkpoint is of another plan
                (epochs, batch, model, class names, settings: named) and `force_resume` is
                not set.
            BadFileError: with `resume=True`, the run's checkpoints folder holds checkpoints
                and none of them is valid (named; remove them to start over).
        """
        if not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"epochs must be a positive int, got {epochs!r}")
        adopt_inputs(self, validation_data, train_data)
        source = self._prepared_source(
            train_data, epochs=epochs, batch_size=batch_size, steps_per_epoch=steps_per_epoch,
            shuffle=shuffle,
        )  # fmt: skip
        history = keras.callbacks.History()
        user = self._keras_callbacks(callbacks, chief_callbacks, history, epochs, source)
        validation = self._validation(validation_data, validation_steps, validation_batch_size)
        self._run_loop(source, epochs, user, validation)
        if self.config.export and self.log_dir is not None:
            self.export(RunFolder(self.log_dir).export)
        return history

    def _prepared_source(
        self,
        train_data: Any,
        *,
        epochs: int,
        batch_size: int | None,
        steps_per_epoch: int | None,
        shuffle: bool,
    ) -> Any:
        """This rank's batches of `train_data`, with the Trainer prepared for them
        (`prepare`: optimizer, resume or rank sync) and in the run's data order."""
        check_array_targets(train_data, self.training_model.loss_fn, self.model)
        source, per_rank = rank_source(
            self.train_state, self.distribution, train_data, seed=self.config.seed,
            batch_size=batch_size, steps_per_epoch=steps_per_epoch, shuffle=shuffle,
        )  # fmt: skip
        self.prepare(
            global_batch=per_rank * self.size, steps_per_epoch=source.steps_per_epoch, epochs=epochs
        )
        source.seed = self.train_state.data_seed  # a resume restores the run's data order
        return source

    def _keras_callbacks(
        self,
        callbacks: Sequence[keras.callbacks.Callback],
        chief_callbacks: Sequence[keras.callbacks.Callback],
        history: keras.callbacks.History,
        epochs: int,
        source: Any,
    ) -> KerasCallbacks:
        """The user's Keras callbacks (`chief_callbacks` on rank 0 only) and the `history`
        over the training model, as the loop calls them."""
        mine = [*callbacks, *(chief_callbacks if self.is_chief else ()), history]
        callback_list = keras.callbacks.CallbackList(mine, model=self.training_model)
        params = {"epochs": epochs, "steps": source.steps_per_epoch, "verbose": 0}
        callback_list.set_params(params)
        return KerasCallbacks(callback_list)

    def _validation(
        self, data: Any, steps: int | None, batch_size: int | None
    ) -> Callable[[], dict[str, float]] | None:
        """`fit`'s epoch-end evaluation: `data` itself when it is a function (e.g. a
        task's evaluation), else `evaluate` over it; None without `data`."""
        if data is None or callable(data):
            return data
        check_array_targets(data, self.training_model.loss_fn, self.model)  # before epoch 1
        _check_finite_evaluation(data, steps, "validation_steps")
        return functools.partial(self.evaluate, data, steps=steps, batch_size=batch_size)

    def _run_loop(
        self,
        source: Any,
        epochs: int,
        user: KerasCallbacks,
        validation: Callable[[], dict[str, float]] | None,
    ) -> None:
        """`fit`'s epochs: the loop over `source` with the run's callbacks (`user`'s among
        them), the run log open, SIGTERM / SIGINT turned into a checkpoint and a stop, a
        failure on another rank named."""
        log = RunLog(self.log_dir, enabled=self.is_chief, progress_bar=self.config.progress_bar)
        loop = LoopState(
            train=self.train_state,
            model=self.training_model,
            distribution=self.distribution,
            global_batch=self.global_batch,
            log_every=self.config.log_every,
            learning_rate=lambda: self.learning_rate,
            loss_scale=lambda: self.loss_scale,
        )
        checkpoints = Checkpointing(
            self.save_checkpoint,
            every=self.config.checkpoint_every,
            directory=self.checkpoint_dir,
            saved_step=self._checkpointed[0],  # not rewritten before a step or epoch end
            saved_epoch=self._checkpointed[1],
        )
        try:
            for event, fields in self.run_events:
                log.record(event, **fields)
            with StopRequest() as stop_request:  # SIGTERM / SIGINT: checkpoint, then stop
                callbacks = loop_callbacks(
                    log, checkpoints, user, precision=self.precision,
                    steps_per_epoch=source.steps_per_epoch,
                    burn_in=self.config.burn_in_steps, stop_request=stop_request,
                )  # fmt: skip
                run_epochs(loop, source, epochs, callbacks, validation)
        except Exception as e:
            failure = self.distribution.rank_failure(e)
            if failure is not None:
                raise failure from e
            raise
        finally:
            log.close()
            self._checkpointed = (checkpoints.saved_step, checkpoints.saved_epoch)
        self.throughput = next(c.summary for c in callbacks if isinstance(c, ThroughputCallback))

    # ----------------------------------------------------------------- evaluate
    @in_distribution_scope
    def evaluate(
        self, data: Any, *, steps: int | None = None, batch_size: int | None = None
    ) -> dict[str, float]:
        """Loss and metrics over `data` on every rank, summed over ranks before averaging.

        Metric states (totals and counts) are summed over ranks, so with each rank holding its
        own shard the results cover the whole set exactly once. Batches may carry a
        `sample_weight` (0 for padding rows), which the metrics and the loss honour (the loss
        is the mean over real examples, whatever the batch size).

        Args:
            data: NumPy arrays `(x, y[, sample_weight])` (split over ranks here, no row
                dropped) or a re-iterable of batches already sharded per rank.
            steps: batches to evaluate (None: all; required for data that repeats forever).
            batch_size: batch size for array data (default 32).

        Returns:
            `{"loss": ..., <metric name>: ...}` as floats, identical on every rank.

        Raises:
            ValueError: `steps` is None and `data` is known to repeat forever (a `tf.data`
                dataset of infinite cardinality, e.g. a training pipeline; an endless
                `len`), before any step.
        """
        check_array_targets(data, self.training_model.loss_fn, self.model)
        _check_finite_evaluation(data, steps, "steps")
        self.compile_for_inference()
        return evaluate_over_ranks(
            self.training_model, self.distribution, data, steps=steps, batch_size=batch_size
        )

    # ----------------------------------------------------------------- benchmark
    @in_distribution_scope
    def benchmark(
        self,
        data: Any,
        *,
        steps: int = 100,
        burn_in: int | None = None,
        batch_size: int | None = None,
        mode: str = "train",
    ) -> ThroughputSummary:
        """Measures images/s (all ranks) over `steps` steps after `burn_in` steps.

        Each step is timed on its own (a window of one step of `measure_throughput`, the
        timing `cvbench benchmark` runs with longer windows), so that every logged step gets
        NVIDIA's line. Training mode really trains (the weights change); nothing is
        checkpointed and `state` is left as it is. Before any `fit`, it sets up the optimizer
        with a schedule over the benchmark's steps, which a later `fit` would keep: benchmark
        a fresh Trainer, or one that has already been fitted.

        Args:
            data: as for `fit` (it must yield at least `burn_in + steps` batches).
            steps: measured steps.
            burn_in: unmeasured steps first (default `config.burn_in_steps`).
            batch_size: rows per rank for array data.
            mode: "train" (train steps) or "inference" (forward passes).

        Returns:
            The `ThroughputSummary`; rank 0 also prints it.
        """
        burn_in = self.config.burn_in_steps if burn_in is None else burn_in
        total = burn_in + steps if isinstance(steps, int) else steps
        source, per_rank = benchmark_source(
            data, mode=mode, steps=steps, total=total, batch_size=batch_size, rank=self.rank,
            size=self.size,
        )  # fmt: skip
        if mode == "train":
            self.prepare(global_batch=per_rank * self.size, steps_per_epoch=total, epochs=1)
        else:
            self.compile_for_inference()
        return time_steps(
            model_step(self.training_model, mode),
            source,
            total=total,
            burn_in=burn_in,
            ranks=self.size,
            log=RunLog(None, enabled=self.is_chief, progress_bar=False),
            log_every=self.config.log_every,
            learning_rate=(lambda: self.learning_rate) if mode == "train" else (lambda: None),
        )

    # ----------------------------------------------------------------- export
    def user_model(self) -> keras.Model:
        """The trained model as users get it: `export_transform(model)`, by default
        `to_plain_keras(model)` (built-in Keras layers only, float32, no regularizers); a
        model of layers it cannot convert is returned as it is, with a warning naming the
        layer (its file then needs those classes to load)."""
        from cvbench.training.export import user_model

        return user_model(self.model, self.export_transform)

    def export(self, directory: str | Path) -> dict[str, Path]:
        """Writes `model.keras` (`user_model()` with `model_info`, loadable by plain Keras),
        `model_info.json` beside it (class names and input rule, readable without cvbench)
        and, on TensorFlow, `keras_saved_model/`, Keras' own SavedModel of the same model
        (float32 pixels at the training size in, logits out; `cvbench export` writes the
        serving SavedModel) into `directory` (rank 0).

        Each is written under a temporary name and renamed into place.

        Returns:
            The written paths by kind ("keras", "info", "keras_saved_model"); empty on other
            ranks.

        """
        if not self.is_chief:
            return {}
        from cvbench.training.export import export_trained_model

        return export_trained_model(self.user_model(), Path(directory), info=self.model_info)


def _some(paths: list[str], shown: int = 3) -> str:
    """`"N variables (a, b, c and M more)"` for a list of variable paths."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    noun = "variable" if len(paths) == 1 else "variables"
    return f"{len(paths)} {noun} ({', '.join(paths[:shown])}{more})"


# `tf.data.INFINITE_CARDINALITY` (TensorFlow is not imported here).
_INFINITE_CARDINALITY = -1


def _check_finite_evaluation(data: Any, steps: int | None, steps_name: str) -> None:
    """Raises `ValueError` when `steps` is None and `data` is known to repeat forever: a
    `tf.data` dataset of infinite cardinality, or data whose `len` is `sys.maxsize` (grain's
    endless `repeat()`); evaluating it would never end."""
    if steps is not None:
        return
    if type(data).__module__.startswith("tensorflow") and hasattr(data, "cardinality"):
        endless = int(data.cardinality()) == _INFINITE_CARDINALITY
        what = "a tf.data dataset of infinite cardinality"
    else:
        try:
            endless = len(data) >= sys.maxsize
        except (TypeError, ValueError, OverflowError):
            endless = False
        what = f"a {type(data).__name__} of length sys.maxsize"
    if endless:
        raise ValueError(
            f"the evaluation data repeats forever ({what}, e.g. a training pipeline): "
            "evaluating it would never end; pass a finite dataset "
            f"(dataset.take(n), or the reader's evaluation pipeline, training=False) or "
            f"{steps_name}=N"
        )
