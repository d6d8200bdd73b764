"""Docs and help that match the commands (#39 item 8): docs/recipes.md lists every recipe
`cvbench recipes` prints (its table and its `$ cvbench recipes` block), and the help of
`cvbench eval` and of `cvbench train --eval` names what each kind of task reports (top-1 and
top-5 for classifiers, COCO AP for SSD320), not top-1/top-5 alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cvbench.cli as cli
from cvbench.detection.coco_eval import COCO_METRIC_NAMES
from cvbench.tasks import TaskOptions, make_task
from cvbench.tasks.recipes import list_recipes

DOC = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"


def _first_table_recipes(text: str) -> list[str]:
    """The recipe names in the first column of the doc's first table."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| `"):
            rows.append(re.match(r"\| `([^`]+)`", line).group(1))
        elif rows:
            break
    return rows


def _listing_block(text: str) -> list[str]:
    """The recipe names of the doc's `$ cvbench recipes` output block."""
    block = text.split("$ cvbench recipes\n", 1)[1].split("```", 1)[0]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


def _printed_recipes(capsys) -> list[str]:
    assert cli.main(["recipes"]) == 0
    return [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_the_docs_list_every_recipe_cvbench_recipes_prints(capsys):
    printed = _printed_recipes(capsys)
    assert sorted(printed) == sorted(list_recipes()) and len(printed) == 8
    text = DOC.read_text()
    assert sorted(_first_table_recipes(text)) == sorted(printed)
    assert _listing_block(text) == printed  # the block shows the command's lines, in order


def test_the_comparison_fails_when_a_recipe_is_missing_from_the_docs(capsys):
    printed = _printed_recipes(capsys)
    text = DOC.read_text()
    lines = text.splitlines()
    dropped = "\n".join(
        line for line in lines if not line.startswith(("resnet34_cvbench ", "| `resnet34_cvbench"))
    )
    assert sorted(_first_table_recipes(dropped)) != sorted(printed)
    assert _listing_block(dropped) != printed


def _help(capsys, argv) -> str:
    with pytest.raises(SystemExit):
        cli.main(argv)
    return " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone


def _train_eval_help(capsys) -> str:
    text = _help(capsys, ["train", "--help"])
    return text.split("--eval {end,epoch,none} ", 1)[1].split("--eval-count", 1)[0]


@pytest.mark.parametrize(
    "model, reports",
    [
        ("resnet18", ("top-1", "top-5")),
        ("inception_v3", ("top-1", "top-5")),
        ("ssd320", ("COCO", "AP")),
    ],
)
def test_eval_help_names_what_each_task_reports(capsys, model, reports):
    # What the task reports: the classifiers' metrics top1/top5, SSD320's COCO numbers.
    options = TaskOptions(model=model, image_size=64 if model == "ssd320" else 32,
                          num_classes=10, synthetic_steps=1)  # fmt: skip
    kwargs = {"backbone_weights": None} if model == "ssd320" else {}
    task = make_task(options, **kwargs)
    if model == "ssd320":
        assert "AP" in COCO_METRIC_NAMES
    else:
        assert [m.name for m in task.metrics()] == ["top1", "top5"]
    listing = _help(capsys, ["--help"])
    eval_line = listing.split(" eval evaluate ", 1)[1].split(" demo ", 1)[0]
    for text in (eval_line, _help(capsys, ["eval", "--help"]), _train_eval_help(capsys)):
        for word in reports:
            assert word in text, (word, text)
        # No help promises top-1/top-5 alone: the detection metric is named beside it.
        assert "COCO" in text and "top-1" in text
