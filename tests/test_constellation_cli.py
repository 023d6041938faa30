"""``pyg-lie train constellation``: learning-rate schedule and a tiny end-to-end run."""
import argparse
import csv
import json
import math
import os

import pytest

from pyg_lie.experiments import constellation as exp


def _args(argv):
    p = argparse.ArgumentParser()
    exp.add_arguments(p)
    return p.parse_args(argv)


def test_lr_factor_warmup_then_cosine():
    a = _args(["--epochs", "20", "--warmup-epochs", "4", "--schedule", "cosine"])
    f = [exp.lr_factor(e, a) for e in range(21)]
    assert f[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8])          # linear warm-up
    assert f[4] == pytest.approx(1.0)
    assert all(x > y for x, y in zip(f[4:20], f[5:21]))          # strictly decreasing
    assert f[12] == pytest.approx(0.5)                           # half-way through the cosine
    assert f[20] == pytest.approx(0.0, abs=1e-12)
    const = _args(["--epochs", "20", "--warmup-epochs", "2"])
    assert [exp.lr_factor(e, const) for e in (0, 1, 2, 19)] == pytest.approx([1 / 3, 2 / 3, 1, 1])


def test_tiny_run_cosine_resume(tmp_path):
    out = str(tmp_path / "run")
    base = ["--group", "SE2", "--num-train", "48", "--num-test", "16", "--hidden", "16", "--layers", "1",
            "--heads", "2", "--kernel-dim", "4", "--batch-size", "16", "--lr", "1e-3", "--schedule", "cosine",
            "--warmup-epochs", "1", "--grad-clip", "1.0", "--invariance-lifts", "1", "2",
            "--invariance-clouds", "8", "--no-progress", "--out", out]
    assert exp.main(_args(base + ["--epochs", "3"])) == 0
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    # the logged lr is the one set for the next epoch (the scheduler steps at the end of each)
    a = _args(base + ["--epochs", "3"])
    assert [float(r["lr"]) for r in rows] == pytest.approx([1e-3 * exp.lr_factor(e, a) for e in (1, 2, 3)])
    assert exp.main(_args(base + ["--epochs", "4", "--resume", os.path.join(out, "checkpoint.pt")])) == 0
    with open(os.path.join(out, "metrics.csv")) as f:
        assert [int(float(r["epoch"])) for r in csv.DictReader(f)] == [0, 1, 2, 3]
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    assert res["epochs_done"] == 4
    assert 0.0 <= res["test"]["acc"] <= 1.0 and math.isfinite(res["inv_SE2"])
    assert os.path.isfile(os.path.join(out, "learning_curves.png"))
    assert os.path.isfile(os.path.join(out, "invariance_vs_lifts.png"))
