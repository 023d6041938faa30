"""Edge features (``edge_dim`` / ``edge_attr``) in LieSelfAttention and LieAlgebraAttention: a
learned per-head score term ``W_e^h e_ij``. Checks: errors, that the term acts, that it acts as a
score (a term constant over a target's edges changes nothing under softmax), equivariance with
invariant edge features in float64, and that every execution path computes the same thing."""

import pytest
import torch
from torch_geometric.utils import softmax

import pyg_lie.ops as ops
from pyg_lie.groups import SE2, get_group
from pyg_lie.nn import LieAlgebraAttention, LieSelfAttention, LieTransformerBlock
from pyg_lie.testing import assert_equivariant
from pyg_lie.testing import explainer_mask as _masked

D = torch.float64


def _graph(N=12, E=60, seed=0, group="SE2", dtype=D):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, E), generator=gen)
    ei[:, :4] = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0]])  # node 0 has several edges
    g = get_group(group).random(N, generator=gen, dtype=dtype)
    return ei, g


def _distances(g, ei):
    """Invariant edge features of SE(2) elements: the distance of the translation parts and its square."""
    d = (g[ei[0], :2, 2] - g[ei[1], :2, 2]).norm(dim=-1, keepdim=True)
    return torch.cat([d, d * d], dim=-1)


LAYERS = {
    "lsa": lambda **kw: LieSelfAttention(8, 8, "SE2", heads=2, **kw),
    "lsa_constant": lambda **kw: LieSelfAttention(8, 8, "SE2", heads=2, normalization="constant", **kw),
    "lsa_mlp": lambda **kw: LieSelfAttention(8, 8, "SE2", heads=2, content="linear_concat_linear",
                                             combine="mlp", **kw),
    "lsa_multiplicative": lambda **kw: LieSelfAttention(8, 8, "SE2", heads=2, combine="multiplicative", **kw),
    "laa": lambda **kw: LieAlgebraAttention(8, 8, "SE2", heads=2, **kw),
    "laa_mlp": lambda **kw: LieAlgebraAttention(8, 8, "SE2", heads=2, score="mlp", **kw),
}


@pytest.mark.parametrize("name", ["lsa", "laa"])
def test_edge_attr_errors(name):
    ei, g = _graph()
    x = torch.randn(g.shape[0], 8, dtype=D)
    E = ei.shape[1]
    plain = LAYERS[name]().double()
    with pytest.raises(ValueError, match="edge_dim=edge_attr.size"):
        plain(x, ei, g, edge_attr=torch.randn(E, 3, dtype=D))
    layer = LAYERS[name](edge_dim=3).double()
    assert "edge_dim=3" in repr(layer)
    with pytest.raises(ValueError, match=r"edge_dim=3 and needs edge_attr of shape \(E, 3\)"):
        layer(x, ei, g)
    with pytest.raises(ValueError, match=rf"edge_attr must be a floating-point tensor of shape \({E}, 3\)"):
        layer(x, ei, g, edge_attr=torch.randn(E - 1, 3, dtype=D))
    with pytest.raises(ValueError, match="one row of edge_dim=3 features per edge"):
        layer(x, ei, g, edge_attr=torch.randn(E, 2, dtype=D))
    with pytest.raises(ValueError, match="edge_attr must be a floating-point tensor"):
        layer(x, ei, g, edge_attr=torch.ones(E, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="edge_attr is torch.float32 but the model's parameters are torch.float64"):
        layer(x, ei, g, edge_attr=torch.randn(E, 3))
    with pytest.raises(ValueError, match="edge_attr must be a torch.Tensor"):
        layer(x, ei, g, edge_attr=[[0.0] * 3] * E)
    with pytest.raises(ValueError, match="edge_dim"):
        LAYERS[name](edge_dim=0)
    # edge_dim=1 takes a vector of one feature per edge
    one = LAYERS[name](edge_dim=1).double()
    e1 = torch.randn(E, dtype=D)
    assert torch.equal(one(x, ei, g, edge_attr=e1), one(x, ei, g, edge_attr=e1[:, None]))


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_edge_attr_is_a_score_term(name):
    torch.manual_seed(0)
    ei, g = _graph()
    N, E = g.shape[0], ei.shape[1]
    x = torch.randn(N, 8, dtype=D)
    layer = LAYERS[name](edge_dim=3).double().eval()
    zero = layer(x, ei, g, edge_attr=torch.zeros(E, 3, dtype=D))
    out = layer(x, ei, g, edge_attr=torch.randn(E, 3, dtype=D))
    assert (out - zero).abs().max() > 1e-3  # the term acts
    # with no edge term the layer is the layer without edge features (same other weights)
    torch.manual_seed(0)
    base = LAYERS[name]().double().eval()
    base.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("lin_edge")})
    assert torch.allclose(base(x, ei, g), zero, atol=1e-12)
    if "constant" not in name:
        # a score term that is the same on every edge of a target changes no softmax
        per_target = torch.randn(N, 3, dtype=D)[ei[1]]
        assert torch.allclose(layer(x, ei, g, edge_attr=per_target), zero, atol=1e-10)


def test_lie_algebra_attention_edge_score_by_hand():
    torch.manual_seed(1)
    ei, g = _graph()
    N, E = g.shape[0], ei.shape[1]
    layer = LieAlgebraAttention(8, 8, "SE2", heads=2, edge_dim=3).double()
    x, ea = torch.randn(N, 8, dtype=D), torch.randn(E, 3, dtype=D)
    _, (_, alpha) = layer(x, ei, g, edge_attr=ea, return_attention_weights=True)
    s = layer.compute_score(SE2().relative_log(g, ei)) + ea @ layer.lin_edge.weight.t()
    assert torch.allclose(alpha, softmax(s, ei[1], num_nodes=N, dim=0), atol=1e-12)
    assert any(p is layer.lin_edge.weight for p in layer.score_parameters())


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_invariant_edge_attr_keeps_the_layer_invariant(name):
    torch.manual_seed(2)
    ei, g = _graph(N=10, E=50, seed=3)
    x = torch.randn(g.shape[0], 8, dtype=D)
    layer = LAYERS[name](edge_dim=2).double().eval()
    with torch.no_grad():  # a large edge term, so the check would see a non-invariant one
        layer.lin_edge.weight.mul_(3.0)

    def f(g):
        return layer(x, ei, g, edge_attr=_distances(g, ei))

    assert_equivariant(f, (g,), group="SE2", actions_in="elements", actions_out="invariant", num_elements=4)

    def f_bad(g):  # a feature that is not invariant (an absolute coordinate) breaks the invariance
        return layer(x, ei, g, edge_attr=torch.cat([_distances(g, ei)[:, :1], g[ei[0], :1, 2]], -1))

    with pytest.raises(AssertionError, match="not equivariant"):
        assert_equivariant(f_bad, (g,), group="SE2", actions_in="elements", actions_out="invariant")


@pytest.mark.parametrize("name", ["lsa", "lsa_constant", "lsa_mlp", "lsa_multiplicative"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_unfused_and_composite_agree(name, dtype):
    torch.manual_seed(3)
    ei, g = _graph(N=20, E=120, seed=4, dtype=dtype)
    N, E = g.shape[0], ei.shape[1]
    layer = LAYERS[name](edge_dim=3).to(dtype).eval()
    x = torch.randn(N, 8, dtype=dtype, requires_grad=True)
    ea = torch.randn(E, 3, dtype=dtype, requires_grad=True)
    inputs = [x, ea, *layer.parameters()]
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-11, rtol=1e-9)

    def run():
        out = layer(x, ei, g, edge_attr=ea)
        return out, torch.autograd.grad(out.square().sum(), inputs)

    layer.fused = False
    ref, ref_grads = run()
    layer.fused = True
    results = {"fused": run()}
    if name == "lsa":  # the one-operator path: the edge term rides on the location scores
        for backend in ["composite"] + (["triton"] if ops.triton_available() else []):
            ops.reset_dispatch_counts()
            with ops.backend(backend):
                results[backend] = run()
            assert ops.dispatch_counts().get(("csr_attention", backend), 0) >= 1
    for key, (out, grads) in results.items():
        assert torch.allclose(out, ref, **tol), (key, (out - ref).abs().max())
        for a, b in zip(grads, ref_grads):
            assert torch.allclose(a, b, **tol), (key, (a - b).abs().max())
    assert ref_grads[1].abs().max() > 0  # edge_attr receives a gradient


@pytest.mark.parametrize("name", ["lsa", "laa"])
def test_explainer_mask_with_edge_attr_equals_removing_edges(name):
    torch.manual_seed(4)
    ei, g = _graph()
    N, E = g.shape[0], ei.shape[1]
    layer = LAYERS[name](edge_dim=3).double()
    x, ea = torch.randn(N, 8, dtype=D), torch.randn(E, 3, dtype=D)
    keep = torch.rand(E) > 0.4
    expected = layer(x, ei[:, keep], g, edge_attr=ea[keep])
    with _masked(layer, keep.double(), ei):
        got = layer(x, ei, g, edge_attr=ea)
    assert torch.allclose(got, expected, atol=1e-12)


def test_block_passes_edge_attr():
    torch.manual_seed(5)
    ei, g = _graph()
    N, E = g.shape[0], ei.shape[1]
    block = LieTransformerBlock(8, "SE2", heads=2, edge_dim=2).double()
    x = torch.randn(N, 8, dtype=D)
    ea = _distances(g, ei)
    out = block(x, ei, g, edge_attr=ea)
    assert out.shape == (N, 8)
    assert (out - block(x, ei, g, edge_attr=torch.zeros(E, 2, dtype=D))).abs().max() > 1e-4
    with pytest.raises(ValueError, match="edge_dim=2 and needs edge_attr"):
        block(x, ei, g)


@pytest.mark.parametrize("name", ["lsa", "laa"])
def test_edge_attr_compiles_without_graph_breaks(name):
    torch.manual_seed(6)
    ei, g = _graph(N=10, E=40)
    ei = ei[:, torch.argsort(ei[1] * 10 + ei[0])]
    layer = LAYERS[name](edge_dim=2).double()
    x, ea = torch.randn(10, 8, dtype=D), torch.randn(40, 2, dtype=D)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(x, ei, g, edge_attr=ea), layer(x, ei, g, edge_attr=ea), atol=1e-12)
