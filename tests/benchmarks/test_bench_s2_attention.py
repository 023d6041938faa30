"""`pyg-lie bench s2-attention` at a tiny size, and its --sizes option."""
import json

from pyg_lie.cli import build_parser


def test_bench_s2_attention_cli_tiny(tmp_path):
    argv = ["bench", "s2-attention", "--sizes", "8x16", "--repeat", "1", "--channels", "4", "--heads", "2",
            "--batch", "1", "--threads", "1", "--out", str(tmp_path)]
    args = build_parser(argv).parse_args(argv)
    from pyg_lie.benchmarks import s2_attention
    assert s2_attention.main(args) == 0
    rows = json.load(open(tmp_path / "results.json"))["rows"]
    assert {r["impl"] for r in rows} == {"torch-harmonics", "pyg-lie fused", "pyg-lie edge-list"}
    for r in rows:
        assert r["grid"] == "8x16" and r["fwd_bwd_ms"] > 0 and r["fwd_bwd_median_ratio"] > 0
        assert r["max_abs_diff"] < 1e-5  # both of ours against torch-harmonics on the same input
    assert (tmp_path / "results.csv").exists()


def test_grid_sizes_parse():
    argv = ["bench", "s2-attention", "--sizes", "8x16,16X32"]
    assert build_parser(argv).parse_args(argv).sizes == [(8, 16), (16, 32)]
