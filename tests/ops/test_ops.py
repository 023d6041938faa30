"""pyg_lie.ops: backends, the fused CSR attention and the edge MLP operators.

The Triton kernels run here on CPU tensors under Triton's interpreter (the same kernel code a GPU
compiles), compared with the composite reference in values and first derivatives; second
derivatives are checked on the composite reference (the differentiable backward of every
backend is that reference). Tests marked ``cuda`` compare the compiled kernels on a GPU.
"""
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pyg_lie.ops as ops
from pyg_lie.ops import _backend

pytestmark = pytest.mark.skipif(not ops.triton_available(), reason="Triton is not installed")

ROOT = Path(__file__).resolve().parents[2]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def random_graph(N, M, max_degree, generator=None, empty_rows=(1,)):
    """CSR pattern over ``N`` targets with sources in ``[0, M)``, degrees 0..max_degree (some rows empty)."""
    deg = torch.randint(0, max_degree + 1, (N,), generator=generator)
    for r in empty_rows:
        if r < N:
            deg[r] = 0
    crow = torch.zeros(N + 1, dtype=torch.long)
    crow[1:] = deg.cumsum(0)
    col = [torch.sort(torch.randperm(M, generator=generator)[:d]).values for d in deg.tolist()]
    col = torch.cat(col) if col else torch.zeros(0, dtype=torch.long)
    return crow, col.long()


def attention_inputs(N=9, M=None, H=3, D=5, dtype=torch.float32, bias="edge", max_degree=6, device="cpu"):
    M = N if M is None else M
    crow, col = random_graph(N, M, max_degree)
    E = col.numel()
    q = torch.randn(N, H, D, dtype=dtype)
    k, v = torch.randn(M, H, D, dtype=dtype), torch.randn(M, H, D, dtype=dtype)
    l = torch.randn(H, E, dtype=dtype)
    b = {"edge": torch.randn(E, dtype=dtype), "head": torch.randn(H, E, dtype=dtype), None: None}[bias]
    ts = [t.to(device).requires_grad_() if t is not None else None for t in (q, k, v, l, b)]
    return ts, crow.to(device), col.to(device)


def run_attention(backend, ts, crow, col, with_gw=True, **kw):
    q, k, v, l, b = ts
    with ops.backend(backend):
        out, w = ops.csr_attention(q, k, v, crow, col, l, b, **kw)
        gen = torch.Generator(device=out.device.type).manual_seed(7)
        go = torch.randn(out.shape, generator=gen, device=out.device).to(out.dtype)
        gw = torch.randn(w.shape, generator=gen, device=w.device).to(w.dtype)
        loss = (out * go).sum() + ((w * gw).sum() if with_gw else 0)
        wanted = [t for t in ts if t is not None]
        grads = torch.autograd.grad(loss, wanted)
    return (out, w, *grads)


def assert_close_all(a, b, tol):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        torch.testing.assert_close(x.detach().float().cpu() if x.dtype == torch.bfloat16 else x.detach().cpu(),
                                   y.detach().float().cpu() if y.dtype == torch.bfloat16 else y.detach().cpu(),
                                   rtol=tol, atol=tol, msg=lambda m: f"output {i}: {m}")


# ---------------------------------------------------------------------------------- backends
def test_backend_selection_and_counts():
    assert ops.get_backend() in ops.BACKENDS
    old = ops.get_backend()
    with ops.backend("composite"):
        assert ops.get_backend() == "composite"
    assert ops.get_backend() == old
    with pytest.raises(ValueError, match="backend must be one of"):
        ops.set_backend("cuda")
    with pytest.raises(ValueError, match="backend must be one of"):
        with ops.backend(3):
            pass
    ops.reset_dispatch_counts()
    ts, crow, col = attention_inputs(N=4, max_degree=3)
    with ops.backend("composite"):
        ops.csr_attention(*ts[:3], crow, col, ts[3])
    assert ops.dispatch_counts() == {("csr_attention", "composite"): 1}
    ops.reset_dispatch_counts()
    assert ops.dispatch_counts() == {}


def test_backend_block_is_per_thread():
    """A ``with ops.backend(...)`` block selects for its own thread only (two threads inside
    blocks of different backends each run their own, counted), and ``set_backend`` is
    process-wide."""
    import threading
    ts, crow, col = attention_inputs(N=4, max_degree=3)
    ready, seen, errors = threading.Barrier(2), {}, []

    def work(name):
        try:
            with ops.backend(name):
                ready.wait(timeout=30)  # both blocks are open now
                seen[name] = ops.get_backend()
                ops.csr_attention(*ts[:3], crow, col, ts[3])
                ready.wait(timeout=30)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    ops.reset_dispatch_counts()
    threads = [threading.Thread(target=work, args=(n,)) for n in ("composite", "triton")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert seen == {"composite": "composite", "triton": "triton"}
    counts = ops.dispatch_counts()
    assert counts.get(("csr_attention", "composite")) == 1 and sum(counts.values()) == 2
    old = ops.get_backend()
    try:
        ops.set_backend("composite")
        other = []
        t = threading.Thread(target=lambda: other.append(ops.get_backend()))
        t.start()
        t.join()
        assert other == ["composite"]
    finally:
        ops.set_backend(old)


def test_backend_from_environment(monkeypatch):
    try:
        monkeypatch.setenv("PYG_LIE_BACKEND", "Triton")
        importlib.reload(_backend)
        assert ops.get_backend() == _backend.get_backend() == "triton"
        monkeypatch.setenv("PYG_LIE_BACKEND", "gpu")
        with pytest.raises(ValueError, match="PYG_LIE_BACKEND.*backend must be one of"):
            importlib.reload(_backend)
    finally:
        monkeypatch.delenv("PYG_LIE_BACKEND")
        importlib.reload(_backend)
    assert _backend.get_backend() == "auto"


def test_auto_backend_on_cpu_picks_native_or_composite():
    ops.reset_dispatch_counts()
    ts, crow, col = attention_inputs(N=6, D=8, bias=None)
    with ops.backend("auto"):
        ops.csr_attention(*ts[:3], crow, col, ts[3])
    (key,) = ops.dispatch_counts()
    assert key[0] == "csr_attention" and key[1] in ("native", "composite")
    assert key[1] == ("native" if _backend._native_module().available() else "composite")
    ops.reset_dispatch_counts()
    with ops.backend("auto"):  # the native kernel takes no log-bias
        ops.csr_attention(*ts[:3], crow, col, ts[3], torch.zeros(col.numel()))
    assert ops.dispatch_counts() == {("csr_attention", "composite"): 1}


def test_kernels_call_only_triton_builtins():
    """The interpreter runs a kernel on CPU tensors only if it calls Triton builtins: the
    standard library's @triton.jit helpers (tl.sum, tl.zeros, tl.sigmoid, ...) are compiled-only
    objects unless TRITON_INTERPRET=1 was set when Triton was imported."""
    import triton.language as tl
    from triton.runtime.jit import JITFunction
    import ast
    tree = ast.parse((ROOT / "pyg_lie" / "ops" / "_triton.py").read_text())
    kernels = [f for f in tree.body if isinstance(f, ast.FunctionDef)
               and any(ast.unparse(a.annotation or ast.Constant(None)) == "tl.constexpr" for a in f.args.args)]
    assert {"_attn_fwd", "_attn_bwd_rows", "_attn_bwd_cols", "_mlp_fwd", "_mlp_bwd"} <= {f.name for f in kernels}
    names = {n.attr for f in kernels for n in ast.walk(f)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "tl"}
    compiled_only = sorted(n for n in names if isinstance(getattr(tl, n, None), JITFunction))
    assert compiled_only == [], f"kernels call Triton standard-library helpers {compiled_only}; use builtins"


# --------------------------------------------------------------------------- fused attention
@pytest.mark.parametrize("dtype,bias", [(torch.float32, "edge"), (torch.float64, "head")])
def test_attention_triton_matches_composite(dtype, bias):
    ts, crow, col = attention_inputs(N=9, M=7, H=3, D=5, dtype=dtype, bias=bias)
    assert (crow[1:] == crow[:-1]).any(), "the graph must have a row without edges"
    ops.reset_dispatch_counts()
    ref = run_attention("composite", ts, crow, col)
    got = run_attention("triton", ts, crow, col)
    counts = ops.dispatch_counts()
    assert counts[("csr_attention", "triton")] == 1 and counts[("csr_attention_backward", "triton")] == 1
    assert_close_all(got, ref, 2e-5 if dtype == torch.float32 else 1e-12)
    out, w = got[:2]
    empty = torch.nonzero(crow[1:] == crow[:-1]).flatten()
    assert torch.all(out[empty] == 0)
    # weights sum to one over every non-empty row
    sums = torch.zeros(w.shape[0], crow.numel() - 1, dtype=w.dtype).index_add(
        1, torch.repeat_interleave(torch.arange(crow.numel() - 1), crow[1:] - crow[:-1]), w.detach())
    nonempty = crow[1:] > crow[:-1]
    torch.testing.assert_close(sums[:, nonempty], torch.ones_like(sums[:, nonempty]))


def test_attention_triton_output_gradient_only_and_given_transpose():
    """Only ``out`` used (no weight gradient), no l, a long row (several edge blocks), and the
    transposed pattern passed in."""
    ts, crow, col = attention_inputs(N=5, H=2, D=3, bias=None, max_degree=5)
    crow = torch.tensor([0, 40, 40, 41, 45, 45])
    col = torch.cat([torch.randint(0, 5, (40,)).sort().values, torch.tensor([2, 0, 1, 3, 4])])
    q, k, v = ts[:3]
    ts = [q, k, v, None, None]
    ref = run_attention("composite", ts, crow, col, with_gw=False)
    got = run_attention("triton", ts, crow, col, with_gw=False, transpose=ops.transpose_csr(crow, col, 5))
    assert_close_all(got, ref, 2e-5)


def test_attention_log_mask_removes_edges():
    """A 0/1 edge mask entering as b = log(mask) gives the attention of the graph without the
    masked edges (rows that lose every edge receive nothing); Triton and composite agree."""
    ts, crow, col = attention_inputs(N=8, H=2, D=4, bias=None, max_degree=5)
    q, k, v, l, _ = ts
    E = col.numel()
    keep = torch.rand(E) > 0.4
    first = int(torch.nonzero(crow[1:] > crow[:-1])[0])
    keep[crow[first]:crow[first + 1]] = False  # one row loses all its edges
    b = torch.log(keep.to(q.dtype))
    row = torch.repeat_interleave(torch.arange(8), crow[1:] - crow[:-1])
    crow_kept = torch.zeros(9, dtype=torch.long)
    crow_kept[1:] = torch.bincount(row[keep], minlength=8).cumsum(0)
    for backend in ("composite", "triton"):
        with ops.backend(backend):
            out, w = ops.csr_attention(q, k, v, crow, col, l, b)
            ref_out, ref_w = ops.csr_attention(q, k, v, crow_kept, col[keep], l[:, keep])
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(w[:, keep], ref_w)
        assert torch.all(w[:, ~keep] == 0) and torch.all(out[first] == 0)


def test_attention_second_derivatives_composite():
    ts, crow, col = attention_inputs(N=5, M=4, H=2, D=3, dtype=torch.float64, bias="edge", max_degree=3)
    with ops.backend("composite"):
        fn = lambda *xs: ops.csr_attention(*xs[:3], crow, col, xs[3], xs[4])  # noqa: E731
        assert torch.autograd.gradcheck(fn, tuple(ts))
        assert torch.autograd.gradgradcheck(fn, tuple(ts))


def _hessian_vector(backend, ts, crow, col):
    """d/d(inputs) of <grad(loss), u>: needs the differentiable backward."""
    with ops.backend(backend):
        out, w = ops.csr_attention(*ts[:3], crow, col, ts[3], ts[4])
        loss = (out.sin()).sum() + (w * w).sum()
        grads = torch.autograd.grad(loss, ts, create_graph=True)
        gen = torch.Generator().manual_seed(3)
        dot = sum((g * torch.randn(g.shape, generator=gen, dtype=g.dtype)).sum() for g in grads)
        return torch.autograd.grad(dot, ts)


def test_attention_second_derivatives_do_not_reenter_the_operator():
    """Under the Triton backend the differentiable backward is the composite closed form:
    second derivatives equal the composite ones. The operators run once each: the forward, and
    the backward operator once, for the part of the second pass that flows back through ``out``
    and ``w`` (the loss's gradient depends on them); nothing runs nested."""
    ts, crow, col = attention_inputs(N=6, H=2, D=3, dtype=torch.float64, bias="head", max_degree=4)
    ref = _hessian_vector("composite", ts, crow, col)
    ops.reset_dispatch_counts()
    got = _hessian_vector("triton", ts, crow, col)
    assert ops.dispatch_counts() == {("csr_attention", "triton"): 1, ("csr_attention_backward", "triton"): 1}
    assert_close_all(got, ref, 1e-10)


def test_attention_native_matches_composite():
    nat = _backend._native_module()
    if not nat.available():
        pytest.skip("native kernels unavailable")
    ts, crow, col = attention_inputs(N=10, H=2, D=8, bias=None)
    ops.reset_dispatch_counts()
    ref = run_attention("composite", ts, crow, col)
    got = run_attention("native", ts, crow, col)
    assert ops.dispatch_counts()[("csr_attention", "native")] == 1
    assert_close_all(got, ref, 2e-5)


def test_attention_bad_inputs():
    ts, crow, col = attention_inputs(N=4, H=2, D=3, max_degree=3)
    q, k, v, l, b = ts
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        ops.csr_attention(q.tolist(), k, v, crow, col)
    with pytest.raises(TypeError, match="col must be an int64"):
        ops.csr_attention(q, k, v, crow, col.float())
    with pytest.raises(ValueError, match="q must have 3 dimensions"):
        ops.csr_attention(q[0], k, v, crow, col)
    with pytest.raises(TypeError, match="k has dtype torch.float64"):
        ops.csr_attention(q, k.double(), v, crow, col)
    with pytest.raises(ValueError, match=r"l must be \(H, E\)"):
        ops.csr_attention(q, k, v, crow, col, l[:, :-1])
    with pytest.raises(ValueError, match=r"b must be \(E,\)"):
        ops.csr_attention(q, k, v, crow, col, l, b[:-1])
    with pytest.raises(ValueError, match="crow must have num_nodes \\+ 1"):
        ops.csr_attention(q, k, v, crow[:-1], col)
    with pytest.raises(ValueError, match="col must hold indices in"):
        ops.csr_attention(q, k, v, crow, torch.full_like(col, 4))
    bad = crow.clone()
    bad[-1] += 1
    with pytest.raises(ValueError, match="crow must be a CSR row pointer"):
        ops.csr_attention(q, k, v, bad, col)
    crow_t, col_t, perm_t = ops.transpose_csr(crow, col, 4)
    with pytest.raises(ValueError, match="transpose: col_t must hold indices in"):
        ops.csr_attention(q, k, v, crow, col, transpose=(crow_t, col_t + 4, perm_t))
    with pytest.raises(ValueError, match="transpose: perm_t must hold edge positions"):
        ops.csr_attention(q, k, v, crow, col, transpose=(crow_t, col_t, perm_t - 1))


def test_attention_accepts_tensor_subclasses():
    from torch_geometric import Index
    ts, crow, col = attention_inputs(N=5, H=2, D=3, max_degree=3)
    ref = ops.csr_attention(*ts[:3], crow, col, ts[3], ts[4])
    got = ops.csr_attention(*ts[:3], Index(crow), Index(col), ts[3], ts[4])
    assert_close_all(got, ref, 0)


def test_csr_softmax_attention_on_a_structure():
    from pyg_lie.ops import CSRStructure
    N = 7
    ei = torch.randint(0, N, (2, 20))
    s = CSRStructure.build(ei, N)
    q, k, v = (torch.randn(N, 2, 4, requires_grad=True) for _ in range(3))
    l = torch.randn(2, s.col.numel(), requires_grad=True)
    with ops.backend("triton"):
        out, w = ops.csr_softmax_attention(s, q, k, v, l)
        out.sum().backward()
    assert s.perm_t is not None  # the structure's cached transpose fed the backward
    ref_out, _ = ops.composite_attention(q, k, v, l, None, s.crow, s.col)
    torch.testing.assert_close(out, ref_out)


def test_structure_attention_chooses_its_kernels():
    """ops.csr_softmax_attention makes the choice the layers used to make: complete clouds on
    CPU under ``auto`` run as batched products (no attention operator), the same structure
    under a selected backend takes the fused operator, a bipartite structure the unfused
    steps; all give the same values."""
    from pyg_lie.ops import CSRStructure
    torch.manual_seed(0)
    n, B, H, D = 4, 2, 2, 8
    blocks = [torch.cartesian_prod(torch.arange(n), torch.arange(n)).t() + b * n for b in range(B)]
    s = CSRStructure.build(torch.cat(blocks, 1), n * B)
    assert s.complete
    q, k, v = (torch.randn(n * B, H, D, dtype=torch.float64) for _ in range(3))
    l = torch.randn(H, s.col.numel(), dtype=torch.float64)
    results = {}
    for name in ("auto", "composite"):
        ops.reset_dispatch_counts()
        with ops.backend(name):
            results[name] = ops.csr_softmax_attention(s, q, k, v, l)
        fused = {key: c for key, c in ops.dispatch_counts().items() if key[0] == "csr_attention"}
        assert fused == ({} if name == "auto" else {("csr_attention", "composite"): 1}), (name, fused)
    assert_close_all(results["auto"], results["composite"], 1e-12)
    bip = CSRStructure.build(torch.cat(blocks, 1), n * B, num_sources=n * B + 1)
    ops.reset_dispatch_counts()
    with ops.backend("composite"):
        got = ops.csr_softmax_attention(bip, q, torch.cat([k, k[:1]]), torch.cat([v, v[:1]]), l)
    assert not any(key[0] == "csr_attention" for key in ops.dispatch_counts())
    assert_close_all(got, results["auto"], 1e-12)
    with pytest.raises(TypeError, match="CSRStructure"):
        ops.csr_softmax_attention((s.crow, s.col), q, k, v, l)


OPCHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")


def test_attention_opcheck():
    ts, crow, col = attention_inputs(N=5, H=2, D=3, max_degree=3)
    args = (*ts, crow, col, None, None, None)
    with ops.backend("composite"):
        torch.library.opcheck(torch.ops.pyg_lie.csr_attention.default, args, test_utils=OPCHECKS)


# ---------------------------------------------------------------------------------- edge MLPs
def _mlps(dtype):
    from pyg_lie.nn._edge_mlp import HeadwiseMLP
    seq = torch.nn.Sequential(torch.nn.Linear(3, 13), torch.nn.SiLU(), torch.nn.Linear(13, 10), torch.nn.SiLU(),
                              torch.nn.Linear(10, 5))
    one = torch.nn.Sequential(torch.nn.Linear(3, 6))
    head = HeadwiseMLP(3, 12, 4, 3)
    return [m.to(dtype) for m in (seq, one, head)]


def run_mlp(backend, module, x):
    with ops.backend(backend):
        y = ops.edge_mlp(module, x)
        go = torch.randn(y.shape, generator=torch.Generator().manual_seed(5), dtype=y.dtype).to(y.device)
        grads = torch.autograd.grad((y * go).sum(), [x, *module.parameters()])
    return (y, *grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mlp_triton_matches_composite(dtype):
    x = torch.randn(200, 3, dtype=dtype, requires_grad=True)  # 4 row blocks, the last partial; 2 programs
    for module in _mlps(dtype):
        ops.reset_dispatch_counts()
        ref = run_mlp("composite", module, x)
        got = run_mlp("triton", module, x)
        assert ops.dispatch_counts()[("mlp", "triton")] == 1
        assert ops.dispatch_counts()[("mlp_backward", "triton")] == 1
        assert_close_all(got, ref, 2e-5 if dtype == torch.float32 else 1e-12)
        torch.testing.assert_close(ref[0], module(x))


def test_mlp_parameter_gradients_only():
    x = torch.randn(20, 3)  # no gradient wanted for x
    for module in _mlps(torch.float32)[::2]:
        res = {}
        for backend in ("composite", "triton"):
            with ops.backend(backend):
                y = ops.edge_mlp(module, x)
                res[backend] = torch.autograd.grad((y * y).sum(), list(module.parameters()))
        assert_close_all(res["triton"], res["composite"], 2e-5)


def test_mlp_wider_than_the_kernels_falls_back_to_composite():
    wide = torch.nn.Sequential(torch.nn.Linear(3, 100), torch.nn.SiLU(), torch.nn.Linear(100, 2))
    x = torch.randn(5, 3)
    ops.reset_dispatch_counts()
    with ops.backend("triton"):
        y = ops.edge_mlp(wide, x)
    assert ops.dispatch_counts() == {("mlp", "composite"): 1}
    torch.testing.assert_close(y, wide(x))


def test_mlp_native_matches_composite():
    from pyg_lie.nn._edge_mlp import HeadwiseMLP
    if not _backend._native_module().available():
        pytest.skip("native kernels unavailable")
    x = torch.randn(50, 3, requires_grad=True)
    seq = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.SiLU(), torch.nn.Linear(16, 16), torch.nn.SiLU(),
                              torch.nn.Linear(16, 5))  # the native kernel's form: equal hidden widths
    for module in (seq, HeadwiseMLP(3, 16, 4, 3)):
        ops.reset_dispatch_counts()
        ref = run_mlp("composite", module, x)
        got = run_mlp("native", module, x)
        assert ops.dispatch_counts()[("mlp", "native")] == 1
        assert_close_all(got, ref, 2e-5)


def test_mlp_second_derivatives_composite_and_triton():
    from pyg_lie.nn._edge_mlp import HeadwiseMLP
    seq = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.SiLU(), torch.nn.Linear(4, 3), torch.nn.SiLU(),
                              torch.nn.Linear(3, 2)).double()
    head = HeadwiseMLP(3, 3, 2, 3).double()
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    for module, headwise in ((seq, False), (head, True)):
        params = [p.detach().clone().requires_grad_() for p in module.parameters()]
        if not headwise:
            params = [t for wb in zip(params[0::2], params[1::2]) for t in wb]
        else:
            params = list(module.params())
            params = [p.detach().clone().requires_grad_() for p in params]
        with ops.backend("composite"):
            fn = lambda x, *p: ops.mlp(x, list(p), headwise)  # noqa: E731
            assert torch.autograd.gradgradcheck(fn, (x, *params))
        # d/dx |dy/dx|^2 (forces-style): the Triton forward, then the composite closed form
        res = {}
        for backend in ("composite", "triton"):
            ops.reset_dispatch_counts()
            with ops.backend(backend):
                y = ops.mlp(x, params, headwise)
                (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
                res[backend] = torch.autograd.grad((gx ** 2).sum(), [x, *params], materialize_grads=True)
            assert ops.dispatch_counts() == {("mlp", backend): 1}
        assert_close_all(res["triton"], res["composite"], 1e-10)


def test_mlp_bad_inputs():
    x = torch.randn(4, 3)
    W, b = torch.randn(5, 3), torch.randn(5)
    with pytest.raises(ValueError, match="params must be a list"):
        ops.mlp(x, [W])
    with pytest.raises(ValueError, match=r"params\[0\] must be a weight \(out, in\) with in = 3"):
        ops.mlp(x, [torch.randn(5, 4), b])
    with pytest.raises(ValueError, match=r"params\[1\] must be a bias of shape \(5,\)"):
        ops.mlp(x, [W, torch.randn(4)])
    with pytest.raises(ValueError, match="one output a head"):
        ops.mlp(x, [torch.randn(2, 5, 3), torch.randn(2, 5)], headwise=True)
    with pytest.raises(TypeError, match=r"params\[0\] has dtype torch.float64"):
        ops.mlp(x, [W.double(), b])
    with pytest.raises(ValueError, match="x must have 2 dimensions"):
        ops.mlp(x[0], [W, b])


def test_edge_mlp_leading_dimensions_and_other_modules():
    seq, _, head = _mlps(torch.float32)
    x = torch.randn(2, 5, 3)
    torch.testing.assert_close(ops.edge_mlp(seq, x), seq(x))
    torch.testing.assert_close(ops.edge_mlp(head, x), head(x))
    other = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    torch.testing.assert_close(ops.edge_mlp(other, x), other(x))


def test_mlp_opcheck():
    x = torch.randn(6, 3, requires_grad=True)
    params = [torch.randn(4, 3, requires_grad=True), torch.randn(4, requires_grad=True),
              torch.randn(2, 4, requires_grad=True), torch.randn(2, requires_grad=True)]
    with ops.backend("composite"):
        torch.library.opcheck(torch.ops.pyg_lie.mlp.default, (x, params, False, 64), test_utils=OPCHECKS)


# ---------------------------------------------------------------- the interpreter, the GPU script
def test_interpreter_switched_on_at_import_also_works():
    """With TRITON_INTERPRET=1 set before Triton is imported (then every Triton kernel is
    interpreted), the operators run their kernels on CPU tensors the same way."""
    code = (
        "import torch, pyg_lie.ops as ops\n"
        "from triton import knobs\n"
        "assert knobs.runtime.interpret\n"
        "crow = torch.tensor([0, 2, 2, 5]); col = torch.tensor([0, 2, 0, 1, 2])\n"
        "q, k, v = (torch.randn(3, 2, 3) for _ in range(3)); l = torch.randn(2, 5)\n"
        "ref = ops.composite_attention(q, k, v, l, None, crow, col)\n"
        "with ops.backend('triton'):\n"
        "    got = ops.csr_attention(q, k, v, crow, col, l)\n"
        "assert ops.dispatch_counts() == {('csr_attention', 'triton'): 1}\n"
        "for a, b in zip(got, ref): torch.testing.assert_close(a, b)\n"
        "print('ok')\n")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("PYG_LIE_BACKEND", None)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


def test_gpu_check_dry_run(tmp_path, capsys):
    import json
    import runpy
    script = runpy.run_path(str(ROOT / "scripts" / "gpu_check.py"), run_name="gpu_check")
    old = ops.get_backend()
    assert script["main"](["--dry-run", "--out", str(tmp_path)]) == 0
    assert ops.get_backend() == old
    assert "| csr_attention" in capsys.readouterr().out
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["dry_run"] and data["results"]
    names = {r["name"] for r in data["results"]}
    assert {"csr_attention", "mlp_shared", "mlp_headwise"} <= names
    for r in data["results"]:
        assert r["composite_ms"] > 0 and r["triton_ms"] > 0 and r["max_abs_diff"] < 1e-3
    assert "| csr_attention" in (tmp_path / "gpu_check.md").read_text()


# ---------------------------------------------------------------------------------- on a GPU
@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("bias", ["edge", "head", None])
def test_cuda_attention_triton_matches_composite(bias):
    ts, crow, col = attention_inputs(N=300, M=250, H=4, D=12, bias=bias, max_degree=70, device="cuda")
    ops.reset_dispatch_counts()
    ref = run_attention("composite", ts, crow, col)
    got = run_attention("auto", ts, crow, col)
    assert ops.dispatch_counts()[("csr_attention", "triton")] == 1
    assert ops.dispatch_counts()[("csr_attention_backward", "triton")] == 1
    assert_close_all(got, ref, 1e-4)


@cuda
@pytest.mark.cuda
def test_cuda_attention_float64_and_bfloat16_autocast():
    ts, crow, col = attention_inputs(N=100, H=2, D=16, dtype=torch.float64, max_degree=40, device="cuda")
    assert_close_all(run_attention("triton", ts, crow, col), run_attention("composite", ts, crow, col), 1e-10)
    ts, crow, col = attention_inputs(N=100, H=2, D=16, max_degree=40, device="cuda")
    lin = torch.nn.Linear(16, 16).cuda()
    res = {}
    for backend in ("composite", "triton"):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            q, k, v, l, b = ts
            res[backend] = run_attention(backend, [lin(q), k, v, l, b], crow, col)
    assert res["triton"][0].dtype == torch.float32 and res["triton"][2].dtype == torch.bfloat16
    assert_close_all(res["triton"], res["composite"], 1e-2)  # the gradient of lin(q) is bfloat16


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_mlp_triton_matches_composite(dtype):
    x = torch.randn(1000, 3, dtype=dtype, device="cuda", requires_grad=True)
    for module in _mlps(dtype):
        module = module.cuda()
        ops.reset_dispatch_counts()
        ref = run_mlp("composite", module, x)
        got = run_mlp("auto", module, x)
        assert ops.dispatch_counts()[("mlp", "triton")] == 1
        assert_close_all(got, ref, 1e-4 if dtype == torch.float32 else 1e-10)


@cuda
@pytest.mark.cuda
def test_cuda_mlp_bfloat16_autocast():
    x = torch.randn(500, 3, device="cuda", requires_grad=True)
    for module in _mlps(torch.float32):
        module = module.cuda()
        res = {}
        for backend in ("composite", "triton"):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                res[backend] = run_mlp(backend, module, x)
        assert_close_all(res["triton"], res["composite"], 1e-4)


def test_autocast_runs_the_operators_in_float32():
    ts, crow, col = attention_inputs(N=6, H=2, D=4, max_degree=4)
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(10, 3, requires_grad=True)
    seq = _mlps(torch.float32)[0]
    res = {}
    for backend in ("composite", "triton"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q = lin(ts[0])
            assert q.dtype == torch.bfloat16
            res[backend] = run_attention(backend, [q, *ts[1:]], crow, col) + run_mlp(backend, seq, x)
    assert res["triton"][0].dtype == res["triton"][1].dtype == torch.float32
    assert_close_all(res["triton"], res["composite"], 1e-2)


def test_empty_graphs_and_edge_sets():
    seq = _mlps(torch.float32)[0]
    for backend in ("composite", "triton"):
        with ops.backend(backend):
            # targets without any edge, then no targets at all
            for N, M in ((3, 2), (0, 2)):
                q = torch.randn(N, 2, 3, requires_grad=True)
                k, v = (torch.randn(M, 2, 3, requires_grad=True) for _ in range(2))
                crow, col = torch.zeros(N + 1, dtype=torch.long), torch.zeros(0, dtype=torch.long)
                out, w = ops.csr_attention(q, k, v, crow, col, torch.zeros(2, 0))
                assert out.shape == (N, 2, 3) and w.shape == (2, 0) and torch.all(out == 0)
                gq, gk = torch.autograd.grad(out.sum(), (q, k))
                assert torch.all(gq == 0) and torch.all(gk == 0)
            x = torch.zeros(0, 3, requires_grad=True)
            y = ops.edge_mlp(seq, x)
            assert y.shape == (0, 5)
            gx, gw = torch.autograd.grad(y.sum(), (x, seq[0].weight))
            assert gx.shape == (0, 3) and torch.all(gw == 0)


def test_triton_bfloat16_inputs_accumulate_in_float32():
    ts, crow, col = attention_inputs(N=6, H=2, D=4, max_degree=5)
    ref = run_attention("composite", ts, crow, col)  # float32
    low = [t.detach().bfloat16().requires_grad_() for t in ts]
    got = run_attention("triton", low, crow, col)
    assert all(t.dtype == torch.bfloat16 for t in got)
    assert_close_all(got, ref, 5e-2)


@pytest.mark.slow
def test_kernels_compile_for_sm90_without_a_gpu():
    """The interpreter accepts code the compiler rejects (loop bounds that are not constexpr,
    dot shapes): compile each float32 kernel ahead of time (Triton ships ptxas)."""
    import runpy
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
    except ImportError:
        pytest.skip("this Triton has no ahead-of-time compile API")
    script = runpy.run_path(str(ROOT / "scripts" / "triton_compile_check.py"), run_name="compile_check")
    seen = set()
    for fn, types, constexprs in script["cases"]():
        if types[next(iter(types))] != "*fp32" or fn.__name__ in seen or constexprs.get("L", 3) != 3:
            continue
        seen.add(fn.__name__)
        script["compile_kernel"](fn, types, constexprs, 90)
    assert len(seen) == 5
