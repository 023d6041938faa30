"""The e3nn bridge (pyg_lie.interop.e3nn), checked in float64 against e3nn itself: Wigner
matrices, spherical harmonics, axis-angle, irreps lifts and pooling, and the irreps in / out
of LieTransformer and LieAlgebraTransformer (exact under the finite lift groups, in
expectation under Haar lifts)."""
import math

import pytest
import torch

o3 = pytest.importorskip("e3nn.o3")

from pyg_lie.groups import get_group  # noqa: E402
from pyg_lie.groups.base import homogeneous  # noqa: E402
from pyg_lie.groups.finite import Cn, Icosahedral, Octahedral, Tetrahedral  # noqa: E402
from pyg_lie.interop.e3nn import (IrrepsLift, IrrepsPool, as_irreps, from_axis_angle,  # noqa: E402
                                  rotate_irreps, to_axis_angle, wigner_D)
from pyg_lie.models.lie_algebra_transformer import LieAlgebraTransformer  # noqa: E402
from pyg_lie.models.lie_transformer import LieTransformer  # noqa: E402
from pyg_lie.testing import assert_equivariant, representation  # noqa: E402

F64 = torch.float64
ODD = "1o + 1e + 2e + 0o"  # parity-odd and -even irreps of the issue
MIXED = "2x0e + 1o + 1e + 2e + 0o + 3o + 4e"


@pytest.fixture(autouse=True)
def e3nn_in_float64():
    """e3nn builds its generators in the default dtype: float64 references need it."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(F64)
    yield
    torch.set_default_dtype(previous)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def rand_matrix(n, seed):
    torch.manual_seed(seed)
    return o3.rand_matrix(n, dtype=F64)


def apply_D(irreps, R, x):
    """``D(R) x`` with e3nn's own matrices."""
    return torch.einsum("...ij,...j->...i", o3.Irreps(irreps).D_from_matrix(R), x)


def rep(irreps):
    """The action of a rotation or rigid motion on irreps features, with e3nn's own matrices."""
    return representation(lambda g: o3.Irreps(irreps).D_from_matrix(g[:3, :3]))


# ------------------------------------------------------------------ wigner_D
@pytest.mark.parametrize("irreps", [ODD, MIXED, "0e", "3x1o", o3.Irreps("2e + 1o")])
def test_wigner_D_equals_e3nn(irreps):
    R = rand_matrix(20, 0)
    ref = o3.Irreps(irreps).D_from_matrix(R)
    torch.testing.assert_close(wigner_D(irreps, R), ref, atol=1e-12, rtol=0)
    # improper matrices: e3nn's parity factor
    torch.testing.assert_close(wigner_D(irreps, -R), o3.Irreps(irreps).D_from_matrix(-R), atol=1e-12, rtol=0)
    # SE(3) elements: their rotation part
    g = homogeneous(R, torch.randn(20, 3, generator=gen(1), dtype=F64))
    torch.testing.assert_close(wigner_D(irreps, g), ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("group", [Tetrahedral(), Octahedral(), Icosahedral()])
def test_wigner_D_on_finite_subgroups_is_a_representation(group):
    E = group.elements(F64)
    D = wigner_D(MIXED, E)
    torch.testing.assert_close(D, o3.Irreps(MIXED).D_from_matrix(E), atol=1e-12, rtol=0)
    table = group.multiplication_table()
    # D(g_i g_j) = D(g_i) D(g_j) over the whole group
    torch.testing.assert_close(D[table], D.unsqueeze(1) @ D.unsqueeze(0), atol=1e-12, rtol=0)


def test_wigner_D_accurate_where_euler_angles_are_singular():
    """Rotations that (nearly) fix e_y: e3nn's Euler angles lose digits there
    (beta = acos(R_yy)); the quaternion-log route does not."""
    alpha = torch.tensor([0.3, 1.0, -2.0], dtype=F64)
    beta = torch.tensor([0.0, 1e-9, 3e-8], dtype=F64)
    gamma = torch.tensor([0.5, -0.2, 1.1], dtype=F64)
    R = o3.angles_to_matrix(alpha, beta, gamma)
    ref = o3.Irreps("2e + 3o").D_from_angles(alpha, beta, gamma)
    torch.testing.assert_close(wigner_D("2e + 3o", R), ref, atol=1e-13, rtol=0)


def test_wigner_D_gradient_finite_at_identity():
    xi = torch.zeros(3, dtype=F64, requires_grad=True)
    R = get_group("SO3").exp(xi)
    wigner_D("2e + 3o", R).sum().backward()
    assert torch.isfinite(xi.grad).all()


def test_spherical_harmonics_rotate_with_wigner_D():
    """e3nn's spherical harmonics of rotated vectors are D(R) times the originals."""
    irreps = o3.Irreps.spherical_harmonics(4)
    v = torch.randn(30, 3, generator=gen(2), dtype=F64)
    R = rand_matrix(1, 3)[0]
    Y = o3.spherical_harmonics(irreps, v, normalize=True)
    Y_rot = o3.spherical_harmonics(irreps, v @ R.T, normalize=True)
    torch.testing.assert_close(Y_rot, Y @ wigner_D(irreps, R).T, atol=1e-12, rtol=0)
    torch.testing.assert_close(Y_rot, rotate_irreps(irreps, Y, R), atol=1e-12, rtol=0)
    assert (Y_rot - Y).abs().max() > 0.1  # the rotation does move them


def test_rotate_irreps_matches_the_matrices_and_broadcasts():
    R = rand_matrix(5, 4)
    x = torch.randn(5, o3.Irreps(MIXED).dim, generator=gen(5), dtype=F64)
    D = o3.Irreps(MIXED).D_from_matrix(R)
    torch.testing.assert_close(rotate_irreps(MIXED, x, R), torch.einsum("nij,nj->ni", D, x), atol=1e-12, rtol=0)
    torch.testing.assert_close(rotate_irreps(MIXED, x, R, inverse=True), torch.einsum("nji,nj->ni", D, x),
                               atol=1e-12, rtol=0)
    torch.testing.assert_close(rotate_irreps(MIXED, x, -R), apply_D(MIXED, -R, x), atol=1e-12, rtol=0)
    # one rotation for many rows, and many rotations of one row
    torch.testing.assert_close(rotate_irreps(MIXED, x, R[0]), x @ D[0].T, atol=1e-12, rtol=0)
    torch.testing.assert_close(rotate_irreps(MIXED, x[0], R), D @ x[0], atol=1e-12, rtol=0)


# ---------------------------------------------------------------- axis-angle
def test_axis_angle_against_e3nn_and_the_sqrt2_factor():
    R = rand_matrix(50, 6)
    axis, angle = to_axis_angle(R)
    axis_ref, angle_ref = o3.matrix_to_axis_angle(R)
    torch.testing.assert_close(axis, axis_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(angle, angle_ref, atol=1e-10, rtol=0)
    # pyg_lie's log is sqrt(2) times e3nn's rotation vector
    SO3 = get_group("SO3")
    torch.testing.assert_close(SO3.log(R), math.sqrt(2) * axis_ref * angle_ref[:, None], atol=1e-10, rtol=0)
    xi = from_axis_angle(axis_ref, angle_ref)
    torch.testing.assert_close(xi, SO3.log(R), atol=1e-10, rtol=0)
    torch.testing.assert_close(from_axis_angle(axis_ref * angle_ref[:, None]), xi, atol=1e-12, rtol=0)
    # exp of the converted coordinates is e3nn's matrix (axis need not be a unit vector)
    torch.testing.assert_close(SO3.exp(from_axis_angle(3 * axis_ref, angle_ref)),
                               o3.axis_angle_to_matrix(axis_ref, angle_ref), atol=1e-12, rtol=0)
    # SE(3) elements: the rotation part
    g = homogeneous(R, torch.randn(50, 3, generator=gen(7), dtype=F64))
    torch.testing.assert_close(to_axis_angle(g)[1], angle_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(get_group("SE3").log(g)[:, 3:], xi, atol=1e-10, rtol=0)


def test_axis_angle_at_zero_and_pi():
    axis, angle = to_axis_angle(torch.eye(3, dtype=F64))
    assert float(angle) == 0 and torch.equal(axis, torch.zeros(3, dtype=F64))
    n = torch.tensor([1.0, 2.0, 2.0], dtype=F64) / 3
    R = o3.axis_angle_to_matrix(n, torch.tensor(math.pi, dtype=F64))
    axis, angle = to_axis_angle(R)
    assert abs(float(angle) - math.pi) < 1e-12
    torch.testing.assert_close(o3.axis_angle_to_matrix(axis, angle), R, atol=1e-12, rtol=0)
    small = o3.axis_angle_to_matrix(n, torch.tensor(1e-9, dtype=F64))
    axis, angle = to_axis_angle(small)
    torch.testing.assert_close(axis, n, atol=1e-6, rtol=0)
    assert abs(float(angle) - 1e-9) < 1e-15
    # finite gradients at the identity (e3nn's acos-based version has none)
    xi = torch.zeros(3, dtype=F64, requires_grad=True)
    a, t = to_axis_angle(get_group("SO3").exp(xi))
    (a.sum() + t).backward()
    assert torch.isfinite(xi.grad).all()


# --------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("call, error, message", [
    (lambda: wigner_D(3, torch.eye(3)), TypeError, "irreps must be an e3nn Irreps or a string"),
    (lambda: wigner_D("1x", torch.eye(3)), ValueError, "irreps must be an e3nn irreps string"),
    (lambda: wigner_D("1o", torch.eye(2)), ValueError, r"R must hold rotation matrices \(..., 3, 3\)"),
    (lambda: wigner_D("1o", torch.eye(3, dtype=torch.long)), ValueError, "R must be a floating-point"),
    (lambda: wigner_D("1o", 2 * torch.eye(3)), ValueError, "R must be orthogonal"),
    (lambda: wigner_D("1o", torch.full((3, 3), math.nan)), ValueError, "R contains non-finite"),
    (lambda: rotate_irreps("1o", torch.ones(4, 2), torch.eye(3)), ValueError, "x must have a last dimension of 3"),
    (lambda: to_axis_angle(-torch.eye(3)), ValueError, "det < 0"),
    (lambda: from_axis_angle(torch.ones(2)), ValueError, r"v must have shape \(..., 3\)"),
    (lambda: IrrepsLift("1o", "SE2"), ValueError, "needs a group of rotations of R\\^3"),
    (lambda: IrrepsPool("1o", reduce="max"), ValueError, "reduce must be 'mean' or 'sum'"),
    (lambda: IrrepsLift("1o", "SE3")(torch.ones(4, 2), torch.randn(4, 3)), ValueError,
     r"x must have shape \(N, 3\) for irreps 1x1o"),
    (lambda: IrrepsPool("1o")(torch.ones(4, 3), torch.eye(3).expand(3, 3, 3)), ValueError,
     "g must hold one element per row of y"),
])
def test_bad_inputs(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ------------------------------------------------------- IrrepsLift / IrrepsPool
def se3_motion(R, seed):
    return homogeneous(R, 5 * torch.randn(3, generator=gen(seed), dtype=F64))


def test_irreps_lift_features_are_invariant_and_in_each_frame():
    G = get_group("SE3")
    lift = IrrepsLift(ODD, G, 3)
    N, K = 6, 3
    pos = torch.randn(N, 3, generator=gen(8), dtype=F64)
    x = torch.randn(N, as_irreps(ODD).dim, generator=gen(9), dtype=F64)
    h = G.stabilizer_random(N, K, generator=gen(10), dtype=F64)
    lifted = lift(x, pos, stabilizer=h)
    # D(R_k) x_k is the point's feature again
    torch.testing.assert_close(apply_D(ODD, lifted.g[:, :3, :3], lifted.x), x[lifted.index], atol=1e-12, rtol=0)
    assert (lifted.x - x[lifted.index]).abs().max() > 0.1  # the frames are not the identity
    # the moved cloud with matched stabiliser samples (s(u x) h' = u s(x) h): the same features, moved frames
    assert_equivariant(lambda x, pos, h: (lift(x, pos, stabilizer=h).g, lift(x, pos, stabilizer=h).x), (x, pos, h), G,
                       (rep(ODD), "points", lambda u, h: homogeneous(u[:3, :3], torch.zeros(3, dtype=F64)) @ h),
                       ("elements", "invariant"), elements=se3_motion(rand_matrix(1, 11)[0], 12)[None],
                       atol=1e-12, rtol=0)


def test_irreps_pool_per_graph_and_per_node():
    G = get_group("SE3")
    M, irreps = 10, o3.Irreps(MIXED)
    g = G.random(M, generator=gen(13), dtype=F64)
    y = torch.randn(M, irreps.dim, generator=gen(14), dtype=F64)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1, 3, 3, 3])
    z = apply_D(irreps, g[:, :3, :3], y)
    out = IrrepsPool(irreps)(y, g, batch)
    assert out.shape == (4, irreps.dim)
    torch.testing.assert_close(out[0], z[:3].mean(0), atol=1e-12, rtol=0)
    torch.testing.assert_close(out[3], z[7:].mean(0), atol=1e-12, rtol=0)
    assert torch.equal(out[2], torch.zeros(irreps.dim, dtype=F64))  # an empty graph
    torch.testing.assert_close(IrrepsPool(irreps, "sum")(y, g), z.sum(0, keepdim=True), atol=1e-12, rtol=0)
    # per node: index of the original point of every lifted node
    index = torch.arange(5).repeat_interleave(2)
    per_node = IrrepsPool(irreps)(y, g[:, :3, :3], index, size=5)
    torch.testing.assert_close(per_node, z.view(5, 2, -1).mean(1), atol=1e-12, rtol=0)
    # moving every frame by u rotates the pooled irreps: D(R_u) out
    assert_equivariant(lambda y, g: IrrepsPool(irreps)(y, g, batch), (y, g), G, ("invariant", "elements"),
                       rep(irreps), elements=G.random(1, generator=gen(15), dtype=F64), atol=1e-12, rtol=0)


# --------------------------------------------------------------- LieTransformer
def irreps_model(irreps_in=ODD, irreps_out="1o + 2e + 0o + 0e", K=2, lift="haar", group="SE3", seed=0,
                 **kw):
    torch.manual_seed(seed)
    kw.setdefault("radius", None)
    return LieTransformer(group, hidden_channels=16, irreps_in=irreps_in, irreps_out=irreps_out,
                          num_layers=2, heads=2, lift_samples=K, lift=lift, kernel_dim=8, **kw).to(F64).eval()


def cloud(n=7, seed=16, group="SE3"):
    pos = 2 * torch.randn(n, 3, generator=gen(seed), dtype=F64)
    x = torch.randn(n, as_irreps(ODD).dim, generator=gen(seed + 1), dtype=F64)
    return x, pos


@pytest.mark.parametrize("subgroup", [Octahedral(), Icosahedral()], ids=["octahedral", "icosahedral"])
def test_lie_transformer_irreps_exact_under_finite_lift_group(subgroup):
    out = o3.Irreps("1o + 2e + 0o + 0e")
    model = irreps_model(lift="finite", subgroup=subgroup)
    assert model.lift_samples == subgroup.order and model.in_channels == as_irreps(ODD).dim
    x, pos = cloud()
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    with torch.no_grad():
        y = model(x, pos, batch)
        assert y.shape == (2, out.dim)
        E = subgroup.elements(F64)
        ks = range(1, subgroup.order, 1 if subgroup.order <= 24 else 7)
        motions = torch.stack([se3_motion(E[k], 100 + k) for k in ks])
        scale = float(y.abs().max())
        res = assert_equivariant(lambda x, pos: model(x, pos, batch), (x, pos), "SE3", (rep(ODD), "points"), rep(out),
                                 elements=motions, atol=0 if scale >= 1 else 1e-12, rtol=1e-12 if scale >= 1 else 0)
        worst = res.error
        with pytest.raises(AssertionError, match="not equivariant"):  # the output does rotate: not vacuous
            assert_equivariant(lambda x, pos: model(x, pos, batch), (x, pos), "SE3", (rep(ODD), "points"),
                               "invariant", elements=motions, atol=1e-3, rtol=0)
        # the output depends on the irreps features ...
        assert float((model(torch.randn_like(x), pos, batch) - y).abs().max()) > 1e-3
        # ... and on their orientation relative to the cloud (rotating x alone changes it)
        R = E[5]
        assert float((model(apply_D(ODD, R, x), pos, batch) - apply_D(out, R, y)).abs().max()) > 1e-4
        # a rotation outside the group is not an exact symmetry: the check can fail
        R = rand_matrix(1, 17)[0]
        y3 = model(apply_D(ODD, R, x), pos @ R.T, batch)
        assert float((y3 - apply_D(out, R, y)).abs().max()) > 1e3 * max(worst, 1e-15)


@pytest.mark.parametrize("group", ["SE3", "SO3"])
def test_lie_transformer_irreps_exact_with_matched_stabiliser(group):
    """Haar lifts with the stabiliser samples matched to the motion (s(u x) h' = u s(x) h):
    exact SE(3) / SO(3) equivariance for any rotation, parity-odd irreps included."""
    G = get_group(group)
    out = "1o + 2e + 0o"
    model = irreps_model(irreps_out=out, K=3, group=group)
    x, pos = cloud()
    h = G.stabilizer_random(pos.size(0), 3, generator=gen(18), dtype=F64)

    def matched(u, h):  # h' with s(u x) h' = u s(x) h
        return (G.inv(G.section(G.act(u, pos))) @ (u @ G.section(pos))).unsqueeze(1) @ h

    u = torch.stack([G.random(generator=gen(19 + s), dtype=F64) for s in range(2)])
    args = (lambda x, pos, h: model(x, pos, stabilizer=h), (x, pos, h), G, (rep(ODD), "points", matched))
    with torch.no_grad():
        assert_equivariant(*args, rep(out), elements=u, atol=1e-11, rtol=0)
        with pytest.raises(AssertionError, match="not equivariant"):  # the output does rotate
            assert_equivariant(*args, "invariant", elements=u, atol=1e-3, rtol=0)


def test_lie_transformer_so3_cyclic_lift_exact_about_z():
    """SO3 lifts x to the minimal rotation s(x) times C_K about e_z; s(R x) = R s(x) R^-1
    for R about e_z, so the model is exactly equivariant to C_K about e_z."""
    model = irreps_model(irreps_out="1o + 2e", K=4, lift="finite", group="SO3", subgroup=Cn(4))
    x, pos = cloud()
    R = get_group("SO3").stabilizer_embed(Cn(4).elements(F64))
    args = (model, (x, pos), "SO3", (rep(ODD), "points"))
    with torch.no_grad():
        assert_equivariant(*args, rep("1o + 2e"), elements=R, atol=1e-11, rtol=0)
        with pytest.raises(AssertionError, match="not equivariant"):  # the output does rotate
            assert_equivariant(*args, "invariant", elements=R[1:], atol=1e-3, rtol=0)


def test_lie_transformer_irreps_haar_error_falls_with_lifts():
    """Haar lifts: equivariant in expectation, so the error of one draw falls with K."""
    G = get_group("SE3")
    out = o3.Irreps("1o + 2e")
    x, pos = cloud(n=4)
    errors = []
    for K in (1, 4, 16):
        model = irreps_model(irreps_out=out, K=K, seed=1)
        err = 0.0
        with torch.no_grad():
            for s in range(4):
                u = G.random(generator=gen(30 + s), dtype=F64)
                h1 = G.stabilizer_random(4, K, generator=gen(40 + s), dtype=F64)
                h2 = G.stabilizer_random(4, K, generator=gen(50 + s), dtype=F64)
                y = model(x, pos, stabilizer=h1)
                y2 = model(apply_D(ODD, u[:3, :3], x), G.act(u, pos), stabilizer=h2)
                err += float((y2 - apply_D(out, u[:3, :3], y)).norm()) / 4
        errors.append(err)
    assert errors[0] > errors[1] > errors[2] and errors[2] < 0.5 * errors[0], errors


def test_lie_transformer_irreps_arguments():
    m = LieTransformer("SE3", hidden_channels=8, irreps_in="1o + 0e", irreps_out=o3.Irreps("1o"), num_layers=1,
                       heads=2)
    assert (m.in_channels, m.out_channels) == (4, 3) and "irreps_out='1x1o'" in repr(m)
    m = LieTransformer("SE3", 4, 8, 3, irreps_in="1o + 0e", irreps_out="1o", num_layers=1, heads=2)
    assert m(torch.randn(5, 4), torch.randn(5, 3)).shape == (1, 3)
    # irreps_out of scalars only: an invariant output
    m = LieTransformer("SO3", hidden_channels=8, in_channels=2, irreps_out="2x0e", num_layers=1, heads=2)
    assert m(torch.randn(5, 2), torch.randn(5, 3)).shape == (1, 2)
    with pytest.raises(ValueError, match=r"in_channels \(3\) must equal the dimension of irreps_in '1x1o\+1x0e' \(4\)"):
        LieTransformer("SE3", 3, 8, irreps_in="1o + 0e", irreps_out="1o")
    with pytest.raises(ValueError, match=r"out_channels \(2\) must equal the dimension of irreps_out"):
        LieTransformer("SE3", 4, 8, 2, irreps_in="1o + 0e", irreps_out="1o")
    with pytest.raises(ValueError, match="needs a group of rotations of R\\^3"):
        LieTransformer("SE2", hidden_channels=8, irreps_in="1o", out_channels=1)
    with pytest.raises(ValueError, match="irreps_in must be an e3nn irreps string"):
        LieTransformer("SE3", hidden_channels=8, irreps_in="vector", out_channels=1)
    with pytest.raises(TypeError, match="missing required argument 'hidden_channels'"):
        LieTransformer("SE3", irreps_in="1o", irreps_out="1o")
    with pytest.raises(TypeError, match="missing required argument 'out_channels'"):
        LieTransformer("SE3", hidden_channels=8, irreps_in="1o")
    with pytest.raises(ValueError, match=r"x must have shape \(N, 4\) for irreps"):
        m = LieTransformer("SE3", hidden_channels=8, irreps_in="1o + 0e", out_channels=1, num_layers=1, heads=2)
        m(torch.randn(5, 3), torch.randn(5, 3))
    with pytest.raises(ValueError, match="subgroup is only used with mode='finite'"):
        LieTransformer("SE3", 1, 8, 1, subgroup=Octahedral())


# ------------------------------------------------------- LieAlgebraTransformer
@pytest.mark.parametrize("group", ["SO3", "SE3"])
def test_lie_algebra_transformer_irreps_payload_equivariant(group):
    G = get_group(group)
    torch.manual_seed(0)
    model = LieAlgebraTransformer(group, hidden_channels=16, num_layers=2, heads=2, irreps_in=ODD).to(F64)
    assert model.in_channels == as_irreps(ODD).dim
    with torch.no_grad():  # the heads start at zero; random weights make the claim non-trivial
        for p in model.parameters():
            p.normal_(0, 0.3, generator=gen(60))
    g = G.random(7, generator=gen(61), dtype=F64)
    x = torch.randn(7, as_irreps(ODD).dim, generator=gen(62), dtype=F64)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    with torch.no_grad():
        p1 = model(g, batch=batch, x=x).prediction
        assert_equivariant(lambda g, x: model(g, batch=batch, x=x).prediction, (g, x), G, ("elements", rep(ODD)),
                           "elements", seed=63, atol=1e-11, rtol=0)
        # the payload matters, including its orientation relative to the tokens
        b = G.random(generator=gen(63), dtype=F64)
        p3 = model(g, batch=batch, x=apply_D(ODD, b[:3, :3], x)).prediction
        assert float((p3 - p1).abs().max()) > 1e-3
    with pytest.raises(ValueError, match="needs a group of rotations of R\\^3"):
        LieAlgebraTransformer("SE2", irreps_in="1o")
    with pytest.raises(ValueError, match=r"in_channels \(2\) must equal the dimension of irreps_in"):
        LieAlgebraTransformer(group, in_channels=2, irreps_in="1o")
