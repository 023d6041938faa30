"""The native (C) per-head MLP kernel against the float64 torch formulation."""
import os
import warnings

import pytest
import torch

from pyg_lie.ops import _native
from pyg_lie.nn._edge_mlp import HeadwiseMLP, _headwise_forward, edge_mlp
from pyg_lie.ops._chunked import headwise_chunked_forward as _headwise_chunked_forward


def _reference(x, params, g):
    """Float64 outputs ``(H O, E)`` and gradients ``[d/dx, d/dW_0, d/db_0, ...]``."""
    xd = x.detach().double().requires_grad_()
    pd = [p.detach().double().requires_grad_() for p in params]
    y = _headwise_forward(xd, pd).reshape(x.shape[0], -1).t()
    return y.detach(), torch.autograd.grad(y, [xd, *pd], g.double())


def _close(a, b, rel):
    """``a`` (float32) equals ``b`` (float64) to ``rel`` of ``b``'s largest magnitude."""
    scale = b.abs().max().clamp_min(1e-30)
    err = (a.double() - b).abs().max() / scale
    assert err <= rel, f"relative error {err:.2e} > {rel:.0e}"


def test_native_kernel_builds_here():
    # CI and the README's set-up have a C compiler: a silent fallback would hide a slow path
    assert _native.available(), _native._failed
    assert _native.library_path().exists()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the loaded libraries from /proc")
def test_native_threads_are_torchs_openmp_threads():
    """Built with OpenMP, and the process holds one OpenMP runtime: the kernel's threads are
    torch's intra-op threads, not a second pool competing with them."""
    assert _native.uses_openmp()
    torch.ones(1 << 20).sum()  # torch's runtime is in use
    with open("/proc/self/maps") as f:
        runtimes = {line.split()[-1] for line in f if "libgomp" in line or "libiomp" in line or "libomp" in line}
    assert len(runtimes) == 1, runtimes


@pytest.mark.parametrize("E,n_in,hidden,heads,layers,outs", [
    (1, 2, 16, 4, 3, 1),      # one edge: the rest of its block padded
    (37, 3, 16, 4, 3, 1),     # the LieTransformer's SE(2) kernel, ragged last block
    (1000, 5, 7, 3, 4, 1),    # odd hidden width (a row outside the register tiles), three hidden layers
    (300, 1, 32, 2, 2, 1),    # widest hidden layer, one input
    (257, 16, 9, 1, 5, 1),    # widest input, four hidden layers, one head
    (500, 3, 16, 1, 3, 4),    # one shared MLP with four outputs (the default location kernel)
    (99, 2, 6, 2, 3, 32),     # several heads with several outputs, the most outputs
])
def test_native_matches_float64_reference(E, n_in, hidden, heads, layers, outs):
    torch.manual_seed(E)
    m = HeadwiseMLP(n_in, hidden, heads, layers)
    params = [p.detach() for p in m.params()]
    params[-2], params[-1] = torch.rand(heads, outs, hidden) - 0.5, torch.rand(heads, outs) - 0.5
    x = torch.randn(E, n_in) * 2
    assert _native.headwise_supported(x, params)
    g = torch.randn(heads * outs, E)
    y_ref, grads_ref = _reference(x, params, g)
    _close(_native.headwise_forward(x, params), y_ref, 1e-6)
    grads = _native.headwise_backward(g, x, params, True)
    assert len(grads) == len(grads_ref)
    for a, b in zip(grads, grads_ref):
        assert a.shape == b.shape and a.dtype == torch.float32
        _close(a, b, 2e-6)
    # without d/dx: the same parameter gradients, an empty first entry
    no_x = _native.headwise_backward(g, x, params, False)
    assert no_x[0].numel() == 0
    for a, b in zip(no_x[1:], grads[1:]):
        assert torch.equal(a, b)


def test_native_threads_agree():
    torch.manual_seed(1)
    m = HeadwiseMLP(3, 16, 4, 3)
    # 20003 edges: ten chunks of 2048, so every thread count takes several, in any order
    x, params, g = torch.randn(20003, 3), [p.detach() for p in m.params()], torch.randn(4, 20003)
    n = torch.get_num_threads()
    try:
        res = []
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            res.append([_native.headwise_forward(x, params), *_native.headwise_backward(g, x, params, True)])
    finally:
        torch.set_num_threads(n)
    for other in res[1:]:
        assert torch.equal(other[0], res[0][0]) and torch.equal(other[1], res[0][1])  # per-edge values
        for a, b in zip(other[2:], res[0][2:]):  # sums over edges, split differently
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def _silu_probe():
    """``HeadwiseMLP(1, 1, 1, 2)`` set to ``y = silu(x)``."""
    m = HeadwiseMLP(1, 1, 1, 2)
    with torch.no_grad():
        for w in m.weights:
            w.fill_(1.0)
        for b in m.biases:
            b.zero_()
    return [p.detach() for p in m.params()]


def test_native_silu_to_float_precision_and_saturation():
    params = _silu_probe()
    z = torch.cat([torch.linspace(-120, 120, 20001), torch.tensor([0.0, -0.0, 1e-30, -1e-30, 87.3, 88.3, -87.3,
                                                                   -88.3, 3e38, -3e38])])
    x = z.unsqueeze(1)
    y = _native.headwise_forward(x, params)[0]
    (gx, *_) = _native.headwise_backward(torch.ones(1, len(z)), x, params, True)
    zd = z.double()
    ref = torch.nn.functional.silu(zd)
    s = torch.sigmoid(zd)
    dref = s * (1 + zd * (1 - s))
    assert torch.isfinite(y).all() and torch.isfinite(gx).all()
    # 4 float32 ulps of the value, and beyond z = -87 (sigmoid below float32's normal range)
    # an absolute 1e-35
    tol = 4 * 2.0 ** -23 * ref.abs() + 1e-35
    assert ((y.double() - ref).abs() <= tol).all(), (y.double() - ref).abs().div(ref.abs() + 1e-35).max()
    dtol = 4 * 2.0 ** -23 * dref.abs().clamp_min(1.0) * (1 + zd.abs().clamp_max(100) / 10) + 1e-35
    assert ((gx[:, 0].double() - dref).abs() <= dtol).all()
    # the sigmoid saturates to exactly 0 far below float32's normal range (2^n overflows to inf)
    far = z < -88.4
    assert (y[far] == 0).all() and (gx[far, 0] == 0).all()


@pytest.mark.parametrize("sizes", [dict(n_in=17, hidden=4, layers=3), dict(n_in=2, hidden=33, layers=3),
                                   dict(n_in=2, hidden=4, layers=6)])
def test_unsupported_sizes_use_the_torch_kernels(sizes):
    m = HeadwiseMLP(sizes["n_in"], sizes["hidden"], 2, sizes["layers"])
    x = torch.randn(50, sizes["n_in"])
    assert not _native.headwise_supported(x, m.params())
    assert torch.allclose(edge_mlp(m, x, chunk=32), m(x), rtol=1e-5, atol=1e-6)


def test_only_float32_cpu_is_native():
    m = HeadwiseMLP(2, 4, 2, 3)
    assert _native.headwise_supported(torch.randn(5, 2), m.params())
    assert not _native.headwise_supported(torch.randn(5, 2, dtype=torch.float64), m.double().params())
    assert not _native.headwise_supported(torch.randn(0, 2), m.float().params())


def test_disabled_by_environment(monkeypatch):
    m = HeadwiseMLP(2, 4, 2, 3)
    monkeypatch.setenv("PYG_LIE_NATIVE", "0")
    assert not _native.available()
    x = torch.randn(40, 2)
    assert not _native.headwise_supported(x, m.params())
    assert torch.allclose(edge_mlp(m, x, chunk=16), m(x), rtol=1e-5, atol=1e-6)


def test_builds_from_scratch_into_the_cache(monkeypatch, tmp_path):
    """What a fresh machine does on first use: compile into ``PYG_LIE_CACHE`` and load."""
    monkeypatch.setattr(_native, "_lib", None)
    monkeypatch.setattr(_native, "_failed", None)
    monkeypatch.setenv("PYG_LIE_CACHE", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native.available()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [_native.library_path().name]
    assert _native.uses_openmp()
    m = HeadwiseMLP(2, 16, 4, 3)
    x, params = torch.randn(100, 2), [p.detach() for p in m.params()]
    y_ref, _ = _reference(x, params, torch.zeros(4, 100))
    _close(_native.headwise_forward(x, params), y_ref, 1e-6)


@pytest.mark.parametrize("name", ["csr.h", "simd.h", "softmax.h"])
def test_cache_key_covers_the_shared_headers(monkeypatch, tmp_path, name):
    """The kernels include ``csr.h``, ``simd.h`` and ``softmax.h``: editing any must give a new
    library, not a stale one."""
    assert [p.name for p in _native._HEADERS] == ["csr.h", "simd.h", "softmax.h"]
    before = _native.library_path()
    headers = list(_native._HEADERS)
    i = [p.name for p in headers].index(name)
    edited = tmp_path / name
    edited.write_bytes(headers[i].read_bytes() + b"\n/* edited */\n")
    headers[i] = edited
    monkeypatch.setattr(_native, "_HEADERS", headers)
    assert _native.library_path() != before


def test_failed_build_warns_once_and_falls_back(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "_lib", None)
    monkeypatch.setattr(_native, "_failed", None)
    monkeypatch.setenv("PYG_LIE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    m = HeadwiseMLP(2, 4, 2, 3)
    x = torch.randn(40, 2)
    with pytest.warns(RuntimeWarning, match=r"could not build the native kernels \(edge MLP, CSR products\)"):
        assert not _native.available()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only once
        y = edge_mlp(m, x, chunk=16)
    params = [p.detach() for p in m.params()]
    assert torch.allclose(y.t(), _headwise_chunked_forward(x, params, 16), rtol=1e-6, atol=1e-7)
    assert list(tmp_path.iterdir()) == []  # no half-written library left behind


def test_shared_mlp_through_edge_mlp_matches_float64(monkeypatch):
    """The library's default location kernel (one ``Linear``/``SiLU`` MLP, an output per head)
    runs on the native kernel as a single head; values and all gradients against float64."""
    from pyg_lie.nn.lie_self_attention import _mlp
    torch.manual_seed(4)
    mlp = _mlp(3, 16, 4, 3)
    x = (torch.randn(2000, 3) * 2).requires_grad_()
    g = torch.randn(2000, 4)
    calls = []
    real = _native.headwise_forward
    monkeypatch.setattr(_native, "headwise_forward", lambda *a: calls.append(1) or real(*a))
    y = edge_mlp(mlp, x)
    assert calls and y.shape == (2000, 4) and y.is_contiguous()
    got = torch.autograd.grad(y, [x, *mlp.parameters()], g)
    mlp64 = _mlp(3, 16, 4, 3).double()
    mlp64.load_state_dict(mlp.state_dict())
    x64 = x.detach().double().requires_grad_()
    y64 = mlp64(x64)
    ref = torch.autograd.grad(y64, [x64, *mlp64.parameters()], g.double())
    _close(y, y64, 1e-6)
    for a, b in zip(got, ref):
        assert a.shape == b.shape
        _close(a, b, 2e-6)


def test_unwritable_cache_falls_back(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "_lib", None)
    monkeypatch.setattr(_native, "_failed", None)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("PYG_LIE_CACHE", str(blocker / "cache"))  # a folder below a file
    with pytest.warns(RuntimeWarning, match="PYG_LIE_CACHE"):
        assert not _native.available()


def test_edge_mlp_uses_the_native_kernel(monkeypatch):
    calls = []
    real = _native.headwise_forward
    monkeypatch.setattr(_native, "headwise_forward", lambda *a: calls.append(1) or real(*a))
    m = HeadwiseMLP(2, 16, 4, 3)
    x = torch.randn(10, 2)
    y = edge_mlp(m, x)
    assert calls and torch.allclose(y, m(x), rtol=1e-5, atol=1e-6)


def test_compiled_float32_matches_eager():
    torch.manual_seed(3)
    m = HeadwiseMLP(3, 16, 4, 3)
    x = torch.randn(700, 3, requires_grad=True)

    def grads(f):
        y = f(x)
        gs = torch.autograd.grad(y.square().sum(), [x, *m.parameters()])
        return [y.detach(), *gs]

    ref = grads(lambda t: edge_mlp(m, t))
    got = grads(torch.compile(lambda t: edge_mlp(m, t), backend="aot_eager", fullgraph=True))
    for a, b in zip(ref, got):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def _csr_graph(N, E, seed):
    """Random edges sorted by (target, source) with node 0 and the last node receiving none."""
    from pyg_lie.ops import CSRStructure
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, E), generator=gen)
    ei = ei[:, (ei[1] != 0) & (ei[1] != N - 1)]
    return CSRStructure.build(ei, N)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("H,D", [(1, 1), (3, 5), (1, 8), (4, 16), (2, 19), (2, 24), (3, 32)])
def test_native_csr_products_match_dense_float64(dtype, H, D):
    """SDDMM and SpMM against the dense formulas in float64, on rows with 0 to many edges,
    feature sizes below, at and past the kernel's 8-wide partial sums, and strided inputs.
    Head widths that are multiples of 8 take the float32 vector paths: groups of eight edges
    plus a remainder per row, and (3 x 32) a row of twelve vectors, more than the eight kept in
    registers at once; 8, 16 and 32 are compiled as constants, 24 is not."""
    N = 37
    s = _csr_graph(N, 400, H * D)
    torch.manual_seed(D)
    A = torch.randn(N, D, H, dtype=dtype).transpose(1, 2)  # (N, H, D), not contiguous
    B = torch.randn(N, H, D, dtype=dtype)
    w = torch.randn(s.col.numel(), H, dtype=dtype).t()  # (H, E), not contiguous
    assert _native.csr_supported(A, B, w)
    dst, src = s.row, s.col
    scores = _native.csr_sddmm(A, B, s.crow, s.col)
    ref = (A.double()[dst] * B.double()[src]).sum(-1).t()
    out = _native.csr_spmm(w, B, s.crow, s.col)
    terms = w.double().t()[:, :, None] * B.double()[src]  # (E, H, D)
    ref_out = torch.zeros(N, H, D, dtype=torch.float64).index_add_(0, dst, terms)
    rel = 1e-6 if dtype == torch.float32 else 1e-14
    _close(scores, ref, rel)
    _close(out, ref_out, rel)
    assert scores.dtype == out.dtype == dtype and out[0].abs().max() == 0 and out[-1].abs().max() == 0


def test_native_csr_products_threads_agree_and_match_torch(monkeypatch):
    """Each output is summed by one thread in a fixed order: bitwise equal for 1-3 threads; and
    equal to torch's sparse kernels (the fallback, PYG_LIE_NATIVE=0) to float32 rounding."""
    from pyg_lie.ops import csr_sddmm as sddmm, csr_spmm as spmm
    s = _csr_graph(500, 6000, 0)
    torch.manual_seed(0)
    A, B, w = torch.randn(500, 4, 16), torch.randn(500, 4, 16), torch.randn(4, s.col.numel())
    n = torch.get_num_threads()
    try:
        res = []
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            res.append((sddmm(s, A, B), spmm(s, w, B)))
    finally:
        torch.set_num_threads(n)
    for other in res[1:]:
        assert torch.equal(other[0], res[0][0]) and torch.equal(other[1], res[0][1])
    monkeypatch.setenv("PYG_LIE_NATIVE", "0")
    assert not _native.csr_supported(A, B)
    assert torch.allclose(sddmm(s, A, B), res[0][0], rtol=1e-5, atol=1e-5)
    assert torch.allclose(spmm(s, w, B), res[0][1], rtol=1e-5, atol=1e-5)


def test_native_csr_products_only_for_cpu_float32_and_float64():
    A = torch.randn(3, 2, 4)
    assert not _native.csr_supported(A.half(), A.half())
    assert not _native.csr_supported(A, A.double())  # mixed precision: torch's kernels decide
    assert _native.csr_supported(A.double(), A.double())


def _structure_fields(s):
    return (s.perm, s.row, s.col, s.crow, s.degree, s.complete, s.perm_t, s.crow_t, s.col_t, s.iperm_t)


def _equal_fields(a, b):
    for x, y in zip(_structure_fields(a), _structure_fields(b)):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            assert x is not None and y is not None and torch.equal(x, y)
        else:
            assert x == y


def _graphs():
    """Radius and complete graphs, lifted K = 1 and 3, a cloud with trailing isolated nodes,
    random unsorted edges, no edges, and a uniform in-degree that is not complete."""
    from pyg_lie.nn.lifted_edges import lifted_edges
    gen = torch.Generator().manual_seed(0)
    pos, batch = torch.randn(60, 2, generator=gen), torch.arange(3).repeat_interleave(20)
    out = [(lifted_edges(pos, batch, K, r), 60 * K) for r in (None, 0.7) for K in (1, 3)]
    out.append((lifted_edges(pos, batch, 1, 0.7), 75))
    out.append((torch.randint(0, 50, (2, 300), generator=gen), 50))
    out.append((torch.empty(2, 0, dtype=torch.long), 5))
    node = torch.arange(12)
    sources = torch.stack([node, (node + 5) % 12], 1).sort(dim=1).values.flatten()
    out.append((torch.stack([sources, node.repeat_interleave(2)]), 12))  # degree 2, not complete
    return out


@pytest.mark.skipif(not _native.available(), reason="native kernels not built (no C compiler)")
def test_native_graph_steps_match_torch(monkeypatch):
    """The complete graphs (full_graph), the lifted edges (expand_edges) and CSRStructure.build
    with its transpose, native against the torch formulation (PYG_LIE_NATIVE=0), exactly,
    including degree/complete."""
    from pyg_lie.ops import CSRStructure
    from pyg_lie.nn.lifted_edges import base_graph, expand_edges, full_graph
    gen = torch.Generator().manual_seed(1)
    pos, batch = torch.randn(50, 2, generator=gen), torch.arange(2).repeat_interleave(25)
    cases = []
    for r in (None, 0.6):
        base = base_graph(pos, batch, r)
        for K in (2, 4):
            cases.append(expand_edges(base, 50, K))
    structures = [(CSRStructure.build(ei, n, transpose=t), ei, n, t) for ei, n in _graphs() for t in (False, True)]
    sizes = torch.tensor([3, 1, 7, 7, 2])  # graphs of different sizes, one of a single node
    graph_ids = torch.arange(5).repeat_interleave(sizes)
    complete = [full_graph(graph_ids, loop) for loop in (True, False)]
    monkeypatch.setenv("PYG_LIE_NATIVE", "0")
    for loop, ei in zip((True, False), complete):
        assert torch.equal(ei, full_graph(graph_ids, loop))
    i = 0
    for r in (None, 0.6):
        base = base_graph(pos, batch, r)
        for K in (2, 4):
            assert torch.equal(cases[i], expand_edges(base, 50, K))
            i += 1
    for s, ei, n, t in structures:
        _equal_fields(s, CSRStructure.build(ei, n, transpose=t))
    assert any(s.complete for s, *_ in structures) and any(s.degree and not s.complete for s, *_ in structures)
    assert any(s.perm is not None for s, *_ in structures)  # the unsorted graph takes the sort


@pytest.mark.skipif(not _native.available(), reason="native kernels not built (no C compiler)")
def test_native_csr_transpose_refuses_bad_patterns():
    """Out-of-range sources or a pointer that does not cover the edges: None, for the torch path."""
    col = torch.tensor([0, 2, 1, 1])
    assert _native.csr_transpose(torch.tensor([0, 2, 3, 4]), col) is not None
    assert _native.csr_transpose(torch.tensor([0, 2, 3, 4]), torch.tensor([0, 3, 1, 1])) is None
    assert _native.csr_transpose(torch.tensor([0, 2, 3, 3]), col) is None
    assert _native.csr_transpose(torch.tensor([0, 3, 2, 4]), col) is None
    assert _native.csr_transpose(torch.tensor([0, 9, 2, 4]), col) is None  # past the edges, then back
    crow_t, col_t, perm_t, iperm_t = _native.csr_transpose(torch.tensor([0, 2, 3, 4]), col)
    assert crow_t.tolist() == [0, 1, 3, 4] and col_t.tolist() == [0, 1, 2, 0] and perm_t.tolist() == [0, 2, 3, 1]
    assert torch.equal(perm_t[iperm_t], torch.arange(4))


@pytest.mark.skipif(not _native.available(), reason="native kernels not built (no C compiler)")
@pytest.mark.parametrize("dtype, Dv", [(torch.float32, 16), (torch.float32, 5), (torch.float64, 16)])
def test_native_spmm_reads_weights_through_a_permutation(dtype, Dv):
    """wperm gives exactly the SpMM of the gathered weights (vector and generic kernels)."""
    s = _csr_graph(37, 400, 2 * Dv)
    gen = torch.Generator().manual_seed(Dv)
    E = s.col.numel()
    w = torch.randn(2, E, generator=gen, dtype=dtype)
    V = torch.randn(37, 2, Dv, generator=gen, dtype=dtype)
    perm = torch.randperm(E, generator=gen)
    out = _native.csr_spmm(w, V, s.crow, s.col, wperm=perm)
    assert torch.equal(out, _native.csr_spmm(w[:, perm], V, s.crow, s.col))


@pytest.mark.skipif(not _native.available(), reason="native kernels not built (no C compiler)")
def test_csr_product_gradients_native_equal_torch(monkeypatch):
    """The backward passes (transposed SpMM reading the weights through perm_t) against torch's
    kernels with gathered weights, and their double backward."""
    from pyg_lie.ops import csr_sddmm as sddmm, csr_spmm as spmm
    s = _csr_graph(40, 500, 32)
    gen = torch.Generator().manual_seed(5)
    base = [torch.randn(40, 2, 16, generator=gen) for _ in range(3)] + [torch.randn(2, s.col.numel(), generator=gen)]
    results = []
    for native in ("1", "0"):
        monkeypatch.setenv("PYG_LIE_NATIVE", native)
        A, B, V, w = (t.clone().requires_grad_() for t in base)
        def loss():
            return (sddmm(s, A, B) * w).sum() + (spmm(s, w.softmax(1), V) ** 2).sum()
        first = torch.autograd.grad(loss(), [A, B, V, w])  # the native path reads through perm_t
        grads = torch.autograd.grad(loss(), [A, B, V, w], create_graph=True)
        second = torch.autograd.grad(sum((g ** 2).sum() for g in grads), [A, B, V, w])
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(first, grads))
        results.append(list(first) + list(second))
    for a, b in zip(*results):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)
