"""S2AttentionConv on bipartite inputs (quadrature weights as PyG's ``(w_src, w_dst)`` pair, as
``to_hetero`` passes them) and its ``explain_mode`` (score mask == edge removal; message mask
scores a target's lone incoming edge)."""

import pytest
import torch

from pyg_lie.nn import S2AttentionConv, S2NeighborhoodAttention
from pyg_lie.testing import explainer_mask as masked

f64 = torch.float64


def _bipartite(n_src=14, n_dst=6, E=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.stack([torch.randint(0, n_src, (E,), generator=gen), torch.randint(0, n_dst, (E,), generator=gen)])
    x_src = torch.randn(n_src, 8, generator=gen, dtype=f64)
    x_dst = torch.randn(n_dst, 8, generator=gen, dtype=f64)
    w_src = torch.rand(n_src, generator=gen, dtype=f64) + 0.1
    w_dst = torch.rand(n_dst, generator=gen, dtype=f64) + 0.1
    return ei, x_src, x_dst, w_src, w_dst


@pytest.mark.parametrize("fused", [True, False])
def test_quad_weight_pair_uses_the_sources(fused):
    torch.manual_seed(0)
    ei, x_src, x_dst, w_src, w_dst = _bipartite()
    layer = S2AttentionConv(8, 8, heads=2, fused=fused, warn_isolated=False).double()
    want = layer((x_src, x_dst), ei, quad_weights=w_src)
    assert torch.equal(layer((x_src, x_dst), ei, quad_weights=(w_src, w_dst)), want)
    assert torch.equal(layer((x_src, x_dst), ei, quad_weights=(w_src, None)), want)
    # the target weights are not read; the source weights are
    assert torch.equal(layer((x_src, x_dst), ei, quad_weights=(w_src, 5 * w_dst)), want)
    assert not torch.allclose(layer((x_src, x_dst), ei, quad_weights=(w_src.flip(0), w_dst)), want)
    # the homogeneous layer on the concatenated nodes (sources, then targets), restricted to the targets
    n_src = x_src.shape[0]
    full = layer(torch.cat([x_src, x_dst]), torch.stack([ei[0], ei[1] + n_src]),
                 quad_weights=torch.cat([w_src, w_dst]))
    assert torch.allclose(full[n_src:], want, atol=1e-12)


def test_quad_weight_pair_errors():
    ei, x_src, x_dst, w_src, w_dst = _bipartite()
    layer = S2AttentionConv(8, 8, heads=2).double()
    with pytest.raises(ValueError, match="quad_weights may be a pair"):
        layer(x_src, ei, quad_weights=(w_src, w_src))
    with pytest.raises(ValueError, match=r"quad_weights\[1\] \(w_dst\)"):
        layer((x_src, x_dst), ei, quad_weights=(w_src, w_src))
    with pytest.raises(ValueError, match="quad_weights must have shape"):
        layer((x_src, x_dst), ei, quad_weights=(w_dst, w_dst))  # swapped
    with pytest.raises(ValueError, match="quad_weights"):
        layer((x_src, x_dst), ei, quad_weights=(w_src, w_dst, w_dst))
    with pytest.raises(ValueError, match="quad_weights must be a tensor"):
        layer((x_src, x_dst), ei, quad_weights=[1.0] * x_src.shape[0])


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 8)
        self.conv = S2AttentionConv(8, 8, heads=2)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x, edge_index, quad_weights):
        return self.head(self.conv(self.lin(x), edge_index, quad_weights))


def test_to_hetero_two_node_types():
    """A fine grid and a coarse grid: ('fine', 'near', 'fine') and ('fine', 'to', 'coarse'); the
    quadrature weights are a node-level dict, which to_hetero passes as (w_fine, w_coarse) on
    the bipartite edge type."""
    from torch_geometric.nn import to_hetero

    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(3)
    n_f, n_c = 16, 5
    near = torch.randint(0, n_f, (2, 50), generator=gen)
    to = torch.stack([torch.randint(0, n_f, (20,), generator=gen), torch.arange(n_c).repeat(4)])
    metadata = (["fine", "coarse"], [("fine", "near", "fine"), ("fine", "to", "coarse")])
    model = to_hetero(_Net(), metadata, aggr="sum").double()
    x = {"fine": torch.randn(n_f, 4, dtype=f64), "coarse": torch.randn(n_c, 4, dtype=f64)}
    w = {"fine": torch.rand(n_f, dtype=f64) + 0.1, "coarse": torch.rand(n_c, dtype=f64) + 0.1}
    ei = {("fine", "near", "fine"): near, ("fine", "to", "coarse"): to}
    out = model(x, ei, w)
    assert out["fine"].shape == (n_f, 3) and out["coarse"].shape == (n_c, 3)
    (out["fine"].square().sum() + out["coarse"].square().sum()).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), \
        [n for n, g in grads.items() if g is None]
    lin = {k: model.lin[k](v) for k, v in x.items()}
    conv = model.conv["fine__to__coarse"]
    coarse = conv((lin["fine"], lin["coarse"]), to, quad_weights=w["fine"])
    assert torch.allclose(model.head["coarse"](coarse), out["coarse"], atol=1e-12)
    fine = model.conv["fine__near__fine"](lin["fine"], near, quad_weights=w["fine"])
    assert torch.allclose(model.head["fine"](fine), out["fine"], atol=1e-12)
    # the coarse quadrature weights are never read
    again = model(x, ei, {"fine": w["fine"], "coarse": 3 * w["coarse"]})
    assert torch.allclose(again["coarse"], out["coarse"], atol=1e-12)


# --------------------------------------------------------------------------- explain_mode
def _lone_edge_graph(N=12, seed=0):
    """Random edges among nodes 1.., and node 0's only incoming edge last (from node 5)."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.cat([torch.randint(1, N, (2, 60), generator=gen), torch.tensor([[5], [0]])], dim=1)
    return ei, torch.randn(N, 8, generator=gen, dtype=f64), torch.rand(N, generator=gen, dtype=f64) + 0.1


@pytest.mark.parametrize("fused", [True, False])
def test_explain_modes(fused):
    torch.manual_seed(4)
    ei, x, w = _lone_edge_graph()
    lone = ei.shape[1] - 1
    grads = {}
    for mode in ("score", "message"):
        layer = S2AttentionConv(8, 8, heads=2, fused=fused, explain_mode=mode).double()
        assert layer.explain_mode == mode
        mask = torch.full((ei.shape[1],), 0.7, dtype=f64, requires_grad=True)
        with masked(layer, mask, ei):
            out = layer(x, ei, quad_weights=w)
        out[0].square().sum().backward()
        grads[mode] = mask.grad
    assert grads["score"][lone] == 0  # its softmax weight is 1 for every mask value > 0
    assert grads["message"][lone].abs() > 1e-6
    keep = torch.ones(ei.shape[1], dtype=f64)
    keep[:15] = 0
    layer = S2AttentionConv(8, 8, heads=2, fused=fused).double()
    removed = layer(x, ei[:, 15:], quad_weights=w)
    with masked(layer, keep, ei):  # score mode (default): a 0/1 mask removes the edges
        assert torch.allclose(layer(x, ei, quad_weights=w), removed, atol=1e-12)
    layer.explain_mode = "message"
    with masked(layer, torch.ones_like(keep), ei):  # an all-ones mask changes nothing
        full = layer(x, ei, quad_weights=w)
    assert torch.allclose(full, layer(x, ei, quad_weights=w), atol=1e-12)
    with masked(layer, keep, ei):  # message mode: scaled, not removed (no renormalisation)
        scaled = layer(x, ei, quad_weights=w)
    assert not torch.allclose(scaled, removed, atol=1e-6)


def test_explain_mode_bipartite_and_checked():
    ei, x_src, x_dst, w_src, w_dst = _bipartite(seed=2)
    layer = S2AttentionConv(8, 8, heads=2, explain_mode="message").double()
    keep = (torch.rand(ei.shape[1], generator=torch.Generator().manual_seed(0)) > 0.3).double()
    with masked(layer, keep, ei):
        got = layer((x_src, x_dst), ei, quad_weights=(w_src, w_dst))
    layer.explain_mode = "score"
    with masked(layer, keep, ei):
        removed = layer((x_src, x_dst), ei, quad_weights=(w_src, w_dst))
    assert torch.allclose(removed, layer((x_src, x_dst), ei[:, keep.bool()], quad_weights=w_src), atol=1e-12)
    assert not torch.allclose(got, removed, atol=1e-6)
    with pytest.raises(ValueError, match="explain_mode"):
        S2AttentionConv(8, 8, explain_mode="after")
    layer.explain_mode = "before"  # an attribute set later is checked when the explainer runs
    with masked(layer, keep, ei), pytest.raises(ValueError, match="explain_mode"):
        layer((x_src, x_dst), ei, quad_weights=w_src)


def test_neighborhood_attention_explain_mode():
    torch.manual_seed(5)
    layer = S2NeighborhoodAttention(4, (6, 12), (6, 12), num_heads=2, explain_mode="message").double()
    assert layer.explain_mode == "message"
    q = torch.randn(1, 4, 6, 12, dtype=f64)
    ei = layer._graph("cpu")["edge_index"]
    with masked(layer, torch.ones(ei.shape[1], dtype=f64), ei):  # an all-ones mask changes nothing
        got = layer(q)
    assert torch.allclose(got, layer(q), atol=1e-12)
    mask = torch.full((ei.shape[1],), 0.5, dtype=f64, requires_grad=True)
    with masked(layer, mask, ei):
        layer(q).square().sum().backward()
    assert mask.grad.abs().min() > 0  # message mode: every edge gets a gradient
    with pytest.raises(ValueError, match="explain_mode"):
        S2NeighborhoodAttention(4, (6, 12), (6, 12), explain_mode=0)
