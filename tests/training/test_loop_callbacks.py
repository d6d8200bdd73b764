"""The Trainer's loop as a step and callbacks (`cvbench.training.epoch_loop`,
`cvbench.training.loop_callbacks`), and the typed state it updates, on tiny fakes: hooks
in order, skipped steps out of the epoch means, early stop, checkpoints once per step, the
stop signal, the throughput burn-in, the user's Keras callbacks; `RunFolder`, the run
folder's layout."""

from __future__ import annotations

import math
import signal

import keras
import numpy as np
import pytest

from cvbench.tasks.runner import epoch_history
from cvbench.training import TrainConfig, Trainer, TrainingInterruptedError
from cvbench.training.distributed import get_distribution
from cvbench.training.epoch_loop import LoopCallback, LoopState, TrainState, run_epochs
from cvbench.training.inputs import BatchSource
from cvbench.training.loop_callbacks import (
    Checkpointing,
    KerasCallbacks,
    StopOnSignal,
    ThroughputCallback,
)
from cvbench.training.run_dir import RUN_ENTRIES, RunFolder, existing_run
from cvbench.training.run_log import LOG_NAME, RunLog
from cvbench.training.trainer_checkpoints import CHECKPOINT_SUBDIR

pytestmark = pytest.mark.backend_agnostic


class FakeModel:
    """`train_on_batch` returning the next of `losses` (None: a skipped step, loss NaN)."""

    def __init__(self, losses, stop_after=None):
        self.losses, self.stop_after, self.stop_training, self.calls = (
            list(losses),
            stop_after,
            False,
            0,
        )

    def train_on_batch(self, x, y, sample_weight=None, return_dict=True):
        loss = self.losses[self.calls]
        self.calls += 1
        if self.stop_after == self.calls:
            self.stop_training = True
        if loss is None:
            return {"loss": math.nan, "skipped": 1.0}
        return {"loss": loss, "skipped": 0.0}


class ListSource(BatchSource):
    """`steps_per_epoch` batches of 2 rows per epoch."""

    def __init__(self, steps_per_epoch):
        self.steps_per_epoch, self.batch_size = steps_per_epoch, 2

    def epoch(self, epoch, start, consumed):
        for _ in range(start, self.steps_per_epoch):
            yield np.zeros((2, 1), "float32"), None, None


class Recorder(LoopCallback):
    def __init__(self):
        self.calls = []

    def __getattribute__(self, name):
        if name.startswith("on_"):
            return lambda loop: self.calls.append((name, loop.epoch, loop.train.step))
        return super().__getattribute__(name)


def loop_of(model, **kwargs):
    return LoopState(
        train=TrainState(), model=model, distribution=get_distribution("single"), global_batch=2,
        **kwargs,
    )  # fmt: skip


def test_hooks_are_called_in_order_around_each_step_and_epoch():
    recorder = Recorder()
    loop = loop_of(FakeModel([1.0] * 4))
    run_epochs(loop, ListSource(2), 2, [recorder])
    assert recorder.calls == [
        ("on_train_begin", 0, 0),
        ("on_epoch_begin", 0, 0),
        ("on_train_batch_begin", 0, 0),
        ("on_train_batch_end", 0, 1),
        ("on_train_batch_begin", 0, 1),
        ("on_train_batch_end", 0, 2),
        ("on_steps_end", 0, 2),
        ("on_epoch_end", 0, 2),
        ("on_epoch_begin", 1, 2),
        ("on_train_batch_begin", 1, 2),
        ("on_train_batch_end", 1, 3),
        ("on_train_batch_begin", 1, 3),
        ("on_train_batch_end", 1, 4),
        ("on_steps_end", 1, 4),
        ("on_epoch_end", 1, 4),
        ("on_train_end", 1, 4),
    ]
    assert loop.train.to_dict() == {
        "step": 4, "epoch": 2, "batch_in_epoch": 0, "consumed": 4, "data_seed": -1,
        "skipped_steps": 0, "epoch_applied": 2, "epoch_skipped": 0, "epoch_sums": {"loss": 2.0},
    }  # fmt: skip


def test_skipped_steps_are_counted_and_left_out_of_the_epoch_means():
    seen = []

    class Epochs(LoopCallback):
        def on_epoch_end(self, loop):
            seen.append((dict(loop.epoch_logs), loop.applied, loop.skipped))

    # Epoch 1: losses 1, skipped, 3: mean over the 2 applied steps = (1 + 3) / 2 = 2.0.
    # Epoch 2: every step skipped: NaN, none applied.
    loop = loop_of(FakeModel([1.0, None, 3.0, None, None, None]))
    run_epochs(loop, ListSource(3), 2, [Epochs()])
    assert seen[0] == ({"loss": 2.0}, 2, 1)
    assert math.isnan(seen[1][0]["loss"]) and seen[1][1:] == (0, 3)
    assert loop.train.skipped_steps == 4 and loop.train.step == 6


def test_one_process_stops_after_the_step_that_asked_and_keeps_the_epoch_open():
    recorder = Recorder()
    loop = loop_of(FakeModel([1.0] * 6, stop_after=2))
    run_epochs(loop, ListSource(3), 2, [recorder])
    assert [c[0] for c in recorder.calls].count("on_train_batch_end") == 2
    # Stopped mid-epoch: the epoch is not done, a resume continues at its third batch.
    assert (loop.train.step, loop.train.epoch, loop.train.batch_in_epoch) == (2, 0, 2)
    assert recorder.calls[-1] == ("on_train_end", 0, 2)


def test_the_epoch_logs_carry_the_validation_results():
    seen = []

    class Epochs(LoopCallback):
        def on_epoch_end(self, loop):
            seen.append(dict(loop.epoch_logs))

    run_epochs(loop_of(FakeModel([2.0, 4.0])), ListSource(2), 1, [Epochs()], lambda: {"top1": 0.5})
    assert seen == [{"loss": 3.0, "val_top1": 0.5}]  # (2 + 4) / 2


def test_log_steps_get_a_report_averaged_over_ranks_others_none():
    reports = []

    class Reports(LoopCallback):
        def on_train_batch_end(self, loop):
            reports.append(None if loop.report is None else (loop.report.step, loop.report.means))

    loop = loop_of(FakeModel([1.0, 2.0, 3.0, 4.0]), log_every=2, learning_rate=lambda: 0.1)
    run_epochs(loop, ListSource(4), 1, [Reports()])
    assert reports == [None, (2, {"loss": 2.0}), None, (4, {"loss": 4.0})]


def test_checkpoints_every_n_steps_and_once_at_each_epoch_end():
    saved = []
    loop = loop_of(FakeModel([1.0] * 6))
    checkpoints = Checkpointing(lambda: saved.append(loop.train.step), every=2, directory=None)
    run_epochs(loop, ListSource(3), 2, [checkpoints])
    # every=2: steps 2, 4, 6; the epoch ends at steps 3 (not saved yet) and 6 (saved at the
    # step, before the epoch's validation, then again at its end, recording it done).
    assert saved == [2, 3, 4, 6, 6]


def test_the_every_n_checkpoint_of_an_epochs_last_step_records_the_epoch_done():
    states = []
    loop = loop_of(FakeModel([1.0] * 4))
    save = lambda: states.append((loop.train.step, loop.train.epoch))  # noqa: E731
    run_epochs(loop, ListSource(2), 2, [Checkpointing(save, every=2, directory=None)])
    # Steps 2 and 4 end epochs 1 and 2: each saved at the step (its epoch's steps done, not
    # its end: a kill in the validation loses no step), then at the end, recording it done.
    assert states == [(2, 0), (2, 1), (4, 1), (4, 2)]


def test_an_epoch_resumed_part_way_ends_with_the_means_over_all_its_steps():
    seen = []

    class Epochs(LoopCallback):
        def on_epoch_end(self, loop):
            seen.append((dict(loop.epoch_logs), loop.applied, loop.skipped))

    # Resumed after 2 of 4 steps: one applied (loss 1) and one skipped, from the checkpoint;
    # then losses 3 and 5: the mean over the 3 applied steps is (1 + 3 + 5) / 3 = 3.0.
    loop = loop_of(FakeModel([3.0, 5.0]))
    loop.train = TrainState(
        step=2, batch_in_epoch=2, consumed=2, epoch_applied=1, epoch_skipped=1,
        epoch_sums={"loss": 1.0},
    )  # fmt: skip
    run_epochs(loop, ListSource(4), 1, [Epochs()])
    assert seen == [({"loss": 3.0}, 3, 1)]


def test_a_stop_after_an_epochs_last_step_leaves_its_end_to_the_resume(tmp_path):
    """Stopped after the last step, before the epoch's end: the checkpoint records the steps
    done, not the end; the resume does the end once (its record, validation, checkpoint)."""

    class Request:
        signum = None

    request, saved, ends, validations = Request(), [], [], []
    loop = loop_of(FakeModel([2.0, 4.0]))
    running = [loop]  # the loop whose state `save` writes

    def save():
        saved.append(running[0].train.to_dict())

    class SignalAtStep2(LoopCallback):
        def on_train_batch_end(self, loop):
            request.signum = signal.SIGTERM if loop.train.step == 2 else None

    class Ends(LoopCallback):
        def on_epoch_end(self, loop):
            ends.append(dict(loop.epoch_logs))

    def validation():
        validations.append(running[0].train.step)
        return {"top1": 0.5}

    log = RunLog(tmp_path, enabled=True, progress_bar=False, tensorboard=False)
    checkpoints = Checkpointing(save, every=2, directory=tmp_path)
    stop = StopOnSignal(request, log, checkpoints)
    callbacks = [Ends(), checkpoints, SignalAtStep2(), stop]
    with pytest.raises(TrainingInterruptedError):
        run_epochs(loop, ListSource(2), 1, callbacks, validation)
    log.close()
    assert [(s["step"], s["epoch"], s["batch_in_epoch"]) for s in saved] == [(2, 0, 2)]
    assert ends == [] and validations == []

    resumed = loop_of(FakeModel([]))
    resumed.train = TrainState.from_dict(saved[0])
    running[0] = resumed
    checkpoints = Checkpointing(save, every=2, directory=tmp_path, saved_step=2, saved_epoch=0)
    run_epochs(resumed, ListSource(2), 1, [Ends(), checkpoints], validation)
    assert ends == [{"loss": 3.0, "val_top1": 0.5}]  # (2 + 4) / 2, from the checkpoint
    assert validations == [2]
    assert [(s["step"], s["epoch"]) for s in saved[1:]] == [(2, 1)]  # rewritten as done


def test_a_stop_signal_checkpoints_the_step_and_raises_naming_its_checkpoint(tmp_path):
    class Request:
        signum = None

    request, saved = Request(), []
    loop = loop_of(FakeModel([1.0] * 4))
    checkpoints = Checkpointing(lambda: saved.append(loop.train.step), every=0, directory=tmp_path)

    class SignalAtStep2(LoopCallback):
        def on_train_batch_end(self, loop):
            if loop.train.step == 2:
                request.signum = signal.SIGTERM

    log = RunLog(tmp_path, enabled=True, progress_bar=False, tensorboard=False)
    stop = StopOnSignal(request, log, checkpoints)
    with pytest.raises(TrainingInterruptedError) as e:
        run_epochs(loop, ListSource(4), 1, [checkpoints, SignalAtStep2(), stop])
    log.close()
    assert saved == [2] and (e.value.step, e.value.signum) == (2, signal.SIGTERM)
    assert e.value.checkpoint == str(tmp_path / "ckpt-0000000002.npz")
    assert '"event": "interrupted"' in (tmp_path / LOG_NAME).read_text()


def test_throughput_leaves_the_burn_in_steps_out_of_the_summary():
    loop = loop_of(FakeModel([]))
    meter = ThroughputCallback(RunLog(None, enabled=False, progress_bar=False), burn_in=1)
    meter.on_train_begin(loop)
    # 2 images a step: 0.5 s -> 4 img/s (burn-in, left out), 0.25 s -> 8, 0.1 s -> 20.
    for seconds in (0.5, 0.25, 0.1):
        loop.step_seconds, loop.images = seconds, 2
        meter.on_train_batch_end(loop)
    meter.on_train_end(loop)
    assert meter.summary.steps == 2 and meter.summary.mean == pytest.approx(14.0)  # (8+20)/2


def test_the_user_keras_callbacks_get_batch_indices_within_the_epoch():
    seen = []

    class Spy(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(("batch", batch, logs["loss"]))

        def on_epoch_end(self, epoch, logs=None):
            seen.append(("epoch", epoch, logs["loss"]))

        def on_train_end(self, logs=None):
            seen.append(("end", logs["loss"]))

    user = KerasCallbacks(keras.callbacks.CallbackList([Spy()]))
    run_epochs(loop_of(FakeModel([1.0, 3.0, 5.0, 7.0])), ListSource(2), 2, [user])
    assert seen == [
        ("batch", 0, 1.0), ("batch", 1, 3.0), ("epoch", 0, 2.0),
        ("batch", 0, 5.0), ("batch", 1, 7.0), ("epoch", 1, 6.0), ("end", 6.0),
    ]  # fmt: skip


# ----------------------------------------------------------------------- typed state
def test_train_state_round_trips_through_a_checkpoint_dict():
    state = TrainState(step=5, epoch=1, batch_in_epoch=1, consumed=5, data_seed=3)
    assert TrainState.from_dict(state.to_dict()).to_dict() == state.to_dict()
    # A checkpoint of an older version lacks skipped_steps: the current value stays.
    restored = TrainState.from_dict({"step": 7, "epoch": 2}, TrainState(skipped_steps=4))
    assert restored.to_dict() == {
        "step": 7, "epoch": 2, "batch_in_epoch": 0, "consumed": 0, "data_seed": -1,
        "skipped_steps": 4, "epoch_applied": 0, "epoch_skipped": 0, "epoch_sums": {},
    }  # fmt: skip
    # The epoch's sums round-trip as floats, the counters as ints.
    state = TrainState(batch_in_epoch=2, epoch_applied=2, epoch_sums={"loss": 0.1 + 0.2})
    assert TrainState.from_dict(state.to_dict()).to_dict() == state.to_dict()


QUIET = {"log_every": 0, "progress_bar": False, "seed": 0, "export": False}


def tiny_trainer(**config):
    def build():
        inputs = keras.Input((4,))
        return keras.Model(inputs, keras.layers.Dense(3, dtype="float32")(inputs))

    return Trainer(
        build, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        schedule=keras.optimizers.schedules.PolynomialDecay(0.4, 4, 0.0),
        precision="float32", distribution="single",
        config=TrainConfig(**{**QUIET, **config}),
    )  # fmt: skip


def test_trainer_state_is_a_dict_of_the_typed_state_and_sets_it():
    trainer = tiny_trainer()
    x, y = np.ones((8, 4), "float32"), np.zeros((8,), "int32")
    trainer.fit((x, y), epochs=1, batch_size=4)
    assert trainer.state | {"epoch_sums": None} == {
        "step": 2, "epoch": 1, "batch_in_epoch": 0, "consumed": 2, "data_seed": 0,
        "skipped_steps": 0, "epoch_applied": 2, "epoch_skipped": 0, "epoch_sums": None,
    }  # fmt: skip
    assert trainer.train_state.step == 2
    copy = trainer.state
    copy["step"] = 99  # a copy: the run is not changed
    assert trainer.train_state.step == 2
    trainer.state = {"step": 5}
    assert trainer.train_state.step == 5 and trainer.train_state.epoch == 1


def test_learning_rate_at_reads_the_schedule_of_the_step_that_made_step_steps():
    trainer = tiny_trainer()
    assert trainer.learning_rate_at(3) is None  # no optimizer yet
    x, y = np.ones((8, 4), "float32"), np.zeros((8,), "int32")
    trainer.fit((x, y), epochs=1, batch_size=4)
    # PolynomialDecay(0.4, 4 steps, 0.0), linear: 0.4 x (1 - s / 4) at schedule step s.
    # Step 2 was made at s = 1: 0.3; step 0 reads s = 0: 0.4.
    assert trainer.learning_rate_at(2) == pytest.approx(0.3)
    assert trainer.learning_rate_at(0) == pytest.approx(0.4)
    assert trainer.learning_rate == trainer.learning_rate_at(2)
    events = [{"event": "epoch", "epoch": 1, "step": 2, "loss": 1.0}]
    history = epoch_history(events, trainer.learning_rate_at)
    assert history["learning_rate"] == [pytest.approx(0.3)]


def test_the_fit_writes_where_run_folder_says(tmp_path):
    trainer = tiny_trainer(log_dir=str(tmp_path / "run"), export=True)
    x, y = np.ones((8, 4), "float32"), np.zeros((8,), "int32")
    with pytest.warns(UserWarning, match="no ModelInfo"):
        trainer.fit((x, y), epochs=1, batch_size=4)
    folder = RunFolder(tmp_path / "run")
    assert folder.log.is_file() and folder.export.is_dir() and folder.lock.is_file()
    assert [p.name for p in folder.checkpoints.iterdir()] == ["ckpt-0000000002.npz"]
    assert trainer.checkpoint_dir == folder.checkpoints
    assert existing_run(folder.root) == [
        "checkpoints/ckpt-0000000002.npz",
        "train_log.jsonl",
        "export/",
    ]


def test_the_old_names_of_the_run_folder_entries_are_run_folders():
    from cvbench.tasks.runner import RESULTS_NAME
    from cvbench.training.run_dir import LOCK_NAME

    assert (LOG_NAME, RESULTS_NAME, LOCK_NAME, CHECKPOINT_SUBDIR) == (
        RunFolder.LOG, RunFolder.RESULTS, RunFolder.LOCK, RunFolder.CHECKPOINTS,
    )  # fmt: skip
    assert RUN_ENTRIES == {"checkpoints": "dir", "train_log.jsonl": "file", "export": "dir"}
