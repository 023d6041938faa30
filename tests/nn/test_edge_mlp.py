"""The chunked per-edge MLP equals the plain module in value and in first and second derivatives."""
import pytest
import torch
from torch.nn import GELU, Linear, Sequential, SiLU
from torch.autograd import gradcheck, gradgradcheck

from pyg_lie import ops
from pyg_lie.nn._edge_mlp import HeadwiseMLP, edge_mlp
from pyg_lie.nn.lie_self_attention import _mlp

D = torch.float64


def _grads(f, x, mlp):
    for p in mlp.parameters():
        p.grad = None
    x = x.detach().requires_grad_()
    y = f(x)
    y.backward(torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y))
    return [y.detach(), x.grad] + [p.grad.clone() for p in mlp.parameters()]


@pytest.mark.parametrize("kind", ["shared", "per_head"])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_matches_module(kind, layers, chunk):
    """Both chunked kernels (shared MLP; one MLP per head, whose blocks hold chunk / heads
    rows) equal their module in values and gradients."""
    torch.manual_seed(0)
    if kind == "shared":
        mlp = _mlp(5, 16, 4, layers).to(D)
    else:
        mlp, chunk = HeadwiseMLP(5, 8, 4, layers).to(D), 4 * chunk
    x = torch.randn(300, 5, dtype=D)
    ref = _grads(mlp, x, mlp)
    got = _grads(lambda t: edge_mlp(mlp, t, chunk=chunk), x, mlp)
    for a, b in zip(ref, got):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-13)


def test_no_bias_and_constant_input():
    torch.manual_seed(1)
    mlp = Sequential(Linear(3, 8, bias=False), SiLU(), Linear(8, 2)).to(D)
    x = torch.randn(50, 3, dtype=D)  # no grad wanted for x
    y = edge_mlp(mlp, x, chunk=8)
    y.sum().backward()
    assert torch.allclose(y, mlp(x), atol=1e-14)
    w = mlp[0].weight.grad.clone()
    mlp.zero_grad()
    mlp(x).sum().backward()
    assert torch.allclose(w, mlp[0].weight.grad, atol=1e-12)


def test_gradcheck_and_double_backward():
    torch.manual_seed(2)
    mlp = _mlp(3, 6, 2, 3).to(D)
    params = []
    for m in mlp[::2]:
        params += [m.weight, m.bias]
    x = torch.randn(11, 3, dtype=D, requires_grad=True)
    f = lambda x, *p: ops.mlp(x, list(p), chunk=4)  # noqa: E731
    assert gradcheck(f, (x, *params))
    assert gradgradcheck(f, (x, *params))


def test_force_like_second_derivative():
    """d/dW of ||d out / d x||^2 (the pattern of force matching) equals the plain module's."""
    torch.manual_seed(3)
    mlp = _mlp(3, 16, 4, 3).to(D)
    x = torch.randn(40, 3, dtype=D, requires_grad=True)
    res = []
    for f in (mlp, lambda t: edge_mlp(mlp, t, chunk=16)):
        mlp.zero_grad()
        (gx,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        res.append(mlp[2].weight.grad.clone())
    assert torch.allclose(res[0], res[1], rtol=1e-12, atol=1e-13)


def test_fallbacks_run_the_module():
    mlp = Sequential(Linear(3, 8), GELU(), Linear(8, 2))  # not Linear/SiLU: plain module
    x = torch.randn(100, 3)
    assert edge_mlp(mlp, x, chunk=8).grad_fn.name() == mlp(x).grad_fn.name()
    small = _mlp(3, 8, 2, 3).double()
    xd = x.double()
    assert edge_mlp(small, xd, chunk=1000).grad_fn.name() == small(xd).grad_fn.name()
    from pyg_lie import ops
    ops.reset_dispatch_counts()
    edge_mlp(small, xd, chunk=8)
    assert sum(n for (op, _), n in ops.dispatch_counts().items() if op == "mlp") == 1
    # float32 goes to the operator at any size: its native kernel beats the module
    edge_mlp(small.float(), x, chunk=1000)
    assert sum(n for (op, _), n in ops.dispatch_counts().items() if op == "mlp") == 2


def test_custom_operators_pass_opcheck():
    """Schema, fake (meta) implementation and autograd registration of the chunked MLP's
    operators, as torch.compile relies on them."""
    torch.manual_seed(5)
    mlp = _mlp(3, 8, 2, 3).to(D)
    params = [t for m in mlp[::2] for t in (m.weight, m.bias)]
    x = torch.randn(20, 3, dtype=D, requires_grad=True)
    torch.library.opcheck(torch.ops.pyg_lie.mlp, (x, params, False, 6))
    g = torch.randn(20, 2, dtype=D)
    torch.library.opcheck(torch.ops.pyg_lie.mlp_backward,
                          (g, x.detach(), [p.detach() for p in params], False, True, 6))


def test_compiled_matches_eager():
    """Under torch.compile the chunked operator is called as is (forward and backward kernels
    both run): same values and gradients."""
    from pyg_lie import ops
    torch.manual_seed(6)
    mlp = _mlp(3, 8, 2, 3).to(D)
    x = torch.randn(100, 3, dtype=D)
    ref = _grads(lambda t: edge_mlp(mlp, t, chunk=16), x, mlp)
    f = torch.compile(lambda t: edge_mlp(mlp, t, chunk=16), backend="aot_eager", fullgraph=True)
    ops.reset_dispatch_counts()
    got = _grads(f, x, mlp)
    assert ops.dispatch_counts() == {("mlp", "chunked"): 1, ("mlp_backward", "chunked"): 1}
    for a, b in zip(ref, got):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("combine, per_head", [("additive", False), ("mlp", False), ("additive", True)])
def test_lie_self_attention_chunked_equals_unchunked(monkeypatch, combine, per_head):
    """The layer (fused path) with 8-row chunks: same output, gradients w.r.t. positions and
    parameters, and the same double backward (gradient of a force loss)."""
    import pyg_lie.nn._edge_mlp as em
    from pyg_lie.groups import get_group
    from pyg_lie.nn.lie_self_attention import LieSelfAttention
    from pyg_lie.nn.lift import Lift
    from pyg_lie.nn.lifted_edges import lifted_edges

    G = get_group("SE2")
    torch.manual_seed(4)
    content = "dot_product" if combine == "additive" else "linear_concat_linear"
    layer = LieSelfAttention(6, 6, G, heads=2, kernel_dim=8, combine=combine, content=content,
                             kernel_per_head=per_head).to(D)
    pos0 = torch.randn(12, 2, dtype=D)
    x = torch.randn(12, 6, dtype=D)
    h = G.stabilizer_random(12, 3, generator=torch.Generator().manual_seed(0), dtype=D)
    ei = lifted_edges(pos0, None, 3, radius=1.5)
    assert ei.size(1) > 8
    res = []
    for chunk in (8, 10**9):
        monkeypatch.setattr(em, "EDGE_CHUNK", chunk)
        layer.zero_grad()
        pos = pos0.clone().requires_grad_()
        lifted = Lift(G, 3).eval()(x, pos, stabilizer=h)
        out = layer(lifted.x, ei, lifted.g)
        (force,) = torch.autograd.grad(out.pow(2).sum(), pos, create_graph=True)
        force.pow(2).sum().backward()
        res.append([out.detach(), force.detach()] + [p.grad.clone() for p in layer.parameters()])
    for a, b in zip(*res):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------ one MLP per head
def _separate_mlps(m: HeadwiseMLP):
    """The heads of ``m`` as independent ``torch.nn`` MLPs (the official code's layout)."""
    heads = []
    for h in range(m.heads):
        seq = _mlp(m.in_dim, m.hidden, 1, m.layers).to(D)
        with torch.no_grad():
            for j, lin in enumerate(seq[::2]):
                lin.weight.copy_(m.weights[j][h])
                lin.bias.copy_(m.biases[j][h])
        heads.append(seq)
    return heads


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_headwise_mlp_is_one_mlp_per_head(layers):
    torch.manual_seed(7)
    m = HeadwiseMLP(3, 6, 4, layers).to(D)
    x = torch.randn(2, 5, 3, dtype=D)  # any leading shape
    ref = torch.cat([seq(x) for seq in _separate_mlps(m)], -1)
    assert m(x).shape == (2, 5, 4)
    assert torch.allclose(m(x), ref, rtol=1e-13, atol=1e-14)
    # heads are independent: perturbing head 1's weights moves only output 1
    before = m(x).detach()
    with torch.no_grad():
        m.weights[0][1].add_(0.5)
    moved = (m(x).detach() - before).abs().amax(dim=(0, 1))
    assert moved[1] > 1e-3 and moved[[0, 2, 3]].max() == 0


def test_headwise_gradcheck_double_backward_and_opcheck():
    torch.manual_seed(9)
    m = HeadwiseMLP(3, 5, 2, 3).to(D)
    x = torch.randn(11, 3, dtype=D, requires_grad=True)
    params = m.params()
    f = lambda x, *p: ops.mlp(x, list(p), headwise=True, chunk=4)  # noqa: E731
    assert gradcheck(f, (x, *params))
    assert gradgradcheck(f, (x, *params))
    torch.library.opcheck(torch.ops.pyg_lie.mlp, (x, params, True, 4))
    g = torch.randn(2, 11, dtype=D)
    torch.library.opcheck(torch.ops.pyg_lie.mlp_backward,
                          (g, x.detach(), [p.detach() for p in params], True, True, 4))


def test_headwise_compiled_matches_eager():
    torch.manual_seed(10)
    m = HeadwiseMLP(3, 8, 4, 3).to(D)
    x = torch.randn(100, 3, dtype=D)
    ref = _grads(lambda t: edge_mlp(m, t, chunk=64), x, m)
    f = torch.compile(lambda t: edge_mlp(m, t, chunk=64), backend="aot_eager", fullgraph=True)
    got = _grads(f, x, m)
    assert "pyg_lie.mlp" in str(torch._dynamo.explain(lambda t: edge_mlp(m, t, chunk=64))(x).graphs[0].code)
    for a, b in zip(ref, got):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-13)
