"""`pyg-lie train swe` end to end at a tiny size, and its --backends option."""
import json
import math
import os

from pyg_lie.cli import build_parser


def test_train_swe_cli_tiny(tmp_path):
    argv = ["train", "swe", "--nlat", "8", "--nlon", "16", "--n-train", "4", "--n-val", "2", "--epochs", "2",
            "--batch-size", "2", "--channels", "4", "--heads", "2", "--blocks", "1", "--threads", "1",
            "--no-progress", "--out", str(tmp_path), "--results-dir", str(tmp_path / "results")]
    args = build_parser(argv).parse_args(argv)
    from pyg_lie.experiments import swe
    assert swe.main(args) == 0
    summary = json.load(open(tmp_path / "summary.json"))
    hist = summary["history"]
    assert set(hist) == {"pyg-lie", "torch-harmonics"}
    for h in hist.values():
        assert len(h["val"]) == 2 and all(math.isfinite(v) for v in h["train"] + h["val"])
    # same weights, same batches: the two attention layers train alike up to float rounding
    assert summary["max_abs_val_loss_difference"] <= 1e-5 * max(hist["pyg-lie"]["val"])
    assert os.path.exists(tmp_path / "maps.png") and os.path.exists(tmp_path / "learning_curves.png")
    # the result file (the CI version of the experiment): every field, a falling loss
    from pyg_lie.experiments.results import load_result
    rec = load_result(tmp_path / "results", "swe", "8x16")
    m = rec["metrics"]
    assert rec["paper"] == {} and rec["setting"].startswith("no paper number")
    for b in ("pyg-lie", "torch-harmonics"):
        assert m[f"{b}.train_loss_last"] < m[f"{b}.train_loss_first"]
    assert (tmp_path / "results" / "swe" / "8x16.maps.png").is_file()


def test_one_backend_parses_to_a_list():
    argv = ["train", "swe", "--backends", " torch-harmonics "]
    assert build_parser(argv).parse_args(argv).backends == ["torch-harmonics"]
