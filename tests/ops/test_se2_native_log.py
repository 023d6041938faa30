"""SE(2) relative logarithms by the native kernel (``se2_log.c``, the CPU kernel of the operator
``pyg_lie::se2_relative_log``) against float64 and the composite path."""
import math

import pytest
import torch

from pyg_lie.groups import get_group
from pyg_lie.groups.base import homogeneous
from pyg_lie import ops

pytestmark = pytest.mark.skipif(not ops.native_available(), reason="native kernels not built (no C compiler)")

EPS32 = 2.0 ** -23
SE2 = get_group("SE2")


class _NativeCalls:
    """How often the operator ran its native kernel since made (from ``ops.dispatch_counts``)."""

    def __init__(self):
        ops.reset_dispatch_counts()

    def __len__(self):
        return ops.dispatch_counts().get(("se2_relative_log", "native"), 0)

    def __bool__(self):
        return len(self) > 0


def _counted(monkeypatch):
    return _NativeCalls()


def _elements(n, gen, angle_scale=2.0, shift_scale=4.0):
    xi = torch.randn(n, 3, generator=gen, dtype=torch.float64) * torch.tensor([shift_scale, shift_scale, angle_scale])
    return SE2.exp(xi).float()


def _row_error(a, ref):
    """Largest error of the float32 rows ``a`` against float64 ``ref``, in float32 epsilons of
    each row's largest magnitude (at least 1)."""
    scale = ref.abs().amax(1, keepdim=True).clamp_min(1.0)
    return ((a.double() - ref).abs() / scale).max().item() / EPS32


@pytest.mark.parametrize("E", [0, 1, 7, 8, 9, 1003])
def test_native_matches_float64_of_the_same_input(monkeypatch, E):
    gen = torch.Generator().manual_seed(E)
    g = _elements(40, gen)
    ei = torch.randint(0, 40, (2, E), generator=gen)
    ei[:, : E // 4] = ei[1, : E // 4]  # some i = j pairs
    calls = _counted(monkeypatch)
    xi = SE2.relative_log(g, ei)
    assert calls and xi.shape == (E, 3) and xi.dtype == torch.float32
    if E:
        assert _row_error(xi, SE2.relative_log(g.double(), ei)) <= 6
        assert (xi[: E // 4] == 0).all()  # log of the identity, exactly


def test_native_threads_agree(monkeypatch):
    gen = torch.Generator().manual_seed(1)
    g = _elements(64, gen)
    ei = torch.randint(0, 64, (2, 5000), generator=gen)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = SE2.relative_log(g, ei, one_sided_cut=True)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, SE2.relative_log(g, ei, one_sided_cut=True))


def test_native_atan2_signs_zeros_and_scales(monkeypatch):
    """With g_i = I the angle is atan2 of g_j's (R_10 - R_01, R_00 + R_11): any (s, c), not only
    rotations, so the kernel's atan2 is checked over all quadrants, signed zeros and scales."""
    gen = torch.Generator().manual_seed(2)
    s = torch.cat([torch.randn(2000, generator=gen) * torch.logspace(-6, 6, 2000),
                   torch.tensor([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 1.0, 0.0])])
    c = torch.cat([torch.randn(2000, generator=gen) * torch.logspace(6, -6, 2000),
                   torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0, -1.0, -1.0, -0.0, 0.0])])
    R = torch.stack([torch.stack([c / 2, -s / 2], -1), torch.stack([s / 2, c / 2], -1)], -2)
    g = torch.cat([torch.eye(3).unsqueeze(0), homogeneous(R, torch.zeros(len(s), 2))])
    ei = torch.stack([torch.arange(1, len(s) + 1), torch.zeros(len(s), dtype=torch.long)])
    calls = _counted(monkeypatch)
    theta = SE2.relative_log(g, ei)[:, 2] / math.sqrt(2)
    assert calls
    # (-0 / 2) - (+0 / 2) is +0 in the kernel's products: the float64 path forms the same sums
    ref = SE2.relative_log(g.double(), ei)[:, 2] / math.sqrt(2)
    assert ((theta.double() - ref).abs() <= 2 * EPS32 * ref.abs()).all()
    assert torch.equal(torch.signbit(theta), torch.signbit(ref))
    assert ((ref - torch.atan2(s.double(), c.double())).abs() <= 1e-12 * ref.abs()).all()


@pytest.mark.parametrize("angle", [0.0, 1e-30, 1e-8, -1e-4, 2.0 ** -10, -0.03, 0.5, -math.pi / 2, 2.5,
                                   math.pi - 1e-3, -(math.pi - 1e-6), math.pi])
def test_native_special_angles(monkeypatch, angle):
    """Relative rotations at and near 0, pi / 2 and pi, where the half-angle cotangent switches
    its formula or its series, with translations in every direction."""
    gen = torch.Generator().manual_seed(3)
    n = 64
    base = _elements(n, gen).double()
    rel = homogeneous(SE2.exp(torch.tensor([[0.0, 0.0, math.sqrt(2) * angle]], dtype=torch.float64))[:, :2, :2]
                      .expand(n, 2, 2), torch.randn(n, 2, generator=gen, dtype=torch.float64) * 3)
    g = torch.cat([base, base @ rel]).float()
    ei = torch.stack([torch.arange(n, 2 * n), torch.arange(n)])
    calls = _counted(monkeypatch)
    xi = SE2.relative_log(g, ei)
    assert calls and torch.isfinite(xi).all()
    assert _row_error(xi, SE2.relative_log(g.double(), ei)) <= 6


def test_native_cut_matches_torch_float32(monkeypatch):
    """The one-sided cut: angles within 1e-4 of -pi move to the +pi side, exactly as the torch
    formulation decides it in float32."""
    gen = torch.Generator().manual_seed(4)
    n = 200
    base = _elements(n, gen).double()
    angles = -math.pi + torch.linspace(-2e-4, 3e-4, n, dtype=torch.float64)
    rel = SE2.exp(torch.stack([torch.randn(n, generator=gen, dtype=torch.float64),
                               torch.randn(n, generator=gen, dtype=torch.float64), math.sqrt(2) * angles], -1))
    g = torch.cat([base, base @ rel]).float()
    ei = torch.stack([torch.arange(n, 2 * n), torch.arange(n)])
    calls = _counted(monkeypatch)
    native = SE2.relative_log(g, ei, one_sided_cut=True)
    assert calls
    monkeypatch.setenv("PYG_LIE_NATIVE", "0")
    torch_path = SE2.relative_log(g, ei, one_sided_cut=True)
    assert len(calls) == 1
    theta = native[:, 2] / math.sqrt(2)
    assert (theta > 0).any() and (theta < 0).any()  # both sides of the threshold are present
    assert _row_error(native, torch_path.double()) <= 8


def test_gradients_differentiate_the_composite_and_float64_is_composite(monkeypatch):
    """float32 elements that need a gradient run the native forward; the backward differentiates
    the composite formulation (twice: gradcheck of the gradient in float64)."""
    gen = torch.Generator().manual_seed(5)
    g = _elements(10, gen)
    ei = torch.randint(0, 10, (2, 30), generator=gen)
    calls = _counted(monkeypatch)
    gg = g.clone().requires_grad_()
    SE2.relative_log(gg, ei, one_sided_cut=True).pow(2).sum().backward()
    assert len(calls) == 1
    gd = g.double().requires_grad_()
    SE2.relative_log(gd, ei, one_sided_cut=True).pow(2).sum().backward()
    assert len(calls) == 1  # float64: the composite implementation
    assert torch.allclose(gg.grad.double(), gd.grad, rtol=1e-3, atol=1e-3)
    w = torch.randn(30, 3, dtype=torch.float64, generator=gen)
    assert torch.autograd.gradcheck(lambda x: SE2.relative_log(x, ei) * w, (g.double().requires_grad_(),))
    assert torch.autograd.gradgradcheck(lambda x: SE2.relative_log(x, ei) * w, (g.double().requires_grad_(),))


def test_out_of_range_index_raises_as_the_torch_path(monkeypatch):
    g = _elements(4, torch.Generator().manual_seed(6))
    ei = torch.tensor([[0, 5], [1, 2]])
    with pytest.raises(ValueError, match="edge_index"):
        SE2.relative_log(g, ei)
    with pytest.raises(ValueError, match="edge_index"):
        SE2.relative_log(g, -ei)
