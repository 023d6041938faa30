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


def _perturbed(model, seed=0):
    """Every parameter randomised (the heads start at zero): the checks below are not trivial."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return model


@pytest.mark.parametrize("group, score", [("SE2", "closed_form"), ("SO3", "mlp"), ("Aff2", "closed_form")])
def test_paper_coordinates_scale_the_attention_input_and_stay_equivariant(group, score):
    import math

    import torch

    from pyg_lie.experiments._lie_sequence_models import make_model
    from pyg_lie.groups import get_group
    from pyg_lie.nn.lie_algebra_attention import relative_log
    from pyg_lie.testing import assert_equivariant
    torch.manual_seed(0)
    model = _perturbed(make_model(group, score, 16, 2, 2, "token", coords="paper")).double().eval()
    G = get_group(group)
    g = G.exp(0.15 * torch.randn(10, G.dim, dtype=torch.float64))
    batch = torch.tensor([0] * 5 + [1] * 5)
    seen = {}
    hook = model.attn[0].register_forward_hook(lambda m, a, kw, out: seen.update(w=kw["rel_log"]), with_kwargs=True)
    out = model(g, batch=batch)
    hook.remove()
    edge_index = torch.tensor([[j, i] for b in (0, 5) for i in range(b, b + 5) for j in range(b, b + 5)]).t()
    w = relative_log(G, g, edge_index)[0]
    expect = w.clone()
    for name, sl in G.blocks.items():
        if name != "translation":
            expect[:, sl] = w[:, sl] / math.sqrt(2)
    got = seen["w"]
    assert got.shape == expect.shape
    # the same set of rows, whichever edge order the model uses
    key = lambda t: t[torch.argsort(t[:, 0] * 1e3 + t[:, -1])]  # noqa: E731
    assert torch.allclose(key(got), key(expect), atol=1e-12)
    assert not torch.allclose(key(got), key(w), atol=1e-3)
    assert torch.isfinite(out.prediction).all()
    assert_equivariant(lambda gg, bb: model(gg, batch=bb).prediction, (g, batch), G,
                       actions_in=("elements", "invariant"), actions_out="elements", atol=1e-9)


def test_score_init_sets_the_block_weight_ratio():
    import torch

    from pyg_lie.experiments._lie_sequence_models import make_model, set_score_init
    m = make_model("SE2", "closed_form", 16, 2, 2, "token", score_init=4.0)
    for attn in m.attn:
        ratio = attn.block_weights / attn.temperature[:, None]
        assert torch.allclose(ratio, torch.full_like(ratio, 4.0), rtol=1e-5)
    with pytest.raises(ValueError, match="ratio"):
        set_score_init(m, 0.0)
    with pytest.raises(ValueError, match="coords"):
        make_model("SE2", "mlp", 16, 2, 2, "token", coords="euler")
    # C has no block weights and A no relative logs: both options leave them unchanged
    torch.manual_seed(0)
    a = make_model("SE2", "vector", 16, 1, 2, "token")
    torch.manual_seed(0)
    b = make_model("SE2", "vector", 16, 1, 2, "token", coords="paper", score_init=4.0)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_ablation_cli_writes_the_grid(tmp_path):
    from pyg_lie.experiments.results import load_result
    res = tmp_path / "results"
    assert main(["train", "lie-sequence-ablation", "--group", "SE2", "--factors", "base", "paper-coords", "init-high",
                 "--seeds", "0", "--steps", "3", "--train-size", "16", "--test-size", "8", "--batch-size", "4",
                 "--out", str(tmp_path / "abl"), "--no-progress", "--results-dir", str(res)]) == 0
    rec = load_result(res, "lie-sequence-ablation", "SE2")
    m = rec["metrics"]
    assert {"base.G.pose_error", "base.C.pose_error", "base.G_over_C", "paper-coords.G_over_C",
            "init-high.G.pose_error", "base.G.failed_seeds"} <= set(m)
    assert "init-high.C.pose_error" not in m  # C has no block weights
    # a sharper initial kernel puts more weight on the token itself and says less about its place
    assert m["init-high.G.init_self_attention"] > m["base.G.init_self_attention"] > 1 / 7
    assert m["init-high.G.init_order_signal"] < m["base.G.init_order_signal"]
    assert rec["paper"]["base.G_over_C"] == pytest.approx(0.6)
    assert "one factor at a time" in rec["setting"]
    assert (res / "lie-sequence-ablation" / "SE2.SE2_ablation.png").is_file()
    # a second call reads the cached runs instead of training again
    assert main(["train", "lie-sequence-ablation", "--group", "SE2", "--factors", "base", "--seeds", "0",
                 "--steps", "3", "--train-size", "16", "--test-size", "8", "--batch-size", "4",
                 "--out", str(tmp_path / "abl"), "--no-progress", "--results-dir", str(res)]) == 0
    assert load_result(res, "lie-sequence-ablation", "SE2")["metrics"]["base.G.pose_error"] == m["base.G.pose_error"]


def test_ablation_result_rebuilds_from_its_stored_runs(tmp_path, capsys):
    """--from-results: the result file's per-seed runs give the same file without training (from a
    clone, where the runs/ cache is absent); old files without runs and other options are refused."""
    import json

    from pyg_lie.experiments.results import load_result
    opts = ["--group", "SE2", "--factors", "base", "init-low", "--seeds", "0", "1", "--steps", "3",
            "--train-size", "16", "--test-size", "8", "--batch-size", "4", "--no-progress"]
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["train", "lie-sequence-ablation", *opts, "--out", str(tmp_path / "abl"),
                 "--results-dir", str(first)]) == 0
    rec = load_result(first, "lie-sequence-ablation", "SE2")
    assert sorted(rec["runs"]) == ["base", "init-low"] and sorted(rec["runs"]["base"]) == ["C", "G"]
    assert [r["seed"] for r in rec["runs"]["init-low"]["G"]] == [0, 1]
    stored = str(first / "lie-sequence-ablation" / "SE2.json")
    assert main(["train", "lie-sequence-ablation", *opts, "--out", str(tmp_path / "empty"),
                 "--from-results", stored, "--results-dir", str(second)]) == 0
    again = load_result(second, "lie-sequence-ablation", "SE2")
    assert again["metrics"] == rec["metrics"] and again["runs"] == rec["runs"] and again["paper"] == rec["paper"]
    assert "(--from-results)" in again["setting"]
    assert not (tmp_path / "empty" / "SE2").exists() or not any((tmp_path / "empty" / "SE2").iterdir())
    # refused: another budget, a seed the file lacks, a file without runs
    old = dict(rec)
    old.pop("runs")
    (tmp_path / "old.json").write_text(json.dumps(old))
    for extra, message in [(["--from-results", stored, "--steps", "4"], "--steps 3"),
                           (["--from-results", stored, "--seeds", "0", "2"], "seed(s) [2]"),
                           (["--from-results", str(tmp_path / "old.json")], "holds no per-seed ablation runs")]:
        assert main(["train", "lie-sequence-ablation", *opts, "--out", str(tmp_path / "empty"), *extra,
                     "--results-dir", str(second)]) == 2
        assert message in capsys.readouterr().err
