"""`cvbench eval --log-dir` is never a training run's folder: a folder whose run lock a
live run holds (exit 1, as a second `train`), or that holds a run or a training's
`results.json` (exit 2); `--json` never replaces a training's `results.json`. All before
anything is loaded (the checkpoint here is no checkpoint at all)."""

import json

from cvbench import cli
from cvbench.training.run_dir import RunDirectory, RunFolder
from cvbench.utils.files import record_output

EVAL = ["eval", "--synthetic", "--checkpoint"]


def _training_folder(root):
    run = root / "run"
    run.mkdir()
    (run / "train_log.jsonl").write_text("{}\n")
    (run / "results.json").write_text(json.dumps({"plan": {}, "metrics": {"top1": 0.5}}))
    record_output(run / "results.json")
    return run


def test_eval_refuses_a_finished_training_runs_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _training_folder(tmp_path)
    (tmp_path / "c.npz").write_bytes(b"no checkpoint")
    before = (tmp_path / "run" / "results.json").read_bytes()
    assert cli.main([*EVAL, "c.npz", "--log-dir", "run"]) == 2
    assert capsys.readouterr().err == (
        "cvbench: error: run is a training run's folder (its results.json is the training's): "
        "give eval another --log-dir\n"
    )
    (tmp_path / "run" / "results.json").unlink()  # a killed run: its log alone
    assert cli.main([*EVAL, "c.npz", "--log-dir", "run"]) == 2
    assert capsys.readouterr().err == (
        "cvbench: error: run is a training run's folder (it holds train_log.jsonl): give eval "
        "another --log-dir\n"
    )
    (tmp_path / "run" / "results.json").write_bytes(before)
    record_output(tmp_path / "run" / "results.json")
    assert cli.main([*EVAL, "c.npz", "--json", "run/results.json"]) == 2
    assert capsys.readouterr().err == (
        "cvbench: error: --json run/results.json is a training's results file; it is never "
        "replaced: give eval another --json\n"
    )
    assert (tmp_path / "run" / "results.json").read_bytes() == before


def test_eval_refuses_a_folder_a_training_run_holds(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.npz").write_bytes(b"no checkpoint")
    held = RunDirectory(tmp_path / "ce")
    held.acquire(fresh=True)  # what cvbench train holds from its start to its results.json
    try:
        assert cli.main([*EVAL, "c.npz", "--log-dir", "ce"]) == 1
        err = capsys.readouterr().err
    finally:
        held.release()
    holder = json.loads(RunFolder(tmp_path / "ce").lock.read_text())
    assert err == (
        f"cvbench eval: error: ce is in use by a training run (pid {holder['pid']} on host "
        f"{holder['host']} since {holder['started']}); give eval another --log-dir\n"
    )
    assert sorted(p.name for p in (tmp_path / "ce").iterdir()) == [".cvbench-run.lock"]
