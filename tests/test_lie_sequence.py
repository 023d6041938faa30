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
                 "--layers", "1", "--repeat", "1", "--out", bout]) == 0
    rows = json.load(open(os.path.join(bout, "bench.json")))["rows"]
    assert {(r["model"], r["graph"]) for r in rows} == {("G", "knn"), ("G", "complete"),
                                                       ("A", "knn"), ("A", "complete")}
    assert all(r["edges"] == (8 * 4 if r["graph"] == "knn" else 64) for r in rows)


def test_cli_rejects_bad_group(tmp_path):
    with pytest.raises(SystemExit):
        main(["train", "lie-sequence", "--group", "SE5", "--out", str(tmp_path)])
