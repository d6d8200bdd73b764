"""A run written while the pipeline spelled "center_crop" "resize_then_crop" (its checkpoints'
run settings carry `preprocessing.eval_crop: "resize_then_crop"`) still agrees with today's
recipe: `--resume` continues it, and `cvbench evaluate` takes back its recipe without a
deviation (#38: one resize vocabulary, the old spelling accepted at the edge)."""

from __future__ import annotations

import warnings

import pytest
from training_helpers import blobs, plain_trainer

from cvbench.tasks.recipes import default_recipe
from cvbench.training.checkpoint import find_checkpoint

pytestmark = pytest.mark.backend_agnostic


def _trainer(log_dir, **config):
    return plain_trainer(log_dir, **config)


def _settings(eval_crop: str) -> dict:
    """What `runner.run_settings` records of ResNet-50's recipe, with `eval_crop` spelled as
    given (an old run wrote "resize_then_crop")."""
    recipe = default_recipe("resnet50")
    knobs = dict(recipe.knobs())
    knobs["preprocessing.eval_crop"] = eval_crop
    return {"model": "resnet50", "recipe": recipe.name, "knobs": knobs}


@pytest.fixture
def old_run(tmp_path):
    """A run of 2 epochs x 4 steps (32 rows, batch 8) whose settings use the old spelling,
    stopped after its first epoch (its last checkpoint removed: the one at step 4 is left)."""
    first = _trainer(tmp_path)
    first.run_settings = _settings("resize_then_crop")
    first.fit(blobs(32), epochs=2, batch_size=8)
    for path in (tmp_path / "checkpoints").glob("ckpt-0000000008*"):
        path.unlink()
    return tmp_path


def test_a_run_saved_with_the_old_spelling_resumes_with_todays(old_run, capsys):
    capsys.readouterr()
    again = _trainer(old_run, resume=True)
    again.run_settings = _settings(default_recipe("resnet50").value("preprocessing.eval_crop"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "differs" warning either
        again.fit(blobs(32), epochs=2, batch_size=8)
    # continued from step 4: the second epoch's 4 steps only, the first not run again
    assert again.state["step"] == 8 and again.state["epoch"] == 2
    out = capsys.readouterr().out
    assert "epoch 2:" in out and "epoch 1:" not in out


def test_another_rule_is_still_a_difference(old_run):
    # the old spelling names "center_crop", not any rule: crop_then_resize is refused
    again = _trainer(old_run, resume=True)
    again.run_settings = _settings("crop_then_resize")
    with pytest.raises(
        ValueError,
        match='settings.knobs.preprocessing.eval_crop "center_crop" in the checkpoint, '
        '"crop_then_resize" now',
    ):
        again.fit(blobs(32), epochs=2, batch_size=8)


def test_evaluate_takes_back_the_old_runs_recipe_without_a_deviation(old_run):
    from cvbench.tasks.evaluation import saved_run

    recipe = saved_run(find_checkpoint(old_run))["recipe"]
    assert recipe.value("preprocessing.eval_crop") == "center_crop"
    assert recipe.deviation("preprocessing.eval_crop") is None
    assert recipe == default_recipe("resnet50")  # nothing else differs either
