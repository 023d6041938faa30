"""PyG's Explainer on models built from the attention layers: edge masks act before the
normalisation, so a 0/1 mask equals removing the masked edges, and GNNExplainer's top edges
matter more than random ones."""
import contextlib

import pytest
import torch
from torch_geometric import EdgeIndex
from torch_geometric.explain import Explainer, GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

from pyg_lie.groups import SE2
from pyg_lie.nn import LieAlgebraAttention, LieSelfAttention


@contextlib.contextmanager
def masked(module, mask, edge_index, apply_sigmoid=False):
    """PyG's explainer masks set on ``module`` for the block, cleared after it."""
    set_masks(module, mask, edge_index, apply_sigmoid=apply_sigmoid)
    try:
        yield
    finally:
        clear_masks(module)


def _graph(N=24, E=96, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, E), generator=gen)
    return ei, SE2().random(N, generator=gen, dtype=torch.float64)


LAYERS = {
    "lie_self_attention_fused": lambda: LieSelfAttention(8, 16, "SE2", heads=2),
    "lie_self_attention_plain": lambda: LieSelfAttention(8, 16, "SE2", heads=2, fused=False),
    "lie_self_attention_constant": lambda: LieSelfAttention(8, 16, "SE2", heads=2, normalization="constant"),
    "lie_self_attention_lcl_mlp": lambda: LieSelfAttention(8, 16, "SE2", heads=2, content="linear_concat_linear",
                                                           combine="mlp"),
    "lie_algebra_attention": lambda: LieAlgebraAttention(8, 8, "SE2", heads=2),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_zero_one_mask_equals_removing_edges(name):
    torch.manual_seed(0)
    ei, g = _graph()
    layer = LAYERS[name]().double()
    x = torch.randn(g.shape[0], 8, dtype=torch.float64)
    keep = torch.rand(ei.shape[1]) > 0.4
    keep[ei[1] == 3] = False  # node 3 loses every edge: it must receive what a node without edges does
    expected = layer(x, ei[:, keep], g)
    with masked(layer, keep.double(), ei):
        got = layer(x, ei, g)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, expected, atol=1e-12), (got - expected).abs().max()
    # the mask is differentiable (GNNExplainer trains it)
    mask = torch.full((ei.shape[1],), 0.3, dtype=torch.float64, requires_grad=True)
    with masked(layer, mask, ei, apply_sigmoid=True):
        layer(x, ei, g).square().sum().backward()
    assert mask.grad is not None and mask.grad.abs().sum() > 0


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_edge_index_subclass_and_alpha(name):
    torch.manual_seed(1)
    ei, g = _graph()
    layer = LAYERS[name]().double()
    x = torch.randn(g.shape[0], 8, dtype=torch.float64)
    plain = layer(x, ei, g)
    sub = EdgeIndex(ei, sparse_size=(g.shape[0], g.shape[0]))
    assert torch.equal(layer(x, sub, g), plain)
    out, (ei_out, alpha) = layer(x, sub, g, return_attention_weights=True)
    assert ei_out is sub and alpha.shape == (ei.shape[1], 2)
    assert getattr(layer, "_alpha", None) is None


def test_wrong_mask_size_is_an_error():
    ei, g = _graph()
    layer = LieSelfAttention(8, 16, "SE2", heads=2).double()
    with masked(layer, torch.ones(5, dtype=torch.float64), ei), pytest.raises(ValueError, match="edge mask"):
        layer(torch.randn(g.shape[0], 8, dtype=torch.float64), ei, g)


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 16)
        self.att1 = LieSelfAttention(16, 16, "SE2", heads=2)
        self.att2 = LieSelfAttention(16, 16, "SE2", heads=2)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x, edge_index, g):  # no residual: a node's output comes through its edges
        h = self.att1(self.lin(x), edge_index, g)
        h = self.att2(torch.nn.functional.silu(h), edge_index, g)
        return self.head(h)


def test_gnn_explainer_top_edges_matter_more_than_random_ones():
    # a few "hot" nodes carry large features: the edges that bring them to a target decide its output
    torch.manual_seed(0)
    N, E, k = 30, 150, 4
    ei = torch.randint(0, N, (2, E))
    g = SE2().random(N)
    x = 0.05 * torch.randn(N, 4)
    x[:3] = 3 * torch.randn(3, 4)
    model = _Model().eval()
    # (regression against the model's own output would start at its minimum: a uniform mask is a
    # constant log-bias, which a softmax ignores; see pyg_lie.nn._explain)
    explainer = Explainer(model, GNNExplainer(epochs=100, lr=0.05), explanation_type="model",
                          edge_mask_type="object", node_mask_type=None,
                          model_config=dict(mode="multiclass_classification", task_level="node",
                                            return_type="raw"))
    with torch.no_grad():
        base = model(x, ei, g)
    hot_edge = ei[0] < 3
    targets = [i for i in range(3, N) if int((hot_edge & (ei[1] == i)).sum()) >= 1][:4]
    assert len(targets) >= 3
    gen = torch.Generator().manual_seed(0)
    top_effect, random_effect = [], []
    for i in targets:
        mask = explainer(x, ei, g=g, index=i).edge_mask.detach()
        keep = torch.ones(E, dtype=torch.bool)
        keep[torch.topk(mask, k).indices] = False
        with torch.no_grad():
            top_effect.append(float((model(x, ei[:, keep], g)[i] - base[i]).abs().sum()))
            draws = []
            for _ in range(20):
                keep = torch.ones(E, dtype=torch.bool)
                keep[torch.randperm(E, generator=gen)[:k]] = False
                draws.append(float((model(x, ei[:, keep], g)[i] - base[i]).abs().sum()))
        random_effect.append(sum(draws) / len(draws))
    assert sum(top_effect) > 2 * sum(random_effect), (top_effect, random_effect)


def test_s2_attention_conv_mask_equals_removing_edges():
    from pyg_lie.nn import S2AttentionConv
    torch.manual_seed(2)
    N, E = 20, 90
    ei = torch.randint(0, N, (2, E))
    layer = S2AttentionConv(8, 8, heads=2).double()
    x = torch.randn(N, 8, dtype=torch.float64)
    w = torch.rand(N, dtype=torch.float64) + 0.1
    keep = torch.rand(E) > 0.4
    expected = layer(x, ei[:, keep], quad_weights=w)
    plan = S2AttentionConv.build_plan(ei, N, N)
    with masked(layer, keep.double(), ei):
        for p in (None, plan):  # the planned path gives way to the masked message-passing path
            got = layer(x, ei, quad_weights=w, plan=p)
            assert torch.allclose(got, expected, atol=1e-12)
    sub = EdgeIndex(ei, sparse_size=(N, N))
    assert torch.equal(layer(x, sub, quad_weights=w), layer(x, ei, quad_weights=w))


def test_equivariant_self_attention_mask_equals_removing_edges():
    from pyg_lie.vit import EquivariantSelfAttention, FieldType, get_group
    torch.manual_seed(3)
    V = FieldType.regular(get_group("C4"), 2)
    layer = EquivariantSelfAttention(V, heads=2).double()
    N, E = 16, 60
    ei = torch.randint(0, N, (2, E))
    x = torch.randn(N, V.dim, dtype=torch.float64)
    keep = torch.rand(E) > 0.4
    expected = layer(x, ei[:, keep])
    with masked(layer, keep.double(), ei):
        got = layer(x, ei)
    assert torch.allclose(got, expected, atol=1e-12)
