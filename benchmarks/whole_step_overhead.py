"""Per-step cost of `TrainingModel`'s whole-step train step against Keras' own (not collected).

    KERAS_BACKEND=tensorflow python benchmarks/whole_step_overhead.py [--steps 4] [--rounds 40]

ResNet-18 (v1.5, 10 classes) on 32 x 32 images, batch 8, float32, momentum SGD, on the CPU.
Both steps train the same model: rounds of `--steps` steps alternate between them, and the
median step time of each is printed with their difference (rounds of few steps
keep the two comparable on a machine shared with other work).
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import numpy as np

from cvbench.models.resnet import resnet18
from cvbench.training.losses import SparseCrossEntropy
from cvbench.training.optimizers import MomentumSGD
from cvbench.training.training_model import TrainingModel


class KerasStep(TrainingModel):
    """The same wrapper with Keras' own train step (and, on TensorFlow, train function)."""

    def make_train_function(self, force: bool = False):
        return keras.Model.make_train_function(self, force)

    def train_step(self, *args):
        return keras.Model.train_step(self, *args)


def step_times(model: keras.Model, x: np.ndarray, y: np.ndarray, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train_on_batch(x, y, return_dict=True)  # returns host floats: a sync
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    inner = resnet18(num_classes=10, input_shape=(32, 32, 3), classifier_activation=None)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, 8).astype("int32")
    models = {"keras": KerasStep(inner, SparseCrossEntropy()), "whole": None}
    models["whole"] = TrainingModel(inner, SparseCrossEntropy())
    for model in models.values():
        model.compile(optimizer=MomentumSGD(learning_rate=0.01, momentum=0.9, weight_decay=1e-4))
        step_times(model, x, y, 5)  # build and trace
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            times[name] += step_times(model, x, y, args.steps)
    median = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(
        f"{keras.config.backend()}: Keras' step {median['keras']:.2f} ms, whole step "
        f"{median['whole']:.2f} ms, overhead {median['whole'] - median['keras']:+.2f} ms "
        f"({(median['whole'] / median['keras'] - 1) * 100:+.1f}%), median of "
        f"{args.rounds * args.steps} steps each"
    )


if __name__ == "__main__":
    main()
