"""The shared edge-normalisation core: the target-sorted (CSR) path against the scatter path."""
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from pyg_lie.nn.attention_core import dense_edge_attention, edge_attention


def _graph(N=7, E=40, seed=0, empty=(2, 5)):
    """Random target-sorted edges; nodes in ``empty`` receive none."""
    gen = torch.Generator().manual_seed(seed)
    ok = torch.tensor([i for i in range(N) if i not in empty])
    dst = ok[torch.randint(len(ok), (E,), generator=gen)].sort().values
    ptr = torch.zeros(N + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(dst, minlength=N), 0)
    return dst, ptr, gen


@pytest.mark.parametrize("norm", ["softmax", "mean"])
@pytest.mark.parametrize("layout", ["edges_first", "heads_first", "flat"])
def test_sorted_path_matches_scatter_path(norm, layout):
    dst, ptr, gen = _graph()
    E, H = dst.numel(), 3
    base = torch.randn(H, E, generator=gen, dtype=torch.float64) * 4
    if layout == "heads_first":
        score = base.t()  # (E, H) view of (H, E) storage, as the fused LieSelfAttention passes it
    elif layout == "edges_first":
        score = base.t().contiguous()
    else:
        score = base[0].clone()
    a = score.detach().clone().requires_grad_()
    b = score.detach().clone().requires_grad_()
    wa = edge_attention(a, dst, 7, norm, ptr=ptr)
    wb = edge_attention(b, dst, 7, norm)
    assert wa.shape == score.shape
    torch.testing.assert_close(wa, wb, rtol=1e-12, atol=1e-14)
    g = torch.randn(wa.shape, generator=gen, dtype=torch.float64)
    (ga,), (gb,) = torch.autograd.grad(wa, a, g), torch.autograd.grad(wb, b, g)
    torch.testing.assert_close(ga, gb, rtol=1e-12, atol=1e-14)
    if norm == "softmax":  # every non-empty target's weights sum to 1 (per head)
        sums = torch.zeros(7, *score.shape[1:], dtype=score.dtype).index_add_(0, dst, wa.detach())
        torch.testing.assert_close(sums[ptr[1:] > ptr[:-1]], torch.ones_like(sums[ptr[1:] > ptr[:-1]]))


@pytest.mark.parametrize("heads_first", [False, True])
def test_sorted_softmax_gradcheck_and_double_backward(heads_first):
    dst, ptr, gen = _graph(N=5, E=14, empty=(1,))
    base = torch.randn(2, dst.numel(), generator=gen, dtype=torch.float64)
    x = (base if heads_first else base.t().contiguous()).requires_grad_()

    def f(t):
        return edge_attention(t.t() if heads_first else t, dst, 5, "softmax", ptr=ptr)
    assert gradcheck(f, (x,))
    assert gradgradcheck(f, (x,))


def test_sorted_softmax_is_stable_for_large_scores():
    dst, ptr, gen = _graph()
    score = torch.randn(dst.numel(), 2, generator=gen) * 1e4  # float32, spreads far beyond exp's range
    score.requires_grad_()
    w = edge_attention(score, dst, 7, "softmax", ptr=ptr)
    w.backward(torch.randn(w.shape, generator=gen))
    assert torch.isfinite(w).all() and torch.isfinite(score.grad).all()
    ref = edge_attention(score.detach(), dst, 7, "softmax")
    torch.testing.assert_close(w.detach(), ref)


def test_empty_edge_set_and_bad_normalisation():
    ptr = torch.zeros(4, dtype=torch.long)
    empty = torch.zeros(0, 2)
    assert edge_attention(empty, torch.zeros(0, dtype=torch.long), 3, ptr=ptr).shape == (0, 2)
    dst, ptr, _ = _graph()
    with pytest.raises(ValueError, match="normalization"):
        edge_attention(torch.randn(dst.numel(), 2), dst, 7, "max", ptr=ptr)
    with pytest.raises(ValueError, match="ptr must be the CSR pointer"):
        edge_attention(torch.randn(dst.numel(), 2), dst, 6, ptr=ptr)
    with pytest.raises(ValueError, match="normalization"):
        dense_edge_attention(torch.randn(3, 4), normalization="max")


@pytest.mark.parametrize("dim", [1, -1])
def test_dense_softmax_operator(dim):
    """The dense softmax operator: equals torch.softmax on strided input, first and second
    derivatives (gradcheck, gradgradcheck), and passes opcheck."""
    from pyg_lie.nn.attention_core import dense_edge_attention
    torch.manual_seed(0)
    s = torch.randn(3, 7, 5, dtype=torch.float64).transpose(0, 2).requires_grad_()  # non-contiguous
    w = dense_edge_attention(s, dim=dim)
    assert torch.allclose(w, torch.softmax(s, dim=dim), rtol=0, atol=1e-15)
    assert torch.autograd.gradcheck(lambda t: dense_edge_attention(t, dim=dim), (s,))
    assert torch.autograd.gradgradcheck(lambda t: dense_edge_attention(t, dim=dim), (s,))
    torch.library.opcheck(torch.ops.pyg_lie.softmax, (s, dim))


def _explicit_attention(edge_index, score, v, norm):
    """Per-node loop: weights over each target's incoming edges, then the weighted sum of values."""
    N, H, D = v.shape
    src, dst = edge_index
    out, w = torch.zeros(N, H, D, dtype=v.dtype), torch.zeros_like(score)
    for i in range(N):
        e = (dst == i).nonzero().flatten()
        if e.numel() == 0:
            continue
        s = score[:, e]  # (H, deg)
        w[:, e] = torch.exp(s - s.max(1, keepdim=True).values) if norm == "softmax" else s
        w[:, e] = w[:, e] / (w[:, e].sum(1, keepdim=True) if norm == "softmax" else e.numel())
        out[i] = torch.einsum("he,ehd->hd", w[:, e], v[src[e]])
    return out.reshape(N, H * D), w


@pytest.mark.parametrize("norm", ["softmax", "mean"])
@pytest.mark.parametrize("graph", ["ragged", "uniform", "complete"])
def test_csr_edge_attention_matches_explicit_loop(norm, graph):
    """Scores in edge_index order -> CSR order -> csr_edge_attention, against a loop over
    nodes; the three structures take the scatter-free sorted, dense-degree and batched paths."""
    from pyg_lie.ops import CSRStructure, to_edge_order
    from pyg_lie.nn.attention_core import csr_edge_attention
    gen = torch.Generator().manual_seed(3)
    N, H, D = 8, 2, 3
    if graph == "ragged":  # node 5 receives nothing
        dst = torch.tensor([i for i in range(N) if i != 5]).repeat(4)[:25]
        src = torch.randint(N, (dst.numel(),), generator=gen)
    elif graph == "uniform":  # three incoming edges each
        dst = torch.arange(N).repeat(3)
        src = torch.randint(N, (dst.numel(),), generator=gen)
    else:  # two clouds of four, all pairs
        ii, jj = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
        src = torch.cat([jj.flatten(), jj.flatten() + 4])
        dst = torch.cat([ii.flatten(), ii.flatten() + 4])
    perm = torch.randperm(dst.numel(), generator=gen)  # unsorted input
    edge_index = torch.stack([src[perm], dst[perm]])
    score = torch.randn(H, edge_index.size(1), generator=gen, dtype=torch.float64) * 3
    v = torch.randn(N, H, D, generator=gen, dtype=torch.float64)
    csr = CSRStructure.build(edge_index, N)
    assert csr.complete == (graph == "complete") and (csr.degree > 0) == (graph != "ragged")
    sorted_score = score if csr.perm is None else score[:, csr.perm]
    out, w = csr_edge_attention(csr, sorted_score.contiguous(), v, norm)
    ref_out, ref_w = _explicit_attention(edge_index, score, v, norm)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(to_edge_order(csr, w.t()), ref_w.t(), rtol=1e-12, atol=1e-12)


def test_csr_edge_attention_dropout_acts_on_the_aggregation_only():
    from pyg_lie.ops import CSRStructure
    from pyg_lie.nn.attention_core import csr_edge_attention
    gen = torch.Generator().manual_seed(4)
    N, H, D = 6, 2, 4
    edge_index = torch.stack([torch.randint(N, (20,), generator=gen), torch.arange(N).repeat(4)[:20]])
    csr = CSRStructure.build(edge_index, N)
    score = torch.randn(H, 20, generator=gen, dtype=torch.float64)
    v = torch.randn(N, H, D, generator=gen, dtype=torch.float64)
    out0, w0 = csr_edge_attention(csr, score, v)
    out1, w1 = csr_edge_attention(csr, score, v, dropout=1.0, training=True)  # every weight dropped
    out2, w2 = csr_edge_attention(csr, score, v, dropout=0.5, training=False)  # eval: no dropout
    assert torch.equal(w1, w0) and torch.equal(w2, w0)  # the weights returned are before dropout
    assert torch.equal(out1, torch.zeros_like(out0)) and torch.equal(out2, out0)
    assert out0.abs().sum() > 0
