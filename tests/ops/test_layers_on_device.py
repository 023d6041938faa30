"""Every attention layer on the kernels a GPU runs, against the composite reference.

On CUDA (``cuda``-marked, run by ``scripts/gpu_check.sh``) the default backend ``auto`` picks
the Triton kernels; on CPU the same tests select ``triton`` explicitly, so the kernels run under
Triton's interpreter and the test bodies are exercised in CI. Each layer: values and gradients
(input and parameters) against the same layer on CPU with the ``composite`` backend, in float32
and float64, an ``EdgeIndex`` gives the
plain tensor's result, and bfloat16 autocast stays finite and close to float32.
"""
import pytest
import torch
from torch_geometric import EdgeIndex

import pyg_lie.ops as ops
from pyg_lie.groups import SE2, SE3
from pyg_lie.models import LieTransformer
from pyg_lie.nn import LieAlgebraAttention, LieSelfAttention, S2AttentionConv
from pyg_lie.vit import EquivariantSelfAttention, FieldType, get_group

pytestmark = pytest.mark.skipif(not ops.triton_available(), reason="Triton is not installed")

DEVICES = [
    pytest.param("cpu", id="cpu-interpreter"),
    pytest.param("cuda", id="cuda", marks=[
        pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]),
]
N, E = 40, 240


def _kernel_backend(device):
    """The backend that runs the Triton kernels: ``auto`` picks them on CUDA."""
    return "auto" if device == "cuda" else "triton"


def _graph(device, seed):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, E), generator=gen)
    ei[:, :4] = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0]])  # a target with several edges
    return ei.to(device)


def _lie_self_attention(dtype, kernel_per_head=False):
    m = LieSelfAttention(16, 32, "SE2", heads=4, kernel_per_head=kernel_per_head).to(dtype)
    g = SE2().random(N, generator=torch.Generator().manual_seed(1), dtype=dtype)
    return m, (g,), lambda m, x, ei, g: m(x, ei, g), 16


def _lie_algebra_attention(dtype):
    m = LieAlgebraAttention(16, 32, "SE3", heads=4).to(dtype)
    g = SE3().random(N, generator=torch.Generator().manual_seed(2), dtype=dtype)
    return m, (g,), lambda m, x, ei, g: m(x, ei, g), 16


def _s2_attention_conv(dtype):
    m = S2AttentionConv(16, 32, heads=4).to(dtype)
    w = torch.rand(N, generator=torch.Generator().manual_seed(3), dtype=dtype) + 0.1
    return m, (w,), lambda m, x, ei, w: m(x, ei, quad_weights=w), 16


def _vit_attention(dtype):
    V = FieldType.regular(get_group("C4"), 4)
    m = EquivariantSelfAttention(V, heads=2).to(dtype)
    return m, (), lambda m, x, ei: m(x, ei), V.dim


#: name -> (builder, whether its attention runs a Triton kernel when one is selected)
LAYERS = {
    "lie_self_attention": (_lie_self_attention, True),
    "lie_self_attention_per_head": (lambda dtype: _lie_self_attention(dtype, kernel_per_head=True), True),
    "lie_algebra_attention": (_lie_algebra_attention, False),  # PyG softmax and propagate
    "s2_attention_conv": (_s2_attention_conv, True),
    "vit_attention": (_vit_attention, False),  # precomputed scores: the primitive operators, no Triton kernel yet
}
TOL = {torch.float32: (1e-4, 1e-3), torch.float64: (1e-10, 1e-8)}


def _build(name, dtype, device, seed=0):
    """The layer on ``device`` and a call ``fn(x, edge_index)``; the same weights on every device."""
    builder, _ = LAYERS[name]
    torch.manual_seed(seed)
    module, extras, call, C = builder(dtype)
    module = module.to(device)
    extras = tuple(t.to(device) for t in extras)
    return module, (lambda x, ei: call(module, x, ei, *extras)), C


def _run(backend, module, fn, x, ei):
    with ops.backend(backend):
        out = fn(x, ei)
        grads = torch.autograd.grad(out.square().sum(), [x, *module.parameters()], allow_unused=True)
    return out, grads


def _assert_close(got, ref, atol, rtol):
    out, grads = got
    out_ref, grads_ref = ref
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, out_ref, atol=atol, rtol=rtol)
    for a, b in zip(grads, grads_ref):
        if a is None or b is None:
            assert a is None and b is None
        else:
            torch.testing.assert_close(a, b, atol=10 * atol, rtol=10 * rtol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_kernels_match_the_composite_reference(device, dtype, name):
    """The layer on ``device`` with the kernels selected against the same layer on CPU with
    the composite backend (same weights, same inputs)."""
    torch.manual_seed(0)
    ref_module, ref_fn, C = _build(name, dtype, "cpu")
    module, fn, _ = _build(name, dtype, device)
    ei = _graph("cpu", 4)
    x = torch.randn(N, C, dtype=dtype, requires_grad=True)
    ref = _run("composite", ref_module, ref_fn, x, ei)
    xd = x.detach().to(device).requires_grad_()
    ops.reset_dispatch_counts()
    out, grads = _run(_kernel_backend(device), module, fn, xd, ei.to(device))
    if LAYERS[name][1]:  # the kernel this test means to test really ran
        assert any(b == "triton" for (_, b) in ops.dispatch_counts()), ops.dispatch_counts()
    got = (out.cpu(), [None if gr is None else gr.cpu() for gr in grads])
    _assert_close(got, ref, *TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_edge_index_input(device, name):
    torch.manual_seed(0)
    module, fn, C = _build(name, torch.float32, device)
    ei = _graph(device, 5)
    x = torch.randn(N, C, device=device)
    with ops.backend(_kernel_backend(device)), torch.no_grad():
        plain = fn(x, ei)
        sub = fn(x, EdgeIndex(ei, sparse_size=(N, N)))
    assert torch.equal(sub, plain)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_bfloat16_autocast(device, name):
    torch.manual_seed(0)
    module, fn, C = _build(name, torch.float32, device)
    ei = _graph(device, 6)
    x = torch.randn(N, C, device=device, requires_grad=True)
    with ops.backend(_kernel_backend(device)):
        ref = fn(x, ei)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = fn(x, ei)
        (gx,) = torch.autograd.grad(out.float().square().sum(), x)
    assert torch.isfinite(out).all() and torch.isfinite(gx).all()
    scale = ref.abs().max()
    assert (out.float() - ref).abs().max() <= 5e-2 * scale


@pytest.mark.parametrize("device", DEVICES)
def test_lie_transformer_second_derivatives(device):
    """A Hamiltonian-style loss (a function of d output / d pos) through the kernels."""
    torch.manual_seed(1)
    model = LieTransformer("T2", in_channels=2, hidden_channels=16, out_channels=1, num_layers=1,
                           heads=2).double().to(device)
    pos = torch.randn(12, 2, dtype=torch.float64, device=device, requires_grad=True)
    batch = torch.arange(2, device=device).repeat_interleave(6)
    x = torch.randn(12, 2, dtype=torch.float64, device=device)

    def grads(backend):
        with ops.backend(backend):
            (f,) = torch.autograd.grad(model(x, pos, batch).sum(), pos, create_graph=True)
            return torch.autograd.grad(f.square().sum(), list(model.parameters()), allow_unused=True)

    ref = grads("composite")
    ops.reset_dispatch_counts()
    got = grads(_kernel_backend(device))
    assert ops.dispatch_counts().get(("csr_attention", "triton"), 0) >= 1
    for a, b in zip(got, ref):
        if a is None or b is None:
            assert a is None and b is None
        else:
            torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-7)
