"""Irreps of C_n / D_n, field types and Schur linear layers."""
import itertools

import numpy as np
import pytest
import torch

from pyg_lie.groups.finite import o2_group as get_group
from pyg_lie.groups.finite_reps import GSet
from pyg_lie.vit.field_type import FieldType
from pyg_lie.vit.linear import EquivariantLinear

GROUPS = ["C1", "C2", "C3", "C4", "C6", "D1", "D2", "D3", "D4", "D6", "C5", "D5"]


@pytest.mark.parametrize("name", GROUPS)
def test_group_axioms_and_plane_embedding(name):
    G = get_group(name)
    assert len(G.irreps) == {"C": (G.n // 2 + 1) if G.n % 2 == 0 else (G.n + 1) // 2,
                             "D": (G.n // 2 + 3) if G.n % 2 == 0 else (G.n + 3) // 2}[name[0]]
    for a, b in itertools.product(range(G.order), repeat=2):
        np.testing.assert_allclose(G.plane_matrix(G.mul(a, b)), G.plane_matrix(a) @ G.plane_matrix(b), atol=1e-12)
    for a in range(G.order):
        assert G.mul(a, G.inv(a)) == 0
    assert len(G.closure(G.generator_indices)) == G.order


@pytest.mark.parametrize("name", GROUPS)
def test_irreps_homomorphism_orthogonality_schur(name):
    G = get_group(name)
    dims = 0
    chars = []
    for rho in G.irreps:
        R = G.rep_matrices(rho)
        for a, b in itertools.product(range(G.order), repeat=2):
            np.testing.assert_allclose(R[G.mul(a, b)], R[a] @ R[b], atol=1e-12)
        np.testing.assert_allclose(np.einsum("gji,gjk->gik", R, R), np.broadcast_to(np.eye(rho.dim), R.shape), atol=1e-12)
        # commutant of the irrep = End basis (Schur): dim of the solution space of L rho = rho L
        ops = np.stack([np.kron(r, r) for r in R])  # L -> r L r^T
        from pyg_lie.groups.finite_reps import invariant_subspace
        assert invariant_subspace(ops).shape[0] == rho.end_dim
        for L in rho.end_basis():
            np.testing.assert_allclose(R @ L, L @ R, atol=1e-12)
        dims += rho.dim ** 2 / rho.end_dim
        chars.append(np.trace(R, axis1=1, axis2=2))
    assert dims == G.order  # sum d^2 / dimEnd = |G| for real irreps
    C = np.stack(chars)
    gram = C @ C.T / G.order
    np.testing.assert_allclose(gram, np.diag([r.end_dim for r in G.irreps]), atol=1e-12)


@pytest.mark.parametrize("name", ["D4", "C4", "D6", "C6", "D3"])
def test_regular_gset_fourier(name):
    G = get_group(name)
    X = GSet.quotient(G, [0])
    Q = X.fourier_basis()
    mult = G.regular_multiplicities()
    full = np.concatenate([Q[k].reshape(-1, X.size) for k in Q])
    np.testing.assert_allclose(full @ full.T, np.eye(X.size), atol=1e-10)
    P = X.perm_matrices()
    for rho in G.irreps:
        assert Q[rho.name].shape[0] == mult[rho.name]
        R = G.rep_matrices(rho)
        np.testing.assert_allclose(np.einsum("gij,ajx->gaix", R, Q[rho.name]),
                                   np.einsum("aix,gxy->gaiy", Q[rho.name], P), atol=1e-10)


def test_paper_table2_d4_homogeneous_spaces():
    G = get_group("D4")
    table = {"e": (1, 1, 1, 1, 2), "r2": (1, 1, 1, 1, 0), "r": (1, 1, 0, 0, 0), "t": (1, 0, 1, 0, 1),
             "tr": (1, 0, 0, 1, 1), "t,r2": (1, 0, 1, 0, 0), "tr,r2": (1, 0, 0, 1, 0), "t,r": (1, 0, 0, 0, 0)}
    for gens, expected in table.items():
        H = G.closure([G.word(w) for w in gens.split(",")])
        Q = GSet.quotient(G, H).fourier_basis()
        assert tuple(Q[n].shape[0] for n in ["A1", "A2", "B1", "B2", "E1"]) == expected, gens


def test_field_type_split_join_transform():
    V = FieldType.regular("D4", 3)
    assert V.dim == 24 and V.mult == {"A1": 3, "A2": 3, "B1": 3, "B2": 3, "E1": 6}
    x = torch.randn(5, V.dim)
    parts = V.split(x)
    assert [tuple(p.shape) for p in parts] == [(5, 3, 1)] * 4 + [(5, 6, 2)]
    torch.testing.assert_close(V.join(parts), x)
    G = V.group
    for a, b in itertools.product(range(G.order), repeat=2):
        torch.testing.assert_close(V.transform(V.transform(x, b), a), V.transform(x, G.mul(a, b)))
    with pytest.raises(ValueError, match="multiplicities"):
        FieldType("C4", {"E2": 1})
    assert FieldType.regular("C4", 2).mult == {"A": 2, "B": 2, "E1": 2}


@pytest.mark.parametrize("name,dtype", [("C1", torch.float32), ("C2", torch.float64), ("C4", torch.float32),
                                        ("D2", torch.float64), ("D4", torch.float32), ("C3", torch.float64),
                                        ("C6", torch.float64), ("D3", torch.float32), ("D6", torch.float64)])
def test_schur_linear_equivariance_and_counts(name, dtype):
    torch.manual_seed(0)
    G = get_group(name)
    Vi = FieldType(G, {r.name: 1 + i % 2 for i, r in enumerate(G.irreps)})
    Vo = FieldType.regular(G, 2)
    lin = EquivariantLinear(Vi, Vo).to(dtype)
    with torch.no_grad():
        lin.bias.normal_()
    n_params = sum(p.numel() for p in lin.parameters())
    expected = sum(r.end_dim * Vi.mult[r.name] * Vo.mult[r.name] for r in G.irreps) + Vo.mult[G.irreps[0].name]
    assert n_params == expected
    # dimension of Hom_G computed numerically from the representations = Schur count
    mats_i = np.stack([Vi.representation(g) for g in G.generator_indices])
    mats_o = np.stack([Vo.representation(g) for g in G.generator_indices])
    from pyg_lie.groups.finite_reps import invariant_subspace
    hom_dim = invariant_subspace(np.stack([np.kron(o, i) for o, i in zip(mats_o, mats_i)])).shape[0]
    assert hom_dim == n_params - Vo.mult[G.irreps[0].name]
    x = torch.randn(7, 4, Vi.dim, dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for g in range(G.order):
        torch.testing.assert_close(lin(Vi.transform(x, g)), Vo.transform(lin(x), g), atol=tol, rtol=tol)
    # the block-wise forward equals the dense matrix; dense round trip is exact
    torch.testing.assert_close(lin(x), x @ lin.dense_weight().T + lin.dense_bias(), atol=tol, rtol=tol)
    M, b = lin.dense_weight().clone(), lin.dense_bias().clone()
    lin2 = EquivariantLinear(Vi, Vo).to(dtype)
    assert lin2.load_dense(M, b) < 1e-6
    torch.testing.assert_close(lin2(x), lin(x))
    if G.order > 1:  # a generic matrix is not equivariant (for C1 every matrix is)
        assert lin.load_dense(torch.randn_like(M)) > 0.1


def test_complex_type_uses_J():
    G = get_group("C4")
    V = FieldType(G, {"E1": 1})
    lin = EquivariantLinear(V, V, bias=False)
    with torch.no_grad():
        lin.weights["E1"].copy_(torch.tensor([[[0.0]], [[1.0]]]))
    y = lin(torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(y, torch.tensor([[0.0, 1.0]]))  # J e1 = e2
    assert lin.macs_per_token() == 2 * 2
    D = FieldType.regular("D4", 4)
    assert EquivariantLinear(D, D).macs_per_token() * 3 <= D.dim ** 2


def test_old_import_paths_name_the_same_objects():
    import pyg_lie.vit as vit
    from pyg_lie.groups import finite, finite_reps
    from pyg_lie.vit import irreps

    assert irreps.get_group is finite.o2_group and vit.get_group("D4") is finite.finite_group("D4")
    assert irreps.FiniteO2Group is finite.FiniteO2Group and irreps.Irrep is finite.Irrep
    assert irreps.GSet is finite_reps.GSet is vit.GSet
    assert irreps.intertwiners is finite_reps.intertwiners
    assert irreps.invariant_subspace is finite_reps.invariant_subspace
