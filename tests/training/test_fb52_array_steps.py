"""P52 F10: `Trainer.fit` on NumPy arrays silently ignored a `steps_per_epoch` larger than the
batches the rows hold (8 rows at batch 4 trained 2 steps per epoch when 10 were asked); a
tf.data set that runs out is refused. Now refused before the first step, naming it and the
rows / batch arithmetic; fewer steps still take the epoch's first batches.

Runs under TensorFlow with the suite and under KERAS_BACKEND=jax with `-m backend_agnostic`.
"""

import numpy as np
import pytest
from training_helpers import blobs, plain_trainer

pytestmark = pytest.mark.backend_agnostic


def test_more_steps_than_the_arrays_hold_is_refused_before_training(tmp_path):
    x, y = blobs(8)
    trainer = plain_trainer(tmp_path / "run")
    expected = (
        r"steps_per_epoch=10 is more than the 2 batches an epoch of the arrays holds "
        r"\(8 rows // global batch 4 = 4 x 1 ranks\): pass steps_per_epoch of at most 2, or None"
    )
    with pytest.raises(ValueError, match=expected):
        trainer.fit((x, y), epochs=2, batch_size=4, steps_per_epoch=10)
    assert trainer.state["step"] == 0


@pytest.mark.parametrize("steps, total", [(2, 4), (1, 2)])
def test_the_arrays_own_steps_or_fewer_are_honoured(tmp_path, steps, total):
    x, y = blobs(9)  # 9 rows at batch 4: 2 batches, the last row dropped
    trainer = plain_trainer(tmp_path / "run")
    trainer.fit((x, y), epochs=2, batch_size=4, steps_per_epoch=steps)
    assert trainer.state["step"] == total


@pytest.mark.parametrize("steps", [0, -1, True, 2.0])
def test_a_steps_per_epoch_that_is_not_a_positive_int_is_refused_for_arrays(tmp_path, steps):
    x, y = blobs(8)
    trainer = plain_trainer(tmp_path / "run")
    with pytest.raises(ValueError, match=f"steps_per_epoch must be a positive int, got {steps!r}"):
        trainer.fit((x, y), epochs=1, batch_size=4, steps_per_epoch=steps)
    assert np.isclose(trainer.state["step"], 0)
