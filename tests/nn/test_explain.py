"""PyG's Explainer on models built from the attention layers: edge masks act before the
normalisation, so a 0/1 mask equals removing the masked edges, and GNNExplainer's top edges
matter more than random ones."""

import pytest
import torch
from torch_geometric import EdgeIndex
from torch_geometric.explain import Explainer, GNNExplainer

from pyg_lie.groups import SE2
from pyg_lie.nn import LieAlgebraAttention, LieSelfAttention
from pyg_lie.testing import explainer_mask as masked


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


# --------------------------------------------------------------- explain_mode, VectorTokenAttention
def _call(layer, x, ei, g):
    """The layers' calls: VectorTokenAttention takes no group elements."""
    from pyg_lie.nn import VectorTokenAttention
    return layer(x, ei) if isinstance(layer, VectorTokenAttention) else layer(x, ei, g)


def _mode_layers(mode):
    from pyg_lie.nn import LieTransformerBlock, VectorTokenAttention
    return {
        "lie_self_attention_fused": LieSelfAttention(8, 8, "SE2", heads=2, explain_mode=mode),
        "lie_self_attention_plain": LieSelfAttention(8, 8, "SE2", heads=2, fused=False, explain_mode=mode),
        "lie_self_attention_constant": LieSelfAttention(8, 8, "SE2", heads=2, normalization="constant",
                                                        explain_mode=mode),
        "lie_algebra_attention": LieAlgebraAttention(8, 8, "SE2", heads=2, score="mlp", explain_mode=mode),
        "vector_token_attention": VectorTokenAttention(8, 8, heads=2, explain_mode=mode),
        "lie_transformer_block": LieTransformerBlock(8, "SE2", heads=2, explain_mode=mode),
    }


MODE_LAYERS = sorted(_mode_layers("score"))


@pytest.mark.parametrize("name", MODE_LAYERS)
def test_default_score_mode_zero_one_mask_equals_removal(name):
    # VectorTokenAttention was off by ~0.5 here (its mask multiplied the messages; issue 41)
    torch.manual_seed(3)
    ei, g = _graph()
    layer = _mode_layers("score")[name].double()
    assert layer.explain_mode == "score" if not hasattr(layer, "attn") else layer.attn.explain_mode == "score"
    x = torch.randn(g.shape[0], 8, dtype=torch.float64)
    keep = torch.rand(ei.shape[1]) > 0.4
    keep[ei[1] == 3] = False
    expected = _call(layer, x, ei[:, keep], g)
    with masked(layer, keep.double(), ei):
        got = _call(layer, x, ei, g)
    assert torch.allclose(got, expected, atol=1e-12), (got - expected).abs().max()


def _lone_edge_graph(N=12, seed=0):
    """Random edges, with node 0's only incoming edge the last one (from node 5)."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(1, N, (2, 60), generator=gen)
    ei = torch.cat([ei, torch.tensor([[5], [0]])], dim=1)
    return ei, SE2().random(N, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("name", MODE_LAYERS)
def test_message_mode_scores_a_lone_incoming_edge(name):
    """Score mode: the mask of a target's only incoming edge has gradient 0 (its weight is 1 for
    every positive mask value). Message mode (PyG's default): it gets a non-zero gradient, and a
    0/1 mask scales messages instead of removing edges."""
    torch.manual_seed(4)
    ei, g = _lone_edge_graph()
    x = torch.randn(g.shape[0], 8, dtype=torch.float64)
    lone = ei.shape[1] - 1
    grads = {}
    for mode in ("score", "message"):
        layer = _mode_layers(mode)[name].double()
        mask = torch.full((ei.shape[1],), 0.7, dtype=torch.float64, requires_grad=True)
        with masked(layer, mask, ei):
            out = _call(layer, x, ei, g)
        out[0].square().sum().backward()  # node 0's output: its lone edge decides it
        grads[mode] = mask.grad
    assert grads["score"][lone] == 0
    assert grads["message"][lone].abs() > 1e-6, grads["message"][lone]
    # message mode with a 0/1 mask: messages scaled, not removed (no renormalisation)
    layer = _mode_layers("message")[name].double()
    keep = torch.ones(ei.shape[1], dtype=torch.float64)
    keep[:10] = 0
    with masked(layer, keep, ei):
        scaled = _call(layer, x, ei, g)
    with masked(layer, torch.ones_like(keep), ei):
        full = _call(layer, x, ei, g)
    assert torch.allclose(full, _call(layer, x, ei, g), atol=1e-12)  # an all-ones mask changes nothing
    if "constant" not in name:  # (softmax: removing differs from zeroing a message)
        assert not torch.allclose(scaled, _call(layer, x, ei[:, 10:], g), atol=1e-6)


def test_explain_mode_is_checked():
    from pyg_lie.nn import VectorTokenAttention
    with pytest.raises(ValueError, match="explain_mode"):
        LieSelfAttention(8, 8, "SE2", explain_mode="before")
    with pytest.raises(ValueError, match="explain_mode"):
        VectorTokenAttention(8, 8, explain_mode=None)
    layer = LieAlgebraAttention(8, 8, "SE2")
    layer.explain_mode = "after"  # an attribute set later is checked when the explainer runs
    ei, g = _graph()
    with masked(layer, torch.ones(ei.shape[1], dtype=torch.float64), ei), pytest.raises(ValueError,
                                                                                       match="explain_mode"):
        layer.double()(torch.randn(g.shape[0], 8, dtype=torch.float64), ei, g)


def test_gnn_explainer_runs_in_message_mode():
    torch.manual_seed(0)
    ei, g = _lone_edge_graph(seed=1)
    g = g.float()
    model = _Model()
    for m in model.modules():
        if hasattr(m, "explain_mode"):
            m.explain_mode = "message"
    explainer = Explainer(model, GNNExplainer(epochs=5, lr=0.05), explanation_type="model",
                          edge_mask_type="object", node_mask_type=None,
                          model_config=dict(mode="multiclass_classification", task_level="node",
                                            return_type="raw"))
    exp = explainer(torch.randn(g.shape[0], 4), ei, g=g, index=0)
    assert exp.edge_mask.shape == (ei.shape[1],) and exp.edge_mask[-1] > 0


def test_lie_transformer_block_returns_attention_weights():
    from pyg_lie.nn import LieTransformerBlock
    torch.manual_seed(5)
    ei, g = _graph()
    block = LieTransformerBlock(8, "SE2", heads=2).double()
    x = torch.randn(g.shape[0], 8, dtype=torch.float64)
    sub = EdgeIndex(ei, sparse_size=(g.shape[0], g.shape[0]))
    out, (ei_out, alpha) = block(x, sub, g, return_attention_weights=True)
    assert ei_out is sub and alpha.shape == (ei.shape[1], 2) and block.attn._alpha is None
    assert torch.equal(out, block(x, ei, g))
    _, (_, want) = block.attn(block.norm1(x), ei, g, return_attention_weights=True)
    assert torch.allclose(alpha, want, atol=1e-14)
    torch.testing.assert_close(torch.zeros(g.shape[0], dtype=torch.float64).index_add(0, ei[1], alpha[:, 0])
                               [torch.unique(ei[1])], torch.ones(len(torch.unique(ei[1])), dtype=torch.float64))
