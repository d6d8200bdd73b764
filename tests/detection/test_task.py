"""Tests for DetectionTask: recipe, data, evaluation through the whole chain, rank gathering."""

from __future__ import annotations

import doctest
import io
import json
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from cvbench.data.builders.coco_builder import build_coco_splits
from cvbench.data.coco_schema import groundtruth_from_records
from cvbench.data.read.coco import list_record_files
from cvbench.tasks import DetectionTask, TaskOptions
from cvbench.tasks import detection as task_module
from cvbench.training.distributed import Distribution, SingleProcess

H, W = 48, 64
SIZE = 128  # levels 3-7 at 128: 16, 8, 4, 2, 1 -> 341 locations x 6 = 2046 anchors


def _tiny_coco(root):
    """Four grey images (value 10 * id) with boxes of categories 1..3; one crowd box."""
    (root / "img").mkdir(parents=True)
    images, anns = [], []
    boxes = {
        1: [(1, [4, 4, 40, 30], 0), (3, [30, 20, 30, 25], 0)],
        2: [(2, [0, 0, 64, 48], 0)],
        3: [],  # no boxes
        4: [(1, [10, 8, 20, 30], 0), (2, [2, 2, 60, 40], 1)],  # the second is a crowd
    }
    for image_id, objs in boxes.items():
        buf = io.BytesIO()
        pixels = np.full((H, W, 3), 10 * image_id, np.uint8)
        Image.fromarray(pixels).save(buf, "JPEG", quality=95)
        (root / "img" / f"{image_id}.jpg").write_bytes(buf.getvalue())
        images.append({"id": image_id, "file_name": f"{image_id}.jpg", "height": H, "width": W})
        for cat, bbox, crowd in objs:
            anns.append(
                {"id": len(anns) + 1, "image_id": image_id, "category_id": cat, "bbox": bbox,
                 "area": bbox[2] * bbox[3], "iscrowd": crowd}
            )  # fmt: skip
    cats = [{"id": i, "name": n} for i, n in [(1, "a"), (2, "b"), (3, "c")]]
    ann_path = root / "instances_val.json"
    ann_path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    out = root / "records"
    build_coco_splits(
        out,
        {"train": (ann_path, root / "img"), "val": (ann_path, root / "img")},
        num_shards={"train": 1, "val": 2},
        num_workers=1,
        progress=False,
    )
    return ann_path, out


@pytest.fixture(scope="module")
def coco_dir(tmp_path_factory):
    return _tiny_coco(tmp_path_factory.mktemp("task_coco"))


def _task(data_dir, **kwargs) -> DetectionTask:
    options = TaskOptions(model="ssd320", data_dir=data_dir, image_size=SIZE, num_classes=3)
    return DetectionTask(options, backbone="resnet18", **kwargs)


class OracleModel:
    """Stands in for ssd320: outputs the encoded ground truth of each image (found from its
    grey value), +30 logits for matched classes and -30 elsewhere (sigmoid(-30) < 1e-8, the
    score threshold). Decoding returns the ground-truth boxes exactly."""

    input_shape = (None, SIZE, SIZE, 3)

    def __init__(self, task: DetectionTask, annotations: dict) -> None:
        self.targets = {}
        for image in annotations["images"]:
            objs = [a for a in annotations["annotations"] if a["image_id"] == image["id"]]
            boxes = np.array(
                [[y / H, x / W, (y + h) / H, (x + w) / W] for x, y, w, h in
                 (a["bbox"] for a in objs)], np.float32,
            ).reshape(-1, 4)  # fmt: skip
            labels = np.array([task.label_map.to_indices([a["category_id"]])[0] for a in objs])
            self.targets[image["id"]] = task._encoder()(boxes, labels.astype(np.int32))

    def predict_on_batch(self, images):
        codes, logits = [], []
        for image in np.asarray(images):
            t = self.targets.get(int(round(image.mean() / 10)))
            if t is None:  # padding (zero image)
                n = len(next(iter(self.targets.values()))["boxes"])
                codes.append(np.zeros((n, 4)))
                logits.append(np.full((n, 3), -30.0))
                continue
            codes.append(np.asarray(t["boxes"])[:, :4])
            logits.append(np.where(np.asarray(t["classes"])[:, :3] > 0, 30.0, -30.0))
        return {"boxes": np.stack(codes), "classes": np.stack(logits)}


def test_recipe_and_label_maps():
    recipe = DetectionTask(TaskOptions(model="ssd320")).recipe
    opt, sched = recipe.optimizer, recipe.schedule
    assert recipe.name == "ssd320_v1.2"
    assert (opt.name, opt.momentum, opt.nesterov, opt.weight_decay) == ("sgd", 0.9, False, 0.0)
    # 0.000625 x global batch = 0.16 for 256 images; warmup 8% of the run from 0.43332 x.
    assert sched.base_lr == pytest.approx(0.16) and sched.reference_batch == 256
    assert sched.warmup_fraction == 0.08 and sched.decay == "cosine"
    assert sched.warmup_start_factor == 0.43332
    default = DetectionTask(TaskOptions(model="ssd320"))
    assert default.num_classes == 90 and default.label_map.category_ids[-1] == 90
    assert (
        DetectionTask(TaskOptions(model="ssd320", num_classes=80)).label_map.category_ids[11] == 13
    )  # the compact map skips the unused id 12
    assert DetectionTask.models() == ["ssd320"]
    with pytest.raises(ValueError, match="resnet50"):
        DetectionTask(TaskOptions(model="resnet50"))
    with pytest.raises(ValueError, match="backend"):
        DetectionTask(TaskOptions(model="ssd320"), backend="fast")


def test_train_data_from_records_and_synthetic(coco_dir):
    _, records = coco_dir
    task = _task(str(records))
    data = task.train_data(batch_size=2, distribution=SingleProcess(), seed=0)
    assert data.steps_per_epoch == 2  # 4 training images // batch 2
    images, y = next(iter(data.data(0)))
    assert images.shape == (2, SIZE, SIZE, 3)
    assert y["boxes"].shape == (2, 2046, 5) and y["classes"].shape == (2, 2046, 4)
    synthetic = _task(None).train_data(batch_size=2, distribution=SingleProcess(), seed=0)
    images, y = next(iter(synthetic.data(0)))
    assert images.shape == (2, SIZE, SIZE, 3) and y["classes"].shape == (2, 2046, 4)
    # Two random boxes per image: each is forced to match at least one anchor.
    assert (np.asarray(y["boxes"])[..., 4].sum(axis=1) >= 1).all()


def test_oracle_detections_score_one_through_the_whole_chain(coco_dir, tmp_path):
    ann_path, records = coco_dir
    det_path = tmp_path / "dets.json"
    task = _task(str(records), annotations_file=ann_path, detections_path=det_path)
    trainer = SimpleNamespace(
        model=OracleModel(task, json.loads(ann_path.read_text())), distribution=SingleProcess()
    )
    metrics = task.evaluate(trainer, batch_size=3)
    # 4 non-crowd boxes found exactly, nothing else: every defined cell is 1. Images are 64x48,
    # so no box is large (area > 96^2): those cells have no ground truth (-1).
    assert metrics["AP"] == pytest.approx(1.0, abs=1e-9)
    assert metrics["AR100"] == pytest.approx(1.0, abs=1e-9)
    assert metrics["APl"] == -1.0
    dets = json.loads(det_path.read_text())
    # One detection per non-crowd box plus one on the crowd region (ignored by COCOeval).
    assert len(dets) == 5
    assert {d["category_id"] for d in dets} == {1, 2, 3}
    person = next(d for d in dets if d["image_id"] == 4 and d["category_id"] == 1)
    np.testing.assert_allclose(person["bbox"], [10, 8, 20, 30], atol=1e-3)
    # The builder copied the val annotation file next to the records: found without asking.
    assert (records / "instances_val.json").is_file()
    found = _task(str(records)).evaluate(trainer, batch_size=3)
    assert found == metrics


def test_groundtruth_rebuilt_from_records_matches_the_annotation_file(coco_dir):
    ann_path, records = coco_dir
    original = json.loads(ann_path.read_text())
    rebuilt = groundtruth_from_records(list_record_files(records, "val"))
    assert sorted(rebuilt["images"], key=lambda im: im["id"]) == original["images"]
    assert rebuilt["categories"] == original["categories"]
    key = lambda a: (a["image_id"], a["category_id"])  # noqa: E731
    for got, want in zip(
        sorted(rebuilt["annotations"], key=key), sorted(original["annotations"], key=key),
        strict=True,
    ):  # fmt: skip
        assert key(got) == key(want) and got["iscrowd"] == want["iscrowd"]
        assert got["area"] == want["area"]
        # Normalized float32 coordinates times the size: pixels within float32 rounding.
        np.testing.assert_allclose(got["bbox"], want["bbox"], atol=1e-4)


class ThreadRanks(Distribution):
    """A `Distribution` for `size` threads of one process, each one rank (for tests)."""

    def __init__(self, group: dict, rank: int) -> None:
        self.group, self.rank, self.size = group, rank, group["size"]

    def _collect(self, value):
        g = self.group
        g["slots"][self.rank] = value
        g["barrier"].wait()
        values = list(g["slots"])
        g["barrier"].wait()
        return values

    def allreduce_sum(self, values):
        return np.sum([np.asarray(v, np.float64) for v in self._collect(values)], axis=0)

    def allreduce_max(self, values):
        return np.max([np.asarray(v, np.float64) for v in self._collect(values)], axis=0)

    def broadcast_object(self, obj):
        return self._collect(obj)[0]


def _run_ranks(size: int, fn):
    group = {"size": size, "slots": [None] * size, "barrier": threading.Barrier(size)}
    results, errors = [None] * size, []

    def run(rank):
        try:
            results[rank] = fn(ThreadRanks(group, rank))
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            group["barrier"].abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def test_allgather_rows_concatenates_in_rank_order():
    rows = {0: np.array([[1.0, 2.0]]), 1: np.array([[3.0, 4.0], [5.0, 6.0]]), 2: np.zeros((0, 2))}
    out = _run_ranks(3, lambda d: d.allgather_rows(rows[d.rank]))
    for gathered in out:
        np.testing.assert_array_equal(gathered, [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(SingleProcess().allgather_rows(rows[1]), rows[1])


def test_evaluation_over_two_ranks_sees_every_image_once(coco_dir, monkeypatch):
    ann_path, records = coco_dir
    task = _task(str(records), annotations_file=ann_path)
    oracle = OracleModel(task, json.loads(ann_path.read_text()))
    evaluated = []
    # DetectionTask.evaluate imports evaluate_coco when called: patch it at its module.
    from cvbench.detection import coco_eval

    original = coco_eval.evaluate_coco

    def spy(dets, gt, **kwargs):
        evaluated.append(sorted(kwargs["image_ids"]))
        return original(dets, gt, **kwargs)

    monkeypatch.setattr(coco_eval, "evaluate_coco", spy)
    results = _run_ranks(
        2,
        lambda d: task.evaluate(SimpleNamespace(model=oracle, distribution=d), batch_size=1),
    )
    assert evaluated == [[1, 2, 3, 4]]  # rank 0 only, with both ranks' images
    assert results[0] == results[1] and results[0]["AP"] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.slow
def test_one_training_step_and_evaluation_with_the_trainer(coco_dir, tmp_path):
    from cvbench.tasks import build_trainer
    from cvbench.training import TrainConfig

    ann_path, records = coco_dir
    task = _task(str(records), annotations_file=ann_path)
    trainer = build_trainer(  # the task's model, loss and recipe
        task,
        precision="float32",
        distribution="single",
        config=TrainConfig(log_every=0, progress_bar=False, seed=0, export=False),
    )
    data = task.train_data(batch_size=2, distribution=SingleProcess(), seed=0)
    history = trainer.fit(data.data, epochs=1, steps_per_epoch=1, batch_size=2)
    assert trainer.state["step"] == 1
    assert np.isfinite(history.history["loss"][0])
    metrics = task.evaluate(trainer, batch_size=2)
    assert set(metrics) >= {"AP", "AP50", "AR100", "ARl"}
    assert all(-1.0 <= v <= 1.0 for v in metrics.values())


def test_docstring_examples():
    result = doctest.testmod(task_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
