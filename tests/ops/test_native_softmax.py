"""The native segment softmax (``segment_softmax.c``, the CPU kernel of ``pyg_lie::segment_softmax``)
against float64 and the composite segment path."""
import math

import pytest
import torch

from pyg_lie import ops
from pyg_lie.nn.attention_core import edge_attention
from pyg_lie.ops import _native

EPS32 = 2.0 ** -23


def _segments(lengths):
    deg = torch.tensor(lengths, dtype=torch.long)
    ptr = torch.cat([deg.new_zeros(1), deg.cumsum(0)])
    return ptr, torch.repeat_interleave(torch.arange(len(lengths)), deg)


def _reference(s, index, n, g=None):
    """float64 softmax of every row of ``s (R, E)`` over its segments, by ``torch.softmax`` of
    each segment, and the gradient of ``(w * g).sum()``."""
    sd = s.detach().double().requires_grad_()
    w = torch.zeros_like(sd)
    parts = [torch.softmax(sd[:, index == i], dim=1) for i in range(n)]
    w = torch.cat(parts, dim=1) if parts else w
    if g is None:
        return w.detach()
    (grad,) = torch.autograd.grad(w, sd, g.double())
    return w.detach(), grad


LENGTHS = [0, 1, 7, 8, 9, 16, 33, 0, 100, 2, 513]


@pytest.mark.parametrize("R, scale", [(1, 1.0), (3, 1.0), (4, 40.0)])
def test_matches_float64(R, scale):
    gen = torch.Generator().manual_seed(R)
    ptr, index = _segments(LENGTHS)
    E = int(ptr[-1])
    s = torch.randn(R, E, generator=gen) * scale
    g = torch.randn(R, E, generator=gen)
    w = _native.segment_softmax(s, ptr)
    ref, ref_grad = _reference(s, index, len(LENGTHS), g)
    assert (w.double() - ref).abs().max() <= 4 * EPS32
    # every segment sums to 1 to float precision
    sums = torch.zeros(R, len(LENGTHS), dtype=torch.float64).index_add_(1, index, w.double())
    nonempty = torch.tensor(LENGTHS) > 0
    assert (sums[:, nonempty] - 1).abs().max() <= 8 * EPS32
    grad = _native.segment_softmax_backward(g, w, ptr)
    assert (grad.double() - ref_grad).abs().max() <= 8 * EPS32 * g.abs().max()


def test_large_segments_and_extreme_spread():
    """Scores spread over hundreds (most weights underflow) and one long segment."""
    gen = torch.Generator().manual_seed(1)
    ptr, index = _segments([5000, 3, 17])
    s = torch.randn(2, 5020, generator=gen) * 300
    w = _native.segment_softmax(s, ptr)
    ref = _reference(s, index, 3)
    assert (w.double() - ref).abs().max() <= 4 * EPS32
    assert torch.isfinite(w).all()


def test_non_finite_scores_as_torch():
    """-inf (masked) edges get weight 0; a segment with +inf, NaN or only -inf is NaN, as in
    torch; the other segments are untouched."""
    ptr, index = _segments([4, 9, 3, 10, 2])
    s = torch.randn(1, 28, generator=torch.Generator().manual_seed(2))
    s[0, [0, 2]] = -math.inf  # segment 0: two masked edges
    s[0, 6] = math.inf        # segment 1
    s[0, 13:16] = -math.inf   # segment 2: all masked
    s[0, 20] = math.nan       # segment 3
    w = _native.segment_softmax(s, ptr)
    torch_w = torch.cat([torch.softmax(s[:, index == i], dim=1) for i in range(5)], dim=1)
    assert torch.equal(torch.isnan(w), torch.isnan(torch_w))
    assert torch.isnan(w[0, 4:26]).all()
    assert (w[0, [0, 2]] == 0).all() and abs(float(w[0, :4].sum()) - 1) < 1e-6
    assert torch.allclose(w[0, 26:], torch.softmax(s[0, 26:], 0))


def test_invalid_pointer_is_refused():
    s = torch.randn(2, 10)
    for ptr in ([0, 4, 3, 10], [1, 4, 10], [0, 4, 9]):
        assert _native.segment_softmax(s, torch.tensor(ptr)) is None
        assert _native.segment_softmax_backward(s, s, torch.tensor(ptr)) is None


def test_threads_agree_bitwise():
    gen = torch.Generator().manual_seed(3)
    ptr, _ = _segments(torch.randint(0, 60, (700,), generator=gen).tolist())
    s = torch.randn(4, int(ptr[-1]), generator=gen)
    g = torch.randn_like(s)
    n = torch.get_num_threads()
    out = []
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            w = _native.segment_softmax(s, ptr)
            out.append((w, _native.segment_softmax_backward(g, w, ptr)))
    finally:
        torch.set_num_threads(n)
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


def _calls(monkeypatch):
    calls = []
    real = _native.segment_softmax
    monkeypatch.setattr(_native, "segment_softmax", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("heads_first", [True, False])
def test_edge_attention_native_equals_torch_path(monkeypatch, heads_first):
    """The sorted-edge attention with and without the kernel (PYG_LIE_NATIVE=0), forward,
    backward and double backward; heads-first (H, E) scores and single-head (E, 1) ones."""
    gen = torch.Generator().manual_seed(4)
    ptr, index = _segments(torch.randint(1, 40, (300,), generator=gen).tolist())
    E = int(ptr[-1])
    base = torch.randn(4, E, generator=gen) if heads_first else torch.randn(E, 1, generator=gen)
    g = torch.randn(E, base.numel() // E, generator=gen)
    results = []
    for native in ("1", "0"):
        monkeypatch.setenv("PYG_LIE_NATIVE", native)
        calls = _calls(monkeypatch)
        s = base.clone().requires_grad_()
        score = s.t() if heads_first else s  # (E, H) view of heads-first storage
        w = edge_attention(score, index, None, ptr=ptr)
        (gs,) = torch.autograd.grad(w, s, g, create_graph=True)
        (gg,) = torch.autograd.grad((gs * gs).sum(), s)
        results.append((w.detach(), gs.detach(), gg))
        assert len(calls) == (1 if native == "1" else 0)
    for a, b in zip(*results):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_float64_and_several_columns_take_torch(monkeypatch):
    calls = _calls(monkeypatch)
    ptr, index = _segments([3, 5])
    w = ops.segment_softmax(torch.randn(2, 8, dtype=torch.float64), ptr, 1)
    assert torch.allclose(w.sum(1), torch.full((2,), 2.0, dtype=torch.float64))
    s = torch.randn(8, 2)
    w = ops.segment_softmax(s, ptr, 0)  # (E, H) contiguous: edges not contiguous
    assert calls == []
    ops.segment_softmax(torch.randn(8, 1), ptr, 0)
    assert calls == [1]
    assert torch.allclose(w, ops.segment_softmax(s.t().contiguous(), ptr, 1).t())  # the native rows
