"""`cvbench recipes` and `cvbench recipes NAME` (registered here on the command's module list)."""

from __future__ import annotations

import pytest

import cvbench.cli as cli

pytestmark = pytest.mark.backend_agnostic


@pytest.fixture(autouse=True)
def with_recipes_command(monkeypatch):
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("cvbench.cli.recipes",))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["recipes", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_one_line_per_recipe(capsys):
    code, out, _ = _run(capsys)
    lines = out.splitlines()
    assert code == 0
    assert [line.split()[:2] for line in lines] == [
        ["inception_v3_nvcnn", "inception_v3"],
        ["resnet101_cvbench", "resnet101"],
        ["resnet152_cvbench", "resnet152"],
        ["resnet18_cvbench", "resnet18"],
        ["resnet34_cvbench", "resnet34"],
        ["resnet50_v1.5_250e", "resnet50"],
        ["resnet50_v1.5_90e", "resnet50"],
        ["ssd320_v1.2", "ssd320"],
    ]
    assert "(COCO AP 0.273-0.282)" in lines[7]
    assert "cvbench default for ResNet-18" in lines[3]


def test_ssd320_prints_every_knob_of_the_8gpu_config(capsys):
    from cvbench.tasks.recipes import get_recipe

    code, out, _ = _run(capsys, "ssd320_v1.2")
    assert code == 0
    knobs = [k for k, v in get_recipe("ssd320_v1.2").knobs() if v is not None]
    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isalpha()}
    assert [k for k in rows if k in knobs] == knobs  # every knob, in order, one row each
    config = "TensorFlow/Detection/SSD/configs/ssd320_full_8gpus.config"
    assert rows["run.batch_per_gpu"].split()[1] == "32"
    assert rows["run.batch_per_gpu"].endswith(f"NVIDIA/DeepLearningExamples {config}:150")
    assert rows["schedule.warmup_start_factor"].split()[1] == "0.43332"
    assert f"{config}:175 (0.0693312 / 0.16 = 0.43332)" in rows["schedule.warmup_start_factor"]
    assert rows["detection.crop_aspect_range"].split(None, 1)[1].startswith("(0.75, 3.0)")
    assert (
        "imagenet (reference: tf-slim resnet_v1_50_2016_08_28)"
        in rows["detection.backbone_weights"]
    )
    assert "Deliberate differences:" in out
    assert "  detection.backbone_weights: The reference starts from TF-slim" in out


def test_resnet_shows_values_exactly_and_the_eval_difference(capsys):
    code, out, _ = _run(capsys, "resnet50_v1.5_90e")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines() if "." in line.split(" ")[0]}
    assert rows["optimizer.weight_decay"][1] == "3.0517578125e-05"
    assert rows["preprocessing.mean"][1:4] == ["(123.68,", "116.28,", "103.53)"]
    assert rows["eval.drop_remainder"][1:4] == ["False", "(reference:", "True)"]
    assert "49,920 images" in out
    # A knob at its part's default without a source is cvbench's (SGD ignores LARC's eta).
    assert rows["optimizer.larc_eta"][1:] == ["0.003", "cvbench", "default"]


def test_a_cvbench_default_recipe_shows_each_difference_from_its_reference(capsys):
    code, out, _ = _run(capsys, "resnet18_cvbench")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines() if "." in line.split(" ")[0]}
    assert rows["schedule.decay_from"][1:3] == ["warmup_end", "(reference:"]
    assert rows["optimizer.momentum"][1] == "0.875"  # DLE's, with DLE's source
    assert "DGX1_RN50_AMP_90E.sh:29" in " ".join(rows["optimizer.momentum"])


def test_gpus_prints_the_scaled_run(capsys):
    code, out, _ = _run(capsys, "resnet50_v1.5_90e", "--gpus", "1")
    assert code == 0
    # 0.256 x 256 / 256; 1,281,167 // 256 = 5,004 steps per epoch, x 90; int(5004 x 8) warmup.
    assert out.splitlines()[-1] == (
        "On 1 GPU(s), 1281167 training images: global batch 256 = 1 x 256, peak LR 0.256 "
        "(0.256 x 256 / 256), 5004 steps per epoch, 450360 steps, warmup 40032 steps from 0"
    )


def test_unknown_recipe_is_one_line_and_exit_2(capsys):
    code, out, err = _run(capsys, "resnet50")
    assert code == 2 and out == ""
    assert err == (
        "cvbench: error: unknown recipe 'resnet50'; known: inception_v3_nvcnn, "
        "resnet101_cvbench, resnet152_cvbench, resnet18_cvbench, resnet34_cvbench, "
        "resnet50_v1.5_250e, resnet50_v1.5_90e, ssd320_v1.2\n"
    )


def test_gpus_without_name_is_an_error(capsys):
    code, _, err = _run(capsys, "--gpus", "8")
    assert code == 2 and err == "cvbench: error: --gpus needs a recipe NAME\n"


def test_register_on_any_parser():
    import argparse

    from cvbench.cli import recipes

    parser = argparse.ArgumentParser()
    recipes.register(parser.add_subparsers())
    args = parser.parse_args(["recipes", "ssd320_v1.2", "--gpus", "8"])
    assert (args.name, args.gpus, args.func) == ("ssd320_v1.2", 8, recipes.run)
