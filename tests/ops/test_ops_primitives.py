"""The primitive operators of ``pyg_lie.ops`` (products and softmax on CSR edges, graph
construction, the SE(2) relative log): the native CPU kernels against the composite reference
(values and gradients, float32 and float64), ``dispatch_counts`` showing which kernel ran,
``torch.library.opcheck``, and no module outside ``pyg_lie/ops`` importing the native library."""
import ast
import math
from pathlib import Path

import pytest
import torch

from pyg_lie import ops
from pyg_lie.ops import _native

native = pytest.mark.skipif(not _native.available(), reason="native kernels not built (no C compiler)")
OPCHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12)}


def _ran(op, backend):
    return ops.dispatch_counts().get((op, backend), 0)


def _graph(N=23, p=0.3, seed=0):
    """A random directed graph in (target, source) order with two nodes that hear nobody, as
    ``(crow, col, crow_t, col_t, perm_t, iperm_t)``."""
    g = torch.Generator().manual_seed(seed)
    adj = torch.rand(N, N, generator=g) < p
    adj[:, 0] = adj[:, N - 1] = False
    dst, src = adj.t().nonzero(as_tuple=True)  # sorted by (dst, src)
    crow = torch.searchsorted(dst, torch.arange(N + 1))
    return (crow, src, *ops.csr_transpose(crow, src))


def _leaves(ts):
    return [t.detach().clone().requires_grad_() for t in ts]


def _both(fn, inputs):
    """``fn`` on the default (auto) and on the composite backend: outputs and input gradients
    for a fixed random output weighting."""
    res = []
    for name in ("auto", "composite"):
        xs = _leaves(inputs)
        with ops.backend(name):
            out = fn(*xs)
            w = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=out.dtype)
            (out * w).sum().backward()
        res.append([out.detach(), *(x.grad for x in xs)])
    return res


# ------------------------------------------------------------------------------- SDDMM, SpMM
@native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sddmm_spmm_native_match_composite(dtype):
    p = _graph()
    N, E = p[0].numel() - 1, p[1].numel()
    g = torch.Generator().manual_seed(1)
    A, B = (torch.randn(N, 3, 5, generator=g, dtype=dtype) for _ in range(2))
    w = torch.randn(3, E, generator=g, dtype=dtype)
    ops.reset_dispatch_counts()
    nat, comp = _both(lambda a, b: ops.sddmm(a, b, *p), (A, B))
    assert _ran("csr_sddmm", "native") == 1 and _ran("csr_sddmm", "composite") == 1
    assert _ran("csr_spmm", "native") == 1 and _ran("csr_spmm_permuted", "native") == 1  # the gradients
    for a, b in zip(nat, comp):
        assert torch.allclose(a, b, **TOL[dtype])
    nat, comp = _both(lambda w, v: ops.spmm(w, v, *p), (w, B))
    for a, b in zip(nat, comp):
        assert torch.allclose(a, b, **TOL[dtype])


def test_sddmm_spmm_match_dense_and_differentiate_twice():
    p = _graph(N=9, p=0.5)
    crow, col = p[0], p[1]
    N = crow.numel() - 1
    row = torch.repeat_interleave(torch.arange(N), crow[1:] - crow[:-1])
    g = torch.Generator().manual_seed(2)
    A, B = (torch.randn(N, 2, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = torch.randn(2, col.numel(), generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.allclose(ops.sddmm(A, B, *p), torch.einsum("ehd,ehd->he", A[row], B[col]))
    dense = torch.zeros(2, N, N, dtype=torch.float64).index_put((torch.arange(2)[:, None], row, col), w)
    assert torch.allclose(ops.spmm(w, B, *p), torch.einsum("hij,jhd->ihd", dense, B))
    for name in ("auto", "composite"):
        with ops.backend(name):
            assert torch.autograd.gradgradcheck(lambda a, b: ops.sddmm(a, b, *p), (A, B))
            assert torch.autograd.gradgradcheck(lambda w, b: ops.spmm(w, b, *p), (w, B))


def test_sddmm_spmm_opcheck():
    p = _graph(N=7, p=0.5)
    A, B = (torch.randn(7, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = torch.randn(2, p[1].numel(), dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.pyg_lie.csr_sddmm.default, (A, B, *p), test_utils=OPCHECKS)
    torch.library.opcheck(torch.ops.pyg_lie.csr_spmm.default, (w, B, *p), test_utils=OPCHECKS)


# --------------------------------------------------------------------------- segment softmax
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_segment_softmax_native_matches_composite(dtype):
    crow = _graph()[0]
    E = int(crow[-1])
    s = 3 * torch.randn(4, E, generator=torch.Generator().manual_seed(3), dtype=dtype)
    ops.reset_dispatch_counts()
    nat, comp = _both(lambda t: ops.segment_softmax(t, crow, 1), (s,))
    ran = "native" if dtype == torch.float32 and _native.available() else "composite"
    assert _ran("segment_softmax", ran) == (1 if ran == "native" else 2)
    assert _ran("segment_softmax_backward", ran) >= 1
    for a, b in zip(nat, comp):
        assert torch.allclose(a, b, **TOL[dtype])
    # along dim 0: the columns of an (E, C) tensor
    w0 = ops.segment_softmax(s.t().contiguous(), crow, 0)
    assert torch.allclose(w0, nat[0].t(), **TOL[dtype])


def test_segment_softmax_differentiates_twice():
    crow = _graph(N=8, p=0.5)[0]
    s = torch.randn(2, int(crow[-1]), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: ops.segment_softmax(t, crow, 1), (s,))
    torch.library.opcheck(torch.ops.pyg_lie.segment_softmax.default, (s, crow, 1), test_utils=OPCHECKS)


# ---------------------------------------------------------------------------- graph building
@native
def test_sorts_native_match_composite():
    g = torch.Generator().manual_seed(4)
    for key in (torch.randint(0, 50, (1000,), generator=g), torch.randint(0, 2 ** 40, (70000,), generator=g),
                torch.tensor([5]), torch.tensor([], dtype=torch.long)):
        ops.reset_dispatch_counts()
        v, i = ops.argsort_keys(key)
        s = ops.sort_keys(key)
        if key.numel() > 1:
            assert _ran("sort_keys", "native") == 2
        ref = torch.sort(key, stable=True)
        assert torch.equal(v, ref.values) and torch.equal(i, ref.indices) and torch.equal(s, ref.values)
        with ops.backend("composite"):
            vc, ic = ops.argsort_keys(key)
            assert torch.equal(vc, v) and torch.equal(ic, i) and torch.equal(ops.sort_keys(key), s)
    # negative keys: the radix sort declines, the composite sort runs
    ops.reset_dispatch_counts()
    key = torch.tensor([3, -1, 2, -1])
    v, i = ops.argsort_keys(key)
    assert torch.equal(i, torch.tensor([1, 3, 2, 0])) and _ran("sort_keys", "composite") == 1


@native
def test_csr_scan_and_transpose_native_match_composite():
    crow, col, *_ = _graph(N=31, p=0.2)
    row = torch.repeat_interleave(torch.arange(31), crow[1:] - crow[:-1])
    blocks = torch.arange(12).view(3, 4)  # all pairs within three clouds of four: complete
    cb_src = blocks[:, None, :].expand(3, 4, 4).reshape(-1)
    cb_dst = blocks[:, :, None].expand(3, 4, 4).reshape(-1)
    for src, dst, n in ((col, row, 31), (cb_src, cb_dst, 12), (col.flip(0), row.flip(0), 31), (col, row, 5)):
        ops.reset_dispatch_counts()
        got = ops.csr_scan(src, dst, n)
        assert _ran("csr_scan", "native") == 1 or got is None
        with ops.backend("composite"):
            ref = ops.csr_scan(src, dst, n)
        assert (got is None) == (ref is None)
        if got is not None:
            assert torch.equal(got[0], ref[0]) and got[1:] == ref[1:]
    assert ops.csr_scan(cb_src, cb_dst, 12)[1:] == (4, True)
    assert ops.csr_scan(col.flip(0), row.flip(0), 31) is None
    ops.reset_dispatch_counts()
    got = ops.csr_transpose(crow, col)
    assert _ran("csr_transpose", "native") == 1
    with ops.backend("composite"):
        ref = ops.csr_transpose(crow, col)
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    crow_t, col_t, perm_t, iperm_t = got
    assert torch.equal(col_t, row[perm_t]) and torch.equal(perm_t[iperm_t], torch.arange(col.numel()))


@native
def test_edge_lists_native_match_composite():
    crow, col, *_ = _graph(N=11, p=0.4)
    for K in (1, 3):
        ops.reset_dispatch_counts()
        got = ops.expand_edges(crow, col, K)
        assert _ran("expand_edges", "native") == 1
        with ops.backend("composite"):
            assert torch.equal(got, ops.expand_edges(crow, col, K))
        assert got.shape == (2, col.numel() * K * K)
        key = got[1] * 11 * K + got[0]
        assert bool((key[1:] > key[:-1]).all())  # (target, source) order, no duplicates
    start = torch.tensor([0, 3, 3, 7, 8])
    ops.reset_dispatch_counts()
    got = ops.complete_edges(start)
    assert _ran("complete_edges", "native") == 1
    with ops.backend("composite"):
        assert torch.equal(got, ops.complete_edges(start))
    assert got.shape == (2, 9 + 0 + 16 + 1)
    with pytest.raises(ValueError, match="start"):
        ops.complete_edges(torch.tensor([0, 3, 2]))


@native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_radius_graph_native_matches_composite(dtype, d):
    g = torch.Generator().manual_seed(d)
    pos = (torch.rand(300, d, generator=g, dtype=torch.float64) * 6).to(dtype)
    ptr = torch.tensor([0, 120, 120, 300])
    for loop in (False, True):
        ops.reset_dispatch_counts()
        got = ops.radius_graph(pos, ptr, 1.0, loop)
        assert _ran("radius_graph", "native") == 1
        with ops.backend("composite"):
            ref = ops.radius_graph(pos, ptr, 1.0, loop)
        assert torch.equal(got, ref)
        # independent check: all pairs of the same graph within r in float64
        p64 = pos.double()
        graph = torch.repeat_interleave(torch.arange(3), ptr[1:] - ptr[:-1])
        keep = (((p64[:, None] - p64[None]) ** 2).sum(-1) <= 1.0) & (graph[:, None] == graph[None])
        if not loop:
            keep.fill_diagonal_(False)
        tgt, src = keep.nonzero(as_tuple=True)
        assert torch.equal(got, torch.stack([src, tgt]))


def test_radius_graph_refuses_bad_input():
    pos = torch.rand(5, 2)
    for bad_ptr in (torch.tensor([0, 4]), torch.tensor([1, 5]), torch.tensor([0, 3, 2, 5])):
        with pytest.raises(ValueError, match="ptr"):
            ops.radius_graph(pos, bad_ptr, 1.0)
    with pytest.raises(ValueError, match="r must"):
        ops.radius_graph(pos, torch.tensor([0, 5]), -1.0)
    with pytest.raises(ValueError, match="finite"):
        ops.radius_graph(torch.tensor([[0.0, math.nan]]), torch.tensor([0, 1]), 1.0)


# ---------------------------------------------------------------------------- SE(2) relative log
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cut", [None, -math.pi + 1e-4])
def test_se2_relative_log_native_matches_composite(dtype, cut):
    from pyg_lie.groups import get_group
    G = get_group("SE2")
    g = G.random(40, generator=torch.Generator().manual_seed(5), dtype=dtype, scale=3.0)
    ei = torch.randint(0, 40, (2, 500), generator=torch.Generator().manual_seed(6))
    ops.reset_dispatch_counts()
    nat, comp = _both(lambda t: ops.se2_relative_log(t, ei, cut), (g,))
    ran = "native" if dtype == torch.float32 and _native.available() else "composite"
    assert _ran("se2_relative_log", ran) >= 1
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else TOL[dtype]
    for a, b in zip(nat, comp):
        assert torch.allclose(a, b, **tol)
    # the group's own log of g_i^-1 g_j
    ref = G.log(G.inv(g[ei[1]]) @ g[ei[0]])
    if cut is not None:
        ref = G.one_sided_cut(ref)
    assert torch.allclose(nat[0], ref, **tol)


def test_se2_relative_log_differentiates_twice_and_opcheck():
    from pyg_lie.groups import get_group
    g = get_group("SE2").random(6, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    g.requires_grad_(True)
    ei = torch.randint(0, 6, (2, 15), generator=torch.Generator().manual_seed(8))
    assert torch.autograd.gradgradcheck(lambda t: ops.se2_relative_log(t, ei), (g,))
    torch.library.opcheck(torch.ops.pyg_lie.se2_relative_log.default, (g, ei, None), test_utils=OPCHECKS)
    with pytest.raises(ValueError, match="edge_index"):
        ops.se2_relative_log(g, torch.tensor([[0, 6], [1, 2]]))


# ------------------------------------------------------------------------ the edge MLP's CPU path
def test_mlp_chunked_cpu_path_matches_composite():
    """float64 (which the C kernel does not take) runs the chunked CPU kernels: same values and
    gradients as the composite reference."""
    torch.manual_seed(10)
    params = [torch.randn(8, 3), torch.randn(8), torch.randn(8, 8), torch.randn(8), torch.randn(2, 8),
              torch.randn(2)]
    x = torch.randn(50, 3)
    inputs = [t.double() for t in (x, *params)]
    ops.reset_dispatch_counts()
    nat, comp = _both(lambda x, *p: ops.mlp(x, list(p), chunk=16), inputs)
    assert _ran("mlp", "chunked") == 1 and _ran("mlp_backward", "chunked") == 1
    for a, b in zip(nat, comp):
        assert torch.allclose(a, b, **TOL[torch.float64])


# ------------------------------------------------------------------------ the native library's users
#: modules still importing the native library instead of calling an operator (none)
PENDING: set = set()


def test_no_module_outside_ops_imports_the_native_library():
    """The native kernels are reached through the operators only: no module of the package
    outside ``pyg_lie/ops`` imports ``_native`` (the re-export ``pyg_lie/nn/_native`` aside)."""
    root = Path(__file__).resolve().parents[2] / "pyg_lie"
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("ops/") or rel == "nn/_native/__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                if "_native" in (node.module or "").split(".") or "_native" in names:
                    offenders.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.Import):
                if any("_native" in a.name.split(".") for a in node.names):
                    offenders.append(f"{rel}:{node.lineno}")
    unexpected = [o for o in offenders if o.split(":")[0] not in PENDING]
    assert unexpected == [], f"modules that import the native library instead of calling pyg_lie.ops: {unexpected}"


def test_pyg_index_subclasses_are_read_as_plain_tensors():
    """PyG's ``EdgeIndex`` / ``Index`` (whose data pointer C cannot read) give the results of
    plain tensors, never a crash."""
    from torch_geometric import EdgeIndex, Index
    from pyg_lie.groups import get_group
    crow, col, *_ = _graph(N=12, p=0.4)
    row = torch.repeat_interleave(torch.arange(12), crow[1:] - crow[:-1])
    ei = torch.stack([col, row])
    eix = EdgeIndex(ei, sparse_size=(12, 12), sort_order="col")
    g = get_group("SE2").random(12, generator=torch.Generator().manual_seed(11))
    assert torch.equal(ops.se2_relative_log(g, eix), ops.se2_relative_log(g, ei))
    key = row * 12 + col
    assert torch.equal(ops.sort_keys(Index(key.flip(0))), torch.sort(key).values)
    assert torch.equal(ops.argsort_keys(Index(key))[1], torch.arange(key.numel()))
    pos = torch.rand(12, 2)
    assert torch.equal(ops.radius_graph(pos, Index(torch.tensor([0, 12])), 0.5),
                       ops.radius_graph(pos, torch.tensor([0, 12]), 0.5))


def test_eager_calls_equal_the_registered_operators():
    """Eager calls run the implementations without the dispatcher; the registered operators
    (what ``torch.compile`` and fake tensors see) give the same values and gradients."""
    from pyg_lie.groups import get_group
    from pyg_lie.ops import _backend
    crow, col, *_ = _graph(N=10, p=0.5)
    E = col.numel()
    gen = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(10, 2, 8, generator=gen) for _ in range(3))
    l = torch.randn(2, E, generator=gen)
    x = torch.randn(E, 3, generator=gen)
    params = [torch.randn(8, 3, generator=gen), torch.randn(8, generator=gen), torch.randn(2, 8, generator=gen),
              torch.randn(2, generator=gen)]
    g = get_group("SE2").random(10, generator=gen)
    ei = torch.stack([col, torch.repeat_interleave(torch.arange(10), crow[1:] - crow[:-1])])
    cases = [
        (lambda q, k, v, l: ops.csr_attention(q, k, v, crow, col, l)[0],
         lambda q, k, v, l: torch.ops.pyg_lie.csr_attention(q, k, v, l, None, crow, col, None, None, None)[0],
         (q, k, v, l)),
        (lambda x, *p: ops.mlp(x, list(p)), lambda x, *p: torch.ops.pyg_lie.mlp(x, list(p), False, 16384),
         (x, *params)),
        (lambda t: ops.se2_relative_log(t, ei), lambda t: torch.ops.pyg_lie.se2_relative_log(t, ei, None), (g,)),
        (lambda s: ops.segment_softmax(s, crow, 1), lambda s: torch.ops.pyg_lie.segment_softmax(s, crow, 1), (l,)),
    ]
    assert _backend.direct(q, crow)
    for eager, registered, inputs in cases:
        a, b = _leaves(inputs), _leaves(inputs)
        ya, yb = eager(*a), registered(*b)
        assert torch.equal(ya, yb)
        w = torch.randn(ya.shape, generator=gen)
        (ya * w).sum().backward()
        (yb * w).sum().backward()
        for s, t in zip(a, b):
            assert torch.equal(s.grad, t.grad)


def test_graph_operators_opcheck():
    crow, col, *_ = _graph(N=9, p=0.4)
    row = torch.repeat_interleave(torch.arange(9), crow[1:] - crow[:-1])
    checks = ("test_schema", "test_faketensor")
    torch.library.opcheck(torch.ops.pyg_lie.sort_keys.default, (row * 9 + col, True), test_utils=checks)
    torch.library.opcheck(torch.ops.pyg_lie.csr_scan.default, (col, row, 9), test_utils=checks)
    torch.library.opcheck(torch.ops.pyg_lie.csr_transpose.default, (crow, col), test_utils=checks)
    torch.library.opcheck(torch.ops.pyg_lie.expand_edges.default, (crow, col, 2), test_utils=checks)
    # data-dependent output sizes: the fake implementations allocate dynamic sizes
    torch.library.opcheck(torch.ops.pyg_lie.complete_edges.default, (torch.tensor([0, 3, 5]),), test_utils=checks)
    torch.library.opcheck(torch.ops.pyg_lie.radius_graph.default, (torch.rand(20, 2), torch.tensor([0, 20]), 0.4, False),
                          test_utils=checks)
