"""Higher derivatives at the cost of a normal backward pass.

Every custom operator's differentiable backward (``create_graph=True``) is written with
operators whose own derivatives are closed-form, never with ``torch.autograd.grad`` over the
forward again: such a call walks the whole history of the operator's inputs, and in an ODE
rollout, where every step's input depends on the gradients of all earlier steps, the work
nested once per step (exponential in the rollout length). These tests check the second and
third derivatives of every such operator in float64, the Hamiltonian model's training
gradient against the plain-module path, and that the cost per RK4 step stays flat.
"""
import statistics
import time

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import pyg_lie.nn._edge_mlp as em
from pyg_lie.models import LieTransformer
from pyg_lie.models.hamiltonian import HamiltonianNODE, rollout_mse
from pyg_lie.ops import _native
from pyg_lie import ops
from pyg_lie.nn._edge_mlp import HeadwiseMLP, _headwise_forward
from pyg_lie.ops import CSRStructure, csr_sddmm as sddmm, csr_spmm as spmm
from pyg_lie.nn.attention_core import _sorted_edge_attention, csr_softmax_attention
from pyg_lie.ops.csr import _unfused_attention as _unfused_csr_attention
from pyg_lie.nn.lie_self_attention import _mlp

D = torch.float64


def _forward(x, params):
    return ops.composite_mlp(x, params, False)


def _third_order(f, inputs):
    """gradgradcheck of ``inputs -> d<f(inputs), u>/d inputs`` (built with create_graph): the
    third derivatives of ``f``, i.e. that the differentiable backward is itself exact to second order."""
    outs = f(*inputs)
    u = torch.randn_like(outs)

    def first(*xs):
        return torch.autograd.grad((f(*xs) * u).sum(), xs, create_graph=True)
    return gradgradcheck(first, inputs, nondet_tol=0.0)


def _shared_params(layers=3, in_dim=3, hidden=6, out=2, seed=2):
    torch.manual_seed(seed)
    mlp = _mlp(in_dim, hidden, out, layers).to(D)
    return [t.detach().clone().requires_grad_() for m in mlp[::2] for t in (m.weight, m.bias)]


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_shared_edge_mlp_derivatives(layers):
    params = _shared_params(layers)
    x = torch.randn(11, 3, dtype=D, requires_grad=True)
    f = lambda x, *p: ops.mlp(x, list(p), chunk=4)  # noqa: E731
    assert torch.allclose(f(x, *params), _forward(x, params), atol=1e-14)
    assert gradcheck(f, (x, *params))
    assert gradgradcheck(f, (x, *params))
    assert _third_order(f, (x, *params))


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_headwise_edge_mlp_derivatives(layers):
    torch.manual_seed(4)
    mlp = HeadwiseMLP(3, 5, 2, layers).to(D)
    params = [p.detach().clone().requires_grad_() for p in mlp.params()]
    x = torch.randn(9, 3, dtype=D, requires_grad=True)
    f = lambda x, *p: ops.mlp(x, list(p), headwise=True, chunk=4)  # noqa: E731
    assert torch.allclose(f(x, *params), _headwise_forward(x, params).t(), atol=1e-14)
    assert gradcheck(f, (x, *params))
    assert gradgradcheck(f, (x, *params))
    assert _third_order(f, (x, *params))


def test_edge_mlp_second_derivative_only_for_some_inputs():
    """A differentiable backward asked for x alone (forces) or for some parameters alone."""
    params = _shared_params(3)
    x = torch.randn(13, 3, dtype=D, requires_grad=True)
    ref = [p.detach().clone().requires_grad_() for p in params]
    xr = x.detach().clone().requires_grad_()
    for f, xs, ps in ((lambda t, p: ops.mlp(t, p, chunk=4), x, params), (_forward, xr, ref)):
        (gx,) = torch.autograd.grad(f(xs, ps).pow(2).sum(), xs, create_graph=True)
        gx.pow(2).sum().backward()
    for a, b in zip(params + [x], ref + [xr]):
        assert torch.allclose(a.grad, b.grad, rtol=1e-12, atol=1e-13)


def _sorted_graph(N=7, E=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, N, (E,), generator=g)
    dst[dst == 3] = 4  # node 3: no incoming edge
    dst = dst.sort().values
    ptr = torch.searchsorted(dst, torch.arange(N + 1))
    return dst, ptr


@pytest.mark.parametrize("heads_first", [False, True])
def test_sorted_softmax_derivatives(heads_first):
    dst, ptr = _sorted_graph()
    x = torch.randn(3, dst.numel(), dtype=D, requires_grad=True)

    def f(t):
        return _sorted_edge_attention(t.t() if heads_first else t.t().contiguous(), dst, ptr, "softmax")
    assert gradcheck(f, (x,))
    assert gradgradcheck(f, (x,))
    assert _third_order(f, (x,))


def _csr(N=9, p=0.4, seed=0):
    g = torch.Generator().manual_seed(seed)
    adj = torch.rand(N, N, generator=g) < p
    adj[2] = False  # node 2 receives nothing
    dst, src = adj.nonzero(as_tuple=True)
    return CSRStructure.build(torch.stack([src, dst]), N, transpose=True)


def test_sddmm_spmm_derivatives():
    s = _csr()
    N, H, Dh, E = s.num_nodes, 2, 3, s.col.numel()
    A, B, V = (torch.randn(N, H, Dh, dtype=D, requires_grad=True) for _ in range(3))
    w = torch.randn(H, E, dtype=D, requires_grad=True)
    for f, xs in ((lambda a, b: sddmm(s, a, b), (A, B)), (lambda w_, v: spmm(s, w_, v), (w, V))):
        assert gradcheck(f, xs)
        assert gradgradcheck(f, xs)
        assert _third_order(f, xs)


def test_csr_attention_closed_form_gradient():
    """The fused attention's differentiable backward (:func:`pyg_lie.ops.composite_attention_backward`
    on the weights of :func:`pyg_lie.ops.composite_attention`, what the operator runs under
    ``create_graph=True``) equals autograd through the unfused operators in float64, and is
    itself exactly differentiable (its gradcheck is the gradgradcheck of the fused operator)."""
    s = _csr(seed=1)
    N, H, Dh, E = s.num_nodes, 2, 8, s.col.numel()
    torch.manual_seed(5)
    q, k, v = (torch.randn(N, H, Dh, dtype=D, requires_grad=True) for _ in range(3))
    l = torch.randn(H, E, dtype=D, requires_grad=True)
    g, gw = torch.randn(N, H, Dh, dtype=D, requires_grad=True), torch.randn(H, E, dtype=D, requires_grad=True)
    out, w = _unfused_csr_attention(s, q, k, v, l)
    xs = [q, k, v, l]

    def closed_form(q, k, v, l, g, gw):
        w = ops.composite_attention(q, k, v, l, None, s.crow, s.col)[1]
        return ops.composite_attention_backward(q, k, v, w, torch.zeros_like(q) if g is None else g, gw,
                                                s.crow, s.col)

    def ref(outs, grads):
        got = torch.autograd.grad(outs, xs, grads, retain_graph=True, allow_unused=True)
        return [torch.zeros_like(x) if t is None else t for x, t in zip(xs, got)]
    for gg, gww, refs in ((g, gw, ref([out, w], [g, gw])), (g, None, ref(out, g)), (None, gw, ref(w, gw))):
        got = closed_form(q, k, v, l, gg, gww)
        for a, b in zip(got, refs):
            assert torch.allclose(a, b, rtol=1e-11, atol=1e-12)
    assert gradcheck(closed_form, (q, k, v, l, g, gw))


@pytest.mark.skipif(not _native.available(), reason="no native kernels")
def test_fused_csr_attention_double_backward_float32():
    """Float32: the native operator's gradient of a gradient equals the unfused path's."""
    s = _csr(N=24, seed=2)
    N, H, Dh, E = s.num_nodes, 2, 8, s.col.numel()
    torch.manual_seed(6)
    base = [torch.randn(N, H, Dh), torch.randn(N, H, Dh), torch.randn(N, H, Dh), torch.randn(H, E)]
    res = []
    for fn in (csr_softmax_attention, _unfused_csr_attention):
        xs = [t.clone().requires_grad_() for t in base]
        out, w = fn(s, *xs)
        grads = torch.autograd.grad(out.pow(2).sum() + w.pow(3).sum(), xs, create_graph=True)
        sum(gr.pow(2).sum() for gr in grads).backward()
        res.append([t.grad for t in xs])
    for a, b in zip(*res):
        assert (a - b).abs().max() <= 1e-5 * b.abs().max(), ((a - b).abs().max(), b.abs().max())


# ------------------------------------------------------------------ the Hamiltonian model
def _hamiltonian(radius=None, hidden=16, heads=2, seed=0, dtype=D):
    torch.manual_seed(seed)
    pot = LieTransformer("T2", in_channels=2, hidden_channels=hidden, out_channels=1, num_layers=1,
                         heads=heads, radius=radius)
    return HamiltonianNODE(pot).to(dtype)


def _systems(B=4, n=5, seed=1, dtype=D):
    g = torch.Generator().manual_seed(seed)
    z0 = torch.randn(B, n, 4, generator=g, dtype=dtype)
    m = torch.rand(B, n, generator=g, dtype=dtype) + 0.5
    k = torch.rand(B, n, generator=g, dtype=dtype) + 0.5
    return z0, m, k


def _training_gradient(model, z0, m, k, steps=3):
    model.zero_grad()
    traj = model(z0, m, k, steps, 0.1)
    rollout_mse(traj, 1.1 * traj.detach().flip(0)).mean().backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("radius", [None, 1.5])
def test_hamiltonian_training_gradient_matches_the_plain_path(monkeypatch, radius):
    """Float64: the custom operators (the edge MLPs forced onto their operators by a small
    chunk, the fused sparse attention) give the training gradient of the plain-module,
    message-passing path to 1e-10."""
    model = _hamiltonian(radius)
    z0, m, k = _systems()
    monkeypatch.setattr(em, "EDGE_CHUNK", 8)
    ops.reset_dispatch_counts()
    fast = _training_gradient(model, z0, m, k)
    assert sum(n for (op, _), n in ops.dispatch_counts().items() if op == "mlp") > 0
    monkeypatch.setattr(em, "EDGE_CHUNK", 1 << 30)
    for mod in model.modules():
        if hasattr(mod, "fused"):
            mod.fused = False
    ref = _training_gradient(model, z0, m, k)
    assert len(fast) == len(ref) and len(ref) > 5
    for a, b in zip(fast, ref):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (a - b).abs().max()


def _rollout_seconds(model, z0, m, k, steps):
    t0 = time.perf_counter()
    traj = model(z0, m, k, steps, 0.05)
    traj.pow(2).mean().backward()
    return time.perf_counter() - t0


def test_rollout_cost_per_step_does_not_grow():
    """The time per RK4 step (rollout and training backward) at T = 5 is at most 3x that at T = 1
    (median of 5 interleaved repetitions; the nested backward took over 100x)."""
    model = _hamiltonian(hidden=8, dtype=torch.float32)
    z0, m, k = _systems(B=2, n=4, dtype=torch.float32)
    _rollout_seconds(model, z0, m, k, 2)  # warm-up
    per_step = {1: [], 5: []}
    for _ in range(5):
        for T in per_step:
            per_step[T].append(_rollout_seconds(model, z0, m, k, T) / T)
    ratio = statistics.median(per_step[5]) / statistics.median(per_step[1])
    assert ratio < 3.0, ratio


@pytest.mark.parametrize("radius", [None, 1.5])
def test_rollout_calls_autograd_once_per_stage(monkeypatch, radius):
    """A T-step rollout asks autograd for 4 T gradients of the potential and nothing else: no
    operator's backward calls autograd again (which nested once per step, exponentially)."""
    model = _hamiltonian(radius, hidden=8, dtype=torch.float32)
    z0, m, k = _systems(B=2, n=4, dtype=torch.float32)
    real, calls = torch.autograd.grad, []

    def grad(*a, **kw):
        calls.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(torch.autograd, "grad", grad)
    model(z0, m, k, 3, 0.05).pow(2).mean().backward()
    assert len(calls) == 12


def test_rollout_benchmark_writes_its_json(tmp_path, capsys):
    import json

    from pyg_lie.cli import build_parser

    out = tmp_path / "rollout.json"
    argv = ["bench", "rollout", "--steps", "1", "2", "--systems", "2", "--particles", "3", "--hidden", "8",
            "--repeat", "1", "--potential-passes", "2", "--threads", "1", "--out", str(out)]
    args = build_parser(argv).parse_args(argv)
    from pyg_lie.benchmarks import rollout
    assert rollout.main(args) == 0
    data = json.loads(out.read_text())
    assert data["seed"] == 0 and data["config"]["steps"] == [1, 2] and "git_revision" in data
    assert data["command"].startswith("pyg-lie bench rollout")
    assert [r["configuration"]["T"] for r in data["records"]] == [1, 2]
    assert all(data["metrics"][f"ratio_T{T}"] > 0 for T in (1, 2))
    assert "/ (4T potential passes)" in capsys.readouterr().out
