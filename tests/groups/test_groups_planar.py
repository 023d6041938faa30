"""SO(2), SE(2) and T(n): chart boundary, gradients, Haar statistics, properties."""
import math

import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyg_lie.groups import SE2, SO2, Tn
from pyg_lie.testing import assert_equivariant

SQ2 = math.sqrt(2)


def _se2(theta, tx=0.3, ty=-0.2):
    return torch.tensor([tx, ty, SQ2 * theta], dtype=torch.float64)


@pytest.mark.parametrize("theta", [1e-8, 1e-4, 0.5, math.pi - 1e-4, math.pi - 1e-6, -(math.pi - 1e-6)])
def test_se2_round_trip_up_to_chart_boundary(theta):
    G = SE2()
    xi = _se2(theta)
    torch.testing.assert_close(G.log(G.exp(xi)), xi, atol=1e-9, rtol=0)


def test_angle_pi_convention():
    """At theta = pi the log is not unique; the convention is theta = +pi, and exp(log g) = g."""
    G = SO2()
    g = torch.tensor([[-1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)
    torch.testing.assert_close(G.log(g), torch.tensor([SQ2 * math.pi], dtype=torch.float64))
    H = SE2()
    h = H.exp(_se2(math.pi))
    torch.testing.assert_close(H.exp(H.log(h)), h, atol=1e-12, rtol=0)


@pytest.mark.parametrize("theta", [0.0, 1e-8, 0.7, math.pi - 1e-6])
def test_se2_gradcheck_at_special_angles(theta):
    G = SE2()
    xi = _se2(theta).unsqueeze(0).requires_grad_()
    assert torch.autograd.gradcheck(G.exp, (xi,))
    assert torch.autograd.gradgradcheck(G.exp, (xi,))
    g = G.exp(_se2(theta)).unsqueeze(0).requires_grad_()
    assert torch.autograd.gradcheck(G.log, (g,), atol=1e-5)
    assert torch.autograd.gradgradcheck(G.log, (g,), atol=1e-5)


def test_float32_near_pi_is_accurate():
    G = SE2()
    xi = _se2(math.pi - 1e-3)
    err = (G.log(G.exp(xi.float())).double() - xi).abs().max()
    assert err < 1e-4


def test_so2_haar_uniform_angles():
    g = SO2().random(4000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    theta = SO2().angle(g).numpy()
    p = scipy.stats.kstest(theta, scipy.stats.uniform(loc=-math.pi, scale=2 * math.pi).cdf).pvalue
    assert p > 1e-3
    # a biased sampler must fail the same test
    p_bad = scipy.stats.kstest(0.9 * theta, scipy.stats.uniform(loc=-math.pi, scale=2 * math.pi).cdf).pvalue
    assert p_bad < 1e-3


def test_se2_random_translation_is_standard_normal():
    g = SE2().random(5000, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    t = g[:, :2, 2]
    assert abs(t.mean()) < 0.05 and abs(t.std() - 1) < 0.05


def test_se2_left_invariance_of_relative_log():
    """log((a g)^-1 (a h)) = log(g^-1 h): the basis of every equivariance claim."""
    G = SE2()
    g, h = (G.random(20, dtype=torch.float64, generator=torch.Generator().manual_seed(s)) for s in (0, 1))
    assert_equivariant(lambda g, h: G.log(G.between(g, h)), (g, h), G, "elements", "invariant",
                       num_elements=20, atol=1e-10, rtol=1e-10)


def test_so2_section_at_origin_raises():
    with pytest.raises(ValueError, match="origin"):
        SO2().lift(torch.zeros(2, 2), 1)


def test_tn_rejects_multiple_lift_samples():
    with pytest.raises(ValueError, match="num_samples"):
        Tn(2).lift(torch.randn(3, 2), 4)
    with pytest.raises(ValueError, match="n in"):
        Tn(5)


def test_se2_finite_subgroup_lift():
    G = SE2()
    k = 4
    angles = torch.arange(k, dtype=torch.float64) * 2 * math.pi / k
    Ck = torch.stack([torch.stack([angles.cos(), -angles.sin()], -1), torch.stack([angles.sin(), angles.cos()], -1)], -2)
    x = torch.randn(5, 2, dtype=torch.float64)
    g = G.lift(x, subgroup=Ck)
    assert g.shape == (5, k, 3, 3)
    torch.testing.assert_close(g[..., :2, 2], x.unsqueeze(1).expand(5, k, 2))
    torch.testing.assert_close(g[:, :, :2, :2], Ck.unsqueeze(0).expand(5, k, 2, 2))


@settings(max_examples=40, deadline=None)
@given(st.floats(-3.1, 3.1), st.floats(-5, 5), st.floats(-5, 5))
def test_se2_property_round_trip(theta, tx, ty):
    G = SE2()
    xi = torch.tensor([tx, ty, SQ2 * theta], dtype=torch.float64)
    torch.testing.assert_close(G.log(G.exp(xi)), xi, atol=1e-9, rtol=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-4, 4), min_size=3, max_size=3))
def test_tn_property_exp_is_translation(t):
    G = Tn(3)
    x = torch.randn(3, dtype=torch.float64)
    tt = torch.tensor(t, dtype=torch.float64)
    torch.testing.assert_close(G.act(G.exp(tt), x), x + tt)


def test_se2_relative_log_matches_generic_routine():
    """SE2's relative_log works on the top rows of both ends; it must equal the generic
    log(between(g_i, g_j)) on self-pairs, near the cut and in its derivatives along the top rows."""
    import torch
    from torch.autograd import gradcheck

    from pyg_lie.groups import get_group
    from pyg_lie.groups.base import LieGroup
    G = get_group("SE2")
    gen = torch.Generator().manual_seed(3)
    g = G.random(40, generator=gen, dtype=torch.float64)
    g[1] = g[0] @ G.exp(torch.tensor([[0.3, -0.2, 2 ** 0.5 * (torch.pi - 1e-9)]], dtype=torch.float64))[0]
    ei = torch.randint(0, 40, (2, 300), generator=gen)
    ei = torch.cat([ei, torch.arange(40).repeat(2, 1), torch.tensor([[0, 1], [1, 0]])], 1)
    for cut in (False, True):
        torch.testing.assert_close(G.relative_log(g, ei, cut), LieGroup.relative_log(G, g, ei, cut),
                                   rtol=1e-12, atol=1e-12)
    small = g[2:8].clone().requires_grad_()  # away from the pair at the cut
    e = torch.tensor([[0, 1, 2, 3, 4, 5, 5], [1, 2, 3, 4, 5, 0, 5]])
    assert gradcheck(lambda h: G.relative_log(h, e, True), (small,))
    gen_grad = torch.autograd.functional.jacobian(lambda h: LieGroup.relative_log(G, h, e, True), g[2:8])
    new_grad = torch.autograd.functional.jacobian(lambda h: G.relative_log(h, e, True), g[2:8])
    # the generic product also reads the bottom rows (0 0 1 on the manifold); the top rows agree
    torch.testing.assert_close(new_grad[..., :2, :], gen_grad[..., :2, :], rtol=1e-10, atol=1e-10)
    assert new_grad[..., 2, :].abs().max() == 0


@pytest.mark.parametrize("n", [1, 2, 3])
def test_tn_relative_log_matches_generic_routine(n):
    """T(n)'s relative_log reads the translation columns; it must equal the generic
    log(between(g_i, g_j)), values and derivatives along the translation column."""
    from torch.autograd import gradcheck

    from pyg_lie.groups import get_group
    from pyg_lie.groups.base import LieGroup
    G = get_group(f"T{n}")
    gen = torch.Generator().manual_seed(4)
    g = G.random(30, generator=gen, dtype=torch.float64)
    ei = torch.cat([torch.randint(0, 30, (2, 200), generator=gen), torch.arange(30).repeat(2, 1)], 1)
    for cut in (False, True):
        torch.testing.assert_close(G.relative_log(g, ei, cut), LieGroup.relative_log(G, g, ei, cut),
                                   rtol=0, atol=1e-15)
    e = torch.tensor([[0, 1, 2, 3, 3], [1, 2, 0, 3, 1]])
    small = g[:4].clone().requires_grad_()
    assert gradcheck(lambda h: G.relative_log(h, e), (small,))
    gen_grad = torch.autograd.functional.jacobian(lambda h: LieGroup.relative_log(G, h, e), g[:4])
    new_grad = torch.autograd.functional.jacobian(lambda h: G.relative_log(h, e), g[:4])
    torch.testing.assert_close(new_grad[..., :n, n], gen_grad[..., :n, n], rtol=0, atol=1e-15)
