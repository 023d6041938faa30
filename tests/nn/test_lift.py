"""Lift and lifted-edge construction."""
import math

import pytest
import torch

from pyg_lie.groups import get_group
from pyg_lie.groups.base import homogeneous, rot2
from pyg_lie.nn.lift import Lift, finite_subgroup
from pyg_lie.nn.lifted_edges import expand_edges, full_graph, lifted_edges, subsample_edges
from pyg_lie.testing import assert_equivariant


def brute_radius(pos, r, batch, loop=True):
    d = torch.cdist(pos.double(), pos.double())
    adj = (d <= r) & (batch[:, None] == batch[None, :])
    if not loop:
        adj.fill_diagonal_(False)
    dst, src = adj.nonzero(as_tuple=True)
    return torch.stack([src, dst])


def test_lift_shapes_and_section():
    G = get_group("SE2")
    pos = torch.randn(7, 2, dtype=torch.float64)
    x = torch.randn(7, 3, dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    out = Lift(G, 4).eval()(x, pos, batch)
    assert out.x.shape == (28, 3) and out.g.shape == (28, 3, 3)
    assert torch.equal(out.index, torch.arange(7).repeat_interleave(4))
    assert torch.equal(out.batch, batch.repeat_interleave(4))
    # every lift maps the origin to its point
    o = G.origin(dtype=torch.float64)
    assert torch.allclose(G.act(out.g, o.expand(28, 2)), pos[out.index], atol=1e-12)


def test_haar_resampled_in_training_reproducible_in_eval():
    lift = Lift("SE2", 3, seed=5)
    pos = torch.randn(6, 2)
    a, b = lift(None, pos).g, lift(None, pos).g
    assert not torch.allclose(a, b)
    lift.eval()
    a, b = lift(None, pos).g, lift(None, pos).g
    assert torch.equal(a, b)


def test_finite_lift_is_group():
    G = get_group("SE2")
    lift = Lift(G, 6, mode="finite")
    out = lift(None, torch.zeros(1, 2, dtype=torch.float64))
    ang = 2 * math.pi * torch.arange(6, dtype=torch.float64) / 6
    assert torch.allclose(out.g[:, :2, :2], rot2(ang), atol=1e-12)
    assert torch.allclose(out.g[:, :2, 2], torch.zeros(6, 2, dtype=torch.float64))


def test_finite_lift_set_is_translated_exactly():
    """s(u x) C_k = u s(x) C_k for u with rotation in C_k (as sets)."""
    G = get_group("SE2")
    lift = Lift(G, 4, mode="finite")
    pos = torch.randn(5, 2, dtype=torch.float64)
    u = homogeneous(rot2(torch.tensor(math.pi / 2, dtype=torch.float64)), torch.randn(2, dtype=torch.float64))
    g1 = (u @ lift(None, pos).g).view(5, 4, 9)
    g2 = lift(None, G.act(u, pos)).g.view(5, 4, 9)
    for i in range(5):
        d = torch.cdist(g1[i], g2[i])
        assert (d.min(1).values < 1e-12).all()


@pytest.mark.parametrize("bad", ["nan", "len_x", "len_batch", "dim", "tn_samples", "so2_finite"])
def test_bad_input(bad):
    pos = torch.randn(4, 2)
    x = torch.ones(4, 1)
    with pytest.raises(ValueError) as err:
        if bad == "nan":
            pos[1, 0] = float("nan")
            Lift("SE2")(x, pos)
        elif bad == "len_x":
            Lift("SE2")(torch.ones(3, 1), pos)
        elif bad == "len_batch":
            Lift("SE2")(x, pos, torch.zeros(5, dtype=torch.long))
        elif bad == "dim":
            Lift("SE2")(x, torch.randn(4, 3))
        elif bad == "tn_samples":
            Lift("T2", 2)
        else:
            Lift("SO2", 4, mode="finite")
    msg = str(err.value)
    assert {"nan": "non-finite", "len_x": "x has 3", "len_batch": "batch", "dim": "R^2",
            "tn_samples": "num_samples=1", "so2_finite": "trivial stabiliser"}[bad] in msg


def test_full_graph_and_expand():
    batch = torch.tensor([0, 0, 0, 1, 1])
    ei = full_graph(batch)
    assert ei.size(1) == 9 + 4
    assert torch.equal(ei, brute_radius(torch.zeros(5, 2), 1.0, batch))
    K = 3
    lei = expand_edges(ei, 5, K)
    assert lei.size(1) == 13 * K * K
    # every lifted pair of neighbouring points, exactly once, sorted by target then source
    pairs = set(map(tuple, lei.t().tolist()))
    assert len(pairs) == lei.size(1)
    expect = {(j * K + b, i * K + a) for j, i in ei.t().tolist() for a in range(K) for b in range(K)}
    assert pairs == expect
    key = lei[1] * 100 + lei[0]
    assert torch.equal(key, key.sort().values)


def test_radius_lifted_edges_and_subsample():
    pos = torch.rand(30, 2) * 3
    batch = torch.tensor([0] * 18 + [1] * 12)
    ei = lifted_edges(pos, batch, 2, radius=0.8)
    base = brute_radius(pos, 0.8, batch)
    assert ei.size(1) == base.size(1) * 4
    sub = subsample_edges(ei, 60, 5, generator=torch.Generator().manual_seed(0))
    deg = torch.bincount(sub[1], minlength=60)
    full = torch.bincount(ei[1], minlength=60)
    assert torch.equal(deg, full.clamp(max=5))
    assert set(map(tuple, sub.t().tolist())) <= set(map(tuple, ei.t().tolist()))
    with pytest.raises(ValueError, match="num_lifts must be a positive int, got 0"):
        lifted_edges(pos, batch, 0, radius=0.8)  # used to return no edges at all
    with pytest.raises(ValueError, match=r"batch must be a 1-D tensor with one graph id per point \(30\)"):
        lifted_edges(pos, batch[:-1], 2)
    with pytest.raises(ValueError, match="batch must hold integer graph ids"):
        lifted_edges(pos, batch.float(), 2)  # all pairs used to group float ids without a word


def test_log_threshold_keeps_self_pairs_and_is_invariant():
    G = get_group("SE2")
    pos = torch.rand(12, 2, dtype=torch.float64)
    lift = Lift(G, 3).eval()
    g = lift(None, pos).g
    ei = lifted_edges(pos, None, 3, 0.7, g=g, group=G, log_threshold=1.0,
                      distance_weights={"rotation": 0.5})
    assert (ei[0] == ei[1]).sum() == 36
    assert_equivariant(lambda pos, g: lifted_edges(pos, None, 3, 0.7, g=g, group=G, log_threshold=1.0,
                                                   distance_weights={"rotation": 0.5}),
                       (pos, g), G, ("points", "elements"), "invariant", atol=0, rtol=0)


def test_finite_subgroup_trivial_stabiliser():
    with pytest.raises(ValueError, match="trivial stabiliser"):
        finite_subgroup(get_group("T2"), 3)


@pytest.mark.parametrize("name", ["T2", "SO2", "T3"])
def test_trivial_stabiliser_finite_mode_is_the_single_lift(name):
    G = get_group(name)
    pos = torch.randn(7, G.space_dim, dtype=torch.float64) + 0.5
    haar = Lift(G, 1, mode="haar").eval()(None, pos)
    fin = Lift(G, 1, mode="finite")(None, pos)
    assert torch.equal(fin.g, haar.g)
    assert torch.equal(fin.index, torch.arange(7))
    with pytest.raises(ValueError, match="trivial stabiliser"):
        Lift(G, 1, mode="finite", subgroup=torch.eye(2).unsqueeze(0))


def test_grid_lift_is_the_finite_subgroup_turned_per_point():
    """mode="grid" on SE(2): every point's K stabiliser samples are rotations by
    phi_i + 2 pi a / K with its own phi_i; on SE(3) the octahedral group turned by one
    rotation per point (h_i0^-1 h_ia runs through the subgroup)."""
    torch.manual_seed(0)
    lift = Lift("SE2", 4, mode="grid").eval()
    h = lift.stabilizer_samples(50, torch.float64, "cpu")
    assert h.shape == (50, 4, 3, 3)
    theta = torch.atan2(h[..., 1, 0], h[..., 0, 0])
    step = torch.remainder(theta[:, 1:] - theta[:, :-1], 2 * math.pi)
    assert torch.allclose(step, torch.full_like(step, math.pi / 2), atol=1e-12)
    assert theta[:, 0].std() > 1.0  # one offset per point, spread over the circle
    assert torch.equal(h, lift.stabilizer_samples(50, torch.float64, "cpu"))  # eval mode: seeded
    lift3 = Lift("SE3", 24, mode="grid")
    h3 = lift3.stabilizer_samples(5, torch.float64, "cpu")
    G = get_group("SE3")
    sub = G.stabilizer_embed(finite_subgroup(G, 24))
    rel = h3[:, :1].transpose(-1, -2) @ h3  # h_i0^-1 h_ia (rotations: inverse = transpose)
    for i in range(5):
        d = (rel[i].unsqueeze(1) - sub.unsqueeze(0)).flatten(2).abs().amax(-1)  # (24, 24)
        assert (d.amin(1) < 1e-10).all()


def test_grid_lift_invariance_beats_independent_samples():
    """The stratified lift's invariance error is far below independent Haar samples' at the
    same K (LieTransformer-SE2 at initialisation, float64, random rotations and translations)."""
    from pyg_lie.models import LieTransformer

    errs = {}
    for mode in ("haar", "grid"):
        torch.manual_seed(0)
        model = LieTransformer("SE2", 3, 16, 2, num_layers=1, heads=2, lift_samples=6, lift=mode).double().eval()
        pos = torch.randn(12, 2, dtype=torch.float64)
        x = torch.randn(12, 3, dtype=torch.float64)
        g = get_group("SE2").random(8, dtype=torch.float64)
        y = model(x, pos)
        moved = [model(x, pos @ gi[:2, :2].T + gi[:2, 2]) for gi in g]
        errs[mode] = max((m - y).abs().max().item() for m in moved) / y.abs().max().item()
    assert errs["grid"] < 0.02 * errs["haar"], errs


def test_lift_mode_error_names_the_modes():
    with pytest.raises(ValueError, match="haar.*finite.*grid"):
        Lift("SE2", 4, mode="stratified")
    with pytest.raises(ValueError, match="subgroup is only used"):
        Lift("SE2", 4, mode="haar", subgroup=finite_subgroup(get_group("SE2"), 4))
