"""The layers on the operator layer: with a backend selected, LieSelfAttention and the
LieTransformer run pyg_lie.ops' kernels (the Triton ones on CPU tensors run under Triton's
interpreter, exactly the kernels a GPU runs) and agree with the default CPU path in values and
gradients; dispatch_counts shows that the kernels really ran."""
import pytest
import torch

import pyg_lie.ops as ops
from pyg_lie.groups import SE2
from pyg_lie.models import LieTransformer
from pyg_lie.nn import LieSelfAttention

BACKENDS = ["composite"] + (["triton"] if ops.triton_available() else [])


def _grads(out, inputs):
    return torch.autograd.grad(out.square().sum(), inputs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kernel_per_head", [False, True])
def test_lie_self_attention_on_the_operators(backend, kernel_per_head):
    torch.manual_seed(0)
    N = 20
    g, ei = SE2().random(N), torch.randint(0, N, (2, 90))
    ei[:, :3] = torch.tensor([[1, 2, 3], [0, 0, 0]])  # node 0 has several edges, some nodes none
    m = LieSelfAttention(16, 32, "SE2", heads=4, kernel_per_head=kernel_per_head)
    x = torch.randn(N, 16, requires_grad=True)
    inputs = [x, *m.parameters()]
    ref = m(x, ei, g)
    ref_grads = _grads(ref, inputs)
    ops.reset_dispatch_counts()
    with ops.backend(backend):
        out = m(x, ei, g)
        grads = _grads(out, inputs)
    counts = ops.dispatch_counts()
    for op in ("csr_attention", "csr_attention_backward", "mlp", "mlp_backward"):
        assert counts.get((op, backend), 0) >= 1, counts
    assert torch.allclose(out, ref, atol=1e-5)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lie_transformer_on_the_operators_float64_and_second_derivatives(backend):
    torch.manual_seed(1)
    model = LieTransformer("T2", in_channels=2, hidden_channels=16, out_channels=1, num_layers=1, heads=2).double()
    pos = torch.randn(12, 2, dtype=torch.float64, requires_grad=True)
    batch = torch.arange(2).repeat_interleave(6)
    x = torch.randn(12, 2, dtype=torch.float64)

    def force_loss():  # a Hamiltonian-style loss: a function of the gradient of the output
        (f,) = torch.autograd.grad(model(x, pos, batch).sum(), pos, create_graph=True)
        return f.square().sum()

    ref = torch.autograd.grad(force_loss(), list(model.parameters()), allow_unused=True)
    ops.reset_dispatch_counts()
    with ops.backend(backend):
        got = torch.autograd.grad(force_loss(), list(model.parameters()), allow_unused=True)
    assert ops.dispatch_counts().get(("csr_attention", backend), 0) >= 1
    for a, b in zip(got, ref):
        if a is None or b is None:
            assert a is None and b is None
        else:
            assert torch.allclose(a, b, atol=1e-9, rtol=1e-7), (a - b).abs().max()
