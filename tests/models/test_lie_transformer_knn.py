"""The original code's lifted neighbourhood: k nearest lifted nodes in the log-map distance
(``lifted_knn_edges``, ``LieTransformer(lift_neighbors=...)``)."""
import pytest
import torch

from pyg_lie.groups import get_group
from pyg_lie.groups.base import homogeneous
from pyg_lie.models.lie_transformer import LieTransformer
from pyg_lie.nn.lifted_edges import _cloud_distances, _padded, lifted_edges, lifted_knn_edges, log_distance


def _brute_d2(G, g, batch):
    """Squared log-map distances of all pairs of a cloud from the group's own log, ``(M, M)``."""
    M = g.shape[0]
    gi = g[:, None].expand(M, M, *g.shape[1:]).reshape(-1, *g.shape[1:])
    gj = g[None].expand(M, M, *g.shape[1:]).reshape(-1, *g.shape[1:])
    d2 = log_distance(G, G.log(G.between(gi, gj))).pow(2).view(M, M)
    return d2.masked_fill(batch[:, None] != batch[None, :], float("inf"))


@pytest.mark.parametrize("name", ["SE3", "T3", "SO3", "SE2"])
def test_cloud_distances_equal_the_log_norm(name):
    G = get_group(name)
    gen = torch.Generator().manual_seed(0)
    g = G.random(30, generator=gen, dtype=torch.float64)
    if name == "SE3":  # molecule-sized translations and relative rotations close to pi
        g[:, :3, 3] *= 3
        flip = homogeneous(torch.diag(torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64)), torch.zeros(3, dtype=torch.float64))
        g[5] = g[4] @ flip
    batch = torch.tensor([0] * 12 + [1] * 18)
    counts, start, cloud, slot = _padded(batch)
    D = _cloud_distances(G, g, cloud, slot, counts)[cloud, slot]  # (M, L) in slot order
    ref = _brute_d2(G, g, batch)
    for m in range(30):
        b = int(batch[m])
        n = int(counts[b])
        s = int(start[b])
        torch.testing.assert_close(D[m, :n], ref[m, s:s + n], atol=1e-9, rtol=1e-10)
        assert torch.isinf(D[m, n:]).all()


def test_knn_edges_are_the_k_nearest():
    G = get_group("SE3")
    gen = torch.Generator().manual_seed(1)
    g = G.random(40, generator=gen, dtype=torch.float64)
    batch = torch.tensor([0] * 15 + [1] * 25)
    k = 7
    ei = lifted_knn_edges(g, batch, G, k)
    ref = _brute_d2(G, g, batch)
    assert torch.equal(torch.bincount(ei[1], minlength=40), torch.full((40,), k))
    order = ei[1] * 40 + ei[0]
    assert bool((order[1:] > order[:-1]).all()), "sorted by target, then source"
    for i in range(40):
        want = torch.sort(torch.topk(ref[i], k, largest=False).indices).values
        assert torch.equal(ei[0, ei[1] == i], want)
    assert bool((ei[0] == ei[1]).sum() == 40), "every node is its own nearest"
    # fewer nodes in a cloud than k: all of them
    ei_small = lifted_knn_edges(g[:3], None, G, 10)
    assert ei_small.size(1) == 9
    # sampling keeps a subset of the nearest
    s = lifted_knn_edges(g, batch, G, k, sample=3, generator=torch.Generator().manual_seed(0))
    assert int(torch.bincount(s[1]).max()) == 3
    full = set(map(tuple, ei.T.tolist()))
    assert set(map(tuple, s.T.tolist())) <= full


def test_ties_are_kept_together():
    """Lifts of one point by a finite group are at equal distances from each other: a cut
    inside such a tie would depend on the order of the lifts."""
    G = get_group("SE3")
    model = LieTransformer("SE3", 1, 8, 1, num_layers=0, lift="finite", lift_samples=12, lift_neighbors=4)
    pos = torch.zeros(1, 3, dtype=torch.float64)
    lifted = model.lift(torch.ones(1, 1, dtype=torch.float64), pos)
    ei = lifted_knn_edges(lifted.g, None, G, 4)
    deg = torch.bincount(ei[1], minlength=12)
    # tetrahedral group: from each element, 8 others at angle 2 pi / 3 and 3 at pi
    assert torch.equal(deg, torch.full((12,), 9)), deg


def _model(K, lift="finite", dtype=torch.float64, **kw):
    torch.manual_seed(0)
    return LieTransformer("SE3", 2, 16, 3, num_layers=2, heads=2, lift_samples=K, lift=lift,
                          kernel_dim=8, **kw).to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("K,k", [(12, 6), (12, 20), (24, 30)])
def test_finite_lift_knn_exact_invariance(K, k, dtype):
    G = get_group("SE3")
    model = _model(K, dtype=dtype, lift_neighbors=k)
    H = model.lift.subgroup
    gen = torch.Generator().manual_seed(2)
    pos = (3 * torch.randn(9, 3, generator=gen, dtype=torch.float64)).to(dtype)
    x = torch.randn(9, 2, generator=gen, dtype=torch.float64).to(dtype)
    batch = torch.tensor([0] * 4 + [1] * 5)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    with torch.no_grad():
        y = model(x, pos, batch)
        worst = 0.0
        for m in range(1, K, 1 if K <= 12 else 5):
            u = homogeneous(H[m].to(dtype), (10 * torch.randn(3, generator=gen, dtype=torch.float64)).to(dtype))
            worst = max(worst, float((model(x, G.act(u, pos), batch) - y).abs().max()))
        assert worst <= tol * max(1.0, float(y.abs().max())), worst
        if dtype == torch.float64:  # a rotation outside the group changes the output: the check can fail
            u = G.random(generator=torch.Generator().manual_seed(5), dtype=dtype)
            assert float((model(x, G.act(u, pos), batch) - y).abs().max()) > max(1e3 * worst, 1e-8)


def test_haar_knn_model_runs_with_sampling_and_gradients():
    model = _model(2, lift="haar", lift_neighbors=6, max_num_neighbors=4).train()
    pos = torch.randn(11, 3, dtype=torch.float64)
    x = torch.randn(11, 2, dtype=torch.float64)
    out = model(x, pos, torch.tensor([0] * 5 + [1] * 6))
    out.square().sum().backward()
    assert out.shape == (2, 3)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert "lift_neighbors=6" in repr(model)


def test_knn_option_errors():
    with pytest.raises(ValueError, match="lift_neighbors and radius"):
        LieTransformer("SE3", 2, 8, 1, lift_neighbors=5, radius=2.0)
    with pytest.raises(ValueError, match="lift_neighbors must be"):
        LieTransformer("SE3", 2, 8, 1, lift_neighbors=0)
    model = _model(2, lift="haar", lift_neighbors=4)
    pos = torch.randn(4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="edge_index cannot be used"):
        model(torch.randn(4, 2, dtype=torch.float64), pos, edge_index=torch.tensor([[0, 1], [1, 0]]))
    with pytest.raises(ValueError, match="nearest needs"):
        lifted_edges(pos, None, 1, nearest=3)
    with pytest.raises(ValueError, match="batch must be sorted"):
        lifted_knn_edges(get_group("SE3").random(3), torch.tensor([1, 0, 1]), get_group("SE3"), 2)
