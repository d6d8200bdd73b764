"""A resume through another input pipeline than the checkpointed run's (`--data-backend tf`
then `grain`, or back) is named in a warning, as another seed is: tf.data and grain order and
augment the images differently, so the resumed run is not the one the checkpoint's would
have been (probe p49, finding 13: it resumed without a word, and the checkpoint did not
record the pipeline). Not refused: the weights and optimizer are the checkpoint's, and a
run moved to a machine without TensorFlow (grain) is a reason to switch.
"""

from __future__ import annotations

import warnings

import pytest
from test_hostile_runs import RESUME, shapes_records

import cvbench.cli as cli
from cvbench.training.checkpoint import read_checkpoint_meta
from cvbench.training.resume import pipeline_change

pytest.importorskip("grain")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return shapes_records(tmp_path_factory.mktemp("pipeline"))


def _train(records, run, backend, epochs, *extra):
    argv = ["train", *RESUME, "--data-dir", str(records), "--epochs", str(epochs), "--seed", "0"]
    return cli.main([*argv, "--data-backend", backend, "--log-dir", str(run), *extra])


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("first, then", [("tf", "grain"), ("grain", "tf")])
def test_a_resume_through_another_pipeline_is_named(records, tmp_path, first, then):
    run = tmp_path / "run"
    assert _train(records, run, first, 1) == 0
    (checkpoint,) = sorted((run / "checkpoints").glob("ckpt-*.npz"))
    assert read_checkpoint_meta(checkpoint)["state"]["settings"]["data_pipeline"] == first
    message = (
        rf"through another input pipeline \(data pipeline '{first}' in the checkpoint, "
        rf"'{then}' now\): the rest of the run reads its images in another order"
    )
    with pytest.warns(UserWarning, match=message):
        assert _train(records, run, then, 1, "--resume") == 0  # a finished run: restored, done


@pytest.mark.backend_agnostic
def test_the_same_pipeline_resumes_without_the_warning(records, tmp_path):
    run = tmp_path / "run"
    assert _train(records, run, "grain", 1) == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _train(records, run, "grain", 1, "--resume") == 0
    assert not [w for w in caught if "input pipeline" in str(w.message)]


@pytest.mark.backend_agnostic
def test_a_resume_with_another_number_of_grain_workers_is_named(records, tmp_path):
    # probe p50 #5: grain's workers batch the records dealt to them, so --data-workers 2
    # trains on other batches than 0 (epoch 1 loss 0.7358 against 0.6694); a resume with
    # another count was silently a third run, and --help said the batches were the same
    run = tmp_path / "run"
    assert _train(records, run, "grain", 1) == 0
    (checkpoint,) = sorted((run / "checkpoints").glob("ckpt-*.npz"))
    assert read_checkpoint_meta(checkpoint)["state"]["settings"]["data_workers"] == 0
    message = r"\(grain with 0 data workers in the checkpoint, 1 now\): .* other batches"
    with pytest.warns(UserWarning, match=message):
        assert _train(records, run, "grain", 1, "--resume", "--data-workers", "1") == 0


def test_data_workers_are_recorded_for_grain_only():
    tf_plan, grain_plan = ({"data_pipeline": p, "data_workers": 2} for p in ("tf", "grain"))
    meta = {"state": {"settings": {"data_pipeline": "grain", "data_workers": 0}}}
    assert pipeline_change(meta, {"settings": grain_plan}) == (
        "grain with 0 data workers in the checkpoint, 2 now")  # fmt: skip
    assert "data pipeline 'grain'" in pipeline_change(meta, {"settings": tf_plan})
    older = {"state": {"settings": {"data_pipeline": "grain"}}}  # before data_workers
    assert pipeline_change(older, {"settings": grain_plan}) is None


@pytest.mark.parametrize(
    "stored, now",
    [({}, "grain"), ({"data_pipeline": None}, "grain"), ({"data_pipeline": "tf"}, None)],
    ids=["older_checkpoint", "synthetic_then", "synthetic_now"],
)
def test_a_side_without_a_pipeline_is_not_compared(stored, now):
    # an older cvbench's checkpoint records none; synthetic data has none (None)
    meta = {"state": {"settings": stored}}
    assert pipeline_change(meta, {"settings": {"data_pipeline": now}}) is None
