"""Smoke tests of `pyg-lie train vit` and `pyg-lie bench vit` (tiny settings)."""
import json
import os

import torch

from pyg_lie.cli import build_parser


def test_train_vit_cli_synthetic(tmp_path):
    argv = ["train", "vit", "--dataset", "synthetic", "--max-train", "24", "--n-val", "12", "--n-test", "12",
            "--img-size", "8", "--patch-size", "4", "--depth", "1", "--ratios", "0.5,1.0",
            "--groups", "D4,C1", "--channels", "3", "--compare-attention", "--batch-size", "16",
            "--break-symmetry", "D2@0.5", "--epochs", "2", "--no-progress",
            "--out", str(tmp_path), "--results-dir", str(tmp_path / "results")]
    args = build_parser(argv).parse_args(argv)
    from pyg_lie.experiments import vit
    assert vit.main(args) == 0
    res = json.load(open(tmp_path / "results.json"))["results"]
    assert {r["group"] for r in res} == {"D4", "C1", "C4"}
    assert all(0.0 <= r["test_acc"] <= 1.0 for r in res)
    assert {(r["group"], r["final_group"]) for r in res} == {("D4", "D2"), ("C1", "C1"), ("C4", "C4")}
    assert os.path.exists(tmp_path / "fig4_accuracy_vs_ratio.png") and os.path.exists(tmp_path / "fig5_attention.png")
    from pyg_lie.experiments.results import load_result
    rec = load_result(tmp_path / "results", "vit", "synthetic-square")
    assert rec["paper"] == {} and "depth 1 (paper 6)" in rec["setting"]
    assert {"fig4.square.D4.ratio1.test_acc", "fig5.square.C4.irrepwise.ratio0.5.test_acc"} <= set(rec["metrics"])
    assert (tmp_path / "results" / "vit" / "synthetic-square.fig5_attention.png").is_file()


def test_smoke_accuracy_beats_chance(tmp_path):
    """The CI version of the experiment: a small D4 model on rotated polygons beats chance (1/6)."""
    argv = ["train", "vit", "--dataset", "synthetic", "--max-train", "384", "--n-val", "48", "--n-test", "96",
            "--img-size", "16", "--patch-size", "4", "--depth", "1", "--ratios", "1.0", "--groups", "D4",
            "--channels", "3", "--batch-size", "32", "--epochs", "15", "--evals", "2", "--no-progress",
            "--out", str(tmp_path), "--results-dir", str(tmp_path / "results")]
    from pyg_lie.experiments import vit
    assert vit.main(build_parser(argv).parse_args(argv)) == 0
    from pyg_lie.experiments.results import load_result
    m = load_result(tmp_path / "results", "vit", "synthetic-square")["metrics"]
    assert m["fig4.square.D4.ratio1.test_acc"] > 1.5 * m["chance"]


def test_rotate_images_quarter_turn_matches_rot90():
    from pyg_lie.experiments.vit import rotate_images
    x = torch.randn(2, 1, 6, 6)
    torch.testing.assert_close(rotate_images(x, torch.full((2,), torch.pi / 2)), torch.rot90(x, 1, (-2, -1)),
                               atol=1e-5, rtol=0)


def test_bench_vit_cli(tmp_path):
    argv = ["bench", "vit", "--img-size", "8", "--patch-size", "4", "--width", "96", "--depth", "1", "--batch", "2",
            "--reps", "1", "--out", str(tmp_path / "vit.json")]
    args = build_parser(argv).parse_args(argv)
    from pyg_lie.benchmarks import vit
    assert vit.main(args) == 0
    result = json.load(open(tmp_path / "vit.json"))  # the format scripts/benchmarks_table.py reads
    records = {r["configuration"]["model"]: r["metrics"] for r in result["records"]}
    assert list(records) == ["D4", "C4", "C1 same width", "C1 same params"]
    assert records["D4"]["macs_ratio_vs_same_width"] > 3.0
    assert records["C1 same width"]["speedup_vs_same_width"] == 1.0
    assert result["command"].startswith("pyg-lie bench vit") and "host_class" in result


def test_patternnet_folder_loader(tmp_path):
    import argparse

    import matplotlib.image as mpimg
    import numpy as np

    from pyg_lie.experiments.vit import load_dataset
    rng = np.random.default_rng(0)
    for c in ("beach", "runway"):
        (tmp_path / c).mkdir()
        for i in range(4):
            mpimg.imsave(tmp_path / c / f"{i}.png", rng.random((20, 20, 3)))
    a = argparse.Namespace(dataset="patternnet", data_dir=str(tmp_path), max_train=4, n_val=2, n_test=2, img_size=8)
    xtr, ytr, xv, yv, xte, yte, nc, name = load_dataset(a)
    assert (nc, name, tuple(xtr.shape)) == (2, "patternnet", (4, 3, 8, 8))
    assert xtr.min() >= -1 - 1e-6 and xtr.max() <= 1 + 1e-6
