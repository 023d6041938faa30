"""The fused CSR softmax attention (``csr_attention_f32`` of ``ops/_native/csr_products.c``, the CPU
kernel of ``pyg_lie::csr_attention``) against the unfused operators (bitwise), an independent
float64 dense formula, and in the layer."""
import math

import pytest
import torch

from pyg_lie import ops
from pyg_lie.nn import LieSelfAttention, lie_self_attention
from pyg_lie.ops import CSRStructure
from pyg_lie.nn.attention_core import csr_softmax_attention
from pyg_lie.ops.csr import _unfused_attention as _unfused_csr_attention
from pyg_lie.ops import _native

pytestmark = pytest.mark.skipif(not _native.available(), reason="native kernels not built (no C compiler)")


@pytest.fixture
def fused(monkeypatch):
    """The calls of the fused C kernel (``_native.csr_attention``), recorded."""
    calls = []
    real = _native.csr_attention
    monkeypatch.setattr(_native, "csr_attention", lambda *a: calls.append(1) or real(*a))
    return calls


def _graph(N, p, seed=0):
    """A random directed graph on ``N`` nodes with edge probability ``p``; nodes 0 and N - 1
    hear nobody (empty rows)."""
    g = torch.Generator().manual_seed(seed)
    adj = torch.rand(N, N, generator=g) < p
    adj[:, 0] = adj[:, N - 1] = False  # adj[j, i]: j -> i
    return adj.nonzero().t().contiguous()  # (2, E): row 0 source, row 1 target


def _inputs(N, H, D, E, seed=1, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    ts = [torch.randn(N, H, D, generator=g, dtype=dtype) for _ in range(3)]
    return [*ts, 3 * torch.randn(H, E, generator=g, dtype=dtype)]


def _leaves(ts):
    return [t.detach().clone().requires_grad_() for t in ts]


def _dense_reference(edge_index, q, k, v, l):
    """float64 attention by a softmax over each target's edges, written with a dense
    ``(H, N, N)`` score matrix masked to the graph (no CSR, no native code)."""
    q, k, v, l = (t.double() for t in (q, k, v, l))
    N, H, _ = q.shape
    src, dst = edge_index
    s = torch.full((H, N, N), -math.inf, dtype=torch.float64)
    s[:, dst, src] = torch.einsum("ehd,ehd->he", q[dst], k[src]) + l
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)  # rows without edges: all -inf -> 0
    out = torch.einsum("hij,jhd->ihd", w, v)
    return out, w[:, dst, src]


@pytest.mark.parametrize("H, D", [(1, 8), (4, 16), (2, 24), (3, 32)])
def test_fused_equals_unfused_bitwise(fused, H, D):
    N = 70
    s = CSRStructure.build(_graph(N, 0.3), N)
    xs = _inputs(N, H, D, s.col.numel())
    a, b = _leaves(xs), _leaves(xs)
    (o1, w1), (o2, w2) = csr_softmax_attention(s, *a), _unfused_csr_attention(s, *b)
    assert len(fused) == 1  # the fused path ran
    assert torch.equal(o1, o2) and torch.equal(w1, w2)
    g = torch.Generator().manual_seed(2)
    go, gw = torch.randn(o1.shape, generator=g), torch.randn(w1.shape, generator=g)
    ((o1 * go).sum() + (w1 * gw).sum()).backward()
    ((o2 * go).sum() + (w2 * gw).sum()).backward()
    for x, y in zip(a, b):
        assert torch.equal(x.grad, y.grad)


def test_uniform_in_degree_agrees_with_the_dense_softmax_path():
    """kNN-like graphs (every node hears K others): the unfused path normalises with torch's
    dense softmax, so the two agree to rounding, not to the bit."""
    N, K, H, D = 60, 7, 4, 16
    g = torch.Generator().manual_seed(6)
    src = torch.stack([torch.randperm(N, generator=g)[:K] for _ in range(N)]).reshape(-1)
    ei = torch.stack([src, torch.arange(N).repeat_interleave(K)])
    s = CSRStructure.build(ei, N)
    assert s.degree == K and not s.complete
    xs = _inputs(N, H, D, s.col.numel())
    a, b = _leaves(xs), _leaves(xs)
    (o1, w1), (o2, w2) = csr_softmax_attention(s, *a), _unfused_csr_attention(s, *b)
    torch.testing.assert_close(o1, o2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w1, w2, rtol=1e-5, atol=1e-7)
    (o1.pow(2).sum() + w1.sum()).backward()
    (o2.pow(2).sum() + w2.sum()).backward()
    for x, y in zip(a, b):  # sums of terms of either sign: rounding relative to the largest
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-4, atol=1e-5 * float(y.grad.abs().max()))


def test_matches_float64_dense_formula():
    N, H, D = 50, 4, 16
    ei = _graph(N, 0.4, seed=3)
    s = CSRStructure.build(ei, N)
    sorted_ei = torch.stack([s.col, s.row])
    xs = _inputs(N, H, D, s.col.numel(), seed=4)
    a, r = _leaves(xs), [t.detach().double().requires_grad_() for t in xs]
    out, w = csr_softmax_attention(s, *a)
    ref_out, ref_w = _dense_reference(sorted_ei, *r)
    assert out[0].abs().max() == 0 and out[N - 1].abs().max() == 0  # empty rows: zero, not NaN
    torch.testing.assert_close(out.double(), ref_out, rtol=0, atol=2e-5)
    torch.testing.assert_close(w.double(), ref_w, rtol=0, atol=2e-6)
    g = torch.Generator().manual_seed(5)
    go, gw = torch.randn(out.shape, generator=g), torch.randn(w.shape, generator=g)
    ((out * go).sum() + (w * gw).sum()).backward()
    ((ref_out * go.double()).sum() + (ref_w * gw.double()).sum()).backward()
    for x, y in zip(a, r):
        torch.testing.assert_close(x.grad.double(), y.grad, rtol=0, atol=5e-5)


def test_only_the_weights_used():
    """A gradient through the weights alone (no output gradient) still reaches q, k and l."""
    N, H, D = 40, 2, 8
    s = CSRStructure.build(_graph(N, 0.3), N)
    xs = _inputs(N, H, D, s.col.numel())
    a, b = _leaves(xs), _leaves(xs)
    csr_softmax_attention(s, *a)[1].pow(2).sum().backward()
    _unfused_csr_attention(s, *b)[1].pow(2).sum().backward()
    for x, y in zip(a[:2] + a[3:], b[:2] + b[3:]):
        assert torch.equal(x.grad, y.grad)
    assert a[2].grad is None or a[2].grad.abs().max() == 0  # v does not enter the weights


def test_double_backward_takes_the_unfused_operators():
    N, H, D = 30, 2, 8
    s = CSRStructure.build(_graph(N, 0.4), N)
    xs = _inputs(N, H, D, s.col.numel())
    outs = []
    for f in (csr_softmax_attention, _unfused_csr_attention):
        a = _leaves(xs)
        out, w = f(s, *a)
        grads = torch.autograd.grad((out.pow(2).sum() + w.pow(3).sum()), a, create_graph=True)
        second = torch.autograd.grad(sum(g.pow(2).sum() for g in grads), a)
        outs.append([*grads, *second])
    for x, y in zip(*outs):  # first derivatives to the bit; second ones summed in another order
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6 * float(y.detach().abs().max()))


def test_non_finite_scores_as_torch():
    """-inf location scores mask edges (weight 0); +inf and NaN give NaN as torch does."""
    N, H, D = 12, 1, 8
    s = CSRStructure.build(_graph(N, 0.6), N)
    q, k, v, l = _inputs(N, H, D, s.col.numel())
    l[0, ::3] = -math.inf
    for bad in (math.inf, math.nan):
        l2 = l.clone()
        row = int(s.row[0])
        l2[0, s.crow[row]] = bad
        (o1, w1), (o2, w2) = csr_softmax_attention(s, q, k, v, l2), _unfused_csr_attention(s, q, k, v, l2)
        assert torch.equal(o1.isnan(), o2.isnan()) and o1[row].isnan().all()
        assert torch.equal(w1.isnan(), w2.isnan())
        fin = ~w1.isnan()
        assert torch.equal(w1[fin], w2[fin])
    w = csr_softmax_attention(s, q, k, v, l)[1]
    assert (w[0, ::3] == 0).all() and not w.isnan().any()


def test_threads_agree_bitwise():
    N, H, D = 400, 4, 16
    s = CSRStructure.build(_graph(N, 0.08), N)
    xs = _inputs(N, H, D, s.col.numel())
    results = []
    threads = torch.get_num_threads()
    try:
        for t in (1, 3):
            torch.set_num_threads(t)
            a = _leaves(xs)
            out, w = csr_softmax_attention(s, *a)
            (out.sum() + w[:, ::2].sum()).backward()
            results.append([out, w, *(x.grad for x in a)])
    finally:
        torch.set_num_threads(threads)
    for x, y in zip(*results):
        assert torch.equal(x, y)


def test_native_refusals():
    N, H, D = 10, 1, 8
    s = CSRStructure.build(_graph(N, 0.5), N)
    q, k, v, l = _inputs(N, H, D, s.col.numel())
    bad = s.crow.clone()
    bad[3] = bad[4] + 1  # decreasing
    with pytest.raises(ValueError, match="row pointer"):
        _native.csr_attention(q, k, v, l, bad, s.col)
    assert not _native.csr_attention_supported(*_inputs(N, H, 12, s.col.numel()))  # D % 8
    assert not _native.csr_attention_supported(*_inputs(N, H, D, s.col.numel(), dtype=torch.float64))
    with pytest.raises(ValueError, match="row pointer"):
        ops.csr_attention(q, k, v, bad, s.col, l)


def test_other_widths_dtypes_and_complete_graphs_take_the_unfused_path(fused):
    """Widths the fused kernel does not take and float64 run the native CSR products inside the
    operator (same values as the unfused operators); complete clouds the batched products."""
    N = 24
    for D, dtype in ((12, torch.float32), (16, torch.float64)):
        s = CSRStructure.build(_graph(N, 0.5), N)
        xs = _inputs(N, 2, D, s.col.numel(), dtype=dtype)
        a, b = _leaves(xs), _leaves(xs)
        ops.reset_dispatch_counts()
        (o1, w1), (o2, w2) = csr_softmax_attention(s, *a), _unfused_csr_attention(s, *b)
        assert not fused and ops.dispatch_counts()[("csr_attention", "native")] == 1
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
        assert torch.allclose(o1, o2, **tol) and torch.allclose(w1, w2, **tol)
        (o1.pow(2).sum() + w1.sum()).backward()
        (o2.pow(2).sum() + w2.sum()).backward()
        assert ops.dispatch_counts()[("csr_attention_backward", "native")] == 1
        for x, y in zip(a, b):
            assert torch.allclose(x.grad, y.grad, **tol)
    blocks = torch.arange(N).view(4, 6)
    ei = torch.stack([blocks[:, None, :].expand(4, 6, 6).reshape(-1),
                      blocks[:, :, None].expand(4, 6, 6).reshape(-1)])  # all pairs within 4 clouds
    s = CSRStructure.build(ei, N)
    assert s.complete
    ops.reset_dispatch_counts()
    csr_softmax_attention(s, *_leaves(_inputs(N, 2, 8, s.col.numel())))
    assert not fused and not any(op == "csr_attention" for op, _ in ops.dispatch_counts())


@pytest.mark.parametrize("kernel_per_head", [False, True])
def test_layer_fused_equals_unfused(monkeypatch, fused, kernel_per_head):
    """LieSelfAttention on a radius graph: the fused path gives the unfused path's outputs,
    attention weights and parameter gradients to the bit."""
    torch.manual_seed(0)
    N = 60
    pos = torch.rand(N, 2)
    g = torch.eye(3).repeat(N, 1, 1)
    g[:, :2, 2] = pos
    d = (pos[:, None] - pos[None]).norm(dim=-1)
    ei = (d < 0.3).nonzero().t()
    ei = ei[:, ei[0] != ei[1]]
    layer = LieSelfAttention(16, 32, group="SE2", heads=4, kernel_per_head=kernel_per_head)
    x = torch.randn(N, 16)
    results, calls = [], []

    def spy(*args):
        out = csr_softmax_attention(*args)
        calls.append(len(fused))
        return out

    monkeypatch.setattr(lie_self_attention, "csr_softmax_attention", spy)
    for one_op in (True, False):
        monkeypatch.setattr(LieSelfAttention, "_one_op_attention", lambda self, f=one_op: f)
        layer.zero_grad()
        out, (ei_out, alpha) = layer(x, ei, g, return_attention_weights=True)
        (out.pow(2).sum() + alpha.sum()).backward()
        results.append([out, ei_out, alpha, *(p.grad.clone() for p in layer.parameters())])
    assert calls == [1] and len(fused) == 1  # the first pass was fused, the second not
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_layer_dropout_in_training_takes_the_unfused_path():
    layer = LieSelfAttention(8, 16, group="T2", heads=2, dropout=0.5)
    assert not layer.train()._one_op_attention()
    assert layer.eval()._one_op_attention()
    assert not LieSelfAttention(8, 16, group="T2", heads=2, normalization="constant")._one_op_attention()
