"""Bipartite inputs (PyG's ``(x_src, x_dst)``, ``size=(N_src, N_dst)``) on the attention engine and
every attention layer: the output equals the homogeneous layer on the concatenated node set
(sources, then targets) restricted to the targets, equivariance holds, and ``to_hetero`` runs
a model with two node types and two edge types, forward and backward."""
import pytest
import torch
from torch_geometric.utils import softmax

from pyg_lie.groups import SE2, SO3
from pyg_lie.nn import LieAlgebraAttention, LieSelfAttention, LieTransformerBlock, VectorTokenAttention
from pyg_lie.ops import CSRStructure, csr_aggregate, to_edge_order
from pyg_lie.nn.attention_core import csr_edge_attention, csr_softmax_attention

f64 = torch.float64


def _bipartite_edges(n_src, n_dst, E, gen, lone=True):
    ei = torch.stack([torch.randint(0, n_src, (E,), generator=gen), torch.randint(0, n_dst, (E,), generator=gen)])
    if lone:  # target 0 has exactly one incoming edge, target n_dst - 1 none
        keep = (ei[1] != 0) & (ei[1] != n_dst - 1)
        ei = torch.cat([ei[:, keep], torch.tensor([[n_src - 1], [0]])], dim=1)
    return ei


# ----------------------------------------------------------------------------- the engine
@pytest.mark.parametrize("n_src,n_dst", [(9, 4), (4, 11)])
def test_engine_bipartite_attention_matches_reference(n_src, n_dst):
    gen = torch.Generator().manual_seed(n_src)
    ei = _bipartite_edges(n_src, n_dst, 40, gen)
    H, D = 2, 3
    q = torch.randn(n_dst, H, D, dtype=f64, generator=gen, requires_grad=True)
    k = torch.randn(n_src, H, D, dtype=f64, generator=gen, requires_grad=True)
    v = torch.randn(n_src, H, D, dtype=f64, generator=gen, requires_grad=True)
    l = torch.randn(H, ei.shape[1], dtype=f64, generator=gen)
    s = CSRStructure.build(ei, n_dst, num_sources=n_src)
    assert s.num_src == n_src and s.num_nodes == n_dst and not s.complete
    lp = (l if s.perm is None else l[:, s.perm]).contiguous()
    src, dst = ei
    a = softmax((q[dst] * k[src]).sum(-1) + l.t(), dst, num_nodes=n_dst)
    ref = torch.zeros(n_dst, H, D, dtype=f64).index_add(0, dst, a.unsqueeze(-1) * v[src])
    out, w = csr_softmax_attention(s, q, k, v, lp)
    assert out.shape == (n_dst, H, D)
    assert torch.allclose(out, ref, atol=1e-13) and torch.allclose(to_edge_order(s, w.t()), a, atol=1e-13)
    assert out[n_dst - 1].abs().max() == 0  # a target without edges receives zero
    for got, want in zip(torch.autograd.grad(out.square().sum(), (q, k, v)),
                         torch.autograd.grad(ref.square().sum(), (q, k, v))):
        assert torch.allclose(got, want, atol=1e-12)
    # the unfused step: normalisation + aggregation of given scores
    out2, _ = csr_edge_attention(s, lp, v)
    ref2 = torch.zeros(n_dst, H, D, dtype=f64).index_add(0, dst, softmax(l.t(), dst, num_nodes=n_dst).unsqueeze(-1)
                                                          * v[src])
    assert torch.allclose(out2.view(n_dst, H, D), ref2, atol=1e-13)
    # the transposed pattern has one row per source
    _, _, crow_t, col_t, perm_t, iperm_t = s.parts(True)
    assert crow_t.numel() == n_src + 1 and torch.equal(crow_t.diff(), torch.bincount(src, minlength=n_src))
    assert torch.equal(s.col[perm_t], torch.sort(s.col, stable=True).values)
    assert torch.equal(col_t, s.row[perm_t]) and torch.equal(perm_t[iperm_t], torch.arange(ei.shape[1]))


def test_engine_bipartite_common_degree_and_checks():
    gen = torch.Generator().manual_seed(0)
    n_src, n_dst, K = 7, 5, 3  # every target has K sources: the dense normalisation
    dst = torch.arange(n_dst).repeat_interleave(K)
    ei = torch.stack([torch.randint(0, n_src, (n_dst * K,), generator=gen), dst])
    s = CSRStructure.build(ei, n_dst, num_sources=n_src, transpose=True)
    assert s.degree == K
    w = torch.rand(2, n_dst * K, dtype=f64, generator=gen)
    v = torch.randn(n_src, 2, 4, dtype=f64, generator=gen)
    ref = torch.zeros(n_dst, 2, 4, dtype=f64).index_add(0, s.row, w.t().unsqueeze(-1) * v[s.col])  # sorted order
    assert torch.allclose(csr_aggregate(s, w, v).view(n_dst, 2, 4), ref, atol=1e-13)
    with pytest.raises(ValueError, match="source"):
        CSRStructure.build(ei, n_dst, num_sources=3)
    with pytest.raises(ValueError, match="target"):
        CSRStructure.build(ei, 2, num_sources=n_src)
    with pytest.raises(ValueError, match="sources"):
        s.check(n_dst, n_dst * K, n_src + 1)
    with pytest.raises(ValueError, match="source features"):
        csr_aggregate(s, w, v[:n_dst])
    # a square structure is unchanged by num_sources == num_nodes
    sq = CSRStructure.build(ei, n_src, num_sources=n_src)
    assert sq.num_sources is None and torch.equal(sq.crow, CSRStructure.build(ei, n_src).crow)


# ------------------------------------------------------------------------------ the layers
def _homogeneous(ei, n_src):
    return torch.stack([ei[0], ei[1] + n_src])


LSA = {
    "fused": dict(),
    "plain": dict(fused=False),
    "constant": dict(normalization="constant"),
    "lcl_mlp": dict(content="linear_concat_linear", combine="mlp"),
    "multiplicative_dropout_eval": dict(combine="multiplicative", dropout=0.3),
    "invariants_edge_attr": dict(invariant_dim=2, edge_dim=3),
}


@pytest.mark.parametrize("name", sorted(LSA))
@pytest.mark.parametrize("n_src,n_dst", [(10, 6), (5, 9)])
def test_lie_self_attention_bipartite_equals_homogeneous(name, n_src, n_dst):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    G = SE2()
    layer = LieSelfAttention(8, 12, G, heads=3, kernel_dim=8, **LSA[name]).double().eval()
    x_src, x_dst = torch.randn(n_src, 8, dtype=f64), torch.randn(n_dst, 8, dtype=f64)
    g_src, g_dst = G.random(n_src, generator=gen, dtype=f64), G.random(n_dst, generator=gen, dtype=f64)
    ei = _bipartite_edges(n_src, n_dst, 50, gen)
    kw, kw_h = {}, {}
    if layer.invariant_dim:
        i_src, i_dst = torch.randn(n_src, 2, dtype=f64), torch.randn(n_dst, 2, dtype=f64)
        kw["invariants"], kw_h["invariants"] = (i_src, i_dst), torch.cat([i_src, i_dst])
    if layer.edge_dim:
        kw["edge_attr"] = kw_h["edge_attr"] = torch.randn(ei.shape[1], 3, dtype=f64)
    out, (ei_out, alpha) = layer((x_src, x_dst), ei, (g_src, g_dst), return_attention_weights=True, **kw)
    ref, (_, ref_alpha) = layer(torch.cat([x_src, x_dst]), _homogeneous(ei, n_src), torch.cat([g_src, g_dst]),
                                return_attention_weights=True, **kw_h)
    assert out.shape == (n_dst, 12) and ei_out is ei and layer._alpha is None
    assert torch.allclose(out, ref[n_src:], atol=1e-12), (out - ref[n_src:]).abs().max()
    assert torch.allclose(alpha, ref_alpha, atol=1e-12)
    # precomputed structure and relative logs: the same numbers
    csr = CSRStructure.build(ei, n_dst, num_sources=n_src)
    rel = G.relative_log(torch.cat([g_src, g_dst]), _homogeneous(ei, n_src), one_sided_cut=True)
    assert torch.allclose(layer((x_src, x_dst), ei, (g_src, g_dst), csr=csr, rel_log=rel, **kw), out, atol=1e-12)
    # gradients of both sides' features
    xs, xd = x_src.clone().requires_grad_(), x_dst.clone().requires_grad_()
    layer((xs, xd), ei, (g_src, g_dst), **kw).square().sum().backward()
    xc = torch.cat([x_src, x_dst]).requires_grad_()
    layer(xc, _homogeneous(ei, n_src), torch.cat([g_src, g_dst]), **kw_h)[n_src:].square().sum().backward()
    assert torch.allclose(xs.grad, xc.grad[:n_src], atol=1e-12) and torch.allclose(xd.grad, xc.grad[n_src:], atol=1e-12)


def test_lie_self_attention_bipartite_is_equivariant():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(2)
    G = SO3()
    n_src, n_dst = 12, 7
    for fused in (True, False):
        layer = LieSelfAttention(6, 6, G, heads=2, kernel_dim=8, fused=fused).double()
        x = (torch.randn(n_src, 6, dtype=f64), torch.randn(n_dst, 6, dtype=f64))
        g = (G.random(n_src, generator=gen, dtype=f64), G.random(n_dst, generator=gen, dtype=f64))
        ei = _bipartite_edges(n_src, n_dst, 40, gen)
        out = layer(x, ei, g)
        u = G.random(1, generator=gen, dtype=f64)
        moved = layer(x, ei, (u @ g[0], u @ g[1]))
        assert torch.allclose(out, moved, atol=1e-10)
        # moving one side alone changes the relative poses, hence the output
        assert not torch.allclose(out, layer(x, ei, (u @ g[0], g[1])), atol=1e-6)


def test_lie_transformer_block_bipartite_residual_and_weights():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    G = SE2()
    n_src, n_dst = 9, 6
    block = LieTransformerBlock(8, G, heads=2, kernel_dim=8).double()
    x_src, x_dst = torch.randn(n_src, 8, dtype=f64), torch.randn(n_dst, 8, dtype=f64)
    g_src, g_dst = G.random(n_src, generator=gen, dtype=f64), G.random(n_dst, generator=gen, dtype=f64)
    ei = _bipartite_edges(n_src, n_dst, 30, gen)
    out, (ei_out, alpha) = block((x_src, x_dst), ei, (g_src, g_dst), return_attention_weights=True)
    ref, (_, ref_alpha) = block(torch.cat([x_src, x_dst]), _homogeneous(ei, n_src), torch.cat([g_src, g_dst]),
                                return_attention_weights=True)
    assert out.shape == (n_dst, 8) and ei_out is ei and block.attn._alpha is None
    assert torch.allclose(out, ref[n_src:], atol=1e-12) and torch.allclose(alpha, ref_alpha, atol=1e-12)
    # the residual is the targets': a target without edges gets x_dst + MLP(LN(x_dst))
    iso = n_dst - 1
    h = x_dst[iso:iso + 1]
    assert torch.allclose(out[iso:iso + 1], h + block.mlp(block.norm2(h)), atol=1e-12)
    u = G.random(1, generator=gen, dtype=f64)
    assert torch.allclose(block((x_src, x_dst), ei, (u @ g_src, u @ g_dst)), out, atol=1e-10)


@pytest.mark.parametrize("score", ["closed_form", "mlp"])
@pytest.mark.parametrize("n_src,n_dst", [(10, 6), (5, 9)])
def test_lie_algebra_attention_bipartite_equals_homogeneous(score, n_src, n_dst):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(4)
    G = SE2()
    layer = LieAlgebraAttention(8, 8, G, heads=2, score=score, edge_dim=2).double()
    x_src, x_dst = torch.randn(n_src, 8, dtype=f64), torch.randn(n_dst, 8, dtype=f64)
    g_src, g_dst = G.random(n_src, generator=gen, dtype=f64), G.random(n_dst, generator=gen, dtype=f64)
    ei = _bipartite_edges(n_src, n_dst, 40, gen)
    ea = torch.randn(ei.shape[1], 2, dtype=f64)
    out, (_, alpha) = layer((x_src, x_dst), ei, (g_src, g_dst), edge_attr=ea, return_attention_weights=True)
    ref, (_, ref_alpha) = layer(torch.cat([x_src, x_dst]), _homogeneous(ei, n_src), torch.cat([g_src, g_dst]),
                                edge_attr=ea, return_attention_weights=True)
    assert out.shape == (n_dst, 8)
    assert torch.allclose(out, ref[n_src:], atol=1e-12) and torch.allclose(alpha, ref_alpha, atol=1e-12)
    # x_dst is not read (the score depends on the poses alone): None is accepted
    assert torch.allclose(layer((x_src, None), ei, (g_src, g_dst), edge_attr=ea), out, atol=1e-12)
    u = G.random(1, generator=gen, dtype=f64)
    assert torch.allclose(layer((x_src, x_dst), ei, (u @ g_src, u @ g_dst), edge_attr=ea), out, atol=1e-10)


@pytest.mark.parametrize("n_src,n_dst", [(10, 6), (5, 9)])
def test_vector_token_attention_bipartite_equals_homogeneous(n_src, n_dst):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(5)
    layer = VectorTokenAttention(8, 8, heads=2).double()
    x_src, x_dst = torch.randn(n_src, 8, dtype=f64), torch.randn(n_dst, 8, dtype=f64)
    ei = _bipartite_edges(n_src, n_dst, 40, gen)
    out, (_, alpha) = layer((x_src, x_dst), ei, return_attention_weights=True)
    ref, (_, ref_alpha) = layer(torch.cat([x_src, x_dst]), _homogeneous(ei, n_src), return_attention_weights=True)
    assert out.shape == (n_dst, 8)
    assert torch.allclose(out, ref[n_src:], atol=1e-12) and torch.allclose(alpha, ref_alpha, atol=1e-12)


def test_bipartite_input_errors():
    G = SE2()
    gen = torch.Generator().manual_seed(6)
    x = (torch.randn(5, 8), torch.randn(3, 8))
    g = (G.random(5, generator=gen), G.random(3, generator=gen))
    ei = torch.tensor([[4, 0], [2, 1]])
    layer = LieSelfAttention(8, 8, G, heads=2)
    with pytest.raises(ValueError, match="g must be a pair"):
        layer(x, ei, g[0])
    with pytest.raises(ValueError, match="g must be a pair"):
        layer(x[0], ei, g)
    with pytest.raises(ValueError, match=r"x\[1\] \(x_dst\)"):
        layer((x[0], torch.randn(3, 7)), ei, g)
    with pytest.raises(ValueError, match=r"g\[1\] \(g_dst\)"):
        layer(x, ei, (g[0], g[0]))
    with pytest.raises(ValueError, match="target"):
        layer(x, torch.tensor([[0], [3]]), g)
    with pytest.raises(ValueError, match="source"):
        layer(x, torch.tensor([[5], [0]]), g)
    with pytest.raises(ValueError, match="pair"):
        layer((x[0],), ei, g)
    with pytest.raises(ValueError, match="target"):
        VectorTokenAttention(8, 8)(x, torch.tensor([[0], [3]]))
    with pytest.raises(ValueError, match="g must be a pair"):
        LieAlgebraAttention(8, 8, G)(x, ei, g[0])
    with pytest.raises(ValueError, match="length 3"):
        LieAlgebraAttention(8, 8, G)(x, ei, (*g, g[0]))
    with pytest.raises(ValueError, match="length 3"):
        layer(x, ei, (*g, g[0]))


# ------------------------------------------------------------------------------- to_hetero
class _Model(torch.nn.Module):
    """One attention layer between two linear maps (plain PyG style: to_hetero makes one copy
    of the attention per edge type, of the linear maps per node type)."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.lin = torch.nn.Linear(4, 8)
        if kind == "lie_self_attention":
            self.att = LieSelfAttention(8, 8, "SE2", heads=2, kernel_dim=8)
        elif kind == "lie_algebra_attention":
            self.att = LieAlgebraAttention(8, 8, "SE2", heads=2)
        else:
            self.att = VectorTokenAttention(8, 8, heads=2)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x, edge_index, g):
        h = self.lin(x)
        if self.kind == "vector_token_attention":
            h = self.att(h, edge_index)
        else:
            h = self.att(h, edge_index, g)
        return self.head(h)


@pytest.mark.parametrize("kind", ["lie_self_attention", "lie_algebra_attention", "vector_token_attention"])
def test_to_hetero_two_node_and_two_edge_types(kind):
    from torch_geometric.nn import to_hetero

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(7)
    G = SE2()
    n_atom, n_site = 10, 4
    near = torch.randint(0, n_atom, (2, 30), generator=gen)
    to = torch.stack([torch.randint(0, n_atom, (12,), generator=gen), torch.arange(n_site).repeat(3)])
    metadata = (["atom", "site"], [("atom", "near", "atom"), ("atom", "to", "site")])
    model = to_hetero(_Model(kind), metadata, aggr="sum").double()
    x = {"atom": torch.randn(n_atom, 4, dtype=f64), "site": torch.randn(n_site, 4, dtype=f64)}
    g = {"atom": G.random(n_atom, generator=gen, dtype=f64), "site": G.random(n_site, generator=gen, dtype=f64)}
    ei = {("atom", "near", "atom"): near, ("atom", "to", "site"): to}
    out = model(x, ei, g)
    assert out["atom"].shape == (n_atom, 2) and out["site"].shape == (n_site, 2)
    (out["atom"].square().sum() + out["site"].square().sum()).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    # LieAlgebraAttention does not read x_dst (its score depends on the poses alone): the site
    # nodes' input map then gets no gradient
    unused = {"lin.site.weight", "lin.site.bias"} if kind == "lie_algebra_attention" else set()
    assert {n for n, gr in grads.items() if gr is None} == unused
    assert all(torch.isfinite(gr).all() for gr in grads.values() if gr is not None)
    to_att = [p for n, p in model.named_parameters() if n.startswith("att.") and "to" in n]
    assert to_att and any(p.grad.abs().sum() > 0 for p in to_att)
    # the ('atom', 'to', 'site') copy computes the bipartite layer on (atom, site)
    conv, lins, heads = model.att["atom__to__site"], model.lin, model.head  # to_hetero's ModuleDicts
    lin_x = {k: lins[k](v) for k, v in x.items()}
    if kind == "vector_token_attention":
        site = conv((lin_x["atom"], lin_x["site"]), to)
    else:
        site = conv((lin_x["atom"], lin_x["site"]), to, (g["atom"], g["site"]))
    assert torch.allclose(heads["site"](site), out["site"], atol=1e-12)
    assert type(conv) is type(model.att["atom__near__atom"])
    # equivariance through the heterogeneous model
    if kind != "vector_token_attention":
        u = G.random(1, generator=gen, dtype=f64)
        moved = model(x, ei, {k: u @ v for k, v in g.items()})
        assert all(torch.allclose(moved[k], out[k].detach(), atol=1e-10) for k in out)


def test_hetero_conv_with_blocks():
    """PyG's HeteroConv passes (x_src, x_dst) and (g_src, g_dst) to a block per edge type: each
    target type's output is its residual stream updated by the block of its edge type."""
    from torch_geometric.nn import HeteroConv

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(8)
    G = SE2()
    n_atom, n_site = 8, 3
    near = torch.randint(0, n_atom, (2, 20), generator=gen)
    to = torch.stack([torch.randint(0, n_atom, (9,), generator=gen), torch.arange(n_site).repeat(3)])
    blocks = {("atom", "near", "atom"): LieTransformerBlock(8, G, heads=2, kernel_dim=8),
              ("atom", "to", "site"): LieTransformerBlock(8, G, heads=2, kernel_dim=8)}
    conv = HeteroConv(blocks, aggr="sum").double()
    x = {"atom": torch.randn(n_atom, 8, dtype=f64, requires_grad=True),
         "site": torch.randn(n_site, 8, dtype=f64, requires_grad=True)}
    g = {"atom": G.random(n_atom, generator=gen, dtype=f64), "site": G.random(n_site, generator=gen, dtype=f64)}
    ei = {("atom", "near", "atom"): near, ("atom", "to", "site"): to}
    out = conv(x, ei, g_dict=g)
    site_block = conv.convs[("atom", "to", "site")]
    assert torch.allclose(out["site"], site_block((x["atom"], x["site"]), to, (g["atom"], g["site"])), atol=1e-12)
    (out["atom"].square().sum() + out["site"].square().sum()).backward()
    assert x["site"].grad.abs().sum() > 0 and x["atom"].grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["lie_self_attention", "lie_self_attention_plain", "lie_algebra_attention",
                                  "vector_token_attention"])
def test_bipartite_explainer_mask_equals_removal(kind):
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(9)
    G = SE2()
    n_src, n_dst = 10, 6
    layer = {"lie_self_attention": lambda: LieSelfAttention(8, 8, G, heads=2),
             "lie_self_attention_plain": lambda: LieSelfAttention(8, 8, G, heads=2, fused=False),
             "lie_algebra_attention": lambda: LieAlgebraAttention(8, 8, G, heads=2),
             "vector_token_attention": lambda: VectorTokenAttention(8, 8, heads=2)}[kind]().double()
    x = (torch.randn(n_src, 8, dtype=f64), torch.randn(n_dst, 8, dtype=f64))
    g = (G.random(n_src, generator=gen, dtype=f64), G.random(n_dst, generator=gen, dtype=f64))
    ei = _bipartite_edges(n_src, n_dst, 40, gen)
    keep = torch.rand(ei.shape[1], generator=gen) > 0.4

    def call(e):
        return layer(x, e) if kind == "vector_token_attention" else layer(x, e, g)

    expected = call(ei[:, keep])
    set_masks(layer, keep.double(), ei, apply_sigmoid=False)
    try:
        got = call(ei)
    finally:
        clear_masks(layer)
    assert got.shape == (n_dst, 8) and torch.allclose(got, expected, atol=1e-12)


class _ResidualModel(torch.nn.Module):
    """A LieTransformer block written out at the top level, as to_hetero needs it (to_hetero
    aggregates per target type only the outputs of MessagePassing modules; a LieTransformerBlock
    inside a model comes out per edge type): LayerNorm and MLP per node type, attention per
    edge type summed per target type, residuals per node type."""

    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(8), torch.nn.LayerNorm(8)
        self.att = LieSelfAttention(8, 8, "SE2", heads=2, kernel_dim=8)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 8))

    def forward(self, x, edge_index, g):
        x = x + self.att(self.norm1(x), edge_index, g)
        return x + self.mlp(self.norm2(x))


def test_to_hetero_residual_block_model():
    from torch_geometric.nn import to_hetero

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(10)
    G = SE2()
    n_atom, n_site = 9, 4
    ei = {("atom", "near", "atom"): torch.randint(0, n_atom, (2, 25), generator=gen),
          ("atom", "to", "site"): torch.stack([torch.randint(0, n_atom, (8,), generator=gen),
                                               torch.arange(n_site).repeat(2)])}
    model = to_hetero(_ResidualModel(), (["atom", "site"], list(ei)), aggr="sum").double()
    x = {"atom": torch.randn(n_atom, 8, dtype=f64), "site": torch.randn(n_site, 8, dtype=f64)}
    g = {"atom": G.random(n_atom, generator=gen, dtype=f64), "site": G.random(n_site, generator=gen, dtype=f64)}
    out = model(x, ei, g)
    assert out["atom"].shape == (n_atom, 8) and out["site"].shape == (n_site, 8)
    sum(o.square().sum() for o in out.values()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    u = G.random(1, generator=gen, dtype=f64)
    moved = model(x, ei, {k: u @ v for k, v in g.items()})
    assert all(torch.allclose(moved[k], out[k].detach(), atol=1e-10) for k in out)
