"""Properties every group in the registry must have (runs over all registered groups)."""

import numpy as np
import pytest
import scipy.linalg
import torch

from pyg_lie.groups import GROUPS, get_group
from pyg_lie.testing import assert_equivariant

NAMES = sorted(GROUPS)


def _small_algebra(G, *batch, scale=0.5, dtype=torch.float64):
    xi = scale * torch.randn(*batch, G.dim, dtype=dtype)
    return xi


def _elements(G, n, dtype=torch.float64):
    """Random elements inside the principal chart (exp of moderate algebra elements)."""
    return G.exp(_small_algebra(G, n, scale=0.7, dtype=dtype))


@pytest.mark.parametrize("name", NAMES)
def test_basis_orthonormal_and_blocks_partition(name):
    G = get_group(name)
    E = G.basis(torch.float64)
    assert E.shape == (G.dim, G.matrix_size, G.matrix_size)
    gram = torch.einsum("aij,bij->ab", E, E)
    torch.testing.assert_close(gram, torch.eye(G.dim, dtype=torch.float64))
    covered = []
    for sl in G.blocks.values():
        covered.extend(range(G.dim)[sl])
    assert sorted(covered) == list(range(G.dim))


@pytest.mark.parametrize("name", NAMES)
def test_hat_vee_inverse(name):
    G = get_group(name)
    xi = torch.randn(4, 3, G.dim, dtype=torch.float64)
    torch.testing.assert_close(G.vee(G.hat(xi)), xi)


@pytest.mark.parametrize("name", NAMES)
def test_exp_matches_scipy_expm(name):
    G = get_group(name)
    xi = _small_algebra(G, 6, scale=1.0)
    ours = G.exp(xi).numpy()
    for k in range(6):
        ref = scipy.linalg.expm(G.hat(xi[k]).numpy())
        np.testing.assert_allclose(ours[k], ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_log_matches_scipy_logm(name):
    G = get_group(name)
    g = _elements(G, 6)
    ours = G.hat(G.log(g)).numpy()
    for k in range(6):
        ref = scipy.linalg.logm(g[k].numpy())
        np.testing.assert_allclose(ours[k], np.real(ref), atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_log_exp_round_trip(name):
    G = get_group(name)
    xi = _small_algebra(G, 50, scale=0.7)
    torch.testing.assert_close(G.log(G.exp(xi)), xi, atol=1e-11, rtol=0)
    g = _elements(G, 50)
    torch.testing.assert_close(G.exp(G.log(g)), g, atol=1e-11, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_group_axioms(name):
    G = get_group(name)
    a, b, c = (_elements(G, 10) for _ in range(3))
    e = G.identity(10, dtype=torch.float64)
    torch.testing.assert_close(G.compose(G.compose(a, b), c), G.compose(a, G.compose(b, c)))
    torch.testing.assert_close(G.compose(a, G.inv(a)), e, atol=1e-12, rtol=0)
    torch.testing.assert_close(G.compose(G.inv(a), a), e, atol=1e-12, rtol=0)
    torch.testing.assert_close(G.inv(a), torch.linalg.inv(a), atol=1e-12, rtol=0)
    torch.testing.assert_close(G.compose(e, a), a)
    torch.testing.assert_close(G.between(a, b), torch.linalg.inv(a) @ b, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_act_is_an_action(name):
    G = get_group(name)
    a, b = _elements(G, 10), _elements(G, 10)
    x = torch.randn(10, G.space_dim, dtype=torch.float64)
    torch.testing.assert_close(G.act(a, G.act(b, x)), G.act(G.compose(a, b), x))
    torch.testing.assert_close(G.act(G.identity(10, dtype=torch.float64), x), x)


@pytest.mark.parametrize("name", NAMES)
def test_random_is_valid_element(name):
    G = get_group(name)
    gen = torch.Generator().manual_seed(3)
    g = G.random(7, 2, generator=gen, dtype=torch.float64)
    assert g.shape == (7, 2, G.matrix_size, G.matrix_size) and g.dtype == torch.float64
    # reproducible from the generator
    g2 = G.random(7, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    torch.testing.assert_close(g, g2)
    # the element lies in the group: exp(log(g)) = g where the log is defined
    n = G.matrix_size
    last_row = torch.zeros(n, dtype=torch.float64)
    last_row[-1] = 1
    if G.space_dim < n:  # affine groups: homogeneous last row
        torch.testing.assert_close(g[..., -1, :], last_row.expand_as(g[..., -1, :]))


@pytest.mark.parametrize("name", NAMES)
def test_relative_log_matches_definition(name):
    G = get_group(name)
    g = _elements(G, 5)
    edge_index = torch.tensor([[0, 1, 2, 4, 3], [1, 1, 0, 2, 4]])
    w = G.relative_log(g, edge_index)
    ref = torch.stack([G.log(torch.linalg.inv(g[i]) @ g[j]) for j, i in edge_index.t().tolist()])
    torch.testing.assert_close(w, ref)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_preserved_and_float32_accuracy(name, dtype):
    G = get_group(name)
    xi = _small_algebra(G, 20, scale=0.7, dtype=torch.float64)
    g = G.exp(xi.to(dtype))
    assert g.dtype == dtype and G.log(g).dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-11
    torch.testing.assert_close(G.log(g).double(), xi, atol=tol, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_exp_log_generic(name):
    G = get_group(name)
    xi = _small_algebra(G, 2, scale=0.7).requires_grad_()
    assert torch.autograd.gradcheck(G.exp, (xi,))
    g = _elements(G, 2).requires_grad_()
    assert torch.autograd.gradcheck(G.log, (g,))


@pytest.mark.parametrize("name", NAMES)
def test_gradients_finite_at_identity(name):
    G = get_group(name)
    xi = torch.zeros(2, G.dim, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(G.exp, (xi,))
    g = G.identity(2, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(G.log, (g,))
    # the i = j pair of attention: log(g^-1 g) must have a finite gradient w.r.t. g
    h = _elements(G, 2).requires_grad_()
    w = G.log(G.between(h, h))
    (grad,) = torch.autograd.grad(w.square().sum() + w.sum(), h)
    assert torch.isfinite(grad).all()


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_raises(name):
    G = get_group(name)
    m = G.matrix_size
    with pytest.raises(ValueError, match="trailing"):
        G.log(torch.eye(m + 1))
    with pytest.raises(ValueError, match="trailing"):
        G.exp(torch.zeros(G.dim + 1))
    bad = G.identity(1)
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        G.log(bad)
    with pytest.raises(ValueError, match="trailing"):
        G.act(G.identity(1), torch.zeros(1, G.space_dim + 1))


@pytest.mark.parametrize("name", NAMES)
def test_lift_maps_origin_to_point(name):
    G = get_group(name)
    x = torch.randn(6, G.space_dim, dtype=torch.float64) + 0.1
    K = 1 if G.stabilizer_dim == 0 else 3
    g = G.lift(x, K, generator=torch.Generator().manual_seed(0))
    assert g.shape == (6, K, G.matrix_size, G.matrix_size)
    o = G.origin(torch.float64)
    image = G.act(g, o.expand(6, K, G.space_dim))
    inv = G.orbit_invariants(x)
    target = x if inv is None else x / x.norm(dim=-1, keepdim=True)  # SO(n): g.o = x/|x|
    torch.testing.assert_close(image, target.unsqueeze(1).expand_as(image))


@pytest.mark.parametrize("name", NAMES)
def test_masked_log_agrees_with_log_inside_the_chart(name):
    G = get_group(name)
    g = _elements(G, 8)
    xi, inside = G.masked_log(g)
    assert inside.shape == (8,) and inside.all()
    torch.testing.assert_close(xi, G.log(g))
    assert G.has_chart_boundary == name.startswith("Aff")


@pytest.mark.parametrize("name", sorted(GROUPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_contains_tells_elements_from_other_matrices(name, dtype):
    G = get_group(name)
    gen = torch.Generator().manual_seed(0)
    g, h = G.random(64, generator=gen, dtype=dtype), G.random(64, generator=gen, dtype=dtype)
    assert G.contains(g).all() and G.contains(G.compose(G.compose(g, h), G.inv(g))).all()
    m = G.matrix_size
    other = torch.randn(64, m, m, generator=gen, dtype=torch.float64).to(dtype)
    assert not G.contains(other).any()
    bad = g.clone()
    bad[3, 0, 0] = float("nan")
    bad[5, -1, 0] = 0.5  # off the last row (affine) / off the manifold (others)
    assert G.contains(bad).tolist() == [i not in (3, 5) for i in range(64)]


@pytest.mark.parametrize("name", NAMES)
def test_relative_log_is_left_invariant(name):
    """log((u g_j)^-1 (u g_i)) = log(g_j^-1 g_i) for every group: what makes the attention
    layers' location kernels invariant. The check fails for a left-variant map (log(g_i))."""
    G = get_group(name)
    torch.manual_seed(0)
    g = G.exp(_small_algebra(G, 6, scale=0.3))  # relative elements stay inside the affine groups' chart
    edge_index = torch.cartesian_prod(torch.arange(6), torch.arange(6)).t()

    def perturb(inputs):  # each element moved on the right by its own small element: no group action
        return inputs[0] @ G.exp(_small_algebra(G, 6, scale=0.3)), inputs[1]

    assert_equivariant(G.relative_log, (g, edge_index), G, ("elements", "invariant"), "invariant",
                       num_elements=4, atol=1e-9, rtol=1e-9, perturb=perturb)
    with pytest.raises(AssertionError, match="not equivariant"):
        assert_equivariant(lambda g, ei: G.log(g)[ei[0]], (g, edge_index), G, ("elements", "invariant"),
                           "invariant", elements=G.exp(_small_algebra(G, 4, scale=0.2)), perturb=perturb)


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_non_tensor_arguments_raise_value_error(name):
    """A list where a tensor belongs is a ValueError naming the argument (as in pyg_lie._checks)."""
    G = get_group(name)
    with pytest.raises(ValueError, match="xi must be a torch.Tensor"):
        G.hat([0.0] * G.dim)
    with pytest.raises(ValueError, match="X must be a torch.Tensor"):
        G.vee(np.zeros((G.matrix_size, G.matrix_size)))
    with pytest.raises(ValueError, match="x must be a torch.Tensor"):
        G.act(torch.eye(G.matrix_size, dtype=torch.float64), [0.0] * G.space_dim)


@pytest.mark.parametrize("bad", [0, 2.5, True, "2"])
def test_num_samples_must_be_a_positive_int(bad):
    G = get_group("SE2")
    with pytest.raises(ValueError, match="num_samples must be a positive int"):
        G.lift(torch.zeros(3, 2, dtype=torch.float64), num_samples=bad)
