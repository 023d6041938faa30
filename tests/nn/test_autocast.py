"""Mixed precision: the fused kernels (custom operators) under ``torch.autocast``.

Autocast does not cast a custom operator's inputs, and stays on inside it; the operators
are registered to run in float32 under autocast (``pyg_lie.ops._common.float32_under_autocast``). Without that,
the chunked edge MLP met bfloat16 activations beside float32 weights and torch's sparse
CSR products, which have no bfloat16 CPU kernel, failed in the forward or backward pass.
"""
import pytest
import torch

from pyg_lie.models import LieTransformer
from pyg_lie.nn import S2NeighborhoodAttention
from pyg_lie.nn._edge_mlp import EDGE_CHUNK


def _relative_error(y, ref):
    return float((y.detach().float() - ref.detach()).abs().max() / ref.detach().abs().max())


def _grads(module):
    return [p.grad.clone() for p in module.parameters() if p.grad is not None]


@pytest.mark.parametrize("group, K, radius, per_head", [("T2", 1, None, False), ("SE2", 4, 0.5, False),
                                                       ("T2", 1, None, True)])
def test_lie_transformer_under_cpu_autocast(group, K, radius, per_head):
    """Complete clouds (batched products) and a radius graph (CSR SDDMM / SpMM), both with
    more edges than one edge-MLP chunk: bfloat16 autocast runs forward and backward and stays
    within bfloat16 accuracy of float32."""
    torch.manual_seed(0)
    pos = torch.randn(1024, 2)
    batch = torch.arange(32).repeat_interleave(32)
    x = torch.ones(1024, 1)
    model = LieTransformer(group, 1, 32, 2, num_layers=2, heads=4, lift_samples=K, radius=radius,
                           kernel_per_head=per_head).eval()
    ref = model(x, pos, batch)
    ref.square().sum().backward()
    ref_grads = _grads(model)
    model.zero_grad()
    lifted = model.lift(x, pos, batch)
    edges = model._graph(pos, batch, lifted.g, transpose=False)[0]
    assert edges.size(1) > EDGE_CHUNK  # the chunked edge-MLP operator runs
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x, pos, batch)
    y.float().square().sum().backward()
    assert torch.isfinite(y.float()).all()
    assert _relative_error(y, ref) < 0.05
    for g, r in zip(_grads(model), ref_grads):
        assert torch.isfinite(g).all()
    cos = torch.nn.functional.cosine_similarity(torch.cat([g.flatten() for g in _grads(model)]),
                                                torch.cat([r.flatten() for r in ref_grads]), dim=0)
    assert cos > 0.99


def test_s2_neighborhood_attention_under_cpu_autocast():
    """S^2 neighbourhood attention on the shared CSR attention engine (forward and backward) under bfloat16 autocast."""
    torch.manual_seed(0)
    layer = S2NeighborhoodAttention(8, (16, 32), (16, 32))
    x = torch.randn(2, 8, 16, 32)
    ref = layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    y.float().square().sum().backward()
    assert torch.isfinite(y.float()).all() and _relative_error(y, ref) < 0.05
    assert all(torch.isfinite(g).all() for g in _grads(layer))


def test_float64_is_left_alone_under_autocast():
    """Autocast never touches float64; nor do the operators' float32 rule."""
    torch.manual_seed(0)
    model = LieTransformer("SE2", 1, 16, 2, num_layers=1, heads=2, lift_samples=2, radius=1.0).double().eval()
    pos, x = torch.randn(40, 2, dtype=torch.float64), torch.ones(40, 1, dtype=torch.float64)
    ref = model(x, pos)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x, pos)
    assert y.dtype == torch.float64 and torch.equal(y, ref)
