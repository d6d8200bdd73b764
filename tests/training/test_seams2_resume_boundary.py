"""A resume at an epoch boundary writes nothing before its first step (docs/reliability.md):
the checkpoint it resumed from is neither rewritten nor rotated away, and the run ends as
the uninterrupted one. Backend-agnostic: nothing here imports TensorFlow."""

import shutil

import numpy as np
import pytest
from training_helpers import images, make_trainer

from cvbench.training import checkpoint as ckpt

pytestmark = pytest.mark.backend_agnostic


def saved_steps(monkeypatch) -> list[int]:
    """The steps of the checkpoints written from now on (every write goes through
    `checkpoint.save_checkpoint`)."""
    steps, save = [], ckpt.save_checkpoint

    def recording(path, **kwargs):
        steps.append(int(path.stem.split("-")[1]))
        return save(path, **kwargs)

    monkeypatch.setattr(ckpt, "save_checkpoint", recording)
    return steps


# 32 images: batch 4 gives 8 steps per epoch, batch 8 gives 4. The every-N rule lands on the
# first epoch's last step (4 | 8, 2 | 4): that step is saved at the step, then again at the
# epoch's end recording the epoch done, and the run dies after that (a death between the two,
# which leaves the end to the resume, is tests/training/test_t_epoch_boundary.py's).
# keep_checkpoints 2 would rotate the resumed one away if anything were written first.
@pytest.mark.parametrize("batch, every, keep", [(4, 4, 10), (8, 2, 2), (8, 0, 2)])
def test_a_resume_at_an_epoch_boundary_rewrites_nothing_before_its_first_step(
    tmp_path, monkeypatch, batch, every, keep
):
    per_epoch = 32 // batch
    full = make_trainer(tmp_path / "full", checkpoint_every=every, keep_checkpoints=10)
    full.fit(images(32), epochs=2, batch_size=batch)
    shutil.copytree(tmp_path / "full", tmp_path / "cut")
    folder = tmp_path / "cut" / "checkpoints"
    for path in folder.iterdir():  # the run died right after the first epoch
        if int(path.stem.split("-")[1]) > per_epoch:
            path.unlink()
    boundary = folder / ckpt.checkpoint_name(per_epoch)
    before = boundary.read_bytes(), boundary.stat().st_ino

    steps = saved_steps(monkeypatch)
    resumed = make_trainer(
        tmp_path / "cut", checkpoint_every=every, keep_checkpoints=keep, resume=True
    )
    resumed.prepare(global_batch=batch, steps_per_epoch=per_epoch, epochs=2)
    assert resumed.state["step"] == per_epoch
    resumed.fit(images(32), epochs=2, batch_size=batch)

    # Only the second epoch's checkpoints: every-N steps after the boundary, then its end
    # (the last step saved again when the every-N rule lands on it).
    expected = list(range(per_epoch + every, 2 * per_epoch + 1, every)) if every else []
    assert steps == [*expected, 2 * per_epoch]
    if keep == 10:
        assert (boundary.read_bytes(), boundary.stat().st_ino) == before
    for a, b in zip(full.model.variables, resumed.model.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    last = ckpt.checkpoint_name(2 * per_epoch)
    meta_full, arrays_full = ckpt.load_checkpoint(tmp_path / "full" / "checkpoints" / last)
    meta_cut, arrays_cut = ckpt.load_checkpoint(folder / last)
    # Keras numbers the models of one process ("functional", "functional_1"): not compared.
    assert meta_cut["state"] | {"model": None} == meta_full["state"] | {"model": None}
    for name, array in arrays_full.items():
        np.testing.assert_array_equal(array, arrays_cut[name])
