"""QM9 inputs, targets, splits and the offline pipeline through PyG's real QM9 class."""
import json
import os

import pytest
import torch

from pyg_lie.datasets.qm9 import (QM9_SIZE, QM9Transform, cormorant_split, pyg_split, write_synthetic_raw)


def test_transform_features_and_units():
    from torch_geometric.data import Data
    y = torch.arange(19, dtype=torch.float32).unsqueeze(0) / 10
    data = Data(z=torch.tensor([1, 6, 9]), pos=torch.randn(3, 3), y=y,
                edge_index=torch.tensor([[0, 1], [1, 0]]), x=torch.zeros(3, 11), name="gdb_1")
    out = QM9Transform("HOMO")(data)
    assert out.x.shape == (3, 15) and "edge_index" not in out and "name" not in out
    # C occupies block 1 with [1, c, c^2], c = 6/9; every other block is zero
    torch.testing.assert_close(out.x[1].view(5, 3)[1], torch.tensor([1.0, 6 / 9, 36 / 81]))
    assert out.x[1].view(5, 3)[[0, 2, 3, 4]].abs().sum() == 0
    torch.testing.assert_close(out.x[0].view(5, 3)[0], torch.tensor([1.0, 1 / 9, 1 / 81]))
    torch.testing.assert_close(out.y, torch.tensor([[200.0]]))  # 0.2 eV -> 200 meV
    t = QM9Transform("U0")
    assert (t.column, t.unit) == (12, "meV")  # atomization energy, as Cormorant / the paper
    assert QM9Transform("mu").unit == "D" and QM9Transform(2).name == "homo"
    assert data.y.shape == (1, 19)  # the input is not modified
    with pytest.raises(ValueError, match="target"):
        QM9Transform("nope")
    with pytest.raises(ValueError, match="atomic numbers"):
        QM9Transform("homo").features(torch.tensor([1, 17]))


def test_splits():
    s = cormorant_split()
    assert [len(s[k]) for k in ("train", "valid", "test")] == [100_000, 17_748, 13_083]
    allidx = torch.cat(list(s.values()))
    assert len(allidx.unique()) == QM9_SIZE == len(allidx)
    assert torch.equal(cormorant_split()["test"], s["test"])  # fixed permutation
    assert not torch.equal(cormorant_split(seed=1)["test"], s["test"])
    p = pyg_split()
    assert [len(p[k]) for k in ("train", "valid", "test")] == [110_831, 10_000, 10_000]
    small = cormorant_split(40)
    assert sum(len(v) for v in small.values()) == 40 and len(small["test"]) == 4


def test_offline_pipeline_end_to_end(tmp_path):
    """A synthetic raw/qm9_v3.pt is processed by PyG's own QM9 and the CLI trains and tests on it."""
    from torch_geometric.datasets import QM9
    root = str(tmp_path / "qm9")
    path = write_synthetic_raw(root, 30, seed=0)
    raw = torch.load(path, weights_only=True)  # the format PyG reads without rdkit
    assert set(raw[0]) == {"x", "edge_index", "edge_attr", "y", "pos", "z", "name", "idx"}
    assert raw[0]["y"].shape == (1, 19) and raw[0]["x"].shape[1] == 11
    ds = QM9(root, transform=QM9Transform("gap"))
    assert len(ds) == 30 and os.path.isfile(os.path.join(root, "processed", "data_v3.pt"))
    d = ds[3]
    assert d.x.shape == (raw[3]["z"].numel(), 15) and d.y.shape == (1, 1)
    torch.testing.assert_close(d.y, raw[3]["y"][:, 4:5] * 1000)
    torch.testing.assert_close(d.pos, raw[3]["pos"])
    # with RDKit installed PyG reads the SDF / CSV copy of the same molecules
    assert os.path.isfile(os.path.join(root, "raw", "gdb9.sdf"))
    plain = QM9(root)
    for i in (0, 3, 29):
        assert torch.equal(plain[i].edge_index, raw[i]["edge_index"]) and torch.equal(plain[i].z, raw[i]["z"])
        assert plain[i].name == raw[i]["name"] and int(plain[i].idx) == raw[i]["idx"]
    torch.testing.assert_close(plain._data.y, torch.cat([r["y"] for r in raw]))

    pytest.importorskip("pyg_lie.models.lie_transformer")
    from pyg_lie.cli import build_parser
    from pyg_lie.experiments import qm9
    out = str(tmp_path / "run")
    argv = ["train", "qm9", "--root", str(tmp_path / "syn"), "--synthetic", "24", "--target", "U0", "--epochs", "2",
            "--batch-size", "8", "--hidden", "8", "--layers", "1", "--heads", "2", "--no-progress",
            "--device", "cpu", "--out", out]
    assert qm9.main(build_parser(argv).parse_args(argv)) == 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["unit"] == "meV" and summary["paper_test_mae"]["SE3"] == 26
    assert torch.isfinite(torch.tensor(summary["test_mae"])) and summary["n_train"] == 18
    assert os.path.isfile(os.path.join(out, "learning_curves.png"))
    assert os.path.isfile(os.path.join(out, "checkpoint.pt"))
    # --synthetic never overwrites real data
    os.remove(os.path.join(str(tmp_path / "syn"), "raw", ".synthetic"))
    with pytest.raises(ValueError, match="not synthetic"):
        qm9.main(build_parser(argv).parse_args(argv))


def test_qm9_model_invariance():
    pytest.importorskip("pyg_lie.models.lie_transformer")
    import argparse
    from pyg_lie.experiments.qm9 import build_model
    torch.manual_seed(0)
    args = argparse.Namespace(group="T3", hidden=8, layers=1, heads=2, lift_samples=None, radius=None,
                              max_neighbors=None, normalization="softmax")
    model = build_model(args, 15).double().eval()
    z = torch.tensor([6, 1, 1, 8, 7, 1])
    x = QM9Transform().features(z).double()
    pos = torch.randn(6, 3, dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    a = model(x, pos, batch)
    b = model(x, pos + torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), batch)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def _parse(argv):
    from pyg_lie.cli import build_parser
    return build_parser(argv).parse_args(argv)


def test_paper_preset_and_overrides():
    pytest.importorskip("pyg_lie.models.lie_transformer")
    from pyg_lie.experiments.qm9 import build_model, resolve_preset
    a = resolve_preset(_parse(["train", "qm9", "--preset", "paper"]))
    assert (a.hidden, a.layers, a.heads, a.batch_size, a.lr, a.epochs) == (848, 13, 8, 75, 3e-4, 500)
    assert (a.content, a.location, a.combine, a.head_layers, a.max_neighbors, a.radius) == (
        "linear_concat_linear", "identity", "mlp", 1, 25, None)
    s = resolve_preset(_parse(["train", "qm9", "--preset", "paper", "--group", "SE3", "--hidden", "32",
                               "--layers", "2"]))
    assert (s.hidden, s.layers, s.lift_samples, s.max_neighbors, s.heads) == (32, 2, 2, 20, 8)
    m = build_model(s, 15)
    attn = m.blocks[0].attn
    assert (attn.content, attn.location, attn.combine) == ("linear_concat_linear", "identity", "mlp")
    assert len(m.head) == 1 and m.lift_samples == 2  # linear then pool (= pool then linear)
    small = resolve_preset(_parse(["train", "qm9"]))
    assert (small.hidden, small.layers, small.content, small.epochs) == (64, 2, "dot_product", 2)


def test_real_subset_smoke_training_loss_falls(tmp_path, monkeypatch):
    """The CLI trains on the first 200 real molecules (qm9pack) with the SchNet baseline; the loss falls."""
    import importlib.util
    if importlib.util.find_spec("qm9pack") is None:
        pytest.skip("qm9pack not installed (pip install pyg-lie[qm9])")
    pytest.importorskip("pyg_lie.models.lie_transformer")
    from pyg_lie.experiments import qm9
    out, res = str(tmp_path / "run"), str(tmp_path / "results")
    argv = ["train", "qm9", "--root", str(tmp_path / "data"), "--max-molecules", "200", "--target", "U0",
            "--preset", "paper", "--hidden", "16", "--layers", "1", "--heads", "2", "--epochs", "8",
            "--batch-size", "16", "--lr", "2e-3", "--baseline", "schnet", "--baseline-hidden", "16",
            "--baseline-interactions", "1", "--no-progress", "--device", "cpu", "--out", out,
            "--results-dir", res]
    assert qm9.main(_parse(argv)) == 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["source"] == "qm9pack" and summary["n_train"] == 153 and summary["unit"] == "meV"
    assert summary["train_loss_last"] < 0.9 * summary["train_loss_first"]
    base = summary["baseline"]
    assert base["train_loss_last"] < 0.9 * base["train_loss_first"]
    split = torch.load(os.path.join(out, "split.pt"))
    assert split["seed"] == 0 and len(split["test"]) == summary["n_test"] == 20
    record = json.load(open(os.path.join(res, "qm9", "U0-T3-paper-n153.json")))
    assert record["paper"]["test_mae_meV_SE3"] == 26
    assert record["metrics"]["test_mae_meV"] == pytest.approx(summary["test_mae"])
    assert record["metrics"]["schnet_test_mae_meV"] == pytest.approx(base["test_mae"])
    assert "first 200 molecules" in record["setting"] and "hidden 16 (paper 848)" in record["setting"]
    with pytest.raises(ValueError, match="--source pyg"):
        qm9.main(_parse(argv + ["--source", "qm9pack", "--synthetic", "10"]))


def test_schnet_interaction_graph_is_the_per_molecule_cutoff_graph():
    from pyg_lie.experiments.qm9 import _MoleculeGraph
    torch.manual_seed(0)
    batch = torch.tensor([0] * 5 + [1] * 1 + [2] * 7)
    pos = torch.randn(13, 3, dtype=torch.float64) * 2
    ei, w = _MoleculeGraph(2.5)(pos, batch)
    d = torch.cdist(pos, pos)
    ref = (batch[:, None] == batch[None, :]) & (d < 2.5) & ~torch.eye(13, dtype=torch.bool)
    got = torch.zeros(13, 13, dtype=torch.bool)
    got[ei[0], ei[1]] = True
    assert torch.equal(got, ref) and ei.shape[1] == int(ref.sum())
    torch.testing.assert_close(w, d[ei[0], ei[1]])
