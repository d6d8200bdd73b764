"""A run killed or stopped near an epoch's end, then resumed, records what an uninterrupted
run records, each once: every step and epoch record (the epoch's loss is the mean over all its
steps, those before the stop included), each epoch's validation, each checkpoint; its weights
are bit-identical. `read_run_history` reads the log as the run's history: the records a
killed run made after its last checkpoint, made again by the resume, count once.

32 images at batch 4: 8 steps per epoch, 2 epochs, a step record per step. `checkpoint_every`
4 lands on the epoch's last step (8), 3 does not (3, 6, 9, ...: step 8 is checkpointed at
the epoch's end only). Backend-agnostic: nothing here imports TensorFlow."""

import os
import signal

import keras
import numpy as np
import pytest
from training_helpers import images, make_trainer

from cvbench.training import checkpoint as ckpt
from cvbench.training.run_log import read_run_history, read_run_log
from cvbench.training.signals import TrainingInterruptedError

pytestmark = pytest.mark.backend_agnostic

STEPS, EPOCHS, BATCH = 8, 2, 4


class KilledError(Exception):
    """What a SIGKILL right after a step's checkpoint leaves: the process gone, nothing more
    written (user callbacks come after the checkpoint of the step)."""


class At(keras.callbacks.Callback):
    """Calls `action` after the `step`-th step of the fit (1-based)."""

    def __init__(self, step, action):
        super().__init__()
        self.step, self.action, self.done = step, action, 0

    def on_train_batch_end(self, batch, logs=None):
        self.done += 1
        if self.done == self.step:
            self.action()


def kill():
    raise KilledError


def sigterm():
    os.kill(os.getpid(), signal.SIGTERM)


def train(log_dir, every, validations, *, resume=False, callbacks=()):
    trainer = make_trainer(
        log_dir, checkpoint_every=every, log_every=1, resume=resume, keep_checkpoints=20
    )

    def validation():
        validations.append(trainer.state["step"])
        return {"calls": 0.0}  # constant: the records compare equal

    trainer.fit(
        images(32), epochs=EPOCHS, batch_size=BATCH, validation_data=validation,
        callbacks=list(callbacks),
    )  # fmt: skip
    return trainer


def records(log_dir):
    """The step and epoch records of the run's history: `(event, step, epoch, loss, ...)`
    (the time and images/s differ between runs)."""
    keys = ("step", "epoch", "loss", "skipped", "skipped_steps", "val_calls", "lr")
    return [
        (e["event"], *(e.get(k) for k in keys))
        for e in read_run_history(log_dir / "train_log.jsonl")
        if e["event"] in ("step", "epoch")
    ]


def checkpoint_states(folder):
    return {
        p.name: {k: ckpt.load_checkpoint(p)[0]["state"][k] for k in ("step", "epoch")}
        for p in sorted(folder.iterdir())
    }


@pytest.mark.parametrize("every", [4, 3])
@pytest.mark.parametrize(
    "stop_at, action, error",
    [
        (8, sigterm, TrainingInterruptedError),  # stopped at the epoch's last step
        (8, kill, KilledError),  # killed right after the last step (and its checkpoint, every 4)
        (10, kill, KilledError),  # killed in the next epoch, after the epoch's checkpoint
    ],
)
def test_a_killed_or_stopped_run_resumed_records_each_epoch_once(
    tmp_path, every, stop_at, action, error
):
    full_validations, validations = [], []
    full = train(tmp_path / "full", every, full_validations)
    with pytest.raises(error):
        train(tmp_path / "cut", every, validations, callbacks=[At(stop_at, action)])
    resumed = train(tmp_path / "cut", every, validations, resume=True)

    assert full_validations == [STEPS, 2 * STEPS]  # each epoch's end, once
    assert sorted(validations) == full_validations
    expected = records(tmp_path / "full")
    assert len([r for r in expected if r[0] == "epoch"]) == EPOCHS
    assert records(tmp_path / "cut") == expected
    # The epoch's loss: the mean of its 8 steps' losses, those before the stop included.
    losses = [r[3] for r in expected if r[0] == "step"]
    epoch_losses = [r[3] for r in expected if r[0] == "epoch"]
    np.testing.assert_allclose(epoch_losses, [np.mean(losses[:8]), np.mean(losses[8:])])
    for a, b in zip(full.model.variables, resumed.model.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # The same checkpoints, each recording its epochs done (8: the first epoch is done).
    folder = "checkpoints"
    assert checkpoint_states(tmp_path / "cut" / folder) == checkpoint_states(
        tmp_path / "full" / folder
    )
    assert checkpoint_states(tmp_path / "full" / folder)[ckpt.checkpoint_name(STEPS)] == {
        "step": STEPS,
        "epoch": 1,
    }


def test_the_raw_log_of_a_stop_at_the_epochs_last_step_holds_each_epoch_record_once(tmp_path):
    """Stopped after step 8, no record was replayed: the raw log itself holds epoch 1's
    record once, written by the resume."""
    validations = []
    with pytest.raises(TrainingInterruptedError):
        train(tmp_path, 4, validations, callbacks=[At(8, sigterm)])
    train(tmp_path, 4, validations, resume=True)
    events = read_run_log(tmp_path / "train_log.jsonl")
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
    assert [e["step"] for e in events if e["event"] == "step"] == list(range(1, 17))
    assert validations == [8, 16]


def test_a_resume_at_another_global_batch_drops_the_epochs_checkpointed_sums(tmp_path):
    """The sums of the steps before the checkpoint are of batches of 4: resumed (forced) at
    batch 8 the epoch's counts start again; at the same batch they are the checkpoint's."""
    with pytest.raises(KilledError):
        make_trainer(tmp_path, checkpoint_every=2).fit(
            images(32), epochs=1, batch_size=4, callbacks=[At(2, kill)]
        )
    same = make_trainer(tmp_path, resume=True)
    same.prepare(global_batch=4, steps_per_epoch=8, epochs=1)
    assert (same.state["batch_in_epoch"], same.state["epoch_applied"]) == (2, 2)
    assert list(same.state["epoch_sums"]) == ["loss"]
    other = make_trainer(tmp_path, resume=True, force_resume=True)
    other.prepare(global_batch=8, steps_per_epoch=4, epochs=1)
    assert other.state["step"] == 2  # forced: the step counters as checkpointed
    assert (other.state["epoch_applied"], other.state["epoch_skipped"]) == (0, 0)
    assert other.state["epoch_sums"] == {}


def test_read_run_history_drops_what_a_resume_made_again():
    # Killed after step 3 and the record of epoch 1 (steps 1-2), before the epoch end's
    # checkpoint: resumed from step 1 with no epoch done, so steps 2-3 and epoch 1's record
    # were made again. A resume from step 2 with epoch 1 done keeps epoch 1's record.
    from cvbench.training.run_log import superseded_records_dropped

    def step(n):
        return {"event": "step", "step": n}

    epoch1 = {"event": "epoch", "epoch": 1, "step": 2}
    start = {"event": "start", "resumed_step": 0, "resumed_epoch": 0}
    events = [start, step(1), step(2), epoch1, step(3)]
    again = {"event": "start", "resumed_step": 1, "resumed_epoch": 0}
    assert superseded_records_dropped([*events, again]) == [start, step(1), again]
    done = {"event": "start", "resumed_step": 2, "resumed_epoch": 1}
    assert superseded_records_dropped([*events, done]) == [start, step(1), step(2), epoch1, done]
    # An epoch record at the resumed step whose epoch the checkpoint records not done.
    not_done = {"event": "start", "resumed_step": 2, "resumed_epoch": 0}
    assert superseded_records_dropped([*events, not_done]) == [start, step(1), step(2), not_done]
    # An older log's start without the fields: nothing dropped.
    older = {"event": "start"}
    assert superseded_records_dropped([*events, older]) == [*events, older]


@pytest.mark.parametrize("every", [4, 8])
def test_a_kill_during_the_epochs_validation_loses_no_step(tmp_path, every):
    """The every-N checkpoint of an epoch's last step is written before the epoch's
    validation: a kill during the validation resumes from that step, ends the epoch once
    and equals the uninterrupted run (the review's finding: written after the validation,
    the kill lost the epoch's steps: no checkpoint at all with every 8)."""
    full = train(tmp_path / "full", every, [])
    cut = make_trainer(tmp_path / "cut", checkpoint_every=every, log_every=1, keep_checkpoints=20)

    def killed_validation():
        raise KilledError

    with pytest.raises(KilledError):
        cut.fit(images(32), epochs=EPOCHS, batch_size=BATCH, validation_data=killed_validation)
    left = checkpoint_states(tmp_path / "cut" / "checkpoints")
    assert left[ckpt.checkpoint_name(STEPS)] == {"step": STEPS, "epoch": 0}  # steps, no end
    validations = []
    resumed = train(tmp_path / "cut", every, validations, resume=True)
    assert validations == [STEPS, 2 * STEPS]
    assert records(tmp_path / "cut") == records(tmp_path / "full")
    for a, b in zip(full.model.variables, resumed.model.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert checkpoint_states(tmp_path / "cut" / "checkpoints") == checkpoint_states(
        tmp_path / "full" / "checkpoints"
    )
