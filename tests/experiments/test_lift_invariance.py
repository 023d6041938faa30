"""``pyg-lie invariance``: the invariance error of the paper's grid lift and of Haar lifts at initialisation."""
import argparse
import json
import os

import pytest

from pyg_lie.experiments import lift_invariance as exp
from pyg_lie.models.lie_transformer import LieTransformer

SMALL = dict(seeds=2, clouds=2, elements=4)


def test_error_falls_with_lift_samples():
    curve = exp.lift_invariance_curve([1, 4, 16], **SMALL)
    med = [q[1] for q in curve["linf"]]
    assert exp.is_monotone(curve)
    # Monte Carlo error ~ K^-1/2: a factor 4 from K = 1 to 16; demand at least 2.5
    assert med[2] < med[0] / 2.5, med
    assert med[2] > 0  # a Haar lift is not exactly invariant
    rel = [q[1] for q in curve["rel"]]
    assert rel[2] < rel[0] / 2.5, rel


def test_grid_lift_beats_haar_at_three_samples():
    # the paper's lift (equally spaced angles, random offset) is a trapezoidal rule on the
    # stabiliser: at K = 3 it is far below the K^-1/2 Monte Carlo error of Haar samples
    grid = exp.lift_invariance_curve([1, 3, 8], lift="grid", **SMALL)
    haar = exp.lift_invariance_curve([1, 3, 8], lift="haar", **SMALL)
    g, h = [q[1] for q in grid["linf"]], [q[1] for q in haar["linf"]]
    assert exp.is_monotone(grid)
    assert g[1] < h[1] / 10 and g[2] < h[2] / 30, (g, h)
    assert g[0] > 100 * g[2] > 0  # one sample is a Haar sample; the grid error then falls by orders of magnitude


def test_grid_stabilizer_is_a_rotated_cyclic_group():
    import math

    import torch
    h = exp.grid_stabilizer(5, 4, torch.Generator().manual_seed(0))
    assert h.shape == (5, 4, 3, 3) and h.dtype == torch.float64
    ang = torch.atan2(h[..., 1, 0], h[..., 0, 0])
    step = torch.remainder(ang[:, 1:] - ang[:, :-1], 2 * math.pi)
    assert torch.allclose(step, torch.full_like(step, math.pi / 2))
    assert ang[:, 0].std() > 0.1  # one random offset per point
    R = h[..., :2, :2]
    assert torch.allclose(R @ R.transpose(-1, -2), torch.eye(2, dtype=torch.float64).expand_as(R))
    assert torch.equal(h[..., 2, :], torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).expand(5, 4, 3))


def test_softmax_with_constant_features_is_exactly_invariant():
    # softmax weights sum to one over identical values: the geometry cannot enter
    curve = exp.lift_invariance_curve([1, 3], normalization="softmax", **SMALL)
    assert max(q[2] for q in curve["linf"]) < 1e-12


def test_swapped_lift_restores_the_model():
    net = LieTransformer("SE2", 1, 8, 3, num_layers=1, heads=2, kernel_dim=2)
    old = net.lift
    with exp.swapped_lift(net, 5) as m:
        assert m.lift.num_samples == 5 and m.lift.seed == old.seed
    assert net.lift is old
    with pytest.raises(RuntimeError):
        with exp.swapped_lift(net, 2):
            raise RuntimeError("boom")
    assert net.lift is old


@pytest.mark.parametrize("kw, name", [({"seeds": 0}, "seeds"), ({"clouds": 0}, "clouds"),
                                      ({"elements": -1}, "elements")])
def test_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        exp.lift_invariance_curve([1, 2], **{**SMALL, **kw})
    with pytest.raises(ValueError, match="lifts"):
        exp.lift_invariance_curve([0, 2], **SMALL)
    with pytest.raises(ValueError, match="lift must be"):
        exp.lift_invariance_curve([1, 2], lift="sobol", **SMALL)


def test_is_monotone():
    q = lambda m: [m / 2, m, 2 * m]  # noqa: E731
    assert exp.is_monotone({"linf": [q(3.0), q(2.0), q(1.0)]})
    assert not exp.is_monotone({"linf": [q(3.0), q(1.0), q(1.0)]})


def test_cli_writes_results(tmp_path):
    p = argparse.ArgumentParser()
    exp.add_arguments(p)
    out = str(tmp_path / "inv")
    args = p.parse_args(["--lifts", "1", "3", "--seeds", "2", "--clouds", "1", "--elements", "2",
                         "--no-progress", "--threads", "1", "--out", out, "--results-dir", str(tmp_path / "res")])
    assert exp.main(args) == 0
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)["curves"]
    assert set(res) == {"grid", "haar"}
    assert all(c["lifts"] == [1, 3] and len(c["linf"]) == 2 and isinstance(c["monotone"], bool) for c in res.values())
    assert os.path.getsize(os.path.join(out, "invariance_vs_lifts.png")) > 0
    assert "| 3 |" in open(os.path.join(out, "results.md")).read()
    # the result file (the CI version of `pyg-lie invariance`): the paper's K = 3 value beside ours
    from pyg_lie.experiments.results import load_result
    rec = load_result(tmp_path / "res", "lift-invariance", "init-d8-l1-constant")
    assert rec["paper"] == {"grid.K3.linf_median": 1e-6} and rec["seed"] == [0, 1]
    assert rec["command"] == ("pyg-lie invariance --lifts 1 3 --seeds 2 --clouds 1 --elements 2 --threads 1 "
                              f"--out {out} --no-progress --results-dir {tmp_path / 'res'}")
    assert all(0 < rec["metrics"][f"{k}.K{K}.linf_median"] < 1 for K in (1, 3) for k in ("grid", "haar"))
    assert rec["metrics"]["grid.K3.linf_median"] < rec["metrics"]["haar.K3.linf_median"]
    assert (tmp_path / "res" / "lift-invariance" / "init-d8-l1-constant.invariance_vs_lifts.png").is_file()
