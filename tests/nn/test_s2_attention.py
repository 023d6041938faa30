"""S^2 neighbourhood attention: parity with torch_harmonics.NeighborhoodAttentionS2 (0.9.3),
an independent brute-force reference, equivariance, and PyG conventions."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

th = pytest.importorskip("torch_harmonics")
from torch_harmonics import NeighborhoodAttentionS2  # noqa: E402

from pyg_lie.nn import S2AttentionConv, S2NeighborhoodAttention  # noqa: E402
from pyg_lie.nn._s2_graph import _geodesic_radius_bruteforce, geodesic_neighbors  # noqa: E402
from pyg_lie.nn.s2_neighborhood_attention import grid_graph, grid_points  # noqa: E402

GRIDS = ["equiangular", "legendre-gauss", "lobatto", "equiangular-trapezoidal"]
MODES = {"same": ((8, 16), (8, 16)), "down": ((12, 24), (6, 12)), "up": ((6, 12), (12, 24))}
# (heads, use_qknorm, bias, in, k, out): together these cover 1/2/4 heads, qk-norm on/off,
# bias on/off and unequal in/k/out widths
CONFIGS = [(1, False, True, 4, 4, 4), (2, True, False, 6, 8, 4), (4, True, True, 8, 16, 12), (4, False, False, 4, 8, 8)]


def _th(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return NeighborhoodAttentionS2(*args, **kw)


def _perturb(module, seed=0):
    """Non-trivial biases and qk-norm gains so that every parameter matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "bias" in name or "norm" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def _expand_th_neighbors(m) -> set:
    """All (source, target) pairs of torch-harmonics' psi, expanded over longitudes.

    Same/downsampling psi rows are output latitudes at output longitude 0, columns
    ``hi * nlon_in + wi``, shifted by ``p * wo`` (p = nlon_in / nlon_out); upsampling psi
    rows are input latitudes at input longitude 0, columns ``ho * nlon_out + wo``,
    shifted by ``p * wi`` (p = nlon_out / nlon_in).
    """
    col, roff = m.psi_col_idx.long(), m.psi_roff_idx.long()
    row = torch.repeat_interleave(torch.arange(roff.numel() - 1), roff[1:] - roff[:-1])
    if not m.upsample:
        p = m.nlon_in // m.nlon_out
        hi, wi = col // m.nlon_in, col % m.nlon_in
        wo = torch.arange(m.nlon_out)[:, None]
        src = hi * m.nlon_in + (wi + p * wo) % m.nlon_in
        dst = row * m.nlon_out + wo.expand_as(src)
    else:
        p = m.nlon_out // m.nlon_in
        ho, wo = col // m.nlon_out, col % m.nlon_out
        wi = torch.arange(m.nlon_in)[:, None]
        dst = ho * m.nlon_out + (wo + p * wi) % m.nlon_out
        src = row * m.nlon_in + wi.expand_as(dst)
    return set(zip(src.reshape(-1).tolist(), dst.reshape(-1).tolist()))


# ----------------------------------------------------------------------------- neighbourhoods
@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("shapes", [((12, 24), (12, 24)), ((16, 32), (8, 16)), ((8, 16), (16, 32)),
                                    ((32, 64), (32, 64))])
def test_neighbour_sets_match_torch_harmonics(grid, shapes):
    ins, outs = shapes
    ref = _th(4, ins, outs, grid_in=grid, grid_out=grid)
    ours = S2NeighborhoodAttention(4, ins, outs, grid_in=grid, grid_out=grid)
    assert ours.theta_cutoff == ref.theta_cutoff
    ei = grid_graph(ins, outs, grid, grid, ours.theta_cutoff)["edge_index"]
    got = set(map(tuple, ei.t().tolist()))
    assert len(got) == ei.shape[1]
    assert got == _expand_th_neighbors(ref)


@pytest.mark.parametrize("grid", GRIDS)
def test_grid_points_and_quadrature(grid):
    pos, w = grid_points(9, 18, grid)
    assert pos.shape == (162, 3) and torch.allclose(pos.norm(dim=-1), torch.ones(162, dtype=torch.float64))
    assert abs(float(w.sum()) - 4 * math.pi) < 1e-10  # the weights integrate the sphere's area
    # quadrature weights as torch-harmonics uses them: 2 pi w_t / nlon on ring t
    m = _th(2, (9, 18), (9, 18), grid_in=grid, grid_out=grid)
    assert torch.allclose(w.view(9, 18)[:, 0].float(), m.quad_weights)


def test_geodesic_neighbors_matches_bruteforce_and_is_sorted():
    g = torch.Generator().manual_seed(1)
    x = torch.nn.functional.normalize(torch.randn(300, 3, generator=g, dtype=torch.float64), dim=-1)
    y = torch.nn.functional.normalize(torch.randn(200, 3, generator=g, dtype=torch.float64), dim=-1)
    theta = 0.3
    ei = geodesic_neighbors(x, y, theta)
    # independent reference: angles via atan2(|x cross y|, x.y)
    ang = torch.atan2(torch.linalg.cross(y[:, None], x[None], dim=-1).norm(dim=-1), y @ x.t())
    ti, sj = torch.nonzero(ang <= theta, as_tuple=True)
    assert set(map(tuple, ei.t().tolist())) == set(zip(sj.tolist(), ti.tolist()))
    key = ei[1] * 300 + ei[0]
    assert torch.all(key[1:] > key[:-1])
    assert torch.equal(ei, _geodesic_radius_bruteforce(x, y, theta))


# ----------------------------------------------------------------------------- parity
# every grid x mode with two of the configurations, every configuration with every mode
PARITY_CASES = [(grid, mode, (gi + mi + j) % len(CONFIGS)) for gi, grid in enumerate(GRIDS)
                for mi, mode in enumerate(MODES) for j in (0, 2)]


@pytest.mark.parametrize("grid, mode, cfg", PARITY_CASES)
def test_parity_with_torch_harmonics(grid, mode, cfg):
    heads, qkn, bias, cin, ck, cout = CONFIGS[cfg]
    ins, outs = MODES[mode]
    torch.manual_seed(cfg)
    kw = dict(grid_in=grid, grid_out=grid, num_heads=heads, use_qknorm=qkn, bias=bias, k_channels=ck,
              out_channels=cout)
    ref = _th(cin, ins, outs, **kw)
    _perturb(ref, cfg)
    q = torch.randn(2, cin, *outs, requires_grad=True)
    kx = torch.randn(2, cin, *ins, requires_grad=True)
    vx = torch.randn(2, cin, *ins, requires_grad=True)
    y_ref = ref(q, kx, vx)
    w = torch.randn_like(y_ref)
    g_ref = torch.autograd.grad((y_ref * w).sum(), [q, kx, vx] + list(ref.parameters()))
    for optimized in (True, False):
        ours = S2NeighborhoodAttention(cin, ins, outs, optimized_kernel=optimized, **kw)
        ours.load_state_dict(ref.state_dict())
        assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
        y = ours(q, kx, vx)
        assert y.shape == (2, cout, *outs)
        assert (y - y_ref).abs().max() < 1e-5
        g = torch.autograd.grad((y * w).sum(), [q, kx, vx] + list(ours.parameters()))
        for a, b in zip(g, g_ref):
            assert (a - b).abs().max() < 1e-4


@pytest.mark.parametrize("mode", list(MODES))
def test_self_attention_default_key_value(mode):
    ins, _ = MODES[mode]
    ref = _th(4, ins, ins, num_heads=2)
    ours = S2NeighborhoodAttention(4, ins, ins, num_heads=2)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 4, *ins)
    assert (ours(x) - ref(x)).abs().max() < 1e-5


def test_state_dict_interchange_both_ways():
    kw = dict(num_heads=2, use_qknorm=True, k_channels=8, out_channels=6)
    ours = S2NeighborhoodAttention(4, (8, 16), (8, 16), **kw)
    _perturb(ours, 3)
    ref = _th(4, (8, 16), (8, 16), **kw)
    ref.load_state_dict(ours.state_dict())  # strict
    x = torch.randn(2, 4, 8, 16)
    assert (ours(x) - ref(x)).abs().max() < 1e-5
    ours2 = S2NeighborhoodAttention(4, (8, 16), (8, 16), **kw)
    ours2.load_state_dict(ref.state_dict())
    assert torch.equal(ours2(x), ours(x))
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in ref.state_dict().items()}


def test_default_theta_cutoff_and_repr():
    for ins, outs in MODES.values():
        for grid in ("equiangular", "lobatto"):
            a = _th(4, ins, outs, grid_in=grid, grid_out=grid)
            b = S2NeighborhoodAttention(4, ins, outs, grid_in=grid, grid_out=grid)
            assert b.theta_cutoff == a.theta_cutoff
    assert "theta_cutoff" in repr(b) and "S2NeighborhoodAttention" in repr(b)


def test_float64_end_to_end():
    ref = _th(4, (12, 24), (6, 12), num_heads=2, use_qknorm=True)
    _perturb(ref)
    ours = S2NeighborhoodAttention(4, (12, 24), (6, 12), num_heads=2, use_qknorm=True)
    ours.load_state_dict(ref.state_dict())
    ours = ours.double()
    q = torch.randn(2, 4, 6, 12, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 4, 12, 24, dtype=torch.float64, requires_grad=True)
    y = ours(q, kv, kv)
    assert y.dtype == torch.float64
    y.sum().backward()
    assert q.grad.dtype == torch.float64 and ours.q_weights.grad.dtype == torch.float64
    assert (y.float() - ref(q.float(), kv.float(), kv.float())).abs().max() < 1e-5
    # the fused and message-passing paths agree to float64 precision
    ours.optimized_kernel = False
    assert (ours(q, kv, kv) - y).abs().max() < 1e-12


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(4)
    pos = torch.nn.functional.normalize(torch.randn(12, 3, generator=g, dtype=torch.float64), dim=-1)
    ei = geodesic_neighbors(pos, pos, 1.0)
    conv = S2AttentionConv(3, 4, heads=2, k_channels=4, use_qknorm=True).double()
    _perturb(conv)
    x = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(12, dtype=torch.float64) + 0.5
    plan = conv.build_plan(ei, 12, 12)
    assert torch.autograd.gradcheck(lambda t: conv(t, ei, quad_weights=w), (x,))
    assert torch.autograd.gradcheck(lambda t: conv(t, ei, quad_weights=w, plan=plan), (x,))


@pytest.mark.parametrize("mode", list(MODES))
def test_engine_matches_message_passing_float64(mode):
    """The CSR engine (bipartite graphs padded to one square structure, neighbourhoods in the
    grid's ring/offset order) against PyG message passing: values, attention weights in
    edge order, first and second derivatives, in float64, with unequal key and value widths."""
    from pyg_lie.nn._s2_kernels import BipartiteCSR, neighborhood_attention

    ins, outs = MODES[mode]
    g = grid_graph(ins, outs, "equiangular", "equiangular", 1.5 * math.pi / (outs[0] - 1))
    ei, n_in, n_out = g["edge_index"], ins[0] * ins[1], outs[0] * outs[1]
    graph = g["graph"]
    assert (graph.num_src, graph.num_dst, graph.num_edges) == (n_in, n_out, ei.shape[1])
    conv = S2AttentionConv(4, 6, heads=2, k_channels=8, use_qknorm=True).double()
    _perturb(conv)
    xs = torch.randn(n_in, 3, 4, dtype=torch.float64, requires_grad=True)
    xt = torch.randn(n_out, 3, 4, dtype=torch.float64, requires_grad=True)
    w = g["quad_weights"]
    res = []
    for fused, plan in ((True, graph), (True, None), (False, None)):
        conv.fused = fused
        y, (_, alpha) = conv((xs, xt), ei, quad_weights=w, plan=plan, return_attention_weights=True)
        (gx,) = torch.autograd.grad(y.pow(2).sum(), xs, create_graph=True)
        gg = torch.autograd.grad(gx.pow(2).sum(), [xt] + list(conv.parameters()))
        res.append([y, alpha, gx, *gg])
    for other in res[1:]:
        for a, b in zip(res[0], other):
            torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)
    # the functional step alone, with a gradient for learnable log weights
    q, k = torch.randn(n_out, 2, 3, 4, dtype=torch.float64), torch.randn(n_in, 2, 3, 4, dtype=torch.float64)
    v = torch.randn(n_in, 2, 3, 4, dtype=torch.float64)
    lw = torch.log(w).requires_grad_()
    out, _ = neighborhood_attention(q, k, v, lw, BipartiteCSR.from_edge_index(ei, n_in, n_out))
    ref = torch.zeros_like(out)
    for i in range(n_out):
        nb = ei[0, ei[1] == i]
        a = torch.softmax(torch.einsum("xhd,nxhd->nxh", q[i], k[nb]) + lw[nb, None, None], 0)
        ref[i] = torch.einsum("nxh,nxhd->xhd", a, v[nb])
    assert (out - ref).abs().max() < 1e-12
    (gl,) = torch.autograd.grad(out.sum() + out.pow(2).sum(), lw)
    (gl_ref,) = torch.autograd.grad(ref.sum() + ref.pow(2).sum(), lw)
    assert (gl - gl_ref).abs().max() < 1e-11


def test_grid_layer_uses_the_one_attention_entry_point(monkeypatch):
    """Both S^2 layers call the engine's entry point (attention_core.csr_softmax_attention, the
    one LieSelfAttention uses); at the benchmark's head width (8) in float32 it is the fused
    native kernel, and it agrees with torch-harmonics."""
    from pyg_lie.nn import _s2_kernels

    calls = []
    real = _s2_kernels.csr_softmax_attention
    monkeypatch.setattr(_s2_kernels, "csr_softmax_attention", lambda *a: calls.append(a[1].shape) or real(*a))
    ref = _th(16, (16, 32), (16, 32), num_heads=2)
    _perturb(ref)
    ours = S2NeighborhoodAttention(16, (16, 32), (16, 32), num_heads=2)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 16, 16, 32)
    assert (ours(x) - ref(x)).abs().max() < 1e-5
    assert calls == [(512, 3 * 2, 8)]  # (nodes, batch x heads, head width)
    conv = S2AttentionConv(16, heads=2)
    pos = torch.nn.functional.normalize(torch.randn(40, 3), dim=-1)
    conv(torch.randn(40, 16), geodesic_neighbors(pos, pos, 0.8), quad_weights=torch.rand(40) + 0.5)
    assert calls[-1] == (40, 2, 8)


@pytest.mark.parametrize("backend", ["composite", "triton"])
def test_both_layers_on_the_operator_layer(backend):
    """With a backend selected (as on CUDA), both layers run pyg_lie.ops.csr_attention (the Triton
    kernels on CPU tensors under Triton's interpreter) and agree with the default CPU path in
    values and gradients, bipartite grids included."""
    import pyg_lie.ops as ops

    if backend == "triton" and not ops.triton_available():
        pytest.skip("Triton is not installed")
    torch.manual_seed(0)
    grid = S2NeighborhoodAttention(4, (8, 16), (4, 8), num_heads=2, use_qknorm=True)
    _perturb(grid)
    conv = S2AttentionConv(4, 6, heads=2)
    pos = torch.nn.functional.normalize(torch.randn(30, 3), dim=-1)
    ei, w = geodesic_neighbors(pos, pos, 0.7), torch.rand(30) + 0.5
    q, kv, x = torch.randn(2, 4, 4, 8), torch.randn(2, 4, 8, 16), torch.randn(30, 4)
    for layer, args in ((grid, (q, kv, kv)), (conv, (x, ei, w))):
        call_args = [t.clone().requires_grad_() if t.is_floating_point() else t for t in args]
        inputs = [t for t in call_args if t.requires_grad] + list(layer.parameters())
        ref = layer(*call_args)
        ref_grads = torch.autograd.grad(ref.square().sum(), inputs)
        ops.reset_dispatch_counts()
        with ops.backend(backend):
            out = layer(*call_args)
            grads = torch.autograd.grad(out.square().sum(), inputs)
        counts = ops.dispatch_counts()
        assert counts.get(("csr_attention", backend), 0) >= 1 and \
            counts.get(("csr_attention_backward", backend), 0) >= 1, counts
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_parity_32x64_native_head_width():
    """At 32x64 (polar rows with 256 neighbours) and head width 8 (the native fused kernel in
    float32): values and gradients against torch-harmonics."""
    ref = _th(16, (32, 64), (32, 64), num_heads=2)
    _perturb(ref)
    ours = S2NeighborhoodAttention(16, (32, 64), (32, 64), num_heads=2)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(1, 16, 32, 64, requires_grad=True)
    y_ref, y = ref(x), ours(x)
    assert (y - y_ref).abs().max() < 1e-5
    w = torch.randn_like(y)
    g_ref = torch.autograd.grad((y_ref * w).sum(), [x] + list(ref.parameters()))
    g = torch.autograd.grad((y * w).sum(), [x] + list(ours.parameters()))
    for a, b in zip(g, g_ref):
        assert (a - b).abs().max() < 1e-4


# ----------------------------------------------------------------------------- equivariance
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("optimized, channels", [(True, 4), (True, 16), (False, 4)])
def test_longitude_shift_commutes_exactly(mode, optimized, channels):
    """Shifting by whole longitude steps commutes with the layer; on the engine bitwise (every
    longitude sums its neighbours in the same order), for head widths 2 (zero-padded to the
    kernel's 8) and 8."""
    ins, outs = MODES[mode]
    m = S2NeighborhoodAttention(channels, ins, outs, grid_in="legendre-gauss", grid_out="legendre-gauss",
                                num_heads=2, use_qknorm=True, optimized_kernel=optimized)
    _perturb(m)
    q = torch.randn(2, channels, *outs)
    kv = torch.randn(2, channels, *ins)
    step_out = 3
    step_in = step_out * ins[1] // outs[1] if ins[1] >= outs[1] else step_out
    if ins[1] < outs[1]:
        step_out = step_in * outs[1] // ins[1]
    y = m(q, kv, kv)
    ys = m(torch.roll(q, step_out, -1), torch.roll(kv, step_in, -1), torch.roll(kv, step_in, -1))
    if optimized:
        assert torch.equal(ys, torch.roll(y, step_out, -1))
    else:
        assert (ys - torch.roll(y, step_out, -1)).abs().max() < 1e-6


def _random_rotation(g):
    A = torch.randn(3, 3, generator=g, dtype=torch.float64)
    Q, R = torch.linalg.qr(A)
    Q = Q * torch.sign(torch.diagonal(R))
    if torch.det(Q) < 0:
        Q[:, 0] = -Q[:, 0]
    return Q


def test_scattered_points_rotation_invariance():
    g = torch.Generator().manual_seed(0)
    N, theta = 400, 0.35
    pos = torch.nn.functional.normalize(torch.randn(N, 3, generator=g, dtype=torch.float64), dim=-1)
    w = 4 * math.pi / N * (0.5 + torch.rand(N, generator=g, dtype=torch.float64))
    x = torch.randn(N, 5, generator=g, dtype=torch.float64)
    conv = S2AttentionConv(5, 6, heads=2, k_channels=4, use_qknorm=True).double()
    _perturb(conv)
    ei = geodesic_neighbors(pos, pos, theta)
    y = conv(x, ei, quad_weights=w)
    R = _random_rotation(g)
    perm = torch.randperm(N, generator=g)
    pos_r = (pos @ R.t())[perm]
    ei_r = geodesic_neighbors(pos_r, pos_r, theta)
    y_r = conv(x[perm], ei_r, quad_weights=w[perm])
    assert (y_r - y[perm]).abs().max() < 1e-12
    # the layer sees geometry only through the graph: neighbourhoods are rotation invariant
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(N)
    assert set(map(tuple, perm[ei_r].t().tolist())) == set(map(tuple, ei.t().tolist()))


# ----------------------------------------------------------------------------- graph-level layer
def _dense_reference(conv, x_src, x_dst, ei, w):
    """Independent float64 loop over targets (no PyG, no scatter)."""
    H = conv.heads
    q, k, v = conv.project_qkv(x_dst, x_src, x_src)
    out = torch.zeros(x_dst.shape[0], H, v.shape[-1], dtype=x_dst.dtype)
    for i in range(x_dst.shape[0]):
        nb = ei[0, ei[1] == i]
        if nb.numel() == 0:
            continue
        s = torch.einsum("hd,nhd->nh", q[i], k[nb]) + torch.log(w[nb])[:, None]
        a = torch.exp(s - s.max(0).values)
        a = a / a.sum(0)
        out[i] = torch.einsum("nh,nhd->hd", a, v[nb])
    return conv.output_projection(out)


def test_conv_matches_dense_reference_bipartite_and_plan():
    g = torch.Generator().manual_seed(5)
    pos_s = torch.nn.functional.normalize(torch.randn(120, 3, generator=g, dtype=torch.float64), dim=-1)
    pos_t = torch.nn.functional.normalize(torch.randn(50, 3, generator=g, dtype=torch.float64), dim=-1)
    w = torch.rand(120, generator=g, dtype=torch.float64) + 0.1
    xs = torch.randn(120, 3, generator=g, dtype=torch.float64)
    xt = torch.randn(50, 3, generator=g, dtype=torch.float64)
    ei = geodesic_neighbors(pos_s, pos_t, 0.4)
    ei = ei[:, torch.randperm(ei.shape[1], generator=g)]  # any edge order
    conv = S2AttentionConv(3, 8, heads=4, k_channels=4, use_qknorm=True).double()
    _perturb(conv)
    ref = _dense_reference(conv, xs, xt, ei, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y, (ei_out, alpha) = conv((xs, xt), ei, quad_weights=w, return_attention_weights=True)
        plan = conv.build_plan(ei, 120, 50)
        y2, (_, alpha2) = conv((xs, xt), ei, quad_weights=w, plan=plan, return_attention_weights=True)
    assert torch.equal(ei_out, ei)
    assert (y - ref).abs().max() < 1e-12 and (y2 - ref).abs().max() < 1e-12
    assert alpha.shape == (ei.shape[1], 4) and (alpha - alpha2).abs().max() < 1e-12
    sums = torch.zeros(50, 4, dtype=torch.float64).index_add_(0, ei[1], alpha)
    has = torch.bincount(ei[1], minlength=50) > 0
    assert torch.allclose(sums[has], torch.ones_like(sums[has]))


def test_conv_batched_features_equal_per_sample():
    g = torch.Generator().manual_seed(2)
    pos = torch.nn.functional.normalize(torch.randn(60, 3, generator=g), dim=-1)
    ei = geodesic_neighbors(pos, pos, 0.5)
    conv = S2AttentionConv(4, heads=2)
    x = torch.randn(60, 3, 4, generator=g)
    y = conv(x, ei)
    for b in range(3):
        assert (y[:, b] - conv(x[:, b], ei)).abs().max() < 1e-6


def test_empty_neighbourhoods_zero_and_warn():
    # a tiny cutoff leaves output points between input rings without neighbours: torch-harmonics gives NaN
    kw = dict(grid_in="legendre-gauss", grid_out="legendre-gauss", num_heads=2, theta_cutoff=0.1)
    ref = _th(4, (12, 24), (6, 12), **kw)
    _perturb(ref)
    with pytest.warns(RuntimeWarning, match="no neighbour"):
        ours = S2NeighborhoodAttention(4, (12, 24), (6, 12), **kw)
    ours.load_state_dict(ref.state_dict())
    q, kv = torch.randn(2, 4, 6, 12), torch.randn(2, 4, 12, 24)
    y_ref = ref(q, kv, kv)
    for optimized in (True, False):
        ours.optimized_kernel = optimized
        with pytest.warns(RuntimeWarning, match="no neighbour"):
            y = ours(q, kv, kv)
        assert torch.isfinite(y).all()
        empty = torch.isnan(y_ref)
        assert empty.any() and (~empty).any()
        bias = ours.proj_bias.view(1, -1, 1, 1).expand_as(y)
        assert torch.equal(y[empty], bias[empty])
        assert (y[~empty] - y_ref[~empty]).abs().max() < 1e-5
        y.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in ours.parameters())
        ours.zero_grad()


def test_conv_isolated_target_zero_before_projection():
    conv = S2AttentionConv(3, 4, heads=2, k_channels=4)
    _perturb(conv)
    x = torch.randn(5, 3)
    ei = torch.tensor([[0, 1, 2], [1, 1, 2]])
    with pytest.warns(RuntimeWarning, match="3 of 5"):
        y = conv(x, ei, quad_weights=torch.ones(5))
    for i in (0, 3, 4):
        assert torch.equal(y[i], conv.proj_bias)


# ----------------------------------------------------------------------------- errors and PyG
def test_errors():
    with pytest.raises(ValueError, match="nlon_in"):
        _th(4, (8, 24), (8, 16))
    with pytest.raises(ValueError, match=r"either nlon_in \(24\) must be an integer multiple of nlon_out \(16\)"):
        S2NeighborhoodAttention(4, (8, 24), (8, 16))
    with pytest.raises(ValueError, match="grid_in"):
        S2NeighborhoodAttention(4, (8, 16), (8, 16), grid_in="healpix")
    with pytest.raises(ValueError, match="theta_cutoff"):
        S2NeighborhoodAttention(4, (8, 16), (8, 16), theta_cutoff=-1.0)
    with pytest.raises(ValueError, match="k_channels"):
        S2NeighborhoodAttention(4, (8, 16), (8, 16), num_heads=3)
    m = S2NeighborhoodAttention(4, (8, 16), (4, 8))
    with pytest.raises(ValueError, match="query"):
        m(torch.randn(2, 4, 8, 16))  # self-attention needs equal grids
    with pytest.raises(ValueError, match="key"):
        m(torch.randn(2, 4, 4, 8), torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 16))
    with pytest.raises(ValueError, match="query"):
        m(torch.randn(4, 4, 8))
    with pytest.raises(ValueError, match="query is torch.float64 but the model's parameters are torch.float32"):
        m(torch.randn(2, 4, 4, 8, dtype=torch.float64), torch.randn(2, 4, 8, 16, dtype=torch.float64),
          torch.randn(2, 4, 8, 16, dtype=torch.float64))
    conv = S2AttentionConv(3)
    with pytest.raises(ValueError, match="edge_index must hold integer node indices"):
        conv(torch.randn(5, 3), torch.zeros(2, 1))
    with pytest.raises(ValueError, match="x_src"):
        conv(torch.randn(5, 4), torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="quad_weights"):
        conv(torch.randn(5, 3), torch.zeros(2, 0, dtype=torch.long), quad_weights=torch.ones(4))


def test_pyg_conventions():
    from torch_geometric.nn import Sequential

    conv = S2AttentionConv(4, 8, heads=2, use_qknorm=True)
    assert repr(conv) == "S2AttentionConv(4, 8, heads=2, k_channels=4, use_qknorm=True)"
    assert conv.node_dim == 0
    pos = torch.nn.functional.normalize(torch.randn(30, 3), dim=-1)
    ei = geodesic_neighbors(pos, pos, 0.6)
    model = Sequential("x, edge_index, w", [(conv, "x, edge_index, w -> x"), torch.nn.ReLU()])
    y = model(torch.randn(30, 4), ei, torch.full((30,), 4 * math.pi / 30))
    assert y.shape == (30, 8)
    before = conv.q_weights.detach().clone()
    conv.reset_parameters()
    assert not torch.equal(before, conv.q_weights)


def test_torch_compile_fullgraph_no_graph_breaks():
    conv = S2AttentionConv(4, 4, heads=2, warn_isolated=False)
    pos = torch.nn.functional.normalize(torch.randn(40, 3), dim=-1)
    ei = geodesic_neighbors(pos, pos, 0.6)
    x, w = torch.randn(40, 4), torch.rand(40) + 0.5
    compiled = torch.compile(conv, backend="eager", fullgraph=True)
    assert (compiled(x, ei, quad_weights=w) - conv(x, ei, quad_weights=w)).abs().max() < 1e-6
    grid = S2NeighborhoodAttention(4, (6, 12), (6, 12), num_heads=2)
    xg = torch.randn(2, 4, 6, 12)
    compiled_grid = torch.compile(grid, backend="eager", fullgraph=True)
    assert (compiled_grid(xg) - grid(xg)).abs().max() < 1e-6


def test_compiled_grid_layer_matches_eager():
    """Under torch.compile (AOT autograd, fullgraph) the grid layer gives the eager values and
    gradients (float64)."""
    torch.manual_seed(0)
    grid = S2NeighborhoodAttention(4, (8, 16), (8, 16), num_heads=2).double()
    x0 = torch.randn(2, 4, 8, 16, dtype=torch.float64)
    compiled = torch.compile(grid, backend="aot_eager", fullgraph=True)
    res = []
    for f in (grid, compiled):
        grid.zero_grad()
        x = x0.clone().requires_grad_()
        y = f(x)
        y.pow(2).sum().backward()
        res.append([y.detach(), x.grad] + [p.grad.clone() for p in grid.parameters()])
    for a, b in zip(*res):
        assert (a - b).abs().max() < 1e-12


@pytest.mark.parametrize("channels", [4, 16])
def test_grid_layer_second_derivatives(channels):
    """The engine path is differentiable twice (its differentiable backward never re-enters
    the kernel) and its second derivatives equal the message-passing path's (float64)."""
    torch.manual_seed(1)
    grid = S2NeighborhoodAttention(channels, (6, 12), (6, 12), num_heads=2, use_qknorm=True).double()
    _perturb(grid)
    x0 = torch.randn(2, channels, 6, 12, dtype=torch.float64)
    res = []
    for optimized in (True, False):
        grid.optimized_kernel = optimized
        x = x0.clone().requires_grad_()
        (gx,) = torch.autograd.grad(grid(x).pow(2).sum(), x, create_graph=True)
        res.append(torch.autograd.grad(gx.pow(2).sum(), [x] + list(grid.parameters())))
    for a, b in zip(*res):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_plan_checks_and_edge_index_subclass():
    from torch_geometric import EdgeIndex

    conv = S2AttentionConv(8, heads=2).double()
    g = torch.Generator().manual_seed(3)
    pos_s = torch.nn.functional.normalize(torch.randn(30, 3, generator=g, dtype=torch.float64), dim=-1)
    pos_t = torch.nn.functional.normalize(torch.randn(50, 3, generator=g, dtype=torch.float64), dim=-1)
    ei = geodesic_neighbors(pos_s, pos_t, 0.7)
    xs, xt = torch.randn(30, 8, dtype=torch.float64), torch.randn(50, 8, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y = conv((xs, xt), ei)
        assert torch.equal(conv((xs, xt), EdgeIndex(ei, sparse_size=(30, 50))), y)
        assert torch.equal(conv((xs, xt), ei, plan=S2AttentionConv.build_plan(EdgeIndex(ei), 30, 50)), y)
        with pytest.raises(ValueError, match="plan was built for 30 sources, 50 targets"):
            conv((xt, xt), torch.zeros(2, ei.shape[1], dtype=torch.long), plan=conv.build_plan(ei, 30, 50))
    # a source index beyond the sources (but inside the padded square structure) is refused
    bad = ei.clone()
    bad[0, 0] = 40
    with pytest.raises(ValueError, match=r"edge_index\[0\] holds source index 40"):
        conv((xs, xt), bad)
    with pytest.raises(ValueError, match=r"edge_index\[1\] holds target index 50"):
        S2AttentionConv.build_plan(torch.tensor([[0], [50]]), 30, 50)


def test_negative_or_nan_quadrature_weights_are_refused():
    from pyg_lie.nn import S2AttentionConv
    layer = S2AttentionConv(4, 4)
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    layer(x, ei, quad_weights=torch.tensor([0.1, 0.0, 0.2, 0.3, 0.1]))  # zero weights are allowed
    for w in (torch.tensor([0.1, -0.2, 0.2, 0.3, 0.1]), torch.tensor([0.1, float("nan"), 0.2, 0.3, 0.1])):
        with pytest.raises(ValueError, match="quad_weights must be finite and >= 0"):
            layer(x, ei, quad_weights=w)
