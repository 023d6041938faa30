"""The QM9 harness: PyG baselines without pyg-lib/torch-sparse, rotations and their
sensitivity, ``bench qm9``, ``train qm9-budget`` and the new ``train qm9`` options."""
import importlib.util
import json
import os

import pytest
import torch

from pyg_lie.experiments.qm9_models import (DimeNetPlusPlusQM9, build_model, lie_transformer_kwargs,
                                            random_rotations, rotate, rotation_sensitivity, triplets)

needs_qm9pack = pytest.mark.skipif(importlib.util.find_spec("qm9pack") is None,
                                   reason="qm9pack not installed (pip install pyg-lie[qm9])")


def _parse(argv):
    from pyg_lie.cli import build_parser
    return build_parser(argv).parse_args(argv)


def test_triplets_match_enumeration():
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, 7, (2, 30), generator=gen)
    ei = ei[:, ei[0] != ei[1]]
    i, j, idx_i, idx_j, idx_k, idx_kj, idx_ji = triplets(ei, 7)
    assert torch.equal(i, ei[1]) and torch.equal(j, ei[0])
    want = set()
    for e, (s, t) in enumerate(ei.T.tolist()):  # edge e: s -> t, i.e. j = s, i = t
        for f, (s2, t2) in enumerate(ei.T.tolist()):  # edge f: k -> j
            if t2 == s and s2 != t:
                want.add((t, s, s2, f, e))
    got = set(zip(idx_i.tolist(), idx_j.tolist(), idx_k.tolist(), idx_kj.tolist(), idx_ji.tolist()))
    assert got == want and len(want) == idx_i.numel()


def _molecules(n=3, dtype=torch.float64):
    gen = torch.Generator().manual_seed(1)
    sizes = [5, 7, 4][:n]
    z = torch.tensor([6, 1, 1, 8, 7, 1, 6, 6, 1, 1, 9, 1, 8, 1, 1, 6][:sum(sizes)])
    pos = 1.5 * torch.randn(sum(sizes), 3, generator=gen, dtype=dtype)
    batch = torch.repeat_interleave(torch.arange(n), torch.tensor(sizes))
    return z, pos, batch


def test_dimenet_runs_without_torch_sparse_and_is_invariant():
    torch.manual_seed(0)
    # small bases: PyG builds them symbolically (sympy), which takes minutes at the defaults
    model = DimeNetPlusPlusQM9(hidden_channels=16, num_blocks=2, int_emb_size=8, basis_emb_size=4,
                               out_emb_channels=16, num_spherical=3, num_radial=3).double()
    with torch.no_grad():  # PyG starts the output layers at zero, which would make any invariance hold
        for p in model.parameters():
            if not p.any():
                p.normal_(0.0, 0.3)
    z, pos, batch = _molecules()
    y = model(z, pos, batch)
    R = random_rotations(3, torch.Generator().manual_seed(2), torch.float64)
    y2 = model(z, rotate(pos, batch, R) + torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64), batch)
    assert y.shape == (3, 1)
    torch.testing.assert_close(y, y2, atol=1e-9, rtol=1e-9)
    # and it depends on the geometry: the check can fail
    assert not torch.allclose(y, model(z, pos * 1.2, batch), atol=1e-6)


def test_rotate_moves_each_molecule_rigidly_about_its_centroid():
    z, pos, batch = _molecules()
    R = random_rotations(3, torch.Generator().manual_seed(3), torch.float64)
    q = rotate(pos, batch, R)
    for b in range(3):
        p, r = pos[batch == b], q[batch == b]
        torch.testing.assert_close(torch.cdist(p, p), torch.cdist(r, r))
        torch.testing.assert_close(p.mean(0), r.mean(0))
    assert not torch.allclose(pos, q)


def _loader():
    from torch_geometric.data import Batch, Data
    from pyg_lie.datasets.qm9 import QM9Transform
    z, pos, batch = _molecules(dtype=torch.float32)
    tf = QM9Transform()
    data = [Data(z=z[batch == b], pos=pos[batch == b], x=tf.features(z[batch == b]), y=torch.zeros(1, 1))
            for b in range(3)]
    return [Batch.from_data_list(data)]


@pytest.mark.parametrize("kind,invariant", [("schnet", True), ("lie-T3", False), ("lie-SE3", False)])
def test_rotation_sensitivity_is_zero_only_for_invariant_models(kind, invariant):
    torch.manual_seed(0)
    overrides = {} if kind == "schnet" else {"hidden": 16, "layers": 1, "heads": 2}
    model, predict = build_model(kind, 15, "small", **overrides)
    s = rotation_sensitivity(model, predict, _loader(), scale=10.0)
    rel = rotation_sensitivity(model, predict, _loader(), relative=True)
    if invariant:
        assert s < 1e-4 and rel < 1e-4
    else:
        assert s > 1e-4 and rel > 1e-4


def test_presets_se3_neighbourhood_and_exact_finite_lift():
    kw = lie_transformer_kwargs("paper", "SE3", "haar")
    assert (kw["num_layers"], kw["hidden_channels"], kw["lift_neighbors"], kw["max_num_neighbors"],
            kw["lift_samples"]) == (30, 848, 25, 20, 2)
    fin = lie_transformer_kwargs("cpu", "SE3", "finite")
    assert (fin["lift_samples"], fin["lift_neighbors"], fin["max_num_neighbors"]) == (12, 25, None)
    t3 = lie_transformer_kwargs("cpu", "T3")
    assert (t3["lift_samples"], t3["max_num_neighbors"], t3["num_layers"]) == (1, 25, 6)
    with pytest.raises(ValueError, match="preset"):
        lie_transformer_kwargs("huge", "T3")
    # the train qm9 CLI: SE3 gets the log-map neighbourhood, the finite lift keeps all of it
    from pyg_lie.experiments.qm9 import build_model as cli_model, resolve_preset
    a = resolve_preset(_parse(["train", "qm9", "--preset", "cpu", "--group", "SE3", "--lift", "finite"]))
    assert (a.hidden, a.layers, a.lift_samples, a.lift_neighbors, a.max_neighbors) == (96, 6, 12, 25, None)
    m = cli_model(a, 15)
    assert (m.lift.mode, m.lift_samples, m.lift_neighbors) == ("finite", 12, 25)


def test_bench_spec_parsing():
    from pyg_lie.benchmarks.qm9 import parse_spec
    assert parse_spec("lie-SE3:cpu:finite-all") == {"name": "lie-SE3 cpu finite-all", "kind": "lie-SE3",
                                                    "preset": "cpu", "lift": "finite", "all_pairs": True}
    assert parse_spec("schnet")["preset"] is None
    for bad in ("schnet:cpu", "lie-T3:cpu:finite", "lie-SE3:big", "gnn"):
        with pytest.raises(Exception, match="kind|preset|lift"):
            parse_spec(bad)


@needs_qm9pack
def test_bench_qm9_smoke(tmp_path):
    from pyg_lie.benchmarks import qm9 as bench
    out = tmp_path / "bench.json"
    argv = ["bench", "qm9", "--root", str(tmp_path / "data"), "--max-molecules", "300", "--models", "lie-T3:small",
            "lie-SE3:small:finite", "schnet", "--batches", "1", "--rounds", "1", "--batch-size", "8",
            "--sensitivity-molecules", "8", "--out", str(out)]
    assert bench.main(_parse(argv)) == 0
    rec = json.loads(out.read_text())
    rows = {r["configuration"]["model"]: r["metrics"] for r in rec["records"]}
    assert set(rows) == {"lie-T3 small", "lie-SE3 small finite", "schnet"}
    assert rows["lie-SE3 small finite"]["step_vs_T3"] > 0 and rows["lie-T3 small"]["throughput_vs_schnet"] > 0
    assert rows["schnet"]["rotation_sensitivity_rel"] < 1e-4 < rows["lie-T3 small"]["rotation_sensitivity_rel"]
    assert rec["git_revision"] and "cores" in rec["host_class"] and rec["command"].startswith("pyg-lie bench qm9")


@needs_qm9pack
def test_qm9_budget_smoke_learns_resumes_and_plots(tmp_path, monkeypatch):
    from pyg_lie.experiments import qm9_budget

    class StepClock(qm9_budget._Clock):
        """Every clock reading advances 1/128 s (exact in binary): a training step counts two ticks, so
        the budget is a fixed number of steps and the learning rate schedule, the evaluation points
        and hence the curve do not depend on how busy the machine is."""

        def __init__(self, kind, spent=0.0):
            super().__init__(kind, spent)
            self._t, self._now = 0.0, self._tick

        def _tick(self):
            self._t += 1 / 128
            return self._t

    monkeypatch.setattr(qm9_budget, "_Clock", StepClock)
    res = tmp_path / "results"
    # ZPVE grows with the number of atoms: a model that sees the molecules halves the error of the best
    # constant within a few hundred steps (HOMO's curve stays within noise of the constant's at this size)
    argv = ["train", "qm9-budget", "--root", str(tmp_path / "data"), "--max-molecules", "300", "--target", "zpve",
            "--model", "lie-T3", "--preset", "small", "--augment", "so3", "--minutes", "0.1", "--eval-points", "3",
            "--lr", "3e-3", "--batch-size", "16", "--max-valid", "32", "--max-test", "32",
            "--sensitivity-molecules", "8", "--no-progress", "--out", str(tmp_path / "runs"),
            "--results-dir", str(res)]
    assert qm9_budget.main(_parse(argv)) == 0
    rec = json.loads((res / "qm9-budget" / "zpve-lie-T3-aug.json").read_text())
    curve, m = rec["curve"], rec["metrics"]
    assert [c["steps"] for c in curve] == [128, 256, 384] and curve[-1]["budget_s"] == 0.1 * 60
    # it learns within its budget: the curve falls, and ends well below the best constant (the training median)
    assert curve[-1]["valid_mae_meV"] < min(curve[0]["valid_mae_meV"], 0.7 * m["valid_mae_meV_constant"]), (curve, m)
    assert m["test_mae_meV"] > 0 and m["rotation_sensitivity_meV"] > 0 and m["steps"] > 0
    # resume: a finished run continues at once to the result; other options are refused
    assert qm9_budget.main(_parse(argv + ["--resume", "auto"])) == 0
    with pytest.raises(ValueError, match="other options"):
        qm9_budget.main(_parse([a if a != "3e-3" else "1e-3" for a in argv] + ["--resume", "auto",
                                                                              "--run-name", "zpve-lie-T3-aug"]))
    assert qm9_budget.main(_parse(["train", "qm9-budget", "--plot", "--target", "zpve", "--results-dir", str(res)])) == 0
    assert (res / "qm9-budget" / "zpve.learning_curves.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="no result files"):
        qm9_budget.main(_parse(["train", "qm9-budget", "--plot", "--target", "mu", "--results-dir", str(res)]))


@needs_qm9pack
def test_train_qm9_target_all_augment_and_sensitivity(tmp_path):
    from pyg_lie.experiments import qm9
    res = tmp_path / "results"
    argv = ["train", "qm9", "--root", str(tmp_path / "data"), "--max-molecules", "120", "--target", "all",
            "--hidden", "8", "--layers", "1", "--heads", "2", "--epochs", "1", "--batch-size", "32",
            "--augment", "so3", "--sensitivity-molecules", "4", "--no-progress", "--out", str(tmp_path / "run"),
            "--results-dir", str(res)]
    assert qm9.main(_parse(argv)) == 0
    files = sorted(p.name for p in (res / "qm9").glob("*.json"))
    n = json.load(open(tmp_path / "run" / "mu" / "summary.json"))["n_train"]
    assert len(files) == 12 and all(f.endswith(f"-T3-small-n{n}-aug.json") for f in files)
    rec = json.loads((res / "qm9" / f"mu-T3-small-n{n}-aug.json").read_text())
    assert rec["metrics"]["rotation_sensitivity_D"] > 0 and rec["config"]["augment"] == "so3"
    assert "trained with SO(3) augmentation, this run without" not in rec["setting"]
    assert os.path.isfile(tmp_path / "run" / "zpve" / "summary.json")
