"""Command-line entry points of the Lie-sequence experiment, summary and benchmark (tiny runs)."""
from __future__ import annotations

import json
import os

import pytest

from pyg_lie.cli import main


def test_train_summary_and_bench_cli(tmp_path):
    out = str(tmp_path / "ls")
    common = ["--steps", "3", "--seeds", "0", "1", "--train-size", "16", "--test-size", "8",
              "--batch-size", "4", "--equiv-sequences", "4", "--out", out, "--no-progress"]
    assert main(["train", "lie-sequence", "--group", "SE2", "--score", "closed_form", "vector", *common]) == 0
    with open(os.path.join(out, "SE2_closed_form.json")) as f:
        summ = json.load(f)["summary"]
    assert summ["score_params"] == 36 and summ["seeds"] == [0, 1]
    assert summ["equivariance_error"] < 1e-12
    with open(os.path.join(out, "SE2_vector.json")) as f:
        assert json.load(f)["summary"]["equivariance_error"] > 1e-6
    assert os.path.exists(os.path.join(out, "SE2_loss.png"))
    assert main(["summary", "--collect-only", "--groups", "SE2", "--out", out]) == 0
    text = open(os.path.join(out, "summary.md")).read()
    assert "| G (closed_form) |" in text and "| 0.003 |" in text  # paper column side by side
    assert os.path.exists(os.path.join(out, "pose_error.png"))
    bout = str(tmp_path / "bench")
    assert main(["bench", "lie-algebra-attention", "--groups", "SE2", "--sizes", "8", "--k", "3",
                 "--layers", "1", "--repeat", "1", "--graph-sizes", "64", "--out", bout]) == 0
    rows = json.load(open(os.path.join(bout, "bench.json")))["rows"]
    assert {(r["model"], r["graph"]) for r in rows} == {("G", "knn"), ("G", "complete"),
                                                       ("A", "knn"), ("A", "complete")}
    assert all(r["edges"] == (8 * 4 if r["graph"] == "knn" else 64) for r in rows)


def test_cli_rejects_bad_group(tmp_path):
    with pytest.raises(SystemExit):
        main(["train", "lie-sequence", "--group", "SE5", "--out", str(tmp_path)])


def test_smoke_writes_a_result_file_and_learns(tmp_path):
    """The CI version of the experiment: every field of the result file, the paper's numbers
    beside ours, and a training loss that falls."""
    from pyg_lie.experiments.results import load_result
    res = tmp_path / "results"
    assert main(["train", "lie-sequence", "--group", "SE2", "--score", "closed_form", "--seeds", "0",
                 "--steps", "200", "--train-size", "64", "--test-size", "16", "--batch-size", "16",
                 "--hidden", "16", "--layers", "1", "--head", "token", "--equiv-sequences", "4",
                 "--out", str(tmp_path / "ls"), "--no-progress", "--results-dir", str(res)]) == 0
    rec = load_result(res, "lie-sequence", "SE2-G-token")
    m = rec["metrics"]
    assert rec["paper"] == {"G.pose_error": 0.003, "G.equivariance_error": 4e-10, "G.score_params": 36}
    assert rec["seed"] == [0] and "hidden 16 (paper 32)" in rec["setting"]
    assert m["G.final_loss"] < 0.9 * m["G.first_loss"]
    assert m["G.equivariance_error"] < 1e-12 and m["G.score_params"] == 12
    assert (res / "lie-sequence" / "SE2-G-token.SE2_loss.png").is_file()
