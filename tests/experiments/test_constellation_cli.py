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


@pytest.mark.parametrize("features", ["constant", "pairwise_distances"])
def test_tiny_run_cosine_resume(tmp_path, features):
    out = str(tmp_path / "run")
    base = ["--group", "SE2", "--features", features, "--num-train", "48", "--num-test", "16", "--hidden", "16", "--layers", "1",
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
    curve = res["invariance_curve"]
    for mode in ("haar", "finite"):  # error and accuracy at every K of --invariance-lifts 1 2
        assert len(curve[mode]) == len(curve[mode + "_acc"]) == 2
        assert all(0.0 <= a <= 1.0 for a in curve[mode + "_acc"])
    assert os.path.isfile(os.path.join(out, "learning_curves.png"))
    assert os.path.isfile(os.path.join(out, "invariance_vs_lifts.png"))


def test_pairwise_distance_features_match_cdist_and_are_invariant():
    import torch
    gen = torch.Generator().manual_seed(0)
    sizes = [3, 7, 1, 5]
    pos = torch.randn(sum(sizes), 2, generator=gen, dtype=torch.float64)
    batch = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes))
    f = exp.pairwise_distance_features(pos, batch, width=8)
    assert f.shape == (sum(sizes), 8)
    start = 0
    for n in sizes:  # each row: the n - 1 distances to the other points, descending, then zeros
        p = pos[start:start + n]
        for i in range(n):
            d = torch.cat([torch.cdist(p[i:i + 1], p)[0, :i], torch.cdist(p[i:i + 1], p)[0, i + 1:]])
            want = torch.cat([d.sort(descending=True).values, d.new_zeros(8 - (n - 1))])
            torch.testing.assert_close(f[start + i], want)
        start += n
    # E(2) and permutation invariance: rotate + reflect + translate each cloud, shuffle within clouds
    th = torch.rand(4, generator=gen, dtype=torch.float64) * 2 * math.pi
    R = torch.stack([torch.stack([th.cos(), -th.sin()], -1), torch.stack([th.sin(), th.cos()], -1)], -2)
    R[0] = R[0] @ torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    t = torch.randn(4, 2, generator=gen, dtype=torch.float64)
    pos2 = (R[batch] @ pos.unsqueeze(-1)).squeeze(-1) + t[batch]
    perm = torch.cat([torch.randperm(n, generator=gen) + s for n, s in
                      zip(sizes, torch.tensor([0] + sizes[:-1]).cumsum(0).tolist())])
    torch.testing.assert_close(exp.pairwise_distance_features(pos2[perm], batch, width=8), f[perm])
    with pytest.raises(ValueError, match="width"):
        exp.pairwise_distance_features(pos, batch, width=5)


def test_distance_feature_model_is_se2_invariant_in_float64():
    import torch
    from pyg_lie.datasets.constellation import Constellation
    a = _args(["--group", "SE2", "--lift", "finite", "--lift-samples", "4", "--features", "pairwise_distances",
               "--hidden", "16", "--layers", "2", "--heads", "2", "--kernel-dim", "4"])
    model = exp.build_model(a).double().eval()
    assert isinstance(model, exp.DistanceFeatureModel) and model.net.in_channels == exp.MAX_POINTS["uniform"] - 1
    data = Constellation(3, seed=5)
    from torch_geometric.loader import DataLoader
    d = next(iter(DataLoader(data, batch_size=3)))
    pos = d.pos.double()
    # a C_4 rotation and a translation per cloud: exact for the C_4 lift
    R = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    t = torch.randn(3, 2, dtype=torch.float64)
    pos2 = pos @ R.T + t[d.batch]
    y = model(d.x.double(), pos, d.batch, num_graphs=3)
    y2 = model(d.x.double(), pos2, d.batch, num_graphs=3)
    assert y.shape == (3, 12) and torch.isfinite(y).all()
    torch.testing.assert_close(y2, y, atol=1e-10, rtol=1e-10)


def test_majority_baseline():
    import torch
    from pyg_lie.datasets.constellation import Constellation
    tr, te = Constellation(4, seed=0), Constellation(3, seed=1)
    tr._data.y = torch.tensor([[0, 1, 2, 2], [0, 1, 2, 1], [1, 1, 0, 1], [0, 2, 2, 1]])
    te._data.y = torch.tensor([[0, 1, 2, 1], [1, 1, 2, 1], [2, 2, 0, 0]])
    # majority per head: 0, 1, 2, 1 -> correct 4 + 3 + 0 of 12
    assert exp.majority_baseline(tr, te) == pytest.approx(7 / 12)


def test_max_points_matches_the_templates():
    from pyg_lie.datasets.constellation import official_templates, templates
    for variant, temps in (("uniform", templates), ("official", official_templates)):
        assert exp.MAX_POINTS[variant] == 2 * sum(len(t) for t in temps().values())


def test_init_from_loads_weights_with_a_fresh_schedule(tmp_path):
    import torch
    base = ["--group", "T2", "--num-train", "32", "--num-test", "8", "--hidden", "16", "--layers", "1",
            "--heads", "2", "--kernel-dim", "4", "--batch-size", "16", "--invariance-lifts",
            "--invariance-clouds", "4", "--no-progress"]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert exp.main(_args(base + ["--epochs", "2", "--lr", "1e-2", "--out", a])) == 0
    # lr 0: Adam leaves the loaded weights as they are, so b ends with a's weights
    assert exp.main(_args(base + ["--epochs", "1", "--lr", "0", "--seed", "5", "--out", b,
                                  "--init-from", os.path.join(a, "checkpoint.pt")])) == 0
    wa = torch.load(os.path.join(a, "checkpoint.pt"), weights_only=False)
    wb = torch.load(os.path.join(b, "checkpoint.pt"), weights_only=False)
    assert wb["epoch"] == 0  # a fresh run, not a continuation of a's two epochs
    for k, v in wa["model"].items():
        assert torch.equal(v, wb["model"][k]), k
    with pytest.raises(ValueError, match="different architecture"):
        exp.main(_args(base + ["--hidden", "8", "--epochs", "1", "--out", str(tmp_path / "c"),
                               "--init-from", os.path.join(a, "checkpoint.pt")]))
    with pytest.raises(ValueError, match="does not exist"):
        exp.main(_args(base + ["--epochs", "1", "--out", str(tmp_path / "d"), "--init-from", "nope.pt"]))


def test_tiny_run_with_bf16_autocast(tmp_path):
    """``--amp bf16`` trains under autocast end to end (fused kernels in float32 inside it)
    and evaluates in full precision."""
    out = str(tmp_path / "amp")
    argv = ["--group", "SE2", "--num-train", "48", "--num-test", "16", "--hidden", "16", "--layers", "1",
            "--heads", "2", "--kernel-dim", "4", "--batch-size", "16", "--epochs", "2", "--amp", "bf16",
            "--invariance-lifts", "1", "--invariance-clouds", "8", "--no-progress", "--out", out]
    assert exp.main(_args(argv)) == 0
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    assert res["epochs_done"] == 2 and math.isfinite(res["inv_SE2"]) and 0.0 <= res["test"]["acc"] <= 1.0
    with open(os.path.join(out, "metrics.csv")) as f:
        assert all(math.isfinite(float(r["train_loss"])) for r in csv.DictReader(f))


def test_kernel_per_head_builds_and_trains_the_official_kernel():
    """``--kernel-per-head`` builds one location MLP per head; the default, one shared MLP."""
    args = _args(["--group", "SE2", "--hidden", "16", "--layers", "1", "--heads", "2", "--kernel-dim", "4",
                  "--kernel-per-head"])
    net = exp.build_model(args)
    assert type(net.blocks[0].attn.loc_mlp).__name__ == "HeadwiseMLP"
    assert type(exp.build_model(_args(["--group", "SE2"])).blocks[0].attn.loc_mlp).__name__ == "Sequential"


def test_bad_option_value_is_a_one_line_error(capsys, monkeypatch):
    from pyg_lie.cli import TRACEBACK_ENV, main
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    argv = ["train", "constellation", "--radius", "-1", "--num-train", "8", "--num-test", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "pyg-lie train constellation: error: radius must be a finite number >= 0" in err
    assert "lie_transformer.py" in err and "Traceback" not in err
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    with pytest.raises(ValueError, match="radius"):
        main(argv)


def test_smoke_writes_a_result_file_and_learns(tmp_path):
    """The CI version of the experiment: its result file has every field, the loss falls and the
    accuracy beats the majority count."""
    from pyg_lie.experiments.results import load_result
    argv = ["--group", "T2", "--num-train", "96", "--num-test", "48", "--hidden", "16", "--layers", "1",
            "--heads", "2", "--kernel-dim", "4", "--batch-size", "16", "--lr", "3e-3", "--epochs", "6",
            "--eval-every", "6", "--features", "pairwise_distances", "--normalization", "softmax",
            "--invariance-clouds", "8", "--no-progress", "--out", str(tmp_path / "run"),
            "--results-dir", str(tmp_path / "results"), "--run-name", "smoke"]
    assert exp.main(_args(argv)) == 0
    rec = load_result(tmp_path / "results", "constellation", "smoke")
    m = rec["metrics"]
    assert rec["experiment"] == "constellation" and rec["seed"] == 0
    assert rec["command"].startswith("pyg-lie train constellation --group T2")
    assert rec["paper"] == {"test_acc": 0.75, "test_SE2_acc": 0.63}
    assert rec["setting"].startswith("scaled down: num-train 96 (paper 10000)")
    assert m["train_loss_last"] < m["train_loss_first"]
    assert m["test_acc"] > max(m["majority_baseline"], 1 / 3)
    assert (tmp_path / "results" / "constellation" / "smoke.learning_curves.png").is_file()


def test_set_transformer_baseline_trains_and_is_not_rotation_invariant(tmp_path):
    """`--model settransformer` (Table 1's baseline): permutation invariant, not SE(2)
    invariant, trains, and its result file carries the paper's baseline row."""
    import torch

    from pyg_lie.experiments.results import load_result
    net = exp.SetTransformerBaseline(1, 16, 12, num_layers=1, heads=2).double()
    pos = torch.randn(10, 2, dtype=torch.float64)
    x = torch.ones(10, 1, dtype=torch.float64)
    batch = torch.tensor([0] * 6 + [1] * 4)
    y = net(x, pos, batch, num_graphs=2)
    perm = torch.cat([torch.randperm(6), 6 + torch.randperm(4)])
    torch.testing.assert_close(net(x[perm], pos[perm], batch, num_graphs=2), y)
    assert (net(x, pos + 1.0, batch, num_graphs=2) - y).abs().max() > 1e-3  # no translation invariance
    argv = ["--model", "settransformer", "--num-train", "96", "--num-test", "48", "--hidden", "16",
            "--layers", "1", "--heads", "2", "--batch-size", "16", "--lr", "3e-3", "--epochs", "6",
            "--eval-every", "6", "--features", "pairwise_distances", "--invariance-clouds", "8", "--no-progress",
            "--out", str(tmp_path / "run"), "--results-dir", str(tmp_path / "results")]
    assert exp.main(_args(argv)) == 0
    rec = load_result(tmp_path / "results", "constellation", "SetTransformer-uniform-aug-none")
    m = rec["metrics"]
    assert rec["paper"] == {"test_acc": 0.58, "test_SE2_acc": 0.44}
    assert "layers 1 (paper 8)" in rec["setting"] and "(paper 1075k)" in rec["setting"]
    assert m["train_loss_last"] < m["train_loss_first"] and m["test_acc"] > 1 / 3
    assert m["inv_SE2"] > 1e-3
