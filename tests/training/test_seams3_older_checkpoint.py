"""A checkpoint written before a knob existed resumes when that knob is None now.

Regression (review of stop 47): `resume.compare_settings` told a key the checkpoint lacks
from a None, so every checkpoint written before `model.weights_normalization` was recorded
(a run without `--weights`, where it is None) was refused: `this run differs from the
checkpointed one (settings.knobs.model.weights_normalization unset in the checkpoint, null
now)`. The resume's comparison always read a lacking key as None.
"""

from __future__ import annotations

import pytest

import cvbench.tasks.runner as runner
from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run
from cvbench.training import TrainConfig


def _task():
    options = TaskOptions(model="resnet18", image_size=32, num_classes=3, synthetic_steps=2)
    return ClassificationTask(options)


@pytest.mark.backend_agnostic
def test_a_checkpoint_without_a_knob_that_is_none_now_resumes(tmp_path, monkeypatch):
    real = runner.run_settings

    def older(task):  # what an older cvbench recorded: no model.weights_normalization
        settings = real(task)
        knobs = settings["knobs"]
        assert knobs["model.weights_normalization"] is None  # no --weights: None now
        settings["knobs"] = {k: v for k, v in knobs.items() if k != "model.weights_normalization"}
        return settings

    config = dict(log_dir=str(tmp_path), progress_bar=False, export=False, seed=0, log_every=0,
                  checkpoint_every=1)  # fmt: skip
    monkeypatch.setattr(runner, "run_settings", older)
    run = prepare_run(_task(), batch_size=2, precision="fp32", config=TrainConfig(**config),
                      distribution="single")  # fmt: skip
    run.fit(epochs=2, evaluate="none")
    monkeypatch.setattr(runner, "run_settings", real)
    (tmp_path / "checkpoints" / "ckpt-0000000004.npz").unlink()  # killed before step 4
    run = prepare_run(_task(), batch_size=2, precision="fp32",
                      config=TrainConfig(resume=True, **config), distribution="single")  # fmt: skip
    run.fit(epochs=2, evaluate="none")
    assert run.trainer.state["step"] == 4  # resumed from step 3 and finished
