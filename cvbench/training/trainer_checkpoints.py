"""The run folder and checkpoint side of the `Trainer`: the lock on `log_dir`, checkpoints,
and the resume from the newest valid one.

`_TrainerCheckpoints` is a base class of `cvbench.training.Trainer`, which sets the
attributes its methods read (`config`, `distribution`, `model`, `optimizer`, `state`, the
run's plan) and calls them: `prepare` resumes or syncs the ranks (`_resume_or_sync`), the
epoch loop saves (`save_checkpoint`) and `fit` holds the run folder (`holding_log_dir`);
`in_distribution_scope` runs the Trainer's methods in its distribution's scope.
Users call these methods on the Trainer, and the API reference lists them there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cvbench.training import checkpoint as ckpt
from cvbench.training import resume
from cvbench.training.epoch_loop import RANK_SUMS, TrainState, gather_epoch_sums
from cvbench.training.run_dir import RunDirectory, RunFolder
from cvbench.utils.errors import BadFileError

#: The checkpoints' folder in the run folder (`RunFolder.CHECKPOINTS`).
CHECKPOINT_SUBDIR = RunFolder.CHECKPOINTS


def holding_log_dir(fit: Callable) -> Callable:
    """`fit` with the run directory claimed first (`Trainer.claim_log_dir`) and let go at
    the end, also after an error."""

    @functools.wraps(fit)
    def run(trainer: _TrainerCheckpoints, *args: Any, **kwargs: Any) -> Any:
        trainer.claim_log_dir()
        try:
            return fit(trainer, *args, **kwargs)
        finally:
            trainer.release_log_dir()

    return run


def in_distribution_scope(method: Callable) -> Callable:
    """A Trainer method run inside its distribution's scope (JAX `keras.distribution`:
    variables made there are replicated, steps take this process' slice of the batch)."""

    @functools.wraps(method)
    def run(trainer: _TrainerCheckpoints, *args: Any, **kwargs: Any) -> Any:
        with trainer.distribution.scope():
            return method(trainer, *args, **kwargs)

    return run


class _TrainerCheckpoints:
    """The `Trainer`'s checkpoints and run folder (see the module docstring); not used alone."""

    # ----------------------------------------------------------------- checkpoints
    @property
    def checkpoint_dir(self) -> Path | None:
        """Where checkpoints are written (`log_dir/checkpoints`), or None."""
        return RunFolder(self.log_dir).checkpoints if self.log_dir is not None else None

    def _checkpoints(self) -> ckpt.CheckpointManager:
        return ckpt.CheckpointManager(self.checkpoint_dir, keep=self.config.keep_checkpoints)

    def save_checkpoint(self) -> Path | None:
        """Writes a checkpoint of the current state and the run's plan (rank 0; others
        return None). Every rank calls it at the same step: under Horovod the checkpoint
        holds every rank's sums of the epoch's steps (`epoch_loop.gather_epoch_sums`, a
        collective), so that each rank resumes from its own.

        Raises:
            CheckpointWriteError: the disk is full; the message names the previous checkpoint,
                which is left intact for a rerun with `resume=True`.
        """
        if self.checkpoint_dir is None or self.optimizer is None:
            return None
        every_rank = gather_epoch_sums(self.distribution, self.train_state)
        if not self.is_chief:
            return None
        state = dict(self.train_state.to_dict(), **self._plan())
        if every_rank is not None:
            state[RANK_SUMS] = every_rank
        return self._checkpoints().save(
            self.train_state.step,
            model_variables=self.model.variables,
            optimizer_variables=self.optimizer.variables,
            state=state,
        )

    def load_weights(self, path: str | Path) -> dict:
        """Loads the model variables (not the optimizer) from a checkpoint file.

        Every rank reads the file, so it must be visible to all of them.

        Returns:
            The trainer state stored in the checkpoint.

        Raises:
            BadFileError: (a `ValueError`) when the file is not a valid checkpoint (not a
                regular file, damaged, crafted: `load_checkpoint`), naming it.
            ValueError: when the file is a checkpoint of another model.
        """
        meta, arrays = ckpt.load_checkpoint(path)
        ckpt.restore_variables(meta, arrays, model_variables=self.model.variables)
        return dict(meta["state"])

    def _plan(self) -> dict[str, Any]:
        """What a resume must agree on, as stored in each checkpoint's state."""
        return resume.run_plan(
            global_batch=self.global_batch,
            precision=self.precision,
            planned_steps=self._planned_steps,
            epochs=self._planned_epochs,
            model_name=self.model.name,
            optimizer=self._optimizer_spec,
            schedule=self._schedule_spec,
            settings=self.run_settings,
            ranks=self.size,
        )

    def _resume_or_sync(self) -> None:
        """Once per Trainer (`prepare`, after the optimizer is built): restores the newest
        valid checkpoint (`config.resume`) and broadcasts rank 0's variables to every rank."""
        if self._synced:
            return
        restored = self._restore_latest() if self.config.resume else None
        if restored is not None:
            self.train_state = TrainState.from_dict(
                restored, self.train_state, rank=self.rank, ranks=self.size
            )
            if restored.get("global_batch") != self.global_batch:  # another number of ranks
                self.train_state.clear_epoch()  # its sums were of other batches
            state = self.train_state
            self._checkpointed = (state.step, state.epoch)  # not rewritten before a step
        self.distribution.broadcast_variables(self._all_variables())
        self._synced = True

    def _all_variables(self) -> list:
        return list(self.model.variables) + list(self.optimizer.variables)

    def _resume_target(self) -> resume.ResumeTarget:
        return resume.ResumeTarget(
            plan=self._plan(),
            model_variables=self.model.variables,
            optimizer=self.optimizer,
            force_resume=self.config.force_resume,
            is_chief=self.is_chief,
            run_events=self.run_events,
        )

    def _restore_latest(self) -> dict | None:
        """Rank 0 loads the newest valid checkpoint, refusing one written for another plan
        (epochs, steps per epoch, global batch, precision, model) unless
        `config.force_resume`; every rank gets its trainer state, or the same refusal. A
        checkpoint of the same run on another number of ranks is resumed with its step
        counters converted to the new global batch (`resume.world_size_change`).

        Raises:
            BadFileError: (a `ValueError`) naming the checkpoint and a field of its state of
                the wrong type or range (`resume.check_state`); nothing is restored.
            ValueError: naming the checkpoint and what differs.
        """
        state = found = None
        if self.is_chief:
            manager = self._checkpoints()
            manager.remove_temporaries()
            found = manager.latest()
        if self.distribution.global_steps and self.size > 1:
            # Variables are global arrays: every process must take part in assigning them,
            # so every process restores rank 0's checkpoint (sent to it), not rank 0 alone.
            found = self.distribution.broadcast_object(found)
            if found is not None:
                state = resume.restore_checked(self._resume_target(), *found)
        elif found is not None:
            state = resume.restore_checked(self._resume_target(), *found)
        state = self.distribution.broadcast_object(state)
        if state is not None and "bad_file" in state:
            raise BadFileError(state["bad_file"])
        if state is not None and "refused" in state:
            raise ValueError(state["refused"])
        return state

    # ----------------------------------------------------------------- run directory
    def claim_log_dir(self) -> None:
        """Takes `log_dir` for this Trainer's run (`fit` does it first; every rank calls it):
        rank 0 locks it for as long as the run writes there, and refuses a fresh run
        (`config.resume` False) into a folder that holds another run's checkpoints,
        `train_log.jsonl` or `export/`. Later calls (a second `fit`) continue the same run.

        Raises:
            ValueError: a fresh run into a folder holding a run (resume it, or use another).
            RunDirInUseError: another training run holds the folder (an `OSError`).
            OSError: the folder cannot be written (read-only, a file in its place, ...).
        """
        if self.log_dir is None:
            return
        run_dir = self._run_dir or RunDirectory(self.log_dir)
        run_dir.claim(self.distribution, fresh=self._run_dir is None and not self.config.resume)
        self._run_dir = run_dir

    def release_log_dir(self) -> None:
        """Lets rank 0's lock on `log_dir` go (the end of `fit` does it)."""
        if self._run_dir is not None:
            self._run_dir.release()
