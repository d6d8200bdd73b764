"""A caller's `train_preprocess` / `eval_preprocess` replaces the recipe's preprocessing for
its split only, and the run says so (regression: with every run having a recipe, a hook
made the reader refuse the recipe's `preprocessing` and the demo failed)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from cvbench.data import ImagePreprocessing, imagenet_dataset
from cvbench.tasks import ClassificationTask, TaskOptions, prepare_run

SIZE = 32


def constant_train(value: float):
    """A train hook whose images are all `value` (so the batch shows which hook ran)."""

    def preprocess(image_bytes, boxes, seed):
        del image_bytes, boxes, seed
        return tf.fill([SIZE, SIZE, 3], value)

    return preprocess


def constant_eval(value: float):
    def preprocess(image_bytes):
        del image_bytes
        return tf.fill([SIZE, SIZE, 3], value)

    return preprocess


def task(records, **hooks) -> ClassificationTask:
    options = TaskOptions(model="resnet18", data_dir=str(records), image_size=SIZE)
    return ClassificationTask(options, **hooks)


def first_images(dataset) -> np.ndarray:
    return np.asarray(next(iter(dataset))[0])


def test_both_hooks_replace_both_splits_and_the_banner_says_so(six_class_records, capsys):
    t = task(six_class_records, train_preprocess=constant_train(7.0),
             eval_preprocess=constant_eval(3.0))  # fmt: skip
    run = prepare_run(t, batch_size=4, distribution="single", seed=0)
    banner = capsys.readouterr().out
    assert "; training preprocessing, evaluation preprocessing: the caller's" in banner
    assert run.notes.callers_own == ("training preprocessing", "evaluation preprocessing")
    assert np.all(first_images(run.train.data(0)) == 7.0)
    evaluation = t.evaluation_data(batch_size=4, distribution=run.trainer.distribution)
    assert np.all(first_images(evaluation) == 3.0)


def test_a_train_hook_leaves_the_recipe_preprocessing_for_evaluation(six_class_records, capsys):
    t = task(six_class_records, train_preprocess=constant_train(7.0))
    run = prepare_run(t, batch_size=4, distribution="single", seed=0)
    assert "; training preprocessing: the caller's" in capsys.readouterr().out
    assert np.all(first_images(run.train.data(0)) == 7.0)
    evaluation = t.evaluation_data(batch_size=4, distribution=run.trainer.distribution)
    # The recipe's evaluation pipeline (resnet18_cvbench: NVIDIA's, ImagePreprocessing()).
    expected = imagenet_dataset(str(six_class_records), "validation", batch_size=4,
                                image_size=SIZE, training=False,
                                preprocessing=ImagePreprocessing())  # fmt: skip
    np.testing.assert_array_equal(first_images(evaluation), first_images(expected))


def test_without_hooks_the_recipe_preprocessing_is_read_and_nothing_is_the_callers(
    six_class_records, capsys
):
    t = task(six_class_records)
    run = prepare_run(t, batch_size=4, distribution="single", seed=0)
    assert "the caller's" not in capsys.readouterr().out
    assert run.notes.callers_own == ()
    evaluation = t.evaluation_data(batch_size=4, distribution=run.trainer.distribution)
    expected = imagenet_dataset(str(six_class_records), "validation", batch_size=4,
                                image_size=SIZE, training=False,
                                preprocessing=t.recipe.preprocessing)  # fmt: skip
    np.testing.assert_array_equal(first_images(evaluation), first_images(expected))
